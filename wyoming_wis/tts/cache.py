"""Finished speech on disk, so a phrase said before is sent at once instead of synthesised again.

Assistants repeat themselves ("The lights are on.", "Good night."), and a hit
costs a file read. Each phrase's audio is kept under a hash of everything that
shaped it: engine, voice and its version, speaker, speech parameters, format
and text. Entries are written atomically, carry a checksum (a damaged one is
deleted, never served), expire after a time to live, and the oldest go first
when the cache passes its size cap. File work runs in threads, off the loop.
A disk that refuses an entry (full, read-only) costs the cache, never the
speech: it is said once in the log, and writing is tried again a while later.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import struct
import threading
import time
from contextlib import suppress
from pathlib import Path

from ..errors import CannotStore
from ..files import atomic_write

_LOGGER = logging.getLogger(__name__)
_MAGIC = b"WISPCM1\n"
_HEADER = struct.Struct("<32sQ")  # sha256 of the audio, its length
RETRY_WRITE_SECONDS = 60.0  # after the disk refused an entry, none is written for this long: a full disk is not
# tried (and a temporary file made) for every phrase, and one freed again is used again without a restart


def cache_key(**parts: object) -> str:
    """A stable name for what shaped a piece of speech."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


class SpeechCache:
    def __init__(self, folder: Path, max_bytes: int, ttl_seconds: float) -> None:
        self.folder = folder
        self.max_bytes = max_bytes
        self.ttl_seconds = ttl_seconds
        self._lock = threading.Lock()
        self._size: int | None = None  # bytes on disk, counted on first use
        self.hits = self.misses = 0
        self._refused_until: float | None = None  # time.monotonic() before which no entry is written; None: writing

    async def get(self, key: str) -> bytes | None:
        audio = await asyncio.to_thread(self._read, key)
        if audio is None:
            self.misses += 1
        else:
            self.hits += 1
        return audio

    async def put(self, key: str, audio: bytes) -> None:
        """Keep `audio`, if the disk lets us: a full or read-only disk costs the cache, never the speech."""
        if self._refused_until is not None and time.monotonic() < self._refused_until:
            return
        try:
            await asyncio.to_thread(self._write, key, audio)
        except (CannotStore, OSError) as err:
            if self._refused_until is None:  # once, not for every phrase
                reason = err.__cause__ or err
                _LOGGER.warning(
                    "Speech cache in %s cannot be written (%s); speech is still served", self.folder, reason
                )
            self._refused_until = time.monotonic() + RETRY_WRITE_SECONDS
            return
        if self._refused_until is not None:
            _LOGGER.info("Speech cache in %s can be written again", self.folder)
            self._refused_until = None

    def _path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.pcm"

    def _read(self, key: str) -> bytes | None:
        path = self._path(key)
        try:
            age = time.time() - path.stat().st_mtime
            data = path.read_bytes()
        except OSError:
            return None
        audio = _unpack(data)
        if audio is None or age > self.ttl_seconds:
            if audio is None:
                _LOGGER.warning("Discarding damaged speech cache entry %s", path)
            self._remove(path)
            return None
        with suppress(OSError):  # a read-only disk still serves what it holds
            os.utime(path)  # recently used: evicted last
        return audio

    def _write(self, key: str, audio: bytes) -> None:
        path = self._path(key)
        data = _MAGIC + _HEADER.pack(hashlib.sha256(audio).digest(), len(audio)) + audio
        if len(data) > self.max_bytes:
            return
        with atomic_write(path) as file:  # readers see the whole entry or none
            file.write(data)
        with self._lock:
            self._size = (self._size if self._size is not None else self._measure()) + len(data)
            over = self._size > self.max_bytes
        if over:
            self._evict()

    def _evict(self) -> None:
        """Remove expired entries, then the least recently used, until under 90 % of the cap."""
        entries = []
        for path in self.folder.glob("*/*.pcm"):
            try:
                stat = path.stat()
            except OSError:
                continue
            entries.append((stat.st_mtime, stat.st_size, path))
        entries.sort()
        total = sum(size for _, size, _ in entries)
        now = time.time()
        for mtime, size, path in entries:
            if total <= 0.9 * self.max_bytes and now - mtime <= self.ttl_seconds:
                break
            self._remove(path)
            total -= size
        with self._lock:
            self._size = total

    def _measure(self) -> int:
        total = 0
        for path in self.folder.glob("*/*.pcm"):
            with suppress(OSError):  # removed meanwhile, by an eviction here or another server sharing the dir
                total += path.stat().st_size
        return total

    def _remove(self, path: Path) -> None:
        try:
            size = path.stat().st_size
            path.unlink()
        except OSError:
            return
        with self._lock:
            if self._size is not None:
                self._size -= size


def _unpack(data: bytes) -> bytes | None:
    """The audio of an entry, or None if it is damaged."""
    start = len(_MAGIC) + _HEADER.size
    if len(data) < start or not data.startswith(_MAGIC):
        return None
    digest, length = _HEADER.unpack_from(data, len(_MAGIC))
    audio = data[start:]
    if len(audio) != length or hashlib.sha256(audio).digest() != digest:
        return None
    return audio
