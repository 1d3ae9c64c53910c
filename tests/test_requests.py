"""The core's side of a typed request, in process: `resolve` checks and makes a request concrete without holding
anything, and a session's lifecycle (open, feed, finish, close) counts its transcript once and gives back its
memory whatever happens."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from wyoming_wis import metrics
from wyoming_wis.config import Settings
from wyoming_wis.core import Core
from wyoming_wis.errors import AudioTooLong, BadRequest, UnknownModel, UnsupportedLanguage
from wyoming_wis.requests import MAX_BEAM_SIZE, AsrRequest


@pytest.fixture(scope="module")
def core(data_dir: Path) -> Iterator[Core]:
    """Whisper base (the default, multilingual) and tiny.en (English-only)."""
    argv = ["--data-dir", str(data_dir), "--asr-model", "base", "--asr-model", "tiny.en", "--max-audio-seconds", "5"]
    core = Core.load(Settings.from_args(argv, environ={}).core)
    yield core
    core.close()


def test_an_unknown_model_is_refused(core: Core) -> None:
    with pytest.raises(UnknownModel, match="'large'"):
        core.resolve(AsrRequest(model="large"))


@pytest.mark.parametrize(("model", "language"), [("base", "xx"), ("tiny.en", "de")])
def test_a_language_the_model_does_not_speak_is_refused(core: Core, model: str, language: str) -> None:
    with pytest.raises(UnsupportedLanguage):
        core.resolve(AsrRequest(model=model, language=language))


@pytest.mark.parametrize("beam_size", [0, -1, MAX_BEAM_SIZE + 1])
def test_a_beam_out_of_range_is_refused(core: Core, beam_size: int) -> None:
    with pytest.raises(BadRequest, match="beam_size"):
        core.resolve(AsrRequest(beam_size=beam_size))


def test_an_unknown_task_is_refused(core: Core) -> None:
    with pytest.raises(BadRequest, match="task"):
        core.resolve(AsrRequest(task="summarise"))


def test_requests_that_decode_alike_resolve_equal(core: Core) -> None:
    beam = core.settings.asr.beam_size
    assert core.resolve(AsrRequest()) == core.resolve(AsrRequest(model="base", beam_size=beam, language="auto"))
    assert core.resolve(AsrRequest(language="en-US")) == core.resolve(AsrRequest(language="en"))
    assert core.resolve(AsrRequest(model="tiny.en", task="translate")) == core.resolve(AsrRequest(model="tiny.en"))
    assert core.resolve(AsrRequest()).model == "base"


def test_requests_that_decode_differently_resolve_apart(core: Core) -> None:
    plain = core.resolve(AsrRequest())
    for other in (
        AsrRequest(model="tiny.en"),
        AsrRequest(beam_size=1),
        AsrRequest(language="de"),
        AsrRequest(task="translate"),
        AsrRequest(names=("Kitchen",)),
    ):
        assert core.resolve(other) != plain, other


def test_resolving_holds_nothing(core: Core) -> None:
    before = core.budget.used
    for _ in range(3):
        core.resolve(AsrRequest(model="tiny.en"))
    assert core.budget.used == before


async def test_a_finished_session_counts_its_transcript_once_and_gives_its_memory_back(
    core: Core, monkeypatch: pytest.MonkeyPatch
) -> None:
    counted: list[tuple[str, str, float, float]] = []
    monkeypatch.setattr(metrics, "transcribed", lambda *args: counted.append(args))
    ended = time.perf_counter()
    async with core.open_asr(AsrRequest(model="tiny.en"), frontend="http") as session:
        await session.feed_samples(np.zeros(16000, dtype=np.float32))
        assert core.budget.used > 0
        transcript = await session.finish(ended)
    assert transcript.text == "" and transcript.duration == 1.0
    assert counted == [("http", "tiny.en", 1.0, ended)]
    assert core.budget.used == 0


async def test_a_failed_session_counts_nothing_and_gives_its_memory_back(
    core: Core, monkeypatch: pytest.MonkeyPatch
) -> None:
    counted: list[tuple[str, str, float, float]] = []
    monkeypatch.setattr(metrics, "transcribed", lambda *args: counted.append(args))
    with pytest.raises(AudioTooLong):
        async with core.open_asr(AsrRequest(), frontend="wyoming") as session:
            await session.feed_samples(np.zeros(16000 * 3, dtype=np.float32))
            await session.feed_samples(np.zeros(16000 * 3, dtype=np.float32))  # past --max-audio-seconds
    assert not counted
    assert core.budget.used == 0
