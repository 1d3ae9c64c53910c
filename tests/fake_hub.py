"""A stand-in Hugging Face Hub on loopback, answering as the real one does what huggingface_hub asks of it.

The server reaches it through its normal endpoint setting (`HF_ENDPOINT`); what a download needs
(../shared/reference/huggingface-hub-downloads.md): `HEAD`/`GET /{repo}/resolve/{revision}/{path}` with
`X-Repo-Commit` and `ETag`, ranges for a resumed transfer, and `404` with `X-Error-Code: EntryNotFound` for a file
it does not have. It serves `rhasspy/piper-voices` only: its `voices.json` lists the voices it was given, each a
real voice's bytes under a name of the hub's, and each may be slow, missing, shorter than the list says, or not
the bytes the list's md5 says. `GET /_requests` tells a test what was asked, in order.

It runs as a process of its own (`StandInHub`), so that the main suite and Home Assistant's (whose harness fails
a test that leaves a thread behind) use it alike, and nothing a test blocks holds it up. Only the standard library
and aiohttp, which both suites have.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

REPO = "rhasspy/piper-voices"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
CHUNK = 64 * 1024
READY = "stand-in hub listening on "
FAULTS = ("slow", "missing", "short", "corrupt")  # what may be wrong with a voice's .onnx on the hub
SLOW_SECONDS = 4.0  # a slow voice's .onnx takes this long to transfer
LANGUAGES = {"de": "German", "en": "English", "fr": "French"}


@dataclass
class Hosted:
    """One file of the stand-in repository."""

    data: bytes
    seconds: float = 0.0  # its transfer spread over this long


def voice_path(name: str, suffix: str = ".onnx") -> str:
    """A voice's file in the repository, as the hub lays it out: de/de_DE/thorsten/medium/de_DE-thorsten-medium.onnx."""
    code, dataset, quality = name.split("-")
    return f"{code.split('_')[0]}/{code}/{dataset}/{quality}/{name}{suffix}"


def repository(voices: dict[str, tuple[Path, str | None]]) -> dict[str, Hosted]:
    """The stand-in repository's files: each voice (name: its source .onnx, and what is wrong with it on the hub, if
    anything) and the list of them."""
    files: dict[str, Hosted] = {}
    listed: dict[str, dict] = {}
    for name, (source, fault) in voices.items():
        onnx, config = source.read_bytes(), Path(f"{source}.json").read_bytes()
        code = name.split("-")[0]
        language, country = code.split("_")
        listed[name] = {
            "key": name,
            "name": name.split("-")[1],
            "language": {
                "code": code,
                "family": language,
                "region": country,
                "name_native": language,
                "name_english": LANGUAGES.get(language, language),
                "country_english": country,
            },
            "quality": name.split("-")[2],
            "num_speakers": 1,
            "speaker_id_map": {},
            "files": {
                voice_path(name, suffix): {"size_bytes": len(data), "md5_digest": hashlib.md5(data).hexdigest()}
                for suffix, data in ((".onnx", onnx), (".onnx.json", config))
            },
            "aliases": [],
        }
        files[voice_path(name, ".onnx.json")] = Hosted(config)
        hosted = {
            None: Hosted(onnx),
            "slow": Hosted(onnx, SLOW_SECONDS),
            "short": Hosted(onnx[:-4096]),
            "corrupt": Hosted(bytes(reversed(onnx))),
        }
        if fault != "missing":
            files[voice_path(name)] = hosted[fault]
    files["voices.json"] = Hosted(json.dumps(listed).encode())
    return files


async def serve(port: int, files: dict[str, Hosted]) -> None:
    from aiohttp import web

    asked: list[tuple[str, str]] = []

    async def resolve(request: web.Request) -> web.StreamResponse:
        path = request.match_info["path"]
        asked.append((request.method, path))
        hosted = files.get(path)
        if f"{request.match_info['owner']}/{request.match_info['name']}" != REPO or hosted is None:
            return web.Response(status=404, headers={"X-Error-Code": "EntryNotFound", "X-Repo-Commit": COMMIT})
        data = hosted.data
        start = request.http_range.start or 0
        headers = {
            "X-Repo-Commit": COMMIT,
            "ETag": f'"{hashlib.sha256(data).hexdigest()}"',
            "Content-Length": str(len(data) - start),
            "Accept-Ranges": "bytes",
        }
        if request.method == "HEAD":
            return web.Response(headers=headers)
        if start:
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
        response = web.StreamResponse(status=206 if start else 200, headers=headers)
        await response.prepare(request)
        chunks = [data[offset : offset + CHUNK] for offset in range(start, len(data), CHUNK)]
        try:
            for chunk in chunks:
                await response.write(chunk)
                if hosted.seconds:
                    await asyncio.sleep(hosted.seconds / len(chunks))
            await response.write_eof()
        except ConnectionError:  # the client gave up (aiohttp's ClientConnectionResetError is one)
            pass
        return response

    async def requests(request: web.Request) -> web.Response:
        return web.json_response(asked)

    app = web.Application()
    app.router.add_get("/_requests", requests)
    app.router.add_route("*", "/{owner}/{name}/resolve/{revision}/{path:.+}", resolve)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    print(READY + f"http://127.0.0.1:{runner.addresses[0][1]}", flush=True)
    await asyncio.Event().wait()


class StandInHub:
    """The stand-in hub as a process, serving `voices` (name: its source .onnx, and a fault from FAULTS or None)."""

    def __init__(self, voices: dict[str, tuple[Path, str | None]]) -> None:
        argv = [sys.executable, __file__]
        for name, (source, fault) in voices.items():
            argv += ["--voice", f"{name}={source}" + (f",{fault}" if fault else "")]
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line.startswith(READY), f"the stand-in hub did not start: {line!r}"
        self.url = line[len(READY) :].strip()

    def env(self) -> dict[str, str]:
        """What a server needs to reach this hub, and downloads that give up within seconds."""
        return {"HF_ENDPOINT": self.url, "HF_HUB_OFFLINE": "0", "HF_HUB_DOWNLOAD_TIMEOUT": "5"}

    def requests(self) -> list[tuple[str, str]]:
        with urllib.request.urlopen(self.url + "/_requests", timeout=10) as answer:
            return [tuple(pair) for pair in json.load(answer)]

    def fetched(self, path: str) -> int:
        """How many times a file's bytes were asked for (GETs; a resumed transfer counts each part)."""
        return sum(1 for method, asked in self.requests() if method == "GET" and asked == path)

    def wait_fetching(self, path: str, timeout: float = 30) -> None:
        """Until the transfer of `path` has begun."""
        deadline = time.monotonic() + timeout
        while not self.fetched(path):
            assert time.monotonic() < deadline, f"nothing asked for {path}: {self.requests()}"
            time.sleep(0.02)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--voice", action="append", default=[], help="NAME=SOURCE.onnx[,FAULT]")
    args = parser.parse_args()
    voices = {}
    for spec in args.voice:
        name, _, rest = spec.partition("=")
        source, _, fault = rest.partition(",")
        assert fault in ("", *FAULTS), fault
        voices[name] = (Path(source), fault or None)
    asyncio.run(serve(args.port, repository(voices)))


if __name__ == "__main__":
    main()
