"""Names from Home Assistant, three ways on one Home Assistant and the same audio: bench/ha_names.py runs this module
(not collected by the suite: its name does not start with test_) in the venv of a Home Assistant.

The household is tests/ha/test_names.py's (floors, areas, a device, entities with aliases; some not exposed to
Assist, one disabled), in a real Home Assistant whose websocket API is served on loopback. Three servers are added
to it through the wyoming config flow, each a wyoming STT entity:

  ours        wyoming-wis with --hass-api and --hass-token-file: it reads the names itself
  ours-plain  wyoming-wis without a token: no names
  peer        wyoming-faster-whisper (WIS_HA_BENCH_PEER: its venv's python) with --hass-token and --hass-api, on our
              Whisper model folder, the same beam size, compute type and threads

Every command of COMMANDS is spoken by our server's Piper through HA's TTS entity at three speeds, and by
espeak-ng, and each take goes through each system's STT entity in turn (the first system rotating). Written to
WIS_HA_BENCH_OUT: one row per take and system, with what HA got back and how long it took, and what the servers
logged about the names. WIS_HA_BENCH_QUICK=1: two voices only.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import test_names
from conftest import WisServer, free_port, offline_env
from homeassistant.const import __version__
from homeassistant.core import HomeAssistant
from support import Pcm, wer
from test_names import (
    HIDDEN_WORDS,
    Command,
    HassApi,
    RegistryEvents,
    added,
    heard,
    names_lines,
    set_up_household,
    settled,
    spoken,
    start_server,
    stop_server,
    with_names,
    written,
)
from wyoming.client import AsyncTcpClient
from wyoming.info import Describe

# test_names.py's fixtures
hass_api = test_names.hass_api
registry_events = test_names.registry_events
# What both kinds of server are told, as bench/asr.py tells them (`server_flags`)
FLAGS = ("--device", "cpu", "--compute-type", "int8", "--beam-size", "5", "--cpu-threads", "2")
VOICES = (None, "joe-slow", "joe-fast", "espeak")  # joe at 1.0, 0.85 and 1.2; espeak-ng's en-us
QUICK_VOICES = (None, "joe-slow")
SYSTEMS = ("ours", "ours-plain", "peer")
# The test's commands, and those whose names come out near but not exact in its steady takes, and more with none
COMMANDS = (
    *test_names.COMMANDS,
    Command("Set the Kvernhus Heater to 21 degrees", ("Kvernhus Heater",)),
    Command("Turn off the Gaupefell Kettle", ("Gaupefell Kettle",)),
    Command("Activate Hyggestund", ("Hyggestund",)),
    Command("Add milk to the Handleliste", ("Handleliste",)),
    Command("Lock the Kvitebjorn Door", ("Kvitebjorn Door",)),
    Command("Turn off all the lights in Lillebo", ("Lillebo",)),
    Command("Turn on the Varanger Chandelier", ("Varanger Chandelier",)),
    Command("Turn on the Porch Glow", ("Porch Glow",)),
    Command("What is the weather like tomorrow"),
    Command("Turn off the lights in the living room"),
    Command("What time is it"),
    Command("Turn up the volume"),
    Command("Lock the front door"),
    Command("Set the thermostat to 20 degrees"),
)


async def start_peer(python: str, workdir: Path, model: Path, api: HassApi) -> tuple[subprocess.Popen, Path, int]:
    """wyoming-faster-whisper 3.8.1 with its Home Assistant names, on our model folder; ready (it answers
    `describe`: it logs "Ready" before it listens)."""
    port = free_port()
    argv = [python, "-m", "wyoming_faster_whisper", "--uri", f"tcp://127.0.0.1:{port}", "--model", str(model)]
    argv += ["--data-dir", str(workdir / "peer-data"), "--stt-library", "faster-whisper", "--local-files-only"]
    argv += [*FLAGS, "--language", "en", "--hass-token", api.token, "--hass-api", api.url]
    env = {key: value for key, value in offline_env(workdir).items() if not key.startswith("WYO_WHISPER_")}
    log_path = workdir / "peer.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=workdir)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the peer exited with {process.returncode}:\n{log_path.read_text(errors='replace')}")
        try:
            async with asyncio.timeout(5), AsyncTcpClient("127.0.0.1", port) as client:
                await client.write_event(Describe().event())
                event = await client.read_event()
                if event is not None and event.type == "info":
                    return process, log_path, port
        except (OSError, TimeoutError):
            pass
        await asyncio.sleep(0.5)
    process.kill()
    pytest.fail(f"the peer did not answer in 180 s:\n{log_path.read_text(errors='replace')}")


async def stop_peer(process: subprocess.Popen) -> None:
    process.terminate()
    for _ in range(150):
        if process.poll() is not None:
            return
        await asyncio.sleep(0.1)
    process.kill()
    process.wait()


def score(command: Command, text: str) -> dict:
    """What a transcript got right: each name written as HA spells it, each hidden one, and the word errors."""
    reference = len(command.text.split())
    return {
        "names_written": [name for name in command.names if written(name, text)],
        "hidden_written": [word for word in HIDDEN_WORDS if word.casefold() in text.casefold()],
        "word_errors": round(wer(command.text, text) * reference),
        "reference_words": reference,
    }


async def test_names_bench(
    hass: HomeAssistant, hass_api: HassApi, registry_events: RegistryEvents, tmp_path: Path
) -> None:
    voices = QUICK_VOICES if os.environ.get("WIS_HA_BENCH_QUICK") == "1" else VOICES
    await set_up_household(hass)
    servers: list[WisServer] = []
    peer = None
    try:
        servers.append(await start_server(tmp_path / "ours", *with_names(hass_api), *FLAGS))
        servers.append(await start_server(tmp_path / "ours-plain", *FLAGS))
        model = tmp_path / "ours" / "data" / "bundled" / "base"
        assert (model / "model.bin").is_file(), f"our server left no model in {model}"
        peer, peer_log, peer_port = await start_peer(os.environ["WIS_HA_BENCH_PEER"], tmp_path, model, hass_api)
        ours, plain = await added(hass, servers[0]), await added(hass, servers[1])
        peer_entry = await added(hass, WisServer(peer, peer_log, "127.0.0.1", peer_port))
        systems = {"ours": ours, "ours-plain": plain, "peer": peer_entry}
        readings = await settled(servers[0], registry_events)
        events = len(registry_events.times)
        takes: list[tuple[Command, str, Pcm]] = []
        for command in COMMANDS:
            for voice in voices:
                takes.append((command, voice or "joe", await spoken(ours, command.text, voice)))
        print(f"{len(takes)} takes of {len(COMMANDS)} commands, {len(voices)} voices", flush=True)
        rows = []
        for number, (command, voice, pcm) in enumerate(takes):
            order = SYSTEMS[number % 3 :] + SYSTEMS[: number % 3]
            for system in order:
                started = time.monotonic()
                text = await heard(systems[system], pcm)
                seconds = time.monotonic() - started
                rows.append(
                    {
                        "command": command.text,
                        "names": list(command.names),
                        "hidden": list(command.hidden),
                        "voice": voice,
                        "audio_s": round(pcm.seconds, 2),
                        "system": system,
                        "heard": text,
                        "stt_s": round(seconds, 3),
                        **score(command, text),
                    }
                )
            print(f"[{number + 1}/{len(takes)}] {voice}: {command.text!r} -> ", end="", flush=True)
            print(" | ".join(f"{row['system']}: {row['heard']!r}" for row in rows[-3:]), flush=True)
        lines = names_lines(servers[0])
        logs = {
            "ours_names_lines": lines,
            "ours_readings_during_takes": len(lines) - readings,
            "registry_events_during_takes": len(registry_events.times) - events,
            "ours_prompt": [line for line in servers[0].log.splitlines() if "The prompt holds" in line][-1:],
            "peer_names": [line for line in peer_log.read_text().splitlines() if "names" in line.lower()][:5],
            "token_in_logs": any(hass_api.token in server.log for server in servers),
        }
    finally:
        if peer is not None:
            await stop_peer(peer)
        for server in servers:
            await stop_server(server)
    document = {"home_assistant": __version__, "voices": [voice or "joe" for voice in voices], "rows": rows, **logs}
    Path(os.environ["WIS_HA_BENCH_OUT"]).write_text(json.dumps(document, indent=1) + "\n")
