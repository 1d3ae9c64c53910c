"""XTTS's voices: the latents a voice is, the recordings they are cloned from, and the folder cloned ones live in.

A cloned voice is its conditioning latents, computed once from the reference
recording and stored as `folder/NAME.safetensors` with a `NAME.json` sidecar,
so it costs nothing at speaking time and survives a restart. Servers that share
a data dir share the folder, and each picks up the others' changes on `rescan`.
The folder holds at most `max_voices` (--max-cloned-voices): a new voice past
them is refused before its recording is decoded, and again, exactly, under the
store's lock before a byte is written; replacing a voice takes no more room.
Each voice carries a digest of its latents: the speech cache keys on it, so a
voice cloned again under the same name never gets the old voice's cached speech.

Latents are numpy arrays here, so this module (like the server without --xtts)
never imports torch; the engine (xtts.py) turns them into tensors to speak.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Collection, Mapping
from contextlib import suppress
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import load_file, save

from ..audio import decode_file
from ..errors import AudioTooLong, BadAudio, BadRequest, CannotStore, UnknownSpeaker
from ..files import atomic_write, refused
from ..requests import MAX_REFERENCE_BYTES
from ..values import quote
from .voices import check_name, file_stamp

_LOGGER = logging.getLogger(__name__)

MIN_REFERENCE_SECONDS = 3.0
MAX_REFERENCE_SECONDS = 30.0
_SUFFIX = ".safetensors"
_SIDECAR = ".json"
_LATENT_KEYS = ("gpt_cond_latent", "speaker_embedding")
_EMBEDDING_SHAPE = (1, 512, 1)


@dataclass(frozen=True, eq=False)
class Conditioning:
    """What XTTS speaks with, a studio speaker's or a cloned voice's: the GPT conditioning and the decoder's speaker
    embedding."""

    name: str
    gpt_cond_latent: np.ndarray  # [1, 32, GPT width], float32
    speaker_embedding: np.ndarray  # [1, 512, 1], float32
    cloned: bool

    @cached_property
    def digest(self) -> str:
        """What the voice sounds like, in a few bytes: equal latents, equal digest."""
        digest = hashlib.sha256()
        for array in (self.gpt_cond_latent, self.speaker_embedding):
            digest.update(np.ascontiguousarray(array, dtype=np.float32).tobytes())
        return digest.hexdigest()[:16]


class VoiceStore:
    """The cloned voices of one XTTS model: read from its folder, kept in memory, written back whole."""

    def __init__(
        self, folder: Path, *, model: str, width: int, studio: Collection[str], max_voices: int | None = None
    ) -> None:
        """`width` is the model's GPT width, so a voice made for another model is refused; `studio` names the
        model's studio speakers, which no cloned voice may take; `max_voices` is how many the folder may hold
        (None: no limit, for tools and tests)."""
        self.folder = Path(folder)  # made with the first voice stored: a read-only data dir still serves the rest
        self.model = model
        self.max_voices = max_voices
        self._width = width
        self._studio = frozenset(studio)
        self._lock = threading.Lock()  # guards _voices and _files, changed by saves, removals and rescans
        self._voices: dict[str, Conditioning] = {}  # replaced whole on each change, so readers need no lock
        self._files: dict[str, tuple[int, int]] = {}  # the stored file each voice was read from
        self.rescan()

    @property
    def voices(self) -> Mapping[str, Conditioning]:
        """The voices by name, in order of their names."""
        return self._voices

    def check_new_name(self, name: object) -> str:
        """The name for a voice about to be cloned; raises BadRequest for one that cannot be used."""
        if not isinstance(name, str):
            raise BadRequest(f"A voice name must be a string, got {type(name).__name__}")
        check_name(name)
        if name in self._studio:
            raise BadRequest(f"{quote(name)} is a studio speaker of XTTS model {self.model!r}; choose another name")
        self._check_room(name)
        return name

    def save(self, voice: Conditioning, source_seconds: float, source_bytes: int) -> dict[str, Any]:
        """Store a voice (replacing one of that name) and return its sidecar; blocking (file system)."""
        info = {
            "name": voice.name,
            "model": self.model,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "source_seconds": round(source_seconds, 3),
            "source_bytes": source_bytes,
        }
        path, sidecar = self._path(voice.name, _SUFFIX), self._path(voice.name, _SIDECAR)
        arrays = {key: np.ascontiguousarray(getattr(voice, key)) for key in _LATENT_KEYS}
        with self._lock:
            self._check_room(voice.name)  # again: another clone may have been stored since check_new_name
            # The voice first, then what it was made from: a disk that refuses the second leaves a voice that
            # works and says so in the log, never a description of a voice that is not there.
            try:
                with atomic_write(path) as file:
                    file.write(save(arrays))
            except CannotStore as err:
                _LOGGER.warning("Cannot store cloned voice %s in %s: %s", voice.name, self.folder, err.__cause__)
                raise
            try:
                with atomic_write(sidecar) as file:
                    file.write(json.dumps(info, indent=2).encode())
            except CannotStore as err:
                with suppress(OSError):
                    sidecar.unlink(missing_ok=True)  # it describes the recording this one replaced
                _LOGGER.warning("Stored cloned voice %s without %s: %s", voice.name, sidecar, err.__cause__)
            self._voices = dict(sorted({**self._voices, voice.name: voice}.items()))
            stamp = file_stamp(path)
            if stamp is not None:
                self._files[voice.name] = stamp
        return info

    def remove(self, name: str) -> None:
        """Forget a voice and delete its files; blocking (file system)."""
        with self._lock:
            if name not in self._voices:
                raise UnknownSpeaker(f"XTTS model {self.model!r} has no cloned voice {quote(name)}")
            try:
                for suffix in (_SUFFIX, _SIDECAR):
                    self._path(name, suffix).unlink(missing_ok=True)
            except OSError as err:  # a read-only data dir: the voice stays, here and after a restart
                raise refused(err) from err
            self._voices = {key: voice for key, voice in self._voices.items() if key != name}
            self._files.pop(name, None)

    def rescan(self) -> None:
        """Pick up voices cloned or removed by another server sharing the folder; cheap when none were."""
        files = {path.name[: -len(_SUFFIX)]: path for path in self.folder.glob(f"*{_SUFFIX}")}
        stamps = {name: stamp for name, path in files.items() if (stamp := file_stamp(path)) is not None}
        with self._lock:
            if stamps == self._files:
                return
            voices = {name: voice for name, voice in self._voices.items() if stamps.get(name) == self._files.get(name)}
            for name in sorted(stamps.keys() - voices.keys()):
                voice = self._read(name, files[name])
                if voice is not None:
                    voices[name] = voice
            self._voices, self._files = dict(sorted(voices.items())), stamps

    def _check_room(self, name: str) -> None:
        """Refuse a new voice when the folder holds `max_voices` (each about 130 kB for XTTS-v2); a voice of a
        name it holds replaces that one."""
        limit, held = self.max_voices, len(self._files)
        if limit is None or name in self._files or held < limit:
            return
        if limit == 0:
            raise CannotStore("Voice cloning is off on this server (--max-cloned-voices 0)")
        raise CannotStore(
            f"This server keeps at most {limit} cloned voices (--max-cloned-voices) and has {held}: clone under "
            f"one of their names to replace it, or remove one"
        )

    def _path(self, name: str, suffix: str) -> Path:
        return self.folder / f"{name}{suffix}"

    def _read(self, name: str, path: Path) -> Conditioning | None:
        """A stored voice, or None (logged) for a file that is damaged, foreign or badly named."""
        try:
            check_name(name)
            if name in self._studio:
                raise ValueError(f"{name!r} is a studio speaker's name")
            arrays = load_file(path)
            latent, embedding = (arrays[key] for key in _LATENT_KEYS)
            if latent.ndim != 3 or latent.shape[-1] != self._width or embedding.shape != _EMBEDDING_SHAPE:
                raise ValueError(f"shapes {tuple(latent.shape)} and {tuple(embedding.shape)} are not this model's")
        except Exception as err:  # a damaged or foreign file must not stop the server
            _LOGGER.warning("Ignoring XTTS voice file %s: %s", path, err)
            return None
        return Conditioning(name, latent, embedding, cloned=True)


def check_reference_size(audio: bytes) -> None:
    """Refuse a recording that is not bytes, is empty or is too big, before it waits for a worker."""
    if not isinstance(audio, (bytes, bytearray, memoryview)):
        raise BadAudio(f"The reference audio must be bytes, got {type(audio).__name__}")
    if not audio:
        raise BadAudio("The reference audio is empty")
    if len(audio) > MAX_REFERENCE_BYTES:
        raise BadAudio(
            f"The reference audio is {len(audio) / 1e6:.1f} MB; the limit is {MAX_REFERENCE_BYTES / 1e6:.0f} MB"
        )


def decode_reference(audio: bytes, rate: int) -> np.ndarray:
    """A recording in one of audio.UPLOAD_FORMATS, as mono float32 at `rate`, checked for size, length and silence."""
    check_reference_size(audio)
    try:
        samples = decode_file(audio, rate, MAX_REFERENCE_SECONDS, what="reference audio")
    except AudioTooLong as err:
        raise BadAudio(
            f"The reference audio is longer than {MAX_REFERENCE_SECONDS:.0f} s; "
            f"use {MIN_REFERENCE_SECONDS:.0f}-{MAX_REFERENCE_SECONDS:.0f} s of clear speech"
        ) from err
    seconds = len(samples) / rate
    if seconds < MIN_REFERENCE_SECONDS:
        raise BadAudio(
            f"The reference audio is {seconds:.1f} s; XTTS needs at least {MIN_REFERENCE_SECONDS:.0f} s of speech"
        )
    if not np.isfinite(samples).all() or float(np.abs(samples).max()) < 1e-4:
        raise BadAudio("The reference audio is silent")
    return np.clip(samples, -1.0, 1.0).astype(np.float32, copy=False)
