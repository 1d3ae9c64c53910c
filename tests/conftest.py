"""Shared fixtures: one data dir and one server with the bundled models for the whole run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from helpers import Server, assert_stops_cleanly, start_server

from wyoming_wis import shares

MAX_AUDIO_SECONDS = 60
MAX_TEXT_CHARS = 2000
collect_ignore = ["ha"]  # the Home Assistant suites run in their own venvs: ./run.sh test ha


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The fast tier (marker `fast`) stays in-process: a test there that asks for the shared server is a mistake."""
    wrong = [item.nodeid for item in items if item.get_closest_marker("fast") and "server" in item.fixturenames]
    if wrong:
        raise pytest.UsageError(f"marked fast but using the shared server (a process with models): {wrong}")


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One data dir for every server, so bundled Whisper base is joined only once."""
    return tmp_path_factory.mktemp("data")


@pytest.fixture(scope="session")
def server(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Whisper base (default) and tiny.en, Piper joe, on a real TCP port."""
    running = start_server(
        [
            "--data-dir",
            str(data_dir),
            "--asr-model",
            "base",
            "--asr-model",
            "tiny.en",
            "--voice",
            "en_US-joe-medium",
            "--max-audio-seconds",
            str(MAX_AUDIO_SECONDS),
            "--max-text-chars",
            str(MAX_TEXT_CHARS),
        ],
        tmp_path_factory.mktemp("server"),
    )
    yield running
    assert_stops_cleanly(running)


KEEPER = ("willow", "keeper-9d41")  # user and password of `keeper`


@pytest.fixture(scope="session")
def keeper_auth() -> httpx.BasicAuth:
    """The credentials of `keeper`, as a Willow device sends them (user:password@ in its URL)."""
    return httpx.BasicAuth(*KEEPER)


@pytest.fixture(scope="session")
def keeper(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Whisper tiny.en behind Basic credentials (`keeper_auth`): a server that keeps Willow's recording, which one
    without credentials never does."""
    env = {"WIS_API_USER": KEEPER[0], "WIS_API_PASSWORD": KEEPER[1]}
    running = start_server(
        ["--data-dir", str(data_dir), "--asr-model", "tiny.en"], tmp_path_factory.mktemp("keeper"), env=env
    )
    yield running
    assert_stops_cleanly(running)


@pytest.fixture
def home_assistant() -> Iterator[str]:
    """An address known to be Home Assistant's (shares.trust) while the test runs."""
    shares.trust("192.0.2.200")
    yield "192.0.2.200"
    shares.trust()
