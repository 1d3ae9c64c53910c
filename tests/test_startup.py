"""Starting the server: defaults, several URIs (tcp, unix, stdio), failures at start-up."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

from helpers import (
    assert_clean_log,
    corpus,
    free_port,
    load_audio,
    offline_env,
    read_until,
    start_server,
    synthesize,
    transcribe,
    wer,
)
from wyoming.client import AsyncUnixClient
from wyoming.event import async_read_event, async_write_event
from wyoming.info import Describe


def test_defaults_fit_the_memory_budget(data_dir: Path, tmp_path: Path) -> None:
    """Whisper base + joe-medium, loaded and warmed up, idle: at most 600 MB resident (the README's promise)."""
    started = time.monotonic()
    server = start_server(["--data-dir", str(data_dir)], tmp_path)
    try:
        ready = time.monotonic() - started
        rss = server.rss_mb()
        print(f"defaults: ready in {ready:.1f} s, idle RSS {rss:.0f} MB")
        assert rss <= 600
        assert "Loaded Whisper base and voices en_US-joe-medium" in server.log
    finally:
        assert server.stop() == 0
    assert_clean_log(server.log)


def test_unknown_model_stops_start_up_with_the_places_searched(tmp_path: Path) -> None:
    port = free_port()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "wis_server",
            "--data-dir",
            str(tmp_path),
            "--asr-model",
            "large-v9",
            "--uri",
            f"tcp://127.0.0.1:{port}",
            "--http-port",
            str(free_port()),
            "--http-host",
            "127.0.0.1",
        ],
        capture_output=True,
        text=True,
        env=offline_env(tmp_path),
        timeout=120,
    )
    assert result.returncode != 0
    assert "Whisper model 'large-v9' not found" in result.stderr
    assert str(tmp_path / "models" / "large-v9") in result.stderr and "bundled packages" in result.stderr
    assert "Traceback" not in result.stderr
    assert "Wyoming server listening" not in result.stderr  # no Wyoming port was opened
    assert "HTTP API listening" in result.stderr  # HTTP was, to say 503 while loading, and it closed without a trace


async def test_tcp_and_unix_from_one_process(data_dir: Path, tmp_path: Path) -> None:
    socket_path = tmp_path / "wis.sock"
    port = free_port()
    server = start_server(
        [
            "--data-dir",
            str(data_dir),
            "--asr-model",
            "tiny.en",
            "--uri",
            f"tcp://127.0.0.1:{port}",
            "--uri",
            f"unix://{socket_path}",
            "--no-http",
        ],
        tmp_path,
        port=port,
    )
    assert server.http_port is None and "HTTP API" not in server.log  # --no-http: Wyoming only
    try:
        path, reference = corpus()[1]
        async with AsyncUnixClient(str(socket_path)) as client:
            heard = await transcribe(client, load_audio(path))
            assert wer([reference], [heard.data["text"]]) < 0.2
        async with server.client() as client:
            speech = await synthesize(client, "Both doors are open.")
            assert speech.pcm.seconds > 0.5
    finally:
        assert server.stop() == 0
    assert not socket_path.exists()  # removed on shutdown
    assert_clean_log(server.log)


async def test_stdio(data_dir: Path, tmp_path: Path) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "wis_server",
        "--data-dir",
        str(data_dir),
        "--asr-model",
        "tiny.en",
        "--uri",
        "stdio://",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=offline_env(tmp_path),
    )
    try:
        await async_write_event(Describe().event(), process.stdin)
        info = await asyncio.wait_for(async_read_event(process.stdout), 120)
        assert info.type == "info" and info.data["asr"][0]["models"][0]["name"] == "tiny.en"

        class Pipe:  # the helpers' client interface over the process's pipes
            async def read_event(self):
                return await async_read_event(process.stdout)

            async def write_event(self, event):
                await async_write_event(event, process.stdin)

        path, reference = corpus()[1]
        heard = await transcribe(Pipe(), load_audio(path))
        assert wer([reference], [heard.data["text"]]) < 0.2
        await Pipe().write_event(Describe().event())
        assert (await read_until(Pipe(), "info"))[-1].type == "info"
        process.stdin.close()  # end of input ends the server
        assert await asyncio.wait_for(process.wait(), 30) == 0
        log = (await process.stderr.read()).decode()
        assert_clean_log(log)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


def test_xtts_without_the_extra_says_how_to_install_it(tmp_path: Path) -> None:
    """Where coqui-tts is missing (here: hidden from the import system), --xtts fails at once and says why."""
    hide = "import sys; sys.modules['TTS'] = None; from wis_server.__main__ import main; main(sys.argv[1:])"
    argv = ["--data-dir", str(tmp_path), "--xtts", "--uri", f"tcp://127.0.0.1:{free_port()}", "--no-http"]
    result = subprocess.run(
        [sys.executable, "-c", hide, *argv], capture_output=True, text=True, env=offline_env(tmp_path), timeout=120
    )
    assert result.returncode != 0
    assert "--xtts needs the xtts extra" in result.stderr and "pip install 'wyoming-wis[xtts]'" in result.stderr
    assert "Traceback" not in result.stderr and "Loading Whisper" not in result.stderr  # before any model loads


def test_a_server_without_xtts_never_loads_torch(server) -> None:
    """XTTS is imported only for --xtts: the default server's memory holds no PyTorch library."""
    maps = Path(f"/proc/{server.process.pid}/maps").read_text()
    assert "python" in maps and "libtorch" not in maps


# Runs the server with any import of pipecat refused, and logged as an error however the importer handles it
NO_PIPECAT = """
import sys
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "pipecat":
            sys.stderr.write(f"ERROR imported {name}\\n")
            raise ImportError(name)
sys.meta_path.insert(0, Refuse())
"""


async def test_the_server_never_imports_pipecat(data_dir: Path, tmp_path: Path) -> None:
    """The turn-taking model is a file in the pipecat-ai package, installed without the framework's dependencies
    (ARCHITECTURE.md): a server that may not import it starts, transcribes and stops cleanly."""
    refused = subprocess.run([sys.executable, "-c", NO_PIPECAT + "import pipecat"], capture_output=True, text=True)
    assert refused.returncode != 0 and "ERROR imported pipecat" in refused.stderr  # the guard works
    launcher = ("-c", NO_PIPECAT + "from wis_server.__main__ import main; main(sys.argv[1:])")
    server = start_server(
        ["--data-dir", str(data_dir), "--asr-model", "tiny.en", "--no-http"], tmp_path, launcher=launcher
    )
    try:
        path, reference = corpus()[1]
        async with server.client() as client:
            heard = await transcribe(client, load_audio(path))
        assert wer([reference], [heard.data["text"]]) < 0.2
    finally:
        assert server.stop() == 0
    assert "Loading turn-taking model" in server.log  # from the package's file, without its code
    assert_clean_log(server.log)
