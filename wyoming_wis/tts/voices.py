"""Every voice a client may ask for, under one stable name each.

Three kinds of name lead to a voice:

- every Piper voice on this machine: in the data dirs (`voices/NAME.onnx`,
  `NAME.onnx`) and in the bundled packages, by its file name;
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

Changes to the manifest and to the voice files are picked up while the server
runs (checked at most every few seconds), without a restart.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..catalog import Catalog, Found
from ..errors import BadRequest, UnknownVoice
from .params import SpeechParams
from .piper import describe

_LOGGER = logging.getLogger(__name__)

OPENAI_VOICES = ("alloy", "ash", "ballad", "coral", "echo", "fable", "onyx", "nova", "sage", "shimmer", "verse")
MANIFEST = Path("voices") / "voices.json"
_NAME = re.compile(r"^[A-Za-z0-9][\w.\-]{0,99}$")  # no slashes, no leading dot: never a path
_MANNER = ("speed", "noise_scale", "noise_w", "sentence_silence")
_REFRESH_SECONDS = 2.0


@dataclass(frozen=True)
class Voice:
    """A voice as clients see it: a name, the Piper voice that speaks it, and how."""

    name: str
    model: Found
    languages: list[str]
    speakers: list[str]
    speaker: str | None = None  # the model's speaker this voice uses
    manner: dict[str, float] = field(default_factory=dict)  # changes to the model's SpeechParams
    description: str = ""

    def params(self, defaults: SpeechParams) -> SpeechParams:
        return defaults.but(**self.manner)


def check_name(name: str) -> str:
    """A voice name that can never name a file outside the voice folders."""
    if not _NAME.match(name):
        raise BadRequest(f"Invalid voice name {name!r}: use letters, digits, '_', '-' and '.'")
    return name


class VoiceRegistry:
    def __init__(self, catalog: Catalog, configured: list[Found], default: str) -> None:
        """`configured`: the --voice voices, found at start (they may be paths); the first is `default`."""
        self.catalog = catalog
        self.manifest = catalog.writable_dir / MANIFEST
        self.default = default
        self._configured = configured
        self._lock = threading.Lock()
        self._checked = 0.0
        self._seen: object = None  # what the voice files and manifest looked like at the last scan
        self._voices: dict[str, Voice] = {}
        self._openai: dict[str, str] = {}
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
            seen = (_manifest_stamp(self.manifest), sorted((f.name, str(f.path)) for f in models.values()))
            if seen == self._seen:
                return
            self._seen = seen
            voices = {name: _describe(name, found) for name, found in models.items()}
            openai = dict.fromkeys(OPENAI_VOICES, self.default)
            custom, mapped = self._read_manifest(voices)
            voices.update(custom)
            openai.update({alias: name for alias, name in mapped.items() if name in voices})
            self._voices, self._openai = voices, openai
            _LOGGER.info("Voices: %s", ", ".join(voices))

    def get(self, name: str | None = None, language: str | None = None) -> Voice:
        """A voice by name or OpenAI name, else the first speaking `language`, else the default."""
        if name:
            voice = self._voices.get(check_name(name)) or self._voices.get(self._openai.get(name.lower(), ""))
            if voice is None:
                raise UnknownVoice(f"Unknown voice {name!r} (voices: {', '.join(self._voices)})")
            return voice
        if language:
            voices = self._voices.values()
            candidates = [v for v in voices if _speaks(v, language, exact=True)] or [
                v for v in voices if _speaks(v, language, exact=False)
            ]
            if not candidates:
                raise UnknownVoice(f"No voice for language {language!r} (voices: {', '.join(self._voices)})")
            default = self._voices[self.default]
            return default if default in candidates else candidates[0]
        return self._voices[self.default]

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
        raise UnknownVoice(f"{entry['model']!r} has no speaker {speaker!r}")
    description = str(entry.get("description") or f"{base.description}, as {name}")
    return Voice(name, base.model, base.languages, [], speaker, manner, description)


def _describe(name: str, found: Found) -> Voice:
    """Languages, speakers and a description from the voice's .onnx.json, without loading the model."""
    languages, speakers, description = describe(name, json.loads(Path(f"{found.path}.json").read_text("utf-8")))
    return Voice(name, found, languages, speakers, description=description)


def _manifest_stamp(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size


def _speaks(voice: Voice, language: str, exact: bool) -> bool:
    """`en-US` matches en_US exactly; `en` or `en-GB` match any English voice otherwise."""
    wanted = language.replace("-", "_").lower()
    for code in voice.languages:
        code = code.lower()
        if code == wanted or (not exact and code.split("_")[0] == wanted.split("_")[0]):
            return True
    return False
