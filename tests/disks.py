"""Data dirs a server cannot write: read-only, or on a full disk, made for real where the system lets us.

Root ignores file modes, so a read-only dir is a read-only bind mount as root (a dir of mode 0555 for anyone
else), and a full disk is a tiny tmpfs filled to its last byte (root only). Where neither can be made, the test
that asks is skipped and says why; tests/test_storage.py also simulates a full disk in-process, which runs
everywhere.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

FULL_DISK_BYTES = 64 * 1024  # the tmpfs of a full data dir: room for a few small files, never for a recording


def _mount(*args: str) -> bool:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    return subprocess.run(["mount", *args], capture_output=True, timeout=30).returncode == 0


def _unmount(path: Path) -> None:
    subprocess.run(["umount", "--lazy", str(path)], capture_output=True, timeout=30, check=True)


@contextmanager
def read_only_dir(path: Path, fill: dict[str, bytes] | None = None) -> Iterator[Path]:
    """`path`, holding the files `fill` names (relative path: content), and then read-only."""
    path.mkdir(parents=True, exist_ok=True)
    for name, content in (fill or {}).items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_bytes(content)
    if os.geteuid() != 0:
        folders = [path, *(item for item in path.rglob("*") if item.is_dir())]
        for folder in folders:
            folder.chmod(0o555)
        try:
            yield path
        finally:
            for folder in folders:
                folder.chmod(0o755)
        return
    if not _mount("--bind", str(path), str(path)):
        pytest.skip("a read-only bind mount cannot be made here (as root, modes do not stop writes)")
    try:
        if not _mount("-o", "remount,bind,ro", str(path)):  # the portable way: bind, then make it read-only
            pytest.skip("a bind mount cannot be made read-only here")
        yield path
    finally:
        _unmount(path)


@contextmanager
def full_dir(path: Path, fill: dict[str, bytes] | None = None) -> Iterator[Path]:
    """`path` on a tmpfs of FULL_DISK_BYTES, holding the files `fill` names, and then full to the last byte."""
    path.mkdir(parents=True, exist_ok=True)
    if not _mount("-t", "tmpfs", "-o", f"size={FULL_DISK_BYTES}", "tmpfs", str(path)):
        pytest.skip("a full disk needs a tmpfs, which only root can mount")
    try:
        for name, content in (fill or {}).items():
            (path / name).parent.mkdir(parents=True, exist_ok=True)
            (path / name).write_bytes(content)
        with open(path / ".filler", "wb", buffering=0) as filler:
            try:
                while filler.write(bytes(4096)):
                    pass
            except OSError:  # ENOSPC: full
                pass
        yield path
    finally:
        _unmount(path)


def temporary_files(path: Path) -> list[Path]:
    """What atomic_write leaves behind if it fails to clean up: `.NAME.*.tmp` files anywhere under `path`."""
    return sorted(path.rglob(".*.tmp"))
