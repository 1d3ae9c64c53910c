"""A data dir that refuses writes, and the cloned voices' quota, in-process: what each writer does when the disk
is full or read-only, and what the voice store keeps.

The disks are real where the system lets us (tests/disks.py: a read-only bind mount, a full tmpfs); a failure at
each step of a write is also simulated, which runs everywhere. tests/test_storage_server.py has the client's view.
"""

from __future__ import annotations

import errno
import logging
import os
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from disks import full_dir, read_only_dir, temporary_files

from wyoming_wis import discovery
from wyoming_wis.errors import CannotStore
from wyoming_wis.files import atomic_write
from wyoming_wis.tts import cache as speech_cache
from wyoming_wis.tts.cache import SpeechCache

pytestmark = pytest.mark.fast

KEY = "ab" * 32  # a speech cache key


def write(path: Path, content: bytes) -> None:
    with atomic_write(path) as file:
        file.write(content)


# -- atomic_write ---------------------------------------------------------------------


def test_a_full_disk_refuses_a_file_whole(tmp_path: Path) -> None:
    with full_dir(tmp_path / "disk", {"kept": b"as it was"}) as disk:
        with pytest.raises(CannotStore, match="data dir cannot be written: No space left on device") as refused:
            write(disk / "kept", bytes(200_000))
        assert isinstance(refused.value.__cause__, OSError) and refused.value.__cause__.errno == errno.ENOSPC
        assert (disk / "kept").read_bytes() == b"as it was"
        assert temporary_files(disk) == []


def test_a_read_only_dir_refuses_a_file(tmp_path: Path) -> None:
    with read_only_dir(tmp_path / "data") as data:
        with pytest.raises(CannotStore, match="data dir cannot be written: (Read-only file system|Permission denied)"):
            write(data / "audio" / "willow.wav", b"RIFF")  # its folder cannot be made either
        assert list(data.iterdir()) == []


def _fail(number: int) -> Callable[..., None]:
    """A stand-in for a file system call that the disk refuses with `number`."""

    def failing(*args: object, **kwargs: object) -> None:
        raise OSError(number, os.strerror(number))

    return failing


@pytest.mark.parametrize("number", [errno.ENOSPC, errno.EROFS, errno.EDQUOT])
@pytest.mark.parametrize("step", ["mkdir", "create", "write", "fsync", "replace"])
def test_a_write_refused_at_any_step_leaves_the_old_file_and_no_temporary_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str, number: int
) -> None:
    """Simulated, so that it runs anywhere (no root): the disk refuses at one step of atomic_write."""
    path = tmp_path / "folder" / "entry"
    write(path, b"old")
    if step == "mkdir":
        monkeypatch.setattr(Path, "mkdir", _fail(number))
    elif step == "create":
        monkeypatch.setattr(tempfile, "NamedTemporaryFile", _fail(number))
    elif step in ("fsync", "replace"):
        monkeypatch.setattr(os, step, _fail(number))
    with pytest.raises(CannotStore, match=f"data dir cannot be written: {os.strerror(number)}"):
        with atomic_write(path) as file:
            file.write(b"new content")
            if step == "write":
                raise OSError(number, os.strerror(number))
    monkeypatch.undo()
    assert path.read_bytes() == b"old"
    assert sorted(child.name for child in path.parent.iterdir()) == ["entry"]  # no temporary file stays


# -- the speech cache -----------------------------------------------------------------


async def test_the_speech_cache_on_a_read_only_disk_serves_what_it_holds_and_warns_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "data"
    await SpeechCache(folder / "speech", 1 << 20, 3600).put(KEY, b"said before")
    monkeypatch.setattr(speech_cache, "RETRY_WRITE_SECONDS", 0.0, raising=False)  # it tries each time: one warning
    cache = SpeechCache(folder / "speech", 1 << 20, 3600)
    with caplog.at_level(logging.INFO, logger="wyoming_wis.tts.cache"):
        with read_only_dir(folder):
            assert await cache.get(KEY) == b"said before"  # its use cannot be recorded, and need not be
            for n in range(10):
                await cache.put(f"{n:02d}" * 32, bytes(1000))
            assert [record.levelname for record in caplog.records] == ["WARNING"], caplog.text
            assert "cannot be written" in caplog.text and "speech is still served" in caplog.text
        await cache.put("cd" * 32, b"again")  # the disk is writable again: the cache is used again
    assert await cache.get("cd" * 32) == b"again" and "can be written again" in caplog.text
    assert temporary_files(folder) == []


async def test_the_speech_cache_waits_before_it_tries_a_refusing_disk_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk is not tried (a temporary file made and removed) for every phrase."""
    tries = []

    def counted(path: Path) -> Any:
        tries.append(path)
        return atomic_write(path)

    monkeypatch.setattr(speech_cache, "atomic_write", counted)
    with full_dir(tmp_path / "disk") as disk:
        cache = SpeechCache(disk / "speech", 1 << 20, 3600)
        for n in range(10):
            await cache.put(f"{n:02d}" * 32, bytes(100_000))
        assert len(tries) == 1  # within RETRY_WRITE_SECONDS of the refusal
        assert temporary_files(disk) == [] and not list(disk.glob("speech/*/*.pcm"))


# -- discovery --------------------------------------------------------------------------


def test_discovery_on_a_read_only_data_dir_names_this_run(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with read_only_dir(tmp_path / "data") as data, caplog.at_level(logging.WARNING, logger="wyoming_wis.discovery"):
        name = discovery.stable_name(data)
        assert name.startswith("wyoming-wis-") and not (data / "zeroconf-name").exists()
    assert len(caplog.records) == 1 and "for this run only" in caplog.text, caplog.text


def test_discovery_on_a_full_data_dir_names_this_run(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with full_dir(tmp_path / "disk") as disk, caplog.at_level(logging.WARNING, logger="wyoming_wis.discovery"):
        assert discovery.stable_name(disk).startswith("wyoming-wis-")
        assert temporary_files(disk) == [] and not (disk / "zeroconf-name").exists()
    assert "No space left on device" in caplog.text and "for this run only" in caplog.text


def test_discovery_replaces_a_name_file_that_is_not_text(tmp_path: Path) -> None:
    (tmp_path / "zeroconf-name").write_bytes(b"\xff\xfe\x00")
    name = discovery.stable_name(tmp_path)
    assert name.startswith("wyoming-wis-") and discovery.stable_name(tmp_path) == name  # kept from now on


# -- the cloned voices' store ---------------------------------------------------------------


@pytest.fixture
def voice_store() -> ModuleType:
    """wyoming_wis.tts.xtts_voices, which needs the xtts extra's safetensors (not torch)."""
    pytest.importorskip("safetensors", reason="the xtts extra is not installed")
    from wyoming_wis.tts import xtts_voices

    return xtts_voices


def voice(module: ModuleType, name: str, seed: int = 0) -> Any:
    rng = np.random.default_rng(seed)
    return module.Conditioning(name, rng.random((1, 32, 8), np.float32), rng.random((1, 512, 1), np.float32), True)


def store(module: ModuleType, folder: Path, max_voices: int | None) -> Any:
    return module.VoiceStore(folder, model="tiny", width=8, studio=["Studio_One"], max_voices=max_voices)


def test_the_voice_store_keeps_at_most_its_quota(voice_store: ModuleType, tmp_path: Path) -> None:
    voices = store(voice_store, tmp_path / "voices", max_voices=2)
    for name in ("mum", "dad"):
        voices.check_new_name(name)
        voices.save(voice(voice_store, name), 4.0, 1000)
    with pytest.raises(CannotStore, match="at most 2 cloned voices .* and has 2"):
        voices.check_new_name("gran")  # before its recording is decoded
    with pytest.raises(CannotStore, match="at most 2 cloned voices"):
        voices.save(voice(voice_store, "gran"), 4.0, 1000)  # and where it would be written
    voices.check_new_name("mum")
    voices.save(voice(voice_store, "mum", seed=1), 4.0, 1000)  # a replacement takes no more room
    files = sorted(path.name for path in voices.folder.iterdir())
    assert files == ["dad.json", "dad.safetensors", "mum.json", "mum.safetensors"]
    assert list(voices.voices) == ["dad", "mum"]
    restarted = store(voice_store, voices.folder, max_voices=2)  # after a restart, or another server sharing it
    with pytest.raises(CannotStore, match="at most 2"):
        restarted.check_new_name("gran")
    with pytest.raises(CannotStore, match="cloning is off"):
        store(voice_store, tmp_path / "none", max_voices=0).check_new_name("mum")


def test_the_voice_quota_holds_for_clones_at_the_same_time(voice_store: ModuleType, tmp_path: Path) -> None:
    voices = store(voice_store, tmp_path / "voices", max_voices=3)
    voices.save(voice(voice_store, "one"), 4.0, 1000)
    for name in ("a", "b", "c", "d", "e", "f"):
        voices.check_new_name(name)  # all pass: the store holds 1
    outcomes: list[str] = []

    def clone(name: str) -> None:
        try:
            voices.save(voice(voice_store, name), 4.0, 1000)
            outcomes.append("stored")
        except CannotStore:
            outcomes.append("refused")

    threads = [threading.Thread(target=clone, args=(name,)) for name in ("a", "b", "c", "d", "e", "f")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["refused"] * 4 + ["stored"] * 2
    assert len(voices.voices) == 3 and len(list(voices.folder.glob("*.safetensors"))) == 3


def test_the_voice_store_on_a_read_only_data_dir(voice_store: ModuleType, tmp_path: Path) -> None:
    with read_only_dir(tmp_path / "data") as data:
        voices = store(voice_store, data / "xtts-voices" / "tiny", max_voices=2)  # it starts, with none
        with pytest.raises(CannotStore, match="data dir cannot be written"):
            voices.save(voice(voice_store, "mum"), 4.0, 1000)
        assert not voices.voices and list(data.iterdir()) == []


def test_the_voice_store_on_a_full_data_dir(voice_store: ModuleType, tmp_path: Path) -> None:
    with full_dir(tmp_path / "disk") as disk:
        voices = store(voice_store, disk / "voices", max_voices=2)
        with pytest.raises(CannotStore, match="No space left on device"):
            voices.save(voice(voice_store, "mum"), 4.0, 1000)
        assert not voices.voices and temporary_files(disk) == []
        assert not [path for path in disk.rglob("*") if path.is_file() and path.name != ".filler"]
