"""OpenAI's Realtime API over WebRTC (POST /v1/realtime/calls): the official SDK posts the offer, aiortc is the
browser (tests/rtc_client.py, its data channel named "oai-events"), a real server, real UDP.

The offer goes as the SDK sends it: multipart with a session (`calls.create(sdp=..., session=...)`) or the SDP
alone as an application/sdp body (`calls.create(sdp=...)`, and here by hand too). The clip is played on the track at
the pace it was spoken; the events come on the data channel. The server's WebRTC connections are four, two per
address, shared with /api/rtc/asr.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from helpers import CORPUS, Server, assert_stops_cleanly, start_server, wer
from openai import AsyncOpenAI, DefaultAsyncHttpxClient
from rtc_client import Client, PlayedTrack, pause, speech
from test_rtc import free_range, reference, sessions, url, wait_sessions

MAX_SESSIONS = 4
EVENTS = "oai-events"
CLIP = CORPUS / "LJ001-0004.flac"  # 5.1 s
SERVER_VAD = {"type": "server_vad", "silence_duration_ms": 500}
COMPLETED = "conversation.item.input_audio_transcription.completed"


@pytest.fixture(scope="module")
def calls_server(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    low, high = free_range(MAX_SESSIONS + 1)
    running = start_server(
        [
            *("--data-dir", str(data_dir), "--asr-model", "base", "--rtc-ports", f"{low}-{high}"),
            *("--rtc-max-sessions", str(MAX_SESSIONS), "--rtc-idle-timeout", "4"),
        ],
        tmp_path_factory.mktemp("realtime-calls"),
    )
    yield running
    assert_stops_cleanly(running)


def sdk(server: Server, source: str | None = None) -> AsyncOpenAI:
    """The SDK, its requests sent from `source` (the server shares its places by address)."""
    http = DefaultAsyncHttpxClient(transport=httpx2.AsyncHTTPTransport(local_address=source))
    return AsyncOpenAI(api_key="unused", base_url=server.http_url + "/v1", http_client=http)


def calls_url(server: Server) -> str:
    return f"{server.http_url}/v1/realtime/calls"


def transcription(**audio_input: Any) -> dict[str, Any]:
    """A GA session of type transcription, English, with these `audio.input` fields."""
    return {"type": "transcription", "audio": {"input": {"transcription": {"language": "en"}, **audio_input}}}


async def offer(client: Client) -> str:
    await client.pc.setLocalDescription(await client.pc.createOffer())  # gathers every candidate
    return client.pc.localDescription.sdp


async def answered(client: Client, status: int, content_type: str, sdp: str) -> None:
    """The server's answer taken: 201 with an SDP body, then the data channel open."""
    assert status == 201, sdp
    assert content_type.split(";")[0] == "application/sdp", content_type
    await client.pc.setRemoteDescription(RTCSessionDescription(sdp, "answer"))
    await client.opened()


async def call(server: Server, session: dict[str, Any] | None = None, source: str | None = None) -> tuple[Client, str]:
    """A call made with the SDK (the offer and `session`, multipart), connected; the client and the call's id."""
    client = Client(calls_url(server), label=EVENTS, source=source)
    sdp = await offer(client)
    raw = await sdk(server, source).realtime.calls.with_raw_response.create(
        sdp=sdp, **({"session": session} if session is not None else {})
    )
    await answered(client, raw.status_code, raw.headers["content-type"], raw.text)
    location = raw.headers["location"]
    assert location.startswith("/v1/realtime/calls/rtc_"), location
    return client, location.rsplit("/", 1)[-1]


async def test_a_call_with_server_vad_transcribes_its_track(calls_server: Server) -> None:
    """session.created first (with the posted session), then for the played clip speech_started, speech_stopped,
    committed and the transcript, all on "oai-events"; hanging up ends the connection."""
    client, call_id = await call(calls_server, transcription(turn_detection=SERVER_VAD))
    try:
        created = await client.receive(10)
        assert created["type"] == "session.created", created
        detection = created["session"]["audio"]["input"]["turn_detection"]
        assert detection["type"] == "server_vad" and detection["silence_duration_ms"] == 500, created
        client.track.play(speech(str(CLIP)))
        client.track.play(pause(2.0))
        events = await client.until(COMPLETED, "error", timeout=60)
    finally:
        hung_up = await sdk(calls_server).realtime.calls.with_raw_response.hangup(call_id)
        await client.close()
    kinds = [event["type"] for event in events]
    assert kinds[-1] == COMPLETED, events
    order = ["input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped", "input_audio_buffer.committed"]
    assert [kind for kind in kinds if kind in order] == order, kinds
    items = {event["item_id"] for event in events if "item_id" in event}
    assert len(items) == 1, events  # one turn, one item
    assert wer([reference(CLIP)], [events[-1]["transcript"]]) < 0.2, events[-1]
    assert hung_up.status_code == 200
    await wait_sessions(calls_server, 0, 10)


async def test_a_raw_sdp_offer_and_events_both_ways(calls_server: Server) -> None:
    """The offer alone (application/sdp); over the data channel session.update turns detection off, an append is
    refused (the audio is the track), and the client's commit ends the turn."""
    client = Client(calls_url(calls_server), label=EVENTS)
    sdp = await offer(client)
    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.post(calls_url(calls_server), content=sdp, headers={"Content-Type": "application/sdp"})
    try:
        await answered(client, response.status_code, response.headers["content-type"], response.text)
        created = await client.receive(10)
        assert created["type"] == "session.created", created
        assert created["session"]["audio"]["input"]["turn_detection"]["type"] == "server_vad"  # OpenAI's default
        client.channel.send(json.dumps({"type": "session.update", "session": transcription(turn_detection=None)}))
        updated = (await client.until("session.updated", "error", timeout=10))[-1]
        assert updated["type"] == "session.updated" and updated["session"]["audio"]["input"]["turn_detection"] is None
        client.channel.send(json.dumps({"type": "input_audio_buffer.append", "audio": "AAAA", "event_id": "ev1"}))
        refused = (await client.until("error", timeout=10))[-1]["error"]
        assert refused["code"] == "invalid_event" and refused["event_id"] == "ev1", refused
        client.track.play(speech(str(CLIP)))
        client.track.play(pause(0.5))
        await client.track.played()
        client.channel.send(json.dumps({"type": "input_audio_buffer.commit"}))
        events = await client.until(COMPLETED, "error", timeout=60)
    finally:
        await client.close()
    kinds = [event["type"] for event in events]
    assert "input_audio_buffer.committed" in kinds and kinds[-1] == COMPLETED, events
    assert "input_audio_buffer.speech_started" not in kinds  # the client ends turns: no VAD events
    assert wer([reference(CLIP)], [events[-1]["transcript"]]) < 0.2, events[-1]
    await wait_sessions(calls_server, 0, 10)


async def test_bad_calls_are_refused_in_the_error_envelope(calls_server: Server) -> None:
    """A bad offer, an offer without a data channel, a bad session, an unknown model, a JSON body: each refused
    before any connection, in OpenAI's error envelope."""
    no_channel = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    no_channel.addTrack(PlayedTrack())
    await no_channel.setLocalDescription(await no_channel.createOffer())
    await no_channel.close()
    good = await offer(client := Client(calls_url(calls_server), label=EVENTS))
    await client.close()

    async def post(sdp: str, session: Any = None) -> httpx.Response:
        files: dict[str, Any] = {"sdp": (None, sdp, "application/sdp")}
        if session is not None:
            files["session"] = (None, session if isinstance(session, str) else json.dumps(session), "application/json")
        async with httpx.AsyncClient(timeout=30) as http:
            return await http.post(calls_url(calls_server), files=files)

    garbage = await post("hello")
    without_channel = await post(no_channel.localDescription.sdp)
    realtime = await post(good, {"type": "realtime"})
    not_json = await post(good, "{")
    silence = await post(good, transcription(turn_detection={"type": "server_vad", "silence_duration_ms": -5}))
    model = await post(good, {"audio": {"input": {"transcription": {"model": "no-such-model"}}}})
    async with httpx.AsyncClient(timeout=30) as http:
        as_json = await http.post(calls_url(calls_server), json={"sdp": good, "type": "offer"})
    for response in (garbage, without_channel, realtime, not_json, silence):
        assert response.status_code == 400, response.text
        assert response.json()["error"]["type"] == "invalid_request_error"
    assert "no data channel" in without_channel.json()["error"]["message"]
    assert realtime.json()["error"]["param"] == "session.type"
    assert not_json.json()["error"]["param"] == "session"
    assert silence.json()["error"]["param"].endswith("silence_duration_ms")
    assert model.status_code == 404 and model.json()["error"]["code"] == "unknown-model", model.text
    assert as_json.status_code == 415 and as_json.json()["error"]["code"] == "bad_content_type"
    assert sessions(calls_server) == 0


async def test_a_call_without_its_events_channel_is_closed(calls_server: Server) -> None:
    """A data channel named otherwise than "oai-events" (Willow's "chat"): the call is answered, then closed."""
    client = Client(calls_url(calls_server), label="chat")
    try:
        raw = await sdk(calls_server).realtime.calls.with_raw_response.create(sdp=await offer(client))
        await answered(client, raw.status_code, raw.headers["content-type"], raw.text)
        await wait_sessions(calls_server, 0, 10)
    finally:
        await client.close()
    assert "a data channel named 'chat', not oai-events; closing" in calls_server.log


async def test_calls_and_willow_connections_share_the_per_address_limit(calls_server: Server) -> None:
    """Calls and /api/rtc/asr connections share --rtc-max-sessions' places: with an address holding a call and a
    Willow connection and another two Willow connections, all of them streaming, a third of either kind from the
    first address is 429 (no place is idle, and no address holds two more than it); hanging up frees a place for
    the next."""
    host = "127.0.0.3"
    willow = Client(url(calls_server), source=host)
    extra = Client(calls_url(calls_server), label=EVENTS, source=host)
    others = [Client(url(calls_server), source="127.0.0.4") for _ in range(MAX_SESSIONS - 2)]
    await willow.connect()
    first, call_id = await call(calls_server, source=host)
    for other in others:
        await other.connect()
    try:
        assert sessions(calls_server) == MAX_SESSIONS
        sdp = await offer(extra)
        transport = httpx.AsyncHTTPTransport(local_address=host)
        async with httpx.AsyncClient(timeout=30, transport=transport) as http:
            refused = await http.post(calls_url(calls_server), content=sdp, headers={"Content-Type": "application/sdp"})
        async with httpx.AsyncClient(timeout=30) as http:  # from 127.0.0.1
            hangup_elsewhere = await http.post(f"{calls_url(calls_server)}/{call_id}/hangup")
        refused_willow = await Client(url(calls_server), source=host).offer()
        for response in (refused, refused_willow):
            assert response.status_code == 429 and response.headers["Retry-After"], response.text
            assert response.json()["error"]["code"] == "too_many_sessions"
        assert hangup_elsewhere.status_code == 404, hangup_elsewhere.text  # another address cannot end the call
        async with httpx.AsyncClient(timeout=30, transport=transport) as http:
            hung_up = await http.post(f"{calls_url(calls_server)}/{call_id}/hangup")
        assert hung_up.status_code == 200, hung_up.text
        await wait_sessions(calls_server, MAX_SESSIONS - 1, 10)
        second, _ = await call(calls_server, source=host)  # the freed place is taken again
        await second.close()
    finally:
        for client in (willow, first, extra, *others):
            await client.close()
    await wait_sessions(calls_server, 0, 10)
