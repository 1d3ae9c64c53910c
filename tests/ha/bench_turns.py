"""The end of each turn through Home Assistant's own assist pipeline, timed from its events: bench/ha_turns.py runs
this module (not collected by the suite: its name does not start with test_) in the venv of a Home Assistant.

A household whose names fit the corpus' commands (tests/bench_household.py: "Living Room Lamp", "Kitchen Lights",
"Front Door", ..., in areas "Living Room", "Kitchen", ...) is set up in Home Assistant's registries, and its API is
served on loopback. Two servers of this checkout read those names from it (--hass-api, --hass-token-file), each
added through the wyoming config flow, each behind a pipeline of its own:

  ours      wyoming-wis on its defaults: `requires_external_vad: false`, so Home Assistant (2026.10 and later)
            runs no VAD and streams until our transcript
  ha-vad    wyoming-wis with --external-vad: Home Assistant's own VAD (its VoiceCommandSegmenter, on the
            pipeline's defaults) ends the turn, and the server transcribes after its audio-stop

Every clip of WIS_HA_BENCH_CLIPS (a JSON list of {name, kind, text, path, last_speech_s}: 16 kHz 16-bit mono WAV,
and where its last speech sample ends) goes through each pipeline in turn, live (tests/ha/support.py `Live`), with
silence after it. Written to WIS_HA_BENCH_OUT, one row per turn: the seconds from the clip's start to
Home Assistant's stt-end (or the error an empty transcript makes) and to its stt-vad-end (HA's VAD only), the text,
why our server ended the turn (its log), and whether the stream ran out (then neither ended the turn).
"""

from __future__ import annotations

import asyncio
import json
import os
import wave
from datetime import datetime
from pathlib import Path

import bench_household
import test_names
from conftest import Wis, WisServer, add_server, entity_ids
from homeassistant.components.assist_pipeline.pipeline import (
    PipelineEventType,
    PipelineStage,
    async_create_default_pipeline,
)
from homeassistant.const import __version__
from homeassistant.core import HomeAssistant
from support import RATE, Live, Pcm
from test_names import (
    Area,
    Floor,
    HassApi,
    Household,
    Thing,
    names_lines,
    set_up_household,
    start_server,
    stop_server,
    with_names,
)

hass_api = test_names.hass_api  # test_names.py's fixture
SILENCE_AFTER = 5.0  # seconds of silence after each clip: more than either path needs to end a turn
SYSTEMS = ("ours", "ha-vad")
HOUSEHOLD = Household(  # tests/bench_household.py's
    floors=tuple(Floor(name, aliases) for name, aliases in bench_household.FLOORS),
    areas=tuple(Area(name, floor) for name, floor in bench_household.AREAS),
    devices={},
    things=tuple(Thing(*thing) for thing in bench_household.THINGS),
)


async def added(hass: HomeAssistant, server: WisServer, name: str) -> tuple[Wis, str]:
    """`server` added to `hass` through the config flow, and a pipeline (as HA makes one) with its STT."""
    entry = await add_server(hass, server.host, server.port)
    ids = entity_ids(hass, entry)
    pipeline = await async_create_default_pipeline(
        hass, stt_engine_id=ids["stt"], tts_engine_id=ids["tts"], pipeline_name=name
    )
    assert pipeline is not None
    return Wis(hass, server, entry, ids["stt"], ids["tts"]), pipeline.id


def read(path: str) -> Pcm:
    with wave.open(path, "rb") as wav:
        assert (wav.getframerate(), wav.getsampwidth(), wav.getnchannels()) == (RATE, 2, 1), path
        return Pcm(wav.readframes(wav.getnframes()))


async def test_turn_times(hass: HomeAssistant, hass_api: HassApi, tmp_path: Path) -> None:
    clips = json.loads(Path(os.environ["WIS_HA_BENCH_CLIPS"]).read_text())
    await set_up_household(hass, HOUSEHOLD)
    servers = {
        "ours": await start_server(tmp_path / "ours", *with_names(hass_api)),
        "ha-vad": await start_server(tmp_path / "ha-vad", *with_names(hass_api), "--external-vad"),
    }
    try:
        for server in servers.values():
            await names_read(server)
        systems = {system: await added(hass, server, system) for system, server in servers.items()}
        assert systems["ours"][0].stt.audio_processing.requires_external_vad is False
        assert systems["ha-vad"][0].stt.audio_processing.requires_external_vad is True
        rows = []
        for number, clip in enumerate(clips, 1):
            speech = read(clip["path"])
            for system, (wis, pipeline_id) in systems.items():
                rows.append({"clip": clip["name"], "system": system, **await one_turn(wis, pipeline_id, speech)})
                print(f"[{number}/{len(clips)} {clip['name']}] {system}: {rows[-1]}", flush=True)
        names = {system: names_lines(server)[-1] for system, server in servers.items()}
    finally:
        for server in servers.values():
            await stop_server(server)
    document = {"home_assistant": __version__, "silence_after_s": SILENCE_AFTER, "names": names, "rows": rows}
    Path(os.environ["WIS_HA_BENCH_OUT"]).write_text(json.dumps(document, indent=1) + "\n")


async def names_read(server: WisServer, seconds: float = 30.0) -> None:
    """Wait until `server` has read the household's names."""
    for _ in range(int(seconds * 10)):
        if names_lines(server):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"no names read in {seconds:g} s:\n{server.log[-4000:]}")


async def one_turn(wis: Wis, pipeline_id: str, speech: Pcm) -> dict:
    """`speech` through the pipeline, live: what HA heard, and when (seconds from the clip's start)."""
    live = Live(speech, SILENCE_AFTER)
    logged = len(wis.server.turns_ended())
    events = await wis.pipeline_events(pipeline_id, live.stream(), PipelineStage.STT)
    assert live.started is not None
    started = live.started

    def since_start(kind: PipelineEventType) -> float | None:
        stamps = [event.timestamp for event in events if event.type == kind]
        return None if not stamps else (datetime.fromisoformat(stamps[0]) - started).total_seconds()

    ends = [event.data for event in events if event.type == PipelineEventType.STT_END]
    errors = [event.data["code"] for event in events if event.type == PipelineEventType.ERROR]
    return {
        "heard": ends[0]["stt_output"]["text"] if ends else None,
        "errors": errors,
        "stt_end_s": since_start(PipelineEventType.ERROR if errors else PipelineEventType.STT_END),
        "vad_end_s": since_start(PipelineEventType.STT_VAD_END),
        "server_reasons": wis.server.turns_ended()[logged:],
        "ran_out": live.ran_out,
    }
