"""What the Home Assistant suites share: the HA version at hand, audio in and out, and scoring speech.

The HA venvs have neither numpy nor PyAV, so audio goes through Debian's ffmpeg (which HA's own TTS needs too) and
command recordings come from Debian's espeak-ng: a different synthesiser than ours, so what our STT hears is a
recording it did not make. Every reply HA gets from our TTS is transcribed back by our server over Wyoming (with the
`wyoming` client HA itself uses) and compared to its words.
"""

from __future__ import annotations

import array
import asyncio
import html
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from homeassistant.components import stt
from homeassistant.components.wyoming.tts import WyomingTtsProvider
from replies import words
from wyoming.asr import Transcribe, Transcript
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "corpus" / "ljspeech"
T = TypeVar("T")
RATE = 16000  # what HA's STT sends (wyoming/const.py SAMPLE_RATE) and what Whisper hears

# homeassistant/components/wyoming/tts.py streams text (synthesize-start/-chunk/-stop) since HA 2025.7
# (core PR #147392); HA 2024.3 only ever sends one `synthesize` per reply.
STREAMING_TTS = hasattr(WyomingTtsProvider, "async_stream_tts_audio")

# An LLM's answer as a conversation agent streams it: pieces that split words, without regard to sentences
LONG_ANSWER_PIECES = [
    "The kitchen light is o",
    "n and the living room is dark. It is twenty one degr",
    "ees inside, and the front door is lock",
    "ed. Tomorrow will be sunny with a high of twenty f",
    "ive degrees",
]


@dataclass(frozen=True)
class Pcm:
    """16-bit mono PCM at RATE."""

    audio: bytes

    @property
    def seconds(self) -> float:
        return len(self.audio) / (2 * RATE)

    def loud(self, threshold: float = 0.02) -> tuple[int, int] | None:
        """The first and the last sample louder than `threshold` (of full scale): where the speech is; None if
        there is none."""
        samples = array.array("h", self.audio)
        limit = int(threshold * 32768)
        loud = [index for index, sample in enumerate(samples) if abs(sample) > limit]
        return (loud[0], loud[-1]) if loud else None

    def trimmed(self, threshold: float = 0.02, margin: float = 0.1) -> Pcm:
        """Without the silence around the speech (an MP3 encoder's delay, a voice's padding), which makes Whisper
        base mishear a lone short word ("Done" as "then"); empty if it is all silence."""
        loud = self.loud(threshold)
        if loud is None:
            return Pcm(b"")
        pad = int(margin * RATE) * 2
        return Pcm(self.audio[max(0, 2 * loud[0] - pad) : 2 * loud[1] + pad])


async def decode(data: bytes) -> Pcm:
    """Any audio file HA hands out (WAV, MP3, FLAC) as 16 kHz mono PCM, by ffmpeg (in a thread: HA's loop runs on)."""
    return await asyncio.to_thread(_decode, data)


def _input_format(data: bytes) -> list[str]:
    """ffmpeg's input options for the file HA made, named rather than probed: HA 2024.3 tags its MP3s with frames
    named "Text" (tts `write_tags`), and behind them ffmpeg's probe fails on about 1 in 60 of Piper's random takes
    ("Invalid data found when processing input"); `-f mp3` decodes every one. A streamed WAV's header says 0 frames
    (homeassistant/components/wyoming/tts.py `_read_tts_audio`): ffmpeg reads it to the end with -ignore_length."""
    if data[:4] == b"RIFF":
        return ["-f", "wav", "-ignore_length", "1"]
    if data[:4] == b"fLaC":
        return ["-f", "flac"]
    if data[:3] == b"ID3" or (len(data) > 1 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0):
        return ["-f", "mp3"]
    return []


def _decode(data: bytes) -> Pcm:
    """From a file, not a pipe: reading an MP3 behind HA's ID3 tag needs to seek."""
    given = _input_format(data)
    with tempfile.NamedTemporaryFile(prefix="wis-ha-audio-") as file:
        file.write(data)
        file.flush()
        result = subprocess.run(
            ["ffmpeg", "-v", "error", *given, "-i", file.name, "-f", "s16le", "-ac", "1", "-ar", str(RATE), "pipe:"],
            capture_output=True,
            check=False,
        )
    assert result.returncode == 0, f"ffmpeg cannot decode {len(data)} bytes ({data[:16]!r}): {result.stderr.decode()}"
    return Pcm(result.stdout)


async def espeak(text: str, voice: str, pause: float = 0.0) -> Pcm:
    """A spoken command recorded with espeak-ng (-s 150 words a minute, -g 4: a short gap between words, which
    Whisper base needs to hear espeak's German articles), with `pause` seconds of silence before its last word: an
    SSML break, inside the sentence (its words before the break keep their length, where a sentence of their own
    ends on a drawn-out last word)."""
    command = ["espeak-ng", "-v", voice, "-s", "150", "-g", "4", "--stdout", text]
    if pause:
        before, last = map(html.escape, text.rsplit(" ", 1))
        command[-1] = f'<speak>{before} <break time="{round(pause * 1000)}ms"/> {last}</speak>'
        command.insert(1, "-m")  # SSML
    wav = await asyncio.to_thread(subprocess.run, command, capture_output=True, check=True)
    return await decode(wav.stdout)


async def corpus(count: int) -> list[tuple[Pcm, str]]:
    """The first `count` LJ Speech recordings and their transcripts."""
    paths = sorted(CORPUS.glob("*.flac"))[:count]
    return [(await decode(path.read_bytes()), path.with_suffix(".txt").read_text().strip()) for path in paths]


def chunks(pcm: Pcm, trailing_silence: float = 0.0, size: int = 2048) -> list[bytes]:
    """Audio in the pieces a satellite streams (64 ms), with silence after it, as a pipeline's VAD expects."""
    audio = pcm.audio + bytes(int(trailing_silence * RATE) * 2)
    return [audio[start : start + size] for start in range(0, len(audio), size)]


def metadata(language: str) -> stt.SpeechMetadata:
    """What HA's wyoming STT takes and a pipeline sends: 16 kHz 16-bit mono PCM (a pipeline sets the language)."""
    return stt.SpeechMetadata(
        language=language,
        format=stt.AudioFormats.WAV,
        codec=stt.AudioCodecs.PCM,
        bit_rate=stt.AudioBitRates.BITRATE_16,
        sample_rate=stt.AudioSampleRates.SAMPLERATE_16000,
        channel=stt.AudioChannels.CHANNEL_MONO,
    )


async def stream(pieces: list[bytes]) -> AsyncIterator[bytes]:
    """`pieces` as the async byte stream HA's STT and pipelines read."""
    for piece in pieces:
        yield piece
        await asyncio.sleep(0)


@dataclass
class Live:
    """A satellite's microphone: `speech`, then `silence` seconds of silence, in `chunks`' pieces, each sent once it
    has been spoken. It notes when (UTC, as HA's pipeline events) the first piece and the piece with the speech's
    last loud sample went to HA, and whether the stream ran out: HA then sends audio-stop, so HA, not the server,
    ended the turn."""

    speech: Pcm
    silence: float
    started: datetime | None = None
    speech_sent: datetime | None = None
    ran_out: bool = False

    async def stream(self) -> AsyncIterator[bytes]:
        loud = self.speech.loud()
        last_speech = None if loud is None else 2 * loud[1]  # its byte
        sent = 0
        start = time.monotonic()
        self.started = datetime.now(UTC)
        for piece in chunks(self.speech, trailing_silence=self.silence):
            await asyncio.sleep(max(0.0, start + (sent + len(piece)) / (2 * RATE) - time.monotonic()))
            if last_speech is not None and sent <= last_speech < sent + len(piece):
                self.speech_sent = datetime.now(UTC)
            sent += len(piece)
            yield piece
        self.ran_out = True


# -- scoring ------------------------------------------------------------------------


def wer(reference: str, hypothesis: str) -> float:
    """Word error rate of `hypothesis` against `reference` (edits over reference words)."""
    ref, hyp = words(reference), words(hypothesis)
    row = list(range(len(hyp) + 1))
    for i, ref_word in enumerate(ref, 1):
        previous, row[0] = row[0], i
        for j, hyp_word in enumerate(hyp, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (ref_word != hyp_word))
    return row[-1] / max(len(ref), 1)


async def transcribe(host: str, port: int, pcm: Pcm, language: str = "en") -> str:
    """What our server hears in `pcm`, asked directly over Wyoming (not through HA, whose path is under test)."""
    async with asyncio.timeout(60), AsyncTcpClient(host, port) as client:
        await client.write_event(Transcribe(language=language).event())
        await client.write_event(AudioStart(rate=RATE, width=2, channels=1).event())
        for piece in chunks(pcm, size=8192):
            await client.write_event(AudioChunk(rate=RATE, width=2, channels=1, audio=piece).event())
        await client.write_event(AudioStop().event())
        while (event := await client.read_event()) is not None:
            if Transcript.is_type(event.type):
                return Transcript.from_event(event).text
            assert event.type != "error", f"our STT failed: {event.data}"
    raise AssertionError("our STT closed the connection without a transcript")


async def within(seconds: float, what: str, awaitable: Awaitable[T]) -> T:
    """`awaitable`'s result, failing with a plain message if it takes longer than `seconds` (HA's wyoming client
    sets no timeout of its own: a server that never answers holds HA until the server's idle timeout)."""
    try:
        async with asyncio.timeout(seconds):
            return await awaitable
    except TimeoutError:
        raise AssertionError(f"{what} did not finish within {seconds} s") from None
