"""Browsers over WebRTC: aiortc as the browser, a real server, real UDP.

One server for the module, with a narrow port range, a cap of three
connections and a short idle timeout, so that every limit can be reached here.
Each test leaves no connection open (the last one checks), and the server's log
must be clean when it stops.
"""

from __future__ import annotations

import asyncio
import errno
import random
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from aiortc import RTCConfiguration, RTCPeerConnection
from helpers import CORPUS, ROOT, Server, assert_clean_log, normalise, start_server, wer
from rtc_client import Client, PlayedTrack, speech

from rtc import ice
from wyoming_wis.config import PortRange, Settings

MAX_SESSIONS = 3
IDLE_TIMEOUT = 4.0
FIRST = CORPUS / "LJ001-0004.flac"  # 5.1 s
SECOND = CORPUS / "LJ001-0002.flac"  # 1.9 s
THIRD = CORPUS / "LJ001-0006.flac"  # 5.7 s


def reference(path: Path) -> str:
    return path.with_suffix(".txt").read_text().strip()


def free_range(size: int) -> tuple[int, int]:
    """A run of UDP ports nothing here uses now (IPv4 and IPv6)."""
    for _ in range(100):
        low = random.randrange(40000, 60000 - size)
        try:
            for sock in bind_all(low, low + size - 1):
                sock.close()
        except OSError:
            continue
        return low, low + size - 1
    raise RuntimeError("no free UDP port range")


def bind_all(low: int, high: int) -> list[socket.socket]:
    """Take every port of the range on every address, as other programs might."""
    taken = []
    try:
        for port in range(low, high + 1):
            for family, address in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
                sock = socket.socket(family, socket.SOCK_DGRAM)
                taken.append(sock)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind((address, port))
    except OSError:
        for sock in taken:
            sock.close()
        raise
    return taken


@pytest.fixture(scope="module")
def ports() -> tuple[int, int]:
    return free_range(4)


@pytest.fixture(scope="module")
def rtc_server(data_dir: Path, tmp_path_factory: pytest.TempPathFactory, ports: tuple[int, int]) -> Iterator[Server]:
    running = start_server(
        [
            "--data-dir",
            str(data_dir),
            "--asr-model",
            "base",
            "--asr-model",
            "tiny.en",
            "--rtc-ports",
            f"{ports[0]}-{ports[1]}",
            "--rtc-max-sessions",
            str(MAX_SESSIONS),
            "--rtc-idle-timeout",
            str(IDLE_TIMEOUT),
        ],
        tmp_path_factory.mktemp("rtc-server"),
    )
    yield running
    assert running.stop() == 0, running.log
    assert_clean_log(running.log)


def url(server: Server, query: str = "") -> str:
    return f"{server.http_url}/api/rtc/asr{query}"


def sessions(server: Server) -> float:
    return server.metric("wis_rtc_sessions") or 0.0


async def wait_sessions(server: Server, count: int, within: float) -> float:
    """Seconds until the server has `count` connections open; fails after `within`."""
    started = time.monotonic()
    while sessions(server) != count:
        assert time.monotonic() - started < within, f"{sessions(server)} connections open, not {count}"
        await asyncio.sleep(0.2)
    return time.monotonic() - started


def utterances(server: Server, status: str) -> float:
    return server.metric("wis_requests_total", frontend="webrtc", route="utterance", status=status) or 0.0


async def test_partials_while_speaking_then_the_final_text(rtc_server: Server, ports, record_property) -> None:
    ok = utterances(rtc_server, "ok")
    client = Client(url(rtc_server))
    await client.connect()
    try:
        client.send("ping")
        assert await client.receive(10) == {"type": "pong"}
        heard = await client.utterance(speech(str(FIRST)))
    finally:
        await client.close()

    final = heard.text
    assert heard.infer["type"] == "infer", heard.messages
    assert wer([reference(FIRST)], [final]) < 0.15, final
    assert heard.partials, f"no partial before stop: {heard.messages}"
    texts = [normalise(message["obj"]["text"]) for message in heard.partials]
    assert all(later.startswith(earlier) for earlier, later in zip(texts, texts[1:], strict=False)), texts  # all so far
    spoken = texts[-1].split()
    start_of_final = " ".join(normalise(final).split()[: len(spoken)])
    assert wer([start_of_final], [texts[-1]]) < 0.3, (texts, final)  # the partial text begins the final text
    obj = heard.infer["obj"]
    assert obj["model"] == "base" and obj["language"] == "en"
    assert 5100 <= obj["audio_duration"] <= 6300, obj  # the clip and its trailing silence, nothing before start
    assert 0 < obj["infer_time"] <= heard.stop_to_infer * 1000
    assert {"type": "log", "message": "Doing ASR..."} in heard.messages
    record_property("stop_to_infer_ms", round(heard.stop_to_infer * 1000))
    print(f"stop to infer: {heard.stop_to_infer * 1000:.0f} ms; partials: {len(heard.partials)}")

    low, high = ports
    found = ice.candidates(client.answer)
    assert found and all(low <= port <= high for _, port, _ in found), found
    assert utterances(rtc_server, "ok") == ok + 1
    assert (rtc_server.metric("wis_asr_audio_seconds_total", frontend="webrtc", model="base") or 0) > 5


async def test_track_detached_and_attached_again_between_utterances(rtc_server: Server, record_property) -> None:
    """replaceTrack(null) with its RTCP BYE, a pause, a new track: the second utterance is heard too."""
    client = Client(url(rtc_server, "?model=tiny.en"))
    await client.connect()
    try:
        first = await client.utterance(speech(str(THIRD)), trailing_silence=0.5)
        await client.detach()
        await asyncio.sleep(1.5)  # the browser sends no audio meanwhile
        client.attach(PlayedTrack())
        second = await client.utterance(speech(str(SECOND)), trailing_silence=0.5)
    finally:
        await client.close()
    assert first.infer["obj"]["model"] == second.infer["obj"]["model"] == "tiny.en"  # the query's model
    assert wer([reference(THIRD)], [first.text]) < 0.15, first.text
    assert wer([reference(SECOND)], [second.text]) < 0.15, second.messages
    assert second.infer["obj"]["audio_duration"] <= 2600, second.infer  # only what was said after start
    record_property("stop_to_infer_ms_after_reattach", round(second.stop_to_infer * 1000))


async def test_parameters_at_stop_as_willow_clients_send_them(rtc_server: Server) -> None:
    """WIS's client names model large at stop: logged and ignored. A loaded model named at stop decodes again."""
    client = Client(url(rtc_server))
    await client.connect()
    try:
        wis = await client.utterance(
            speech(str(SECOND)), stop={"model": "large", "beam_size": 5, "detect_language": False}
        )
        other = await client.utterance(speech(str(SECOND)), start={"partials": False}, stop={"model": "tiny.en"})
    finally:
        await client.close()
    assert wis.infer["type"] == "infer" and wis.infer["obj"]["model"] == "base", wis.messages
    assert any(m["type"] == "log" and "'large' is not loaded" in m["message"] for m in wis.messages), wis.messages
    assert wer([reference(SECOND)], [wis.text]) < 0.15
    assert other.infer["obj"]["model"] == "tiny.en" and wer([reference(SECOND)], [other.text]) < 0.15
    assert not [m for m in other.messages if m["type"] == "partial"], other.messages  # partials: false


async def test_bad_messages_get_errors_and_the_connection_carries_on(rtc_server: Server) -> None:
    client = Client(url(rtc_server))
    await client.connect()
    try:
        sent = [
            client.send("x", raw="not json"),
            client.send("x", raw=b"\x00binary"),
            client.send("hello"),
            client.send("stop"),
            client.send("start", {"model": "nope"}),
            client.send("start", {"beam_size": 99}),
            client.send("start", {"language": "xx"}),
        ]
        errors = [await client.receive(10) for _ in sent]
        client.send("ping")
        pong = await client.receive(10)
    finally:
        await client.close()
    codes = [error.get("obj", {}).get("code") for error in errors]
    assert [error["type"] for error in errors] == ["error"] * len(sent), errors
    assert codes == [
        "bad-message",
        "bad-message",
        "bad-message",
        "not-started",
        "unknown-model",
        "bad-message",
        "unsupported-language",
    ], errors
    assert all(error["message"] for error in errors)
    assert pong == {"type": "pong"}


async def test_bad_signalling_is_refused_in_the_error_envelope(rtc_server: Server) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        not_json = await http.post(url(rtc_server), content=b"{")
        garbage = await http.post(url(rtc_server), json={"sdp": "hello", "type": "offer"})
        answer = await http.post(url(rtc_server), json={"sdp": "v=0", "type": "answer"})
        model = await http.post(url(rtc_server, "?model=nope"), json={"sdp": "v=0", "type": "offer"})
    for response in (not_json, garbage, answer):
        assert response.status_code == 400, response.text
        assert response.json()["error"]["type"] == "invalid_request_error"
    assert model.status_code == 404 and model.json()["error"]["code"] == "unknown-model"

    no_audio = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    no_audio.createDataChannel("chat")
    no_channel = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    no_channel.addTrack(PlayedTrack())
    refused = {}
    for name, pc in (("audio track", no_audio), ("data channel", no_channel)):
        await pc.setLocalDescription(await pc.createOffer())
        async with httpx.AsyncClient(timeout=30) as http:
            refused[name] = await http.post(url(rtc_server), json={"sdp": pc.localDescription.sdp, "type": "offer"})
        await pc.close()
    for name, response in refused.items():
        assert response.status_code == 400 and f"no {name}" in response.json()["error"]["message"], response.text
    assert sessions(rtc_server) == 0


async def test_the_session_cap_gives_a_clear_error(rtc_server: Server) -> None:
    clients = [Client(url(rtc_server)) for _ in range(MAX_SESSIONS)]
    try:
        for client in clients:
            await client.connect()
        assert sessions(rtc_server) == MAX_SESSIONS
        refused = await Client(url(rtc_server)).offer()
        assert refused.status_code == 429 and refused.headers["Retry-After"], refused.text
        assert f"all {MAX_SESSIONS} (--rtc-max-sessions)" in refused.json()["error"]["message"]
        await clients.pop().close()
        await wait_sessions(rtc_server, MAX_SESSIONS - 1, 10)
        clients.append(Client(url(rtc_server)))
        await clients[-1].connect()  # a freed place is taken again
    finally:
        for client in clients:
            await client.close()
    await wait_sessions(rtc_server, 0, 10)


async def test_a_full_port_range_is_a_clear_error(rtc_server: Server, ports) -> None:
    await wait_sessions(rtc_server, 0, 10)
    taken = bind_all(*ports)
    try:
        started = time.monotonic()
        refused = await Client(url(rtc_server)).offer()
        took = time.monotonic() - started
    finally:
        for sock in taken:
            sock.close()
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "no_free_port", refused.text
    assert f"--rtc-ports {ports[0]}-{ports[1]}" in refused.json()["error"]["message"]
    assert took < 10
    assert sessions(rtc_server) == 0
    client = Client(url(rtc_server))
    await client.connect()  # free again
    await client.close()


async def test_a_client_that_closes_mid_utterance_is_cleaned_up(rtc_server: Server) -> None:
    cancelled = utterances(rtc_server, "cancelled")
    client = Client(url(rtc_server))
    await client.connect()
    client.send("start")
    client.track.play(speech(str(SECOND)))
    await client.track.played()
    await client.close()  # no stop, no goodbye on the data channel
    await wait_sessions(rtc_server, 0, 10)
    assert utterances(rtc_server, "cancelled") == cancelled + 1
    progress = rtc_server.metric("wis_requests_in_progress", frontend="webrtc", route="utterance")
    assert progress == 0


async def test_a_client_that_vanishes_is_dropped_after_the_idle_timeout(rtc_server: Server) -> None:
    """A killed browser sends nothing more, not even a goodbye: the connection goes after --rtc-idle-timeout."""
    client = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "rtc_client.py"), url(rtc_server)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = await asyncio.wait_for(asyncio.to_thread(client.stdout.readline), 60)
        assert line.strip() == "connected"
        assert sessions(rtc_server) == 1
    finally:
        client.kill()
        client.wait()
    took = await wait_sessions(rtc_server, 0, IDLE_TIMEOUT + 10)
    assert took >= IDLE_TIMEOUT - 1.5, took  # not dropped before the timeout: it was alive until killed
    assert "nothing heard for" in rtc_server.log


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], ("10000-10049", None, None, 16, 300.0)),
        (["--rtc-ports", "any", "--rtc-stun", "stun:s.example:3478"], ("any", "stun:s.example:3478", None, 16, 300)),
        (
            ["--rtc-ports", "20000-20000", "--rtc-turn", "turn:t.example?transport=tcp", "--rtc-turn-user", "u"]
            + ["--rtc-turn-password", "p", "--rtc-max-sessions", "2", "--rtc-idle-timeout", "30"],
            ("20000-20000", None, "turn:t.example?transport=tcp", 2, 30.0),
        ),
    ],
)
def test_rtc_settings(argv: list[str], expected: tuple) -> None:
    settings = Settings.from_args(argv, environ={})
    got = (str(settings.rtc_ports), settings.rtc_stun, settings.rtc_turn, settings.rtc_max_sessions)
    assert got + (settings.rtc_idle_timeout,) == expected
    servers = ice.configuration(settings).iceServers
    assert [server.urls for server in servers] == [url for url in expected[1:3] if url]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--rtc-ports", "10049-10000"], "is empty"),
        (["--rtc-ports", "10000-70000"], "expected LOW-HIGH"),
        (["--rtc-stun", "stun.example:3478"], "expected stun:HOST[:PORT]"),
        (["--rtc-turn", "turn:t.example"], "--rtc-turn needs --rtc-turn-user and --rtc-turn-password"),
    ],
)
def test_bad_rtc_settings_are_refused(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        Settings.from_args(argv, environ={})
    assert message in capsys.readouterr().err


def test_port_range_binding_gives_up_cleanly() -> None:
    """The bind wrapper itself: in the range while active, any port otherwise, EADDRINUSE when full."""

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        ice.install(loop)
        low, high = free_range(2)
        with ice.bound_to(PortRange(low, high)):
            first, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol, local_addr=("127.0.0.1", 0))
            second, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol, local_addr=("127.0.0.1", 0))
            ports = {first.get_extra_info("sockname")[1], second.get_extra_info("sockname")[1]}
            with pytest.raises(OSError) as full:
                await loop.create_datagram_endpoint(asyncio.DatagramProtocol, local_addr=("127.0.0.1", 0))
        outside, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol, local_addr=("127.0.0.1", 0))
        for transport in (first, second, outside):
            transport.close()
        assert ports == {low, high}
        assert full.value.errno == errno.EADDRINUSE and f"{low}-{high}" in str(full.value)
        assert not low <= outside.get_extra_info("sockname")[1] <= high

    asyncio.run(scenario())


async def test_stopping_the_server_closes_open_connections(rtc_server: Server) -> None:
    """Last in this module: SIGTERM with a browser connected mid-utterance; the server ends cleanly and soon."""
    client = Client(url(rtc_server))
    await client.connect()
    client.send("start")
    client.track.play(speech(str(SECOND)))
    await client.track.played()
    started = time.monotonic()
    code = await asyncio.to_thread(rtc_server.stop)
    await client.close()
    assert code == 0 and time.monotonic() - started < 10, rtc_server.log
    assert "closed: the server is stopping" in rtc_server.log
    assert_clean_log(rtc_server.log)
