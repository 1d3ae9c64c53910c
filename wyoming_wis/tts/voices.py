"""Every voice a client may ask for, under one stable name each.

Four kinds of name lead to a voice:

- every Piper voice on this machine: in the data dirs (`voices/NAME.onnx`,
  `NAME.onnx`) and in the bundled packages, by its file name;
- a loaded XTTS model, by its name (its studio speakers and cloned voices are
  its speakers), and each voice cloned with it, by the name it was given;
- custom voices from the manifest `voices/voices.json` in the first data dir:
  a Piper voice with a speaker and a manner of its own (speed, noise, pauses);
- the OpenAI voice names (alloy, ash, ...), which map to configured voices, by
  default all to the default voice.

The manifest, for example:

    {
      "voices": {
        "butler": {"model": "en_GB-alan-medium", "speed": 0.9, "sentence_silence": 0.3,
                   "description": "Slow and formal"},
        "kid": {"model": "en_US-libritts-high", "speaker": "p3922"}
      },
      "openai": {"alloy": "butler", "nova": "kid"}
    }

A custom voice may also be an XTTS model with one of its speakers. Changes to
the manifest, to the voice files and to the cloned voices are picked up while the server
runs (checked at most every few seconds), without a restart.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..catalog import Catalog, Found
from ..errors import BadRequest, UnknownVoice
from ..languages import matches
from ..served import PIPER, XTTS
from ..values import quote
from .params import SpeechParams
from .piper import describe

_LOGGER = logging.getLogger(__name__)

OPENAI_VOICES = ("alloy", "ash", "ballad", "coral", "echo", "fable", "onyx", "nova", "sage", "shimmer", "verse")
MANIFEST = Path("voices") / "voices.json"
VOICE_NAME = re.compile(r"^[A-Za-z0-9][\w.\-]{0,99}$")  # no slashes, no leading dot: never a path
_MANNER = ("speed", "noise_scale", "noise_w", "sentence_silence")
_REFRESH_SECONDS = 2.0
MAX_UNKNOWN_NAMES = 256  # unknown voice names remembered, so each is logged once


@dataclass(frozen=True)
class Voice:
    """A voice as clients see it: a name, the model that speaks it (on `engine`), and how."""

    name: str
    model: Found
    languages: list[str]
    speakers: list[str]
    speaker: str | None = None  # the model's speaker this voice uses
    manner: dict[str, float] = field(default_factory=dict)  # changes to the model's SpeechParams
    description: str = ""
    engine: str = PIPER  # or XTTS

    def params(self, defaults: SpeechParams) -> SpeechParams:
        return defaults.but(**self.manner)


def check_name(name: str) -> str:
    """A voice name that can never name a file outside the voice folders."""
    if not VOICE_NAME.fullmatch(name):
        raise BadRequest(f"Invalid voice name {quote(name)}: use letters, digits, '_', '-' and '.'")
    return name


class ClonedVoices(Protocol):
    """What the registry reads from a loaded XTTS model (the engine itself; torch stays out of here)."""

    name: str
    found: Found
    languages: list[str]
    description: str

    @property
    def studio_speakers(self) -> list[str]: ...

    @property
    def cloned_voices(self) -> list[str]: ...

    def rescan(self) -> None: ...


class VoiceRegistry:
    def __init__(
        self, catalog: Catalog, configured: list[Found], default: str, xtts: Sequence[ClonedVoices] = ()
    ) -> None:
        """`configured`: the --voice voices, found at start (they may be paths); the first is `default`."""
        self.catalog = catalog
        self.manifest = catalog.writable_dir / MANIFEST
        self.default = default
        self.xtts = list(xtts)
        self._configured = configured
        self._lock = threading.Lock()
        self._checked = 0.0
        self._seen: object = None  # what the voice files and manifest looked like at the last scan
        self._voices: dict[str, Voice] = {}
        self._openai: dict[str, str] = {}
        self._unknown: dict[str, None] = {}  # names asked for that lead nowhere, already logged; oldest first
        self.refresh(force=True)

    @property
    def voices(self) -> list[Voice]:
        return list(self._voices.values())

    @property
    def stale(self) -> bool:
        """Whether it is time to look at the disk again."""
        return time.monotonic() - self._checked >= _REFRESH_SECONDS

    def refresh(self, force: bool = False) -> None:
        """Rescan voice files and the manifest if they changed; blocking (file system), cheap when nothing did."""
        with self._lock:
            if not force and not self.stale:
                return
            self._checked = time.monotonic()
            models = {found.name: found for found in self._configured}
            for found in self.catalog.local_voices():
                models.setdefault(found.name, found)
            for engine in self.xtts:
                engine.rescan()
            cloned = [(engine.name, engine.cloned_voices) for engine in self.xtts]
            seen = (file_stamp(self.manifest), sorted((f.name, str(f.path)) for f in models.values()), cloned)
            if seen == self._seen:
                return
            self._seen = seen
            voices = {name: _describe(name, found) for name, found in models.items()}
            for voice in _xtts_voices(self.xtts):
                if voice.name in voices:
                    _LOGGER.warning("Ignoring XTTS voice %r: a Piper voice has that name", voice.name)
                else:
                    voices[voice.name] = voice
            openai = dict.fromkeys(OPENAI_VOICES, self.default)
            custom, mapped = self._read_manifest(voices)
            voices.update(custom)
            openai.update({alias: name for alias, name in mapped.items() if name in voices})
            self._voices, self._openai = voices, openai
            _LOGGER.info("Voices: %s", ", ".join(voices))

    @property
    def openai_names(self) -> dict[str, str]:
        """OpenAI voice names and the voice each one means."""
        return dict(self._openai)

    def taken(self, name: str) -> bool:
        """Whether a name already leads to a voice (OpenAI names included)."""
        return name in self._voices or name.lower() in self._openai

    def get(self, name: str | None = None, language: str | None = None) -> Voice:
        """A voice by name or OpenAI name, else the first speaking `language`, else the default.

        A name that leads nowhere (often one Home Assistant remembered from an earlier
        --voice) speaks with a voice of the language its name begins with
        (en_GB-alan-medium: British, else any English), or the default: the reply is
        heard, and the substitution logged once per name.
        """
        if name:
            voice = self.find(name)
            if voice is None:
                voice = self._speaking(name.split("-")[0]) or self._voices[self.default]
                self._warn_once(name, voice)
            return voice
        if language:
            voice = self._speaking(language)
            if voice is None:
                raise UnknownVoice(f"No voice for language {quote(language)} (voices: {', '.join(self._voices)})")
            return voice
        return self._voices[self.default]

    def find(self, name: str) -> Voice | None:
        """The voice a name or OpenAI name leads to, if any."""
        return self._voices.get(check_name(name)) or self._voices.get(self._openai.get(name.lower(), ""))

    def _speaking(self, language: str) -> Voice | None:
        """Of the voices for the language's country (else for the language): the default if it is one, else the
        first."""
        voices = self._voices.values()
        candidates = [v for v in voices if _speaks(v, language, exact=True)] or [
            v for v in voices if _speaks(v, language, exact=False)
        ]
        default = self._voices[self.default]
        return default if default in candidates else next(iter(candidates), None)

    def _warn_once(self, name: str, substitute: Voice) -> None:
        if name in self._unknown:
            return
        if len(self._unknown) >= MAX_UNKNOWN_NAMES:  # a client inventing names cannot grow this
            self._unknown.pop(next(iter(self._unknown)))
        self._unknown[name] = None
        _LOGGER.warning(
            "No voice %r (voices: %s); speaking with %s instead", name, ", ".join(self._voices), substitute.name
        )

    def _read_manifest(self, models: dict[str, Voice]) -> tuple[dict[str, Voice], dict[str, str]]:
        """Custom voices and OpenAI mappings; a broken manifest or entry is logged and skipped, not fatal."""
        if not self.manifest.is_file():
            return {}, {}
        try:
            document = json.loads(self.manifest.read_text(encoding="utf-8"))
            entries: dict[str, Any] = document.get("voices", {})
            mapped: dict[str, str] = document.get("openai", {})
            assert isinstance(entries, dict) and isinstance(mapped, dict)
        except (OSError, ValueError, AttributeError, AssertionError) as err:
            _LOGGER.error("Ignoring voice manifest %s: %s", self.manifest, err)
            return {}, {}
        custom: dict[str, Voice] = {}
        for name, entry in entries.items():
            try:
                custom[check_name(name)] = _custom(name, entry, models)
            except (BadRequest, UnknownVoice, TypeError, ValueError, AttributeError) as err:
                _LOGGER.error("Ignoring voice %r in %s: %s", name, self.manifest, err)
        return custom, {str(alias).lower(): str(target) for alias, target in mapped.items()}


def _custom(name: str, entry: dict[str, Any], models: dict[str, Voice]) -> Voice:
    base = models.get(str(entry["model"]))
    if base is None:
        raise UnknownVoice(f"no Piper voice {entry['model']!r}")
    manner = {key: float(entry[key]) for key in _MANNER if entry.get(key) is not None}
    SpeechParams().but(**manner)  # out of range: refused now, not at the first request
    speaker = entry.get("speaker")
    if speaker is not None and str(speaker) not in base.speakers:
        raise UnknownVoice(f"{entry['model']!r} has no speaker {quote(speaker)}")
    description = str(entry.get("description") or f"{base.description}, as {name}")
    return Voice(name, base.model, base.languages, [], speaker, manner, description, base.engine)


def _xtts_voices(engines: Sequence[ClonedVoices]) -> list[Voice]:
    """Each XTTS model, with all its speakers, then each cloned voice under its own name."""
    voices = []
    for engine in engines:
        speakers = [*engine.studio_speakers, *engine.cloned_voices]
        voices.append(Voice(engine.name, engine.found, engine.languages, speakers, None, {}, engine.description, XTTS))
        for name in engine.cloned_voices:
            description = f"{name}, cloned with XTTS {engine.name}"
            voices.append(Voice(name, engine.found, engine.languages, [], name, {}, description, XTTS))
    return voices


def _describe(name: str, found: Found) -> Voice:
    """Languages, speakers and a description from the voice's .onnx.json, without loading the model."""
    languages, speakers, description = describe(name, json.loads(Path(f"{found.path}.json").read_text("utf-8")))
    return Voice(name, found, languages, speakers, description=description)


def file_stamp(path: Path) -> tuple[int, int] | None:
    """When a file last changed and its size, or None if it is not there: enough to notice an edit."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size


def _speaks(voice: Voice, language: str, exact: bool) -> bool:
    return any(matches(code, language, exact) for code in voice.languages)
