"""Every wake word model on this machine, under one stable name each.

Two families, both run by the libraries that ship their models in PyPI wheels (TensorFlow Lite, no download):

- microWakeWord (`pymicro-wakeword`): a model file and its JSON config, the models Home Assistant Voice PE runs
  on the device. A model is called by its config's name: `okay_nabu`, `hey_jarvis`, `hey_mycroft`, `alexa`, as
  wyoming-microwakeword and ESPHome call them.
- openWakeWord (`pyopen-wakeword`): a model over the library's shared melspectrogram and embedding models. A model
  is called by its file's name and `_oww` (`okay_nabu_oww`, `hey_rhasspy_oww`), so that both families' Okay Nabu
  can be offered side by side; `detect` also takes the bare name wyoming-openwakeword uses (see `WakeModels.find`).

The user's own models go in `wake/` in any data dir: a microWakeWord `NAME.json` beside its `.tflite`, or an
openWakeWord `NAME.tflite` on its own. The manifest `wake/wake.json` in the first data dir sets a model's own
cutoff, refractory time and phrase:

    {"models": {"okay_nabu": {"cutoff": 0.9}, "computer_v2_oww": {"phrase": "Computer", "refractory_seconds": 3}}}

Files and manifest are read again when they change (checked at most every few seconds), without a restart.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..served import MICRO_WAKE, OPEN_WAKE

_LOGGER = logging.getLogger(__name__)

MICRO, OPEN = MICRO_WAKE, OPEN_WAKE  # the families, also the `engine` of their entries in the view
OPEN_SUFFIX = "_oww"  # after an openWakeWord model's file name
FOLDER = "wake"  # in each data dir
MANIFEST = "wake.json"  # in FOLDER of the first data dir
OPEN_CUTOFF = 0.5  # openWakeWord's probability cutoff where a model gives none (wyoming-openwakeword's --threshold)
_FEATURE_MODELS = {"melspectrogram", "embedding_model"}  # openWakeWord's shared models, not wake words
_RESCAN_SECONDS = 5.0  # files are looked at again at most this often
_VERSION = re.compile(r"_v\d+(\.\d+)*$")  # a version at the end of a file name (wyoming-openwakeword's `_v0.1`)
_ALIASES = {"ok_nabu": "okay_nabu"}  # wyoming-openwakeword's name before 2.0


@dataclass(frozen=True)
class WakeModel:
    """One wake word model: where it is and how it decides."""

    name: str
    family: str  # MICRO or OPEN
    phrase: str  # what the speaker says ("Okay Nabu")
    path: Path  # the .tflite file
    cutoff: float  # the probability above which the phrase is heard
    window: int  # microWakeWord: probabilities averaged; openWakeWord: activations in a row needed
    languages: tuple[str, ...] = ()
    version: str | None = None
    author: str = ""
    url: str = ""
    bundled: bool = False
    refractory_seconds: float | None = None  # None: the server's --wake-refractory-seconds

    @property
    def description(self) -> str:
        return f"{self.phrase} ({'microWakeWord' if self.family == MICRO else 'openWakeWord'})"

    @property
    def stem(self) -> str:
        """The name without the family's suffix: what other servers call the model."""
        return self.name.removesuffix(OPEN_SUFFIX)


def library_dir(family: str) -> Path:
    """The installed package of a family (its `models/` and `lib/` folders), found without importing it."""
    import importlib.util

    spec = importlib.util.find_spec("pymicro_wakeword" if family == MICRO else "pyopen_wakeword")
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(f"the {family} package is not installed")
    return Path(spec.origin).parent


def tflite_library() -> Path:
    """TensorFlow Lite's C library, from pymicro-wakeword: one copy in the process runs both families."""
    return next((library_dir(MICRO) / "lib").glob("*tensorflowlite_c.*"))


def _phrase(stem: str) -> str:
    return " ".join(word.capitalize() for word in _VERSION.sub("", stem).split("_") if word)


def _micro(config_path: Path, bundled: bool) -> WakeModel | None:
    config = json.loads(config_path.read_text(encoding="utf-8"))
    if config.get("type") != "micro":
        return None
    micro = config["micro"]
    return WakeModel(
        name=config_path.stem,
        family=MICRO,
        phrase=str(config.get("wake_word") or _phrase(config_path.stem)),
        path=config_path.parent / str(config["model"]),
        cutoff=float(micro["probability_cutoff"]),
        window=int(micro["sliding_window_size"]),
        languages=tuple(str(language) for language in config.get("trained_languages", ())),
        version=str(config["version"]) if config.get("version") is not None else None,
        author=str(config.get("author", "")),
        url=str(config.get("website", "")),
        bundled=bundled,
    )


def _open(path: Path, bundled: bool) -> WakeModel:
    return WakeModel(
        name=path.stem + OPEN_SUFFIX,
        family=OPEN,
        phrase=_phrase(path.stem),
        path=path,
        cutoff=OPEN_CUTOFF,
        window=1,
        languages=("en",) if bundled else (),
        author="David Scripka" if bundled else "",
        url="https://github.com/dscripka/openWakeWord" if bundled else "",
        bundled=bundled,
    )


def scan(folder: Path, bundled: bool = False) -> list[WakeModel]:
    """The models in one folder; a file that cannot be read is logged and skipped."""
    found: list[WakeModel] = []
    micro_files: set[Path] = set()
    for config_path in sorted(folder.glob("*.json")):
        if config_path.name == MANIFEST:
            continue
        try:
            model = _micro(config_path, bundled)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            _LOGGER.error("Ignoring wake word config %s: %s", config_path, err)
            continue
        if model is None:
            continue
        if not model.path.is_file():
            _LOGGER.error("Ignoring wake word config %s: no model file %s", config_path, model.path)
            continue
        found.append(model)
        micro_files.add(model.path.resolve())
    for path in sorted(folder.glob("*.tflite")):
        if path.stem not in _FEATURE_MODELS and path.resolve() not in micro_files:
            found.append(_open(path, bundled))
    return found


class WakeModels:
    """The wake word models a server offers: the bundled ones and the data dirs', less those not chosen.

    Safe from any thread; `refresh` rescans the files when they may have changed.
    """

    def __init__(self, data_dirs: Sequence[Path], chosen: Sequence[str] = ("all",)) -> None:
        self.folders = [Path(folder) / FOLDER for folder in data_dirs]
        self.manifest = self.folders[0] / MANIFEST
        self.chosen = [name for name in chosen if name] or ["all"]
        self._lock = threading.Lock()
        self._models: dict[str, WakeModel] = {}
        self._scanned = -_RESCAN_SECONDS
        self._stamps: tuple[Any, ...] = ()
        self.refresh(force=True)
        if not self._models and self.chosen != ["none"]:
            _LOGGER.warning("No wake word models found (--wake-model %s)", " ".join(self.chosen))

    @property
    def models(self) -> dict[str, WakeModel]:
        return self._models

    def refresh(self, force: bool = False) -> None:
        """Read the folders and the manifest again if any changed (looked at every few seconds at most)."""
        now = time.monotonic()
        if not force and now - self._scanned < _RESCAN_SECONDS:
            return
        with self._lock:
            self._scanned = now
            stamps = self._file_stamps()
            if not force and stamps == self._stamps:
                return
            self._stamps = stamps
            self._models = self._load()

    def find(self, name: str) -> tuple[str, WakeModel] | None:
        """The model a client means by `name`: its own name, else the name another server gives it.

        wyoming-openwakeword calls its models by their bare file names (`hey_rhasspy`, before 2.0 `ok_nabu_v0.1`),
        wyoming-microwakeword by its config names: a bare name is the microWakeWord model if there is one, else the
        openWakeWord one. Returns the name as asked (detections carry it back) and the model.
        """
        models = self._models
        if name in models:
            return name, models[name]
        stem = _VERSION.sub("", name.strip().lower())
        stem = _ALIASES.get(stem, stem)
        for candidate in (stem, stem + OPEN_SUFFIX):
            if candidate in models:
                return name, models[candidate]
        return None

    def _file_stamps(self) -> tuple[Any, ...]:
        stamps = []
        for folder in self.folders:
            if folder.is_dir():
                for path in sorted(folder.iterdir()):
                    try:
                        stat = path.stat()
                    except OSError:
                        continue
                    stamps.append((str(path), stat.st_mtime_ns, stat.st_size))
        return tuple(stamps)

    def _load(self) -> dict[str, WakeModel]:
        every: dict[str, WakeModel] = {}
        for folder, bundled in [(library_dir(MICRO) / "models", True), (library_dir(OPEN) / "models", True)] + [
            (folder, False) for folder in self.folders if folder.is_dir()
        ]:
            for model in scan(folder, bundled):
                every.setdefault(model.name, model)  # the first data dir wins, as for voices
        settings = self._read_manifest()
        for name, entry in settings.items():
            if name in every:
                every[name] = replace(every[name], **entry)
            else:
                _LOGGER.error("Ignoring %r in %s: no such wake word model", name, self.manifest)
        if "none" in self.chosen:
            return {}
        if "all" in self.chosen:
            return every
        unknown = [name for name in self.chosen if name not in every]
        if unknown:
            _LOGGER.warning("No wake word model %s (found: %s)", ", ".join(unknown), ", ".join(every) or "none")
        return {name: every[name] for name in self.chosen if name in every}

    def _read_manifest(self) -> dict[str, dict[str, Any]]:
        """Each model's own settings; a broken manifest or entry is logged and skipped, not fatal."""
        if not self.manifest.is_file():
            return {}
        try:
            document = json.loads(self.manifest.read_text(encoding="utf-8"))
            entries = document.get("models", {})
            assert isinstance(entries, dict)
        except (OSError, ValueError, AttributeError, AssertionError) as err:
            _LOGGER.error("Ignoring wake word manifest %s: %s", self.manifest, err)
            return {}
        settings: dict[str, dict[str, Any]] = {}
        for name, entry in entries.items():
            try:
                settings[str(name)] = _manifest_entry(entry)
            except (TypeError, ValueError, AttributeError) as err:
                _LOGGER.error("Ignoring wake word %r in %s: %s", name, self.manifest, err)
        return settings


def _manifest_entry(entry: dict[str, Any]) -> dict[str, Any]:
    unknown = set(entry) - {"cutoff", "refractory_seconds", "phrase", "window"}
    if unknown:
        raise ValueError(f"unknown settings {', '.join(sorted(unknown))}")
    checked: dict[str, Any] = {}
    if "cutoff" in entry:
        checked["cutoff"] = check_cutoff(float(entry["cutoff"]))
    if "refractory_seconds" in entry:
        checked["refractory_seconds"] = float(entry["refractory_seconds"])
        if not 0 <= checked["refractory_seconds"] <= 60:
            raise ValueError("refractory_seconds must be 0 to 60")
    if "phrase" in entry:
        checked["phrase"] = str(entry["phrase"]).strip() or None
        if checked["phrase"] is None:
            raise ValueError("phrase is empty")
    if "window" in entry:
        checked["window"] = int(entry["window"])
        if not 1 <= checked["window"] <= 50:
            raise ValueError("window must be 1 to 50")
    return checked


def check_cutoff(value: float) -> float:
    if not 0 < value < 1:
        raise ValueError(f"a cutoff must be between 0 and 1, got {value:g}")
    return value
