"""What a client asks of the core, as one typed value per kind of request.

Every frontend parses its own protocol (Wyoming events, OpenAI's form or JSON,
Willow's query string, WebRTC's parameters) into one of these at the edge and
hands it to the core, which checks the rest against what is loaded
(`Core.resolve`, `Core.speech_stream`). They are plain frozen values, like the
`wyoming` package's events and faster-whisper's `TranscriptionOptions`: easy to
compare, log and pass on. A field's default here is the default everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MAX_BEAM_SIZE = 10  # wider searches cost much and rarely change a voice command
MAX_REFERENCE_BYTES = 10 * 1024 * 1024  # of a recording to clone a voice from (SpeechRequest.reference, XTTS)
TASKS = ("transcribe", "translate")  # what Whisper does with speech; translate: to English
# How soon the server ends a speaker's turn, in Home Assistant's names (`vad_sensitivity`); the first is the default.
SENSITIVITIES = ("default", "relaxed", "aggressive")
MIN_SILENCE, MAX_SILENCE = 0.1, 10.0  # seconds: the range of AsrRequest.max_silence

# Who asked, as metrics label it.
Frontend = Literal["wyoming", "http", "webrtc", "realtime"]


@dataclass(frozen=True, kw_only=True)
class AsrRequest:
    """Speech to text. None means the server's own setting (--asr-model, --language, --task, --beam-size)."""

    model: str | None = None  # a loaded Whisper model; None: the first
    language: str | None = None  # any spelling of a tag, or "auto"
    task: str | None = None  # one of TASKS
    prompt: str | None = None  # the request's own text, to steer spelling and style
    names: tuple[str, ...] = ()  # names the speaker may say (Home Assistant's devices and areas)
    terms: tuple[str, ...] = ()  # words the speaker may say
    words: bool = False  # time every word
    logprobs: bool = False  # score every token of the text (Transcript.logprobs, and each Delta's)
    temperature: float = 0.0  # above 0: sample at this temperature
    beam_size: int | None = None  # 1 to MAX_BEAM_SIZE
    detect_language: bool = False  # detect even where --language names one (unless `language` is given)
    end_of_turn: str | None = None  # one of SENSITIVITIES: the server ends the turn; None: the client's audio end does
    max_silence: float | None = None  # with end_of_turn: seconds of silence that end any turn, if sooner than its own
    drafts: bool = False  # with end_of_turn: partial text while the speaker talks too (captions), not only at pauses


@dataclass(frozen=True, kw_only=True)
class SpeechRequest:
    """Text to speech; the text itself is written to the stream the core returns, as it comes."""

    voice_name: str | None = None  # the protocols' `voice`; None, or one not here: the default voice (for `language`)
    speaker: str | None = None  # one of a multi-speaker voice's speakers
    language: str | None = None  # picks a voice when none is named; what XTTS speaks
    speed: float | None = None  # 2.0 speaks twice as fast; None: the voice's own
    cached: bool = True  # False: neither read nor write the speech cache
    reference: bytes | None = None  # a recording to clone a voice from, for this request only (XTTS)


@dataclass(frozen=True, kw_only=True)
class WakeRequest:
    """Wake words to listen for in a stream of audio."""

    names: tuple[str, ...] = ()  # models by name (or the name another server gives them); (): the default one
    recording: bool = False  # a recording (HTTP): at most --max-audio-seconds; a satellite's stream may last all day
