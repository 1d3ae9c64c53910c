"""What the Hugging Face Hub has, known without asking it, and the one way to fetch a voice from it.

Every Piper voice of `rhasspy/piper-voices` is known from the repository's own list, `voices.json`: name,
language, speakers, quality, and each file's size and md5. A copy ships in this package (`data/piper_voices.json`,
as wyoming-piper ships one); with `--allow-download` the server fetches the hub's list, the first time it starts so, in
the background, into the first data dir (`piper-voices.json`), and reads that copy from then on.

A voice in the list but not on this machine is *available*: with `--allow-download` the first request for it
fetches it, once, however many ask at the same time (they share the download), in threads of their own so that
nothing else waits. Its files are checked against the list (size and md5) in a staging folder beside the voices and
renamed into `voices/` only when both are whole, the model last: a voice is on disk entirely or not at all, and a
failed fetch leaves nothing behind.

The hub is reached through huggingface_hub, so `HF_ENDPOINT` moves it (the tests' stand-in hub on loopback, whose
list names its own files); no token is ever sent. Nothing here touches the network unless the core asks, and it
asks only with `--allow-download`. A list is checked before it is used: at most MAX_LIST_BYTES, and each entry
with a voice's name (never a path) and its two files, or it is left out.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import CannotStore, DownloadFailed

_LOGGER = logging.getLogger(__name__)

PIPER_VOICES_REPO = "rhasspy/piper-voices"
PIPER_VOICES_LIST = "voices.json"  # in the repository
SHIPPED_LIST = Path(__file__).parent / "data" / "piper_voices.json"
CACHED_LIST = "piper-voices.json"  # in the first data dir, once fetched
VOICES_FOLDER = "voices"  # in the first data dir: where fetched voices go, as `NAME.onnx` and `NAME.onnx.json`
MAX_LIST_BYTES = 8 << 20  # the list is 0.25 MB today
FETCH_WORKERS = 2  # fetches at the same time; more wait their turn
KEEP_FREE_BYTES = 1 << 30  # a fetch that would leave less free space in the data dir is refused: clients asking
# for one voice after another cannot fill the disk
PIPER_NAME = re.compile(r"^(?P<code>[a-z]{2,3}_[A-Z]{2})-(?P<speaker>\w+)-(?P<quality>x_low|low|medium|high)$")
_REPO_PATH = re.compile(r"[\w.\-]+(/[\w.\-]+)*")  # a file's path in the repository: never absolute, never up
# Language families whose Piper voices need a phonemizer that piper-tts leaves to an extra, and its module
_OPTIONAL_PHONEMIZERS = {"ja": "pyopenjtalk", "th": "tltk"}


@dataclass(frozen=True)
class HubFile:
    """One file of the hub, as its list gives it."""

    path: str  # in the repository
    size: int
    md5: str


@dataclass(frozen=True)
class KnownVoice:
    """A Piper voice the hub has."""

    name: str  # en_US-lessac-medium
    language: str  # en_US
    language_name: str  # English (United States)
    quality: str  # x_low, low, medium, high
    speakers: tuple[str, ...]  # the names of a voice with more than one
    model: HubFile  # the .onnx
    config: HubFile  # the .onnx.json

    @property
    def size(self) -> int:
        return self.model.size + self.config.size

    @property
    def description(self) -> str:
        dataset = self.name.split("-")[1].replace("_", " ")
        return f"{dataset} ({self.language_name}, {self.quality}; fetched on first use, {self.size / 1e6:.0f} MB)"


class Hub:
    """The hub's voices as this server knows them, and their fetches into the first data dir."""

    def __init__(self, data_dir: Path) -> None:
        self.folder = data_dir / VOICES_FOLDER
        self.cached_list = data_dir / CACHED_LIST
        self._lock = threading.Lock()
        self._running: dict[str, Future[Any]] = {}
        self._slots = threading.BoundedSemaphore(FETCH_WORKERS)
        self._closed = False
        # Every Piper voice the hub has, by name: read here, at start, and again only by a fetch of the list (in
        # its thread), never on the event loop
        self.voices: Mapping[str, KnownVoice] = self._read()

    def _read(self) -> Mapping[str, KnownVoice]:
        """The fetched list if there is one, else the shipped one."""
        if self.cached_list.is_file():
            try:
                return read_list(self.cached_list)
            except (OSError, ValueError) as err:
                _LOGGER.warning("Ignoring the Piper voices' list %s: %s", self.cached_list, err)
        return read_list(SHIPPED_LIST)

    def fetch_list(self) -> Future[Any]:
        """Fetch the hub's list of voices into the data dir where it is not yet (at start with --allow-download,
        in the background); a failure is logged, and the list the server has is kept."""
        return self._once(PIPER_VOICES_LIST, self._fetch_list)

    def voice(self, voice: KnownVoice) -> Future[Path]:
        """The voice's .onnx in the data dir once fetched and checked; a fetch of it already running is shared.
        Fails with DownloadFailed."""
        return self._once(voice.name, lambda: self._fetch_voice(voice))

    def close(self) -> None:
        """Fetches not started yet are dropped. Running ones are left to their threads, which never hold the process
        back from exiting: a fetch cut short there leaves only its staging folder, cleared by the next fetch."""
        self._closed = True

    def _once(self, key: str, fetch: Callable[[], Any]) -> Future[Any]:
        """`fetch` in a thread of its own, or the future of the one for `key` already under way."""
        with self._lock:
            running = self._running.get(key)
            if running is not None:
                return running
            future: Future[Any] = Future()
            self._running[key] = future
        threading.Thread(target=self._run, args=(key, fetch, future), name=f"fetch-{key}", daemon=True).start()
        return future

    def _run(self, key: str, fetch: Callable[[], Any], future: Future[Any]) -> None:
        try:
            with self._slots:
                if self._closed:
                    raise DownloadFailed("The server is stopping")
                result = fetch()
        except BaseException as err:  # the future carries it to whoever waits
            future.set_exception(err)
        else:
            future.set_result(result)
        finally:
            with self._lock:
                self._running.pop(key, None)

    def _fetch_list(self) -> None:
        if self.cached_list.is_file():
            return
        self.cached_list.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".piper-voices-", dir=self.cached_list.parent))
        try:
            path = _download(PIPER_VOICES_LIST, staging)
            voices = read_list(path)  # refused whole if it is too big or no list at all
            os.replace(path, self.cached_list)
        except (DownloadFailed, OSError, ValueError) as err:
            _LOGGER.warning("Keeping the Piper voices' list the server has: %s", getattr(err, "message", err))
            return
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        self.voices = voices
        _LOGGER.info("Piper voices' list from the Hugging Face Hub: %d voices", len(voices))

    def _fetch_voice(self, voice: KnownVoice) -> Path:
        target = self.folder / f"{voice.name}.onnx"
        if target.is_file() and Path(f"{target}.json").is_file():
            return target  # fetched meanwhile, by an earlier request or another process
        _LOGGER.info("Fetching Piper voice %s (%.0f MB) from the Hugging Face Hub", voice.name, voice.size / 1e6)
        self.folder.mkdir(parents=True, exist_ok=True)
        for left in self.folder.glob(f".{voice.name}-*"):  # a fetch cut short by the server's exit
            shutil.rmtree(left, ignore_errors=True)
        free = shutil.disk_usage(self.folder).free
        if free < voice.size + KEEP_FREE_BYTES:
            raise CannotStore(
                f"Piper voice {voice.name} ({voice.size / 1e6:.0f} MB) would leave less than "
                f"{KEEP_FREE_BYTES >> 20} MB free in {self.folder} ({free / 1e6:.0f} MB free)"
            )
        staging = Path(tempfile.mkdtemp(prefix=f".{voice.name}-", dir=self.folder))
        try:
            config, model = (_checked(file, _download(file.path, staging)) for file in (voice.config, voice.model))
            os.replace(config, f"{target}.json")
            os.replace(model, target)  # last: a voice is the .onnx beside its .onnx.json
        except OSError as err:
            raise DownloadFailed(f"Cannot store Piper voice {voice.name} in {self.folder}: {err}") from err
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        _LOGGER.info("Fetched Piper voice %s into %s", voice.name, self.folder)
        return target


def read_list(path: Path) -> Mapping[str, KnownVoice]:
    """A `voices.json`, refused whole (ValueError) when it is over MAX_LIST_BYTES or not an object; entries that are
    not a voice, or whose language needs a phonemizer that is not installed (their speech would be silence), are
    left out. Blocking, and it grows with the file: at start or in a fetch's thread, never on the event loop."""
    size = path.stat().st_size
    if size > MAX_LIST_BYTES:
        raise ValueError(f"{size} bytes, over {MAX_LIST_BYTES >> 20} MB")
    document = json.loads(path.read_text("utf-8"))
    if not isinstance(document, dict):
        raise ValueError("not a JSON object")
    missing = {family for family, module in _OPTIONAL_PHONEMIZERS.items() if importlib.util.find_spec(module) is None}
    voices = {}
    for name, entry in document.items():
        try:
            voice = _voice(name, entry)
        except (KeyError, TypeError, ValueError, AttributeError):
            _LOGGER.debug("Not a voice in %s: %.60r", path, name)
            continue
        if voice.language.split("_")[0] not in missing:
            voices[name] = voice
    return voices


def _voice(name: str, entry: dict[str, Any]) -> KnownVoice:
    match = PIPER_NAME.match(name)
    if match is None:
        raise ValueError("not a Piper voice's name")
    files = {
        path.rsplit("/", 1)[-1]: HubFile(path, int(file["size_bytes"]), str(file["md5_digest"]))
        for path, file in entry["files"].items()
        if _REPO_PATH.fullmatch(path) and ".." not in path
    }
    language = entry["language"]
    return KnownVoice(
        name=name,
        language=match["code"],
        language_name=f"{language['name_english']} ({language['country_english']})",
        quality=match["quality"],
        speakers=tuple(str(speaker) for speaker in entry.get("speaker_id_map") or ()),
        model=files[f"{name}.onnx"],
        config=files[f"{name}.onnx.json"],
    )


def _download(path: str, staging: Path) -> Path:
    """One file of the hub's voices into `staging`."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.utils import disable_progress_bars

    disable_progress_bars()  # a server's log, not a terminal
    try:
        return Path(hf_hub_download(PIPER_VOICES_REPO, path, local_dir=staging, token=False))
    except Exception as err:  # not on the hub, unreachable, timed out, cut short past its retries
        raise DownloadFailed(f"Download of {path} from the Hugging Face Hub failed: {_reason(err)}") from err


def _checked(file: HubFile, path: Path) -> Path:
    """The file, if it has the size and md5 the list says; else DownloadFailed."""
    size = path.stat().st_size
    if size != file.size:
        raise DownloadFailed(f"Download of {file.path} is {size} bytes, the hub's list says {file.size}")
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as opened:
        while block := opened.read(1 << 20):
            digest.update(block)
    if digest.hexdigest() != file.md5:
        raise DownloadFailed(f"Download of {file.path} has md5 {digest.hexdigest()}, the hub's list says {file.md5}")
    return path


def _reason(err: Exception) -> str:
    """The first line of a huggingface_hub error: its name and message, without the request id and links."""
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__
