"""A model that raises inside a real server process: the client is told, and the next request is served.

The server is tests/faulty_server.py, the shipped server with its Whisper decode and Piper synthesis made to raise
for requests that carry its marker. The failure comes from the engine's worker thread, as a real model's would, and
everything from there to the client is the production path. In-process faults are in test_limits.py.
"""

from __future__ import annotations

import io
import re
import wave
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from faulty_server import ASR_FAILURE, MARKER, TTS_FAILURE
from helpers import CORPUS, ROOT, Pcm, Server, load_audio, read_until, rms, send_audio, start_server, synthesize, wer
from wyoming.asr import Transcribe
from wyoming.tts import Synthesize

SPOKEN = CORPUS / "LJ001-0004.flac"
SPOKEN_TEXT = (CORPUS / "LJ001-0004.txt").read_text().strip()
LAUNCHER = (str(ROOT / "tests" / "faulty_server.py"),)
INTERNAL = {  # the OpenAI error envelope, as any OpenAI SDK reads it
    "error": {
        "message": "Internal error; see the server log",
        "type": "server_error",
        "param": None,
        "code": "internal_error",
    }
}


@pytest.fixture(scope="module")
def faulty(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    args = ["--data-dir", str(data_dir), "--asr-model", "tiny.en", "--voice", "en_US-joe-medium"]
    running = start_server(args, tmp_path_factory.mktemp("faulty"), launcher=LAUNCHER)
    yield running
    assert running.stop() == 0, running.log
    for sign in ("exception was never retrieved", "Task was destroyed"):
        assert sign not in running.log, running.log


class LogWatch:
    """What a server logs from now on: its ERROR lines, and the failures they report."""

    def __init__(self, server: Server) -> None:
        self.server, self.start = server, len(server.log)

    def errors(self) -> list[str]:
        return [line for line in self.server.log[self.start :].splitlines() if " ERROR " in line]

    def failures(self) -> list[str]:
        return re.findall(r"^RuntimeError: (.+)$", self.server.log[self.start :], re.MULTILINE)


def wyoming_error(event: str) -> dict[str, str]:
    """The `error` event's data for a failure nobody expected while answering `event`."""
    return {"text": f"Internal error handling {event}; see the server log", "code": "internal-error"}


def wav_pcm(data: bytes) -> Pcm:
    with wave.open(io.BytesIO(data)) as wav:
        return Pcm(wav.readframes(wav.getnframes()), wav.getframerate(), wav.getsampwidth(), wav.getnchannels())


async def test_wyoming_client_gets_an_error_then_is_served(faulty: Server) -> None:
    """A failed transcription, a real one, a failed synthesis, a real one; a failure ends its connection."""
    pcm = load_audio(SPOKEN)
    log = LogWatch(faulty)
    async with faulty.client() as client:
        await client.write_event(Transcribe(transcript_terms=[MARKER]).event())
        await send_audio(client, pcm)
        failed = (await read_until(client, "transcript"))[-1]
        assert failed.type == "error", failed
        assert failed.data == {  # the core's turn controller answers the turn (turns/listening.py)
            "text": "Internal error transcribing the turn; see the server log",
            "code": "internal-error",
        }
        assert await client.read_event() is None

    async with faulty.client() as client:
        await client.write_event(Transcribe(transcript_terms=["Gutenberg"]).event())
        await send_audio(client, pcm)
        heard = (await read_until(client, "transcript"))[-1]
        assert heard.type == "transcript" and wer([SPOKEN_TEXT], [heard.data["text"]]) < 0.2, heard

        await client.write_event(Synthesize(text=f"Please {MARKER} now.").event())
        failed = (await read_until(client, "audio-stop", timeout=30))[-1]
        assert failed.type == "error", failed
        assert failed.data == wyoming_error("synthesize")
        assert await client.read_event() is None

    async with faulty.client() as client:
        speech = await synthesize(client, "The kitchen lights are on.")
        assert speech.stops == 1 and speech.pcm.seconds > 0.8 and rms(speech.pcm) > 0.02, speech.pcm.seconds
    assert log.failures() == [ASR_FAILURE, TTS_FAILURE]
    assert len(log.errors()) == 2, log.errors()  # the two injected ones, logged; nothing else went wrong


async def test_http_client_gets_a_500_then_is_served(faulty: Server) -> None:
    """OpenAI transcription and speech, and Willow's speech: each fails with the JSON envelope, then works."""
    log = LogWatch(faulty)
    files = {"file": ("speech.flac", SPOKEN.read_bytes())}
    async with httpx.AsyncClient(base_url=faulty.http_url, timeout=60) as http:
        failed = await http.post("/v1/audio/transcriptions", files=files, data={"prompt": f"Say {MARKER}."})
        assert failed.status_code == 500 and failed.json() == INTERNAL, failed.text
        answer = await http.post("/v1/audio/transcriptions", files=files, data={"prompt": "Gutenberg."})
        assert answer.status_code == 200 and wer([SPOKEN_TEXT], [answer.json()["text"]]) < 0.2, answer.text

        failed = await http.post("/v1/audio/speech", json={"input": f"Please {MARKER}.", "response_format": "wav"})
        assert failed.status_code == 500 and failed.json() == INTERNAL, failed.text
        speech = await http.post("/v1/audio/speech", json={"input": "It is twenty degrees.", "response_format": "wav"})
        assert speech.status_code == 200, speech.text
        pcm = wav_pcm(speech.content)
        assert pcm.seconds > 0.8 and rms(pcm) > 0.02, pcm.seconds

        failed = await http.get("/api/tts", params={"text": f"Please {MARKER}."})
        assert failed.status_code == 500 and failed.json() == INTERNAL, failed.text
        speech = await http.get("/api/tts", params={"text": "The door is locked."})
        assert speech.status_code == 200 and speech.headers["Content-Type"] == "audio/wav", speech.headers
        assert rms(wav_pcm(speech.content)) > 0.02
    assert log.failures() == [ASR_FAILURE, TTS_FAILURE, TTS_FAILURE]
    assert len(log.errors()) == 3, log.errors()
