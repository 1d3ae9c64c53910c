"""What the core serves, as a read-only snapshot: the one thing frontends and /metrics read about models and voices.

`Core.served()` builds a `Served`; `info`, `/health`, `/v1/models`, `/v1/audio/voices` and the live gauges in
/metrics all read it, so none of them walks the engines in a way of its own, and an engine can change inside
without a frontend noticing. Each engine describes its model with an `entry()` method.

Plain data, importing nothing of ours, so that engines can describe themselves in it without importing the core.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

# The engines a model runs on (also the `engine` label of the model-call metrics), and the kind of each. The
# turn-taking model (Smart Turn: has the speaker finished?) is a kind of its own, so that no list of ASR models
# (Wyoming's info, /health) offers it as one to transcribe with.
WHISPER, PIPER, XTTS, TURN = "whisper", "piper", "xtts", "turn"
MICRO_WAKE, OPEN_WAKE = "microwakeword", "openwakeword"  # the two families of wake word models
ASR, TTS, WAKE = "asr", "tts", "wake"
KINDS = {WHISPER: ASR, PIPER: TTS, XTTS: TTS, TURN: TURN, MICRO_WAKE: WAKE, OPEN_WAKE: WAKE}
LOADED, UNLOADED = "loaded", "unloaded"


class _Queue(Protocol):
    """What a Calls reads of a scheduler."""

    engine: str

    @property
    def pending(self) -> int: ...

    @property
    def waiting(self) -> int: ...

    @property
    def running(self) -> int: ...

    @property
    def closed(self) -> bool: ...


@dataclass(frozen=True)
class Calls:
    """The model calls in one engine queue now."""

    engine: str  # its `engine` label in /metrics: whisper, vad (Whisper's speech detector), piper, xtts, turn, wake
    pending: int  # running or waiting, as the queue counts them to admit new calls
    waiting: int
    running: int
    open: bool  # False once the engine has shut down

    @classmethod
    def of(cls, queue: _Queue) -> Calls:
        return cls(queue.engine, queue.pending, queue.waiting, queue.running, not queue.closed)


@dataclass(frozen=True)
class Entry:
    """One model or voice, as clients may see it."""

    name: str
    engine: str  # WHISPER, PIPER, XTTS, TURN, MICRO_WAKE or OPEN_WAKE
    languages: tuple[str, ...]
    loaded: bool  # a Whisper model unloaded after --unload-after loads again on use; so does a Piper voice
    version: str | None
    description: str
    multilingual: bool = False  # Whisper: more languages than English
    speakers: tuple[str, ...] = ()  # a voice's speakers, if it has more than one
    phrase: str | None = None  # a wake word model's phrase ("Okay Nabu")
    streams: int = 0  # a wake word model: streams listening for it now
    calls: tuple[Calls, ...] = ()  # its model's queues, its own first (Whisper's speech detector next); () unloaded
    installed: bool = True  # False: a voice the hub has (hub.py), fetched on first use with --allow-download

    @property
    def kind(self) -> str:
        return KINDS[self.engine]

    @property
    def state(self) -> str:
        return LOADED if self.loaded else UNLOADED

    @property
    def pending(self) -> int:
        """Calls running or waiting in the model's own queue: its queue depth."""
        return self.calls[0].pending if self.calls else 0


@dataclass(frozen=True)
class Served:
    """Everything a client may name, and what the server holds for them, at one moment."""

    models: tuple[Entry, ...]  # the models in memory or ready to load again: Whisper, Piper, XTTS, turn, wake words
    voices: tuple[Entry, ...]  # every voice on this machine a client may name (Piper voices load on first use)
    openai_voices: Mapping[str, str]  # each OpenAI voice name and the voice it means
    partial_results: bool  # whether ASR sends text while the audio still streams
    budget_used: int  # bytes of client audio and uploads held now (--memory-budget-mb)
    budget_limit: int
    household_names: int = 0  # names from Home Assistant as last read (--hass-token), for every transcription
    available_voices: tuple[Entry, ...] = ()  # the hub's voices not on this machine
    downloads: bool = False  # --allow-download: a request for an available voice fetches it

    def names_voice(self, name: str) -> bool:
        """Whether `name` leads to a voice: a voice's own name (here or the hub's), or an OpenAI voice name in any
        case."""
        voices = (*self.voices, *self.available_voices)
        return any(voice.name == name for voice in voices) or name.lower() in self.openai_voices

    def of_kind(self, kind: str) -> tuple[Entry, ...]:
        return tuple(model for model in self.models if model.kind == kind)

    def uses(self, engine: str) -> bool:
        return any(model.engine == engine for model in self.models)
