"""Fixtures of the Home Assistant suites: one real wyoming-wis process for the session, and for each test a Home
Assistant (pytest-homeassistant-custom-component's `hass`) that added that server through the wyoming config flow.

The harness allows sockets to 127.0.0.1 only (pytest-socket) and fails a test that leaves tasks, timers or threads
behind, so the server is a subprocess (no threads here), everything talks to 127.0.0.1, and the `hass` fixture
unloads the config entries at the end of each test.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_socket
from aiohttp import ClientSession
from homeassistant import config_entries
from homeassistant.components import stt, tts
from homeassistant.components.assist_pipeline import async_pipeline_from_audio_stream
from homeassistant.components.assist_pipeline.pipeline import (
    PipelineEvent,
    PipelineEventType,
    PipelineStage,
    async_create_default_pipeline,
    async_update_pipeline,
)
from homeassistant.components.light import ColorMode, LightEntity
from homeassistant.components.tts.helper import get_engine_instance
from homeassistant.core import Context, HomeAssistant
from homeassistant.data_entry_flow import FlowResultType
from homeassistant.helpers import area_registry as ar
from homeassistant.helpers import entity_registry as er
from homeassistant.setup import async_setup_component
from pytest_homeassistant_custom_component.common import MockPlatform, mock_platform
from replies import words
from support import ROOT, Pcm, decode, metadata, transcribe, wer, within

# The server as ./run.sh installs it (run.sh passes its venv's); the tests never import it: it runs on Python 3.11
# with its own dependencies, HA 2026.11 on 3.14, 2026.2 on 3.13.
SERVER = Path(os.environ.get("WIS_HA_SERVER", ROOT / ".venv" / "bin" / "wyoming-wis"))
READY_LINE = "Wyoming server listening on"
# The limits on turns the server ends itself (--max-turn-seconds, --no-speech-seconds), as set here: the defaults
MAX_TURN_SECONDS = 15.0
NO_SPEECH_SECONDS = 5.0
# Why the server ended a turn (wyoming_wis/asr/session.py logs it with --debug; wyoming_wis/asr/turn.py `Reason`)
TURN_ENDED = re.compile(r"Turn ended \(([a-z-]+)\)")
# What HA needs set up for the paths under test; wyoming's own dependencies (assist_pipeline, ...) follow
HassClient = Callable[[], Awaitable[ClientSession]]  # the `hass_client` fixture: a client of HA's HTTP API
COMPONENTS = ["http", "tts", "stt", "media_source", "assist_pipeline", "conversation", "intent"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test here is a Home Assistant test: marker `ha` (pytest.ini), as the main suite marks its tiers."""
    for item in items:
        item.add_marker(pytest.mark.ha)


@dataclass
class WisServer:
    """The wyoming-wis process of this session."""

    process: subprocess.Popen
    log_path: Path
    host: str
    port: int

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def turns_ended(self) -> list[str]:
        """Why the server ended each turn it ended so far, in order."""
        return TURN_ENDED.findall(self.log)


def offline_env(home: Path) -> dict[str, str]:
    """The environment of a server that must find everything locally (as tests/helpers.py's `offline_env`)."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HOME=str(home / "hf-home"), PYTHONUNBUFFERED="1")
    return {key: value for key, value in env.items() if not key.startswith("WIS_")}


def free_port() -> int:
    """A free port on 127.0.0.1. The harness blocks sockets outside a test's `socket_enabled`: allow this one, and
    leave sockets as they were (inside a test they stay allowed: HA there serves and connects on)."""
    blocked = socket.socket is not pytest_socket._true_socket  # noqa: SLF001  (pytest-socket has no public query)
    pytest_socket.enable_socket()
    try:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]
    finally:
        if blocked:
            pytest_socket.disable_socket(allow_unix_socket=True)


def start_wis(workdir: Path, *options: str, env: dict[str, str] | None = None) -> WisServer:
    """wyoming-wis with its bundled models (Whisper base, Piper joe) on a free port, ready; `options` added, and
    `env` to its environment."""
    assert SERVER.exists(), f"{SERVER} is missing: ./run.sh test installs it (or set WIS_HA_SERVER)"
    port = free_port()
    argv = [str(SERVER), "--data-dir", str(workdir / "data"), "--uri", f"tcp://127.0.0.1:{port}", "--no-http"]
    argv += ["--asr-model", "base", "--voice", "en_US-joe-medium", "--debug"]
    argv += ["--max-turn-seconds", str(MAX_TURN_SECONDS), "--no-speech-seconds", str(NO_SPEECH_SECONDS), *options]
    log_path = workdir / "server.log"
    with open(log_path, "wb") as log:
        environment = offline_env(workdir) | (env or {})
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log, env=environment, cwd=workdir)
    server = WisServer(process, log_path, "127.0.0.1", port)
    deadline = time.monotonic() + 180
    while READY_LINE not in server.log:
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"wyoming-wis did not start (exit {process.wait()}):\n{server.log}")
        time.sleep(0.1)
    return server


def stop_wis(server: WisServer) -> None:
    """Stop the server; it must not have logged a traceback."""
    server.process.terminate()
    try:
        server.process.wait(20)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()
    assert "Traceback" not in server.log, server.log


@pytest.fixture(scope="session")
def wis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WisServer]:
    """The server of the session, on its defaults (it ends the turns itself)."""
    server = start_wis(tmp_path_factory.mktemp("wis"))
    yield server
    stop_wis(server)


@pytest.fixture(autouse=True)
def _sockets(socket_enabled: None) -> None:
    """Let HA (and the tests) open sockets; pytest-socket still allows connecting to 127.0.0.1 only."""


@pytest.fixture(autouse=True)
async def _home(hass: HomeAssistant, tmp_path: Path) -> None:
    """What a real HA has before any integration: its config dir (here the test's tmp dir, where TTS keeps its
    file cache, not in the test package) and the core `homeassistant` integration (conversation needs it)."""
    hass.config.config_dir = str(tmp_path)
    assert await async_setup_component(hass, "homeassistant", {})


def wyoming_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What HA logged at WARNING or above about Wyoming: our `info` or answers surprised it."""
    return [
        f"{record.name}: {record.getMessage()}"
        for record in caplog.records
        if record.levelno >= logging.WARNING and ("wyoming" in record.name or "wyoming" in record.getMessage().lower())
    ]


async def add_server(hass: HomeAssistant, host: str, port: int) -> config_entries.ConfigEntry:
    """Add the server as a person does: the config flow's user step with its host and port
    (homeassistant/components/wyoming/config_flow.py `async_step_user`), then wait for the entry to load."""
    result = await hass.config_entries.flow.async_init("wyoming", context={"source": config_entries.SOURCE_USER})
    assert result["type"] == FlowResultType.FORM and result["step_id"] == "user", result
    result = await hass.config_entries.flow.async_configure(result["flow_id"], {"host": host, "port": port})
    assert result["type"] == FlowResultType.CREATE_ENTRY, result
    await hass.async_block_till_done()
    entry = result["result"]
    assert entry.state == config_entries.ConfigEntryState.LOADED, entry.state
    return entry


def entity_ids(hass: HomeAssistant, entry: config_entries.ConfigEntry) -> dict[str, str]:
    """The entry's entity ids by domain ("stt", "tts", "wake_word")."""
    entries = er.async_entries_for_config_entry(er.async_get(hass), entry.entry_id)
    return {item.domain: item.entity_id for item in entries}


async def fetch(hass_client: HassClient, url: str, what: str) -> bytes:
    """GET one of HA's URLs (a /api/tts_proxy/... file, as a media player or satellite fetches it)."""
    client = await hass_client()
    response = await client.get(url)
    assert response.status == 200, f"HA answered {response.status} for {what} ({url}); HA's log above says why"
    return await response.read()


@dataclass
class Wis:
    """Home Assistant with our server added: its entities, and checks on what they produce."""

    hass: HomeAssistant
    server: WisServer
    entry: config_entries.ConfigEntry
    stt_id: str
    tts_id: str

    @property
    def stt(self) -> stt.SpeechToTextEntity:
        entity = stt.async_get_speech_to_text_entity(self.hass, self.stt_id)
        assert entity is not None
        return entity

    @property
    def tts(self) -> tts.TextToSpeechEntity:
        entity = get_engine_instance(self.hass, self.tts_id)
        assert isinstance(entity, tts.TextToSpeechEntity)
        return entity

    async def run_pipeline(
        self,
        pipeline_id: str,
        audio: AsyncIterator[bytes],
        end_stage: PipelineStage,
        start_stage: PipelineStage = PipelineStage.STT,
    ) -> dict[PipelineEventType, Any]:
        """Run an assist pipeline on a satellite's audio; its events' data by type (it fails on an error event)."""
        events = await self.pipeline_events(pipeline_id, audio, end_stage, start_stage)
        errors = [event.data for event in events if event.type == PipelineEventType.ERROR]
        assert not errors, (errors, [event.type for event in events])
        return {event.type: event.data for event in events}

    async def pipeline_events(
        self,
        pipeline_id: str,
        audio: AsyncIterator[bytes],
        end_stage: PipelineStage,
        start_stage: PipelineStage = PipelineStage.STT,
    ) -> list[PipelineEvent]:
        """Run an assist pipeline on a satellite's audio, as assist_pipeline/__init__.py
        `async_pipeline_from_audio_stream` does for one; its events, errors too."""
        events: list[PipelineEvent] = []
        await within(
            60,
            "the pipeline",
            async_pipeline_from_audio_stream(
                self.hass,
                context=Context(),
                event_callback=events.append,
                stt_metadata=metadata(""),  # the pipeline puts its STT language in
                stt_stream=audio,
                pipeline_id=pipeline_id,
                start_stage=start_stage,
                end_stage=end_stage,
            ),
        )
        return events

    async def hears(self, pcm: Pcm, language: str = "en") -> str:
        return await transcribe(self.server.host, self.server.port, pcm, language)

    async def assert_says(self, audio: bytes | None, text: str) -> Pcm:
        """`audio` (any format) is `text` spoken: our STT hears its words (a few may be misheard in long texts; a
        lone word only has to be heard as one: Whisper base hears "Done" as "then" about as often as not).
        Returns the speech, without the silence around it."""
        assert audio, f"no audio for {text!r}"
        pcm = await decode(audio)
        speech = pcm.trimmed()
        assert speech.seconds > 0.2, f"{pcm.seconds:.2f} s of audio for {text!r}, {speech.seconds:.2f} s not silent"
        heard = await self.hears(speech)
        if len(words(text)) == 1:
            assert len(words(heard)) == 1, f"{text!r} was spoken as {heard!r} ({speech.seconds:.2f} s)"
        else:
            assert wer(text, heard) <= 0.25, f"{text!r} was spoken as {heard!r} ({speech.seconds:.2f} s)"
        return speech


@pytest.fixture
async def wis(hass: HomeAssistant, wis_server: WisServer) -> Wis:
    """HA with the components the assist paths use, and our server added through the config flow."""
    for domain in COMPONENTS:
        assert await async_setup_component(hass, domain, {}), domain
    entry = await add_server(hass, wis_server.host, wis_server.port)
    ids = entity_ids(hass, entry)
    return Wis(hass, wis_server, entry, ids["stt"], ids["tts"])


class KitchenLight(LightEntity):
    """An on/off light that the default agent's HassTurnOn can find by name ("kitchen light") or by area."""

    _attr_name = "Kitchen Light"
    _attr_unique_id = "wis-ha-test-kitchen-light"  # in the entity registry, so it can have an area
    _attr_should_poll = False
    _attr_color_mode = ColorMode.ONOFF
    _attr_supported_color_modes = {ColorMode.ONOFF}
    _attr_is_on = False

    async def async_turn_on(self, **kwargs: Any) -> None:
        self._attr_is_on = True
        self.async_write_ha_state()

    async def async_turn_off(self, **kwargs: Any) -> None:
        self._attr_is_on = False
        self.async_write_ha_state()


@pytest.fixture
async def light(wis: Wis) -> str:
    """The light's entity id: a `light` platform of a test integration (light domains are exposed to Assist by
    default, homeassistant/components/homeassistant/exposed_entities.py)."""
    entity = KitchenLight()

    async def setup_platform(hass: HomeAssistant, config: Any, add_entities: Any, discovery_info: Any = None) -> None:
        add_entities([entity])

    mock_platform(wis.hass, "wis_test.light", MockPlatform(async_setup_platform=setup_platform))
    assert await async_setup_component(wis.hass, "light", {"light": [{"platform": "wis_test"}]})
    await wis.hass.async_block_till_done()
    assert wis.hass.states.get(entity.entity_id).state == "off"
    return entity.entity_id


async def german_pipeline(wis: Wis, light: str, **tts: str | None) -> str:
    """A German pipeline of our engines (HA's default one, made German), with the light in the area Küche: its id.
    `tts`: the pipeline's tts_engine, tts_language and tts_voice, where they differ from the default pipeline's."""
    kitchen = ar.async_get(wis.hass).async_create("Küche")
    er.async_get(wis.hass).async_update_entity(light, area_id=kitchen.id)
    pipeline = await async_create_default_pipeline(
        wis.hass, stt_engine_id=wis.stt_id, tts_engine_id=wis.tts_id, pipeline_name="wyoming-wis"
    )
    assert pipeline is not None
    await async_update_pipeline(wis.hass, pipeline, language="de", conversation_language="de", stt_language="de", **tts)
    return pipeline.id
