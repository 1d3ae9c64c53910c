"""Which wake word models a server offers, under which names, with which settings (wyoming_wis/wake/models.py).

The bundled models are the real ones from the pymicro-wakeword and pyopen-wakeword wheels; the user's are copies of
them dropped in a data dir, with configs and a manifest as a user writes them, mistakes included.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from wyoming_wis.wake.models import MICRO, OPEN, WakeModels, library_dir

pytestmark = pytest.mark.fast

BUNDLED_MICRO = ("alexa", "hey_jarvis", "hey_mycroft", "okay_nabu")
BUNDLED_OPEN = ("alexa_oww", "hey_jarvis_oww", "hey_mycroft_oww", "hey_rhasspy_oww", "okay_nabu_oww")


def drop_micro(folder: Path, name: str, **config: object) -> None:
    """A microWakeWord model as a user drops it in: the bundled Okay Nabu's file and config, renamed."""
    folder.mkdir(parents=True, exist_ok=True)
    bundled = library_dir(MICRO) / "models"
    shutil.copy(bundled / "okay_nabu.tflite", folder / f"{name}.tflite")
    document = json.loads((bundled / "okay_nabu.json").read_text()) | {"model": f"{name}.tflite"} | config
    (folder / f"{name}.json").write_text(json.dumps(document))


def test_every_bundled_model_of_both_families_is_offered(tmp_path: Path) -> None:
    models = WakeModels([tmp_path]).models
    assert sorted(models) == sorted(BUNDLED_MICRO + BUNDLED_OPEN)
    assert models["okay_nabu"].family == MICRO and models["okay_nabu"].phrase == "Okay Nabu"
    assert models["okay_nabu"].cutoff == 0.85 and models["okay_nabu"].window == 5  # from its JSON config
    assert models["okay_nabu_oww"].family == OPEN and models["okay_nabu_oww"].phrase == "Okay Nabu"
    assert "melspectrogram_oww" not in models and "embedding_model_oww" not in models  # openWakeWord's features
    assert all(model.path.is_file() for model in models.values())


def test_a_users_models_of_both_families_are_found_in_the_data_dir(tmp_path: Path) -> None:
    drop_micro(tmp_path / "wake", "hey_kitchen", wake_word="Hey Kitchen", author="Me")
    shutil.copy(library_dir(OPEN) / "models" / "hey_jarvis.tflite", tmp_path / "wake" / "computer_v2.tflite")
    models = WakeModels([tmp_path]).models
    assert models["hey_kitchen"].family == MICRO and models["hey_kitchen"].phrase == "Hey Kitchen"
    assert models["hey_kitchen"].author == "Me" and not models["hey_kitchen"].bundled
    assert "hey_kitchen_oww" not in models  # its .tflite belongs to its config
    assert models["computer_v2_oww"].family == OPEN and models["computer_v2_oww"].phrase == "Computer"


def test_broken_files_are_skipped_with_a_reason(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder = tmp_path / "wake"
    drop_micro(folder, "no_file", model="missing.tflite")
    (folder / "not_json.json").write_text("{")
    (folder / "no_micro.json").write_text(json.dumps({"type": "micro", "model": "x.tflite"}))
    (folder / "other.json").write_text(json.dumps({"type": "something else"}))
    with caplog.at_level(logging.ERROR):
        models = WakeModels([tmp_path]).models
    assert sorted(models) == sorted(BUNDLED_MICRO + BUNDLED_OPEN + ("no_file_oww",))  # its file, on its own
    logged = caplog.text
    assert "missing.tflite" in logged and "not_json.json" in logged and "no_micro.json" in logged


def test_the_manifest_sets_a_models_own_settings_and_skips_what_is_wrong(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "wake").mkdir()
    manifest = {
        "okay_nabu": {"cutoff": 0.95, "refractory_seconds": 4},
        "hey_rhasspy_oww": {"phrase": "Hey Rhasspy!", "window": 2},
        "alexa": {"cutoff": 2},
        "hey_jarvis": {"loudness": 3},
        "nobody": {"cutoff": 0.5},
    }
    (tmp_path / "wake" / "wake.json").write_text(json.dumps({"models": manifest}))
    with caplog.at_level(logging.ERROR):
        models = WakeModels([tmp_path]).models
    assert models["okay_nabu"].cutoff == 0.95 and models["okay_nabu"].refractory_seconds == 4
    assert models["hey_rhasspy_oww"].phrase == "Hey Rhasspy!" and models["hey_rhasspy_oww"].window == 2
    bundled = json.loads((library_dir(MICRO) / "models" / "alexa.json").read_text())["micro"]["probability_cutoff"]
    assert models["alexa"].cutoff == bundled  # its entry was refused whole
    assert "'alexa'" in caplog.text and "'hey_jarvis'" in caplog.text and "'nobody'" in caplog.text


def test_only_the_models_chosen_are_offered(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert sorted(WakeModels([tmp_path], ["okay_nabu", "hey_rhasspy_oww"]).models) == ["hey_rhasspy_oww", "okay_nabu"]
    assert WakeModels([tmp_path], ["none"]).models == {}
    with caplog.at_level(logging.WARNING):
        assert list(WakeModels([tmp_path], ["okay_nabu", "hey_siri"]).models) == ["okay_nabu"]
    assert "hey_siri" in caplog.text


@pytest.mark.parametrize(
    ("asked", "model"),
    [
        ("okay_nabu", "okay_nabu"),
        ("okay_nabu_oww", "okay_nabu_oww"),
        ("ok_nabu", "okay_nabu"),  # wyoming-openwakeword before 2.0
        ("ok_nabu_v0.1", "okay_nabu"),  # ... as its info named it
        ("Hey_Jarvis", "hey_jarvis"),
        ("hey_rhasspy", "hey_rhasspy_oww"),  # only openWakeWord has it
        ("hey_rhasspy_v0.1", "hey_rhasspy_oww"),
    ],
)
def test_names_other_servers_give_a_model_find_it(tmp_path: Path, asked: str, model: str) -> None:
    found = WakeModels([tmp_path]).find(asked)
    assert found is not None and found[0] == asked and found[1].name == model


def test_a_name_nothing_matches_is_not_found(tmp_path: Path) -> None:
    models = WakeModels([tmp_path])
    assert models.find("hey_siri") is None and models.find("") is None and models.find("_oww") is None


def test_files_added_later_are_found_on_refresh(tmp_path: Path) -> None:
    models = WakeModels([tmp_path])
    drop_micro(tmp_path / "wake", "later")
    models.refresh()  # within the rescan interval: not looked at yet
    assert "later" not in models.models
    models.refresh(force=True)
    assert "later" in models.models
