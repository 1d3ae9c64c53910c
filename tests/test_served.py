"""The core's read-only view (served.py), in process: what info, /health, /v1/models and /metrics read of the core."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import held
from prometheus_client.parser import text_string_to_metric_families

from wyoming_wis import metrics
from wyoming_wis.catalog import TURN_FILE, Catalog
from wyoming_wis.config import Settings
from wyoming_wis.core import Core
from wyoming_wis.requests import SpeechRequest
from wyoming_wis.served import (
    ASR,
    MICRO_WAKE,
    OPEN_WAKE,
    PIPER,
    TTS,
    TURN,
    WAKE,
    WHISPER,
    XTTS,
    Calls,
    Entry,
    Served,
)
from wyoming_wis.wyoming import build_info

WHISPER_MODEL, VOICE, UNUSED = "tiny.en", "en_US-joe-medium", "en_US-spare-medium"


@pytest.fixture(scope="module")
def core(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Core]:
    """Whisper tiny.en (one worker, so that a second call waits) and Piper joe, loaded; a second Piper voice on disk,
    never used."""
    data = tmp_path_factory.mktemp("served")
    joe = Catalog([data]).voice(VOICE).path
    (data / "voices").mkdir()
    shutil.copy(joe, data / "voices" / f"{UNUSED}.onnx")
    shutil.copy(f"{joe}.json", data / "voices" / f"{UNUSED}.onnx.json")
    args = ["--data-dir", str(data), "--asr-model", WHISPER_MODEL, "--voice", VOICE, "--asr-workers", "1"]
    args += ["--memory-budget-mb", "64"]
    loaded = Core.load(Settings.from_args(args, environ={}).core)
    yield loaded
    loaded.close()


def gauges() -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """The gauges read from the cores at scrape time, by name and labels."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(metrics.exposition().decode())
        if family.name.startswith(("wis_queue_depth", "wis_inference_in_progress", "wis_model_loaded", "wis_memory"))
        for sample in family.samples
    }


def test_the_view_lists_every_model_and_voice_with_what_frontends_read(core: Core) -> None:
    fields = {type_: {field.name for field in dataclasses.fields(type_)} for type_ in (Served, Entry, Calls)}
    assert fields == {
        Served: {
            "models",
            "voices",
            "openai_voices",
            "partial_results",
            "budget_used",
            "budget_limit",
            "household_names",
            "available_voices",
            "downloads",
        },
        Entry: {
            *("name", "engine", "languages", "loaded", "version", "description", "multilingual", "speakers", "calls"),
            *("phrase", "streams", "installed"),
        },
        Calls: {"engine", "pending", "waiting", "running", "open"},
    }
    served = core.served()
    assert served.household_names == 0  # no --hass-token
    with pytest.raises(dataclasses.FrozenInstanceError):
        served.partial_results = False  # type: ignore[misc]
    with pytest.raises(TypeError):
        served.openai_voices["alloy"] = UNUSED  # type: ignore[index]
    assert [(model.name, model.engine, model.kind) for model in served.models[:3]] == [
        (WHISPER_MODEL, WHISPER, ASR),
        (VOICE, PIPER, TTS),
        (Path(TURN_FILE).stem, TURN, TURN),  # the turn-taking model, from the pipecat-ai package
    ]
    whisper, piper, turn, *wake = served.models
    wake_words = {model.name: model for model in wake}  # every bundled wake word model, after the others
    assert {model.kind for model in wake} == {WAKE} and len(wake) == 9, wake
    assert (wake_words["okay_nabu"].engine, wake_words["okay_nabu"].phrase) == (MICRO_WAKE, "Okay Nabu")
    assert (wake_words["okay_nabu_oww"].engine, wake_words["okay_nabu_oww"].phrase) == (OPEN_WAKE, "Okay Nabu")
    assert turn.state == "loaded" and [calls.engine for calls in turn.calls] == [TURN]
    assert (whisper.state, whisper.pending, whisper.languages, whisper.multilingual) == ("loaded", 0, ("en",), False)
    assert whisper.description == "Whisper tiny.en (English only)" and whisper.version
    assert [calls.engine for calls in whisper.calls] == ["whisper", "vad"]
    assert (piper.state, piper.languages, piper.speakers) == ("loaded", ("en_US",), ())
    assert piper.description == "joe (en_US, medium)" and piper.version

    voices = {voice.name: voice for voice in served.voices}
    assert set(voices) == {VOICE, UNUSED}
    assert voices[VOICE] == piper  # a Piper voice in use: its model's entry, as a voice
    spare = voices[UNUSED]
    assert (spare.kind, spare.engine, spare.state, spare.pending, spare.calls) == (TTS, PIPER, "unloaded", 0, ())
    assert served.of_kind(ASR) == (whisper,) and served.of_kind(TTS) == (piper,)
    assert served.uses(PIPER) and not served.uses(XTTS)
    available = {voice.name: voice for voice in served.available_voices}  # the hub's, from the shipped list
    assert VOICE not in available and len(available) > 150 and not served.downloads
    thorsten = available["de_DE-thorsten-medium"]
    assert (thorsten.engine, thorsten.languages, thorsten.installed, thorsten.loaded) == (
        PIPER,
        ("de_DE",),
        False,
        False,
    )
    assert all(voice.installed for voice in served.voices) and served.names_voice("de_DE-thorsten-medium")
    assert dict(served.openai_voices)["alloy"] == VOICE and served.partial_results
    assert (served.budget_used, served.budget_limit) == (0, 64 * 2**20)


async def test_queue_depth_running_calls_and_budget_reach_the_view_and_metrics(core: Core) -> None:
    engine = core.asr_engine(WHISPER_MODEL)
    before = gauges()
    assert ("wis_queue_depth", frozenset({("engine", WHISPER), ("model", WHISPER_MODEL)})) not in before
    async with held(engine.scheduler):
        waiting = asyncio.ensure_future(engine.scheduler.run(lambda: None))
        await asyncio.sleep(0.05)
        with core.budget.hold() as hold:
            hold.set(1000)
            (whisper, *_) = core.served().models
            assert whisper.pending == 2 and whisper.calls[0] == Calls(WHISPER, 2, 1, 1, True)
            assert core.served().budget_used == 1000

            metrics.watch(core)  # as the composition root does; the collector joins the registry only once
            metrics.watch(core)
            labels = frozenset({("engine", WHISPER), ("model", WHISPER_MODEL)})
            scraped = gauges()
            assert scraped[("wis_queue_depth", labels)] == 1
            assert scraped[("wis_inference_in_progress", labels)] == 1
            assert scraped[("wis_model_loaded", frozenset({("kind", ASR), ("model", WHISPER_MODEL)}))] == 1
            assert scraped[("wis_model_loaded", frozenset({("kind", TTS), ("model", VOICE)}))] == 1
            assert scraped[("wis_memory_budget_used_bytes", frozenset())] == 1000
            assert scraped[("wis_memory_budget_bytes", frozenset())] == 64 * 2**20
            assert not any(name.endswith("_created") for name, _ in scraped)
        await waiting
    assert core.served().models[0].pending == 0


def test_info_reads_the_view(core: Core) -> None:
    info = build_info(core)
    (model,) = info.asr[0].models
    assert (model.name, model.description, model.languages) == (WHISPER_MODEL, "Whisper tiny.en (English only)", ["en"])
    assert info.asr[0].supports_transcript_streaming
    # raw audio preferred (a Voice PE sends its raw microphone), unless --processed-audio asks for cleaned audio
    assert not info.asr[0].prefers_auto_gain_enabled and not info.asr[0].prefers_noise_reduction_enabled
    processed = build_info(core, processed_audio=True).asr[0]
    assert processed.prefers_auto_gain_enabled and processed.prefers_noise_reduction_enabled
    assert info.tts[0].description == "Piper text-to-speech"
    voices = {voice.name: voice for voice in info.tts[0].voices}
    assert voices[VOICE].languages == ["en_US", "en-US", "en"] and voices[VOICE].speakers is None


def test_an_unloaded_whisper_model_is_listed_so(core: Core) -> None:
    engine = core.asr_engine(WHISPER_MODEL)
    assert engine.unload_if_idle(0)
    assert core.served().models[0].state == "unloaded"
    metrics.watch(core)
    assert gauges()[("wis_model_loaded", frozenset({("kind", ASR), ("model", WHISPER_MODEL)}))] == 0


async def test_voices_loaded_on_first_use_are_let_go_past_a_few(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Clients naming one voice after another (every voice of the hub, with downloads on) cannot make the server
    hold them all: past twice ON_DEMAND_VOICES the one asked for longest ago and idle is closed at once; past
    ON_DEMAND_VOICES, one not asked for in VOICE_IDLE_SECONDS. A closed voice loads again on its use."""
    import wyoming_wis.core as core_module

    kept = core_module.ON_DEMAND_VOICES
    joe = Catalog([tmp_path]).voice(VOICE).path
    names = [f"en_US-spare{n}-medium" for n in range(2 * kept + 2)]
    (tmp_path / "voices").mkdir()
    for name in names:
        shutil.copy(joe, tmp_path / "voices" / f"{name}.onnx")
        shutil.copy(f"{joe}.json", tmp_path / "voices" / f"{name}.onnx.json")
    args = ["--data-dir", str(tmp_path), "--asr-model", WHISPER_MODEL, "--voice", VOICE]
    core = Core.load(Settings.from_args(args, environ={}).core)
    try:

        def loaded() -> list[str]:
            return [model.name for model in core.served().models if model.engine == PIPER]

        async def ask(name: str) -> None:
            (await core.speech_stream(SpeechRequest(voice_name=name))).close()

        for name in names:  # all within VOICE_IDLE_SECONDS
            await ask(name)
        assert loaded() == [VOICE, *names[2:]]  # the --voice voice stays; the first two asked for were closed
        voices = {voice.name: voice for voice in core.served().voices}
        assert [voices[name].state for name in names[:2]] == ["unloaded", "unloaded"]

        monkeypatch.setattr(core_module, "VOICE_IDLE_SECONDS", 0.0)  # as if the rest had been unused that long
        await ask(names[0])  # loads again; only the last few asked for stay
        assert loaded() == [VOICE, *names[-(kept - 1) :], names[0]]
    finally:
        core.close()
