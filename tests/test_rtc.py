"""Browsers over WebRTC: aiortc as the browser, a real server, real UDP.

One server for the module, with a narrow port range, a cap of four
connections (two from one address, whose last connection may still be closing
when the next test connects) and a short idle timeout, so that every limit can
be reached here.
Each test leaves no connection open (the last one checks), and the server's log
must be clean when it stops. A second server, with `--rtc-public-address`, stands
in for a container behind Docker's port publishing (`Published`).
"""

from __future__ import annotations

import asyncio
import errno
import random
import selectors
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import av
import httpx
import numpy as np
import pytest
from aioice.ice import get_host_addresses
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from helpers import CORPUS, ROOT, Server, assert_clean_log, assert_stops_cleanly, normalise, start_server, wer
from rtc_client import RATE, Client, PlayedTrack, pause, speech

from rtc import ice
from rtc.messages import Params
from rtc.track import Listener
from wyoming_wis.config import PortRange, Settings

MAX_SESSIONS = 4
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
    return free_range(MAX_SESSIONS + 1)


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
    assert_stops_cleanly(running)


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
            client.send("start", {"hands_free": "maybe"}),
            client.send("start", {"hands_free": True, "vad_sensitivity": "sometimes"}),
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
        "bad-message",
        "bad-request",  # the sensitivity's name: the core checks it, for every frontend
    ], errors
    assert "vad_sensitivity must be one of default, relaxed, aggressive" in errors[-1]["message"], errors
    assert all(error["message"] for error in errors)
    assert pong == {"type": "pong"}
    warned = [line for line in rtc_server.log.splitlines() if "WARNING" in line and "WebRTC client 127.0.0.1" in line]
    assert len(warned) >= len(sent), warned  # each mistake is logged with the browser's address


async def test_bad_signalling_is_refused_in_the_error_envelope(rtc_server: Server) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        not_json = await http.post(url(rtc_server), content=b"{")
        garbage = await http.post(url(rtc_server), json={"sdp": "hello", "type": "offer"})
        answer = await http.post(url(rtc_server), json={"sdp": "v=0", "type": "answer"})
        model = await http.post(url(rtc_server, "?model=nope"), json={"sdp": "v=0", "type": "offer"})
        sensitivity = await http.post(url(rtc_server, "?hands_free=true&vad_sensitivity=x"), json={"type": "offer"})
    for response in (not_json, garbage, answer):
        assert response.status_code == 400, response.text
        assert response.json()["error"]["type"] == "invalid_request_error"
    assert model.status_code == 404 and model.json()["error"]["code"] == "unknown-model"
    assert sensitivity.status_code == 400 and "vad_sensitivity" in sensitivity.json()["error"]["message"]

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
    """Browsers on as many hosts as --rtc-max-sessions (one host holds at most half: tests/test_rtc_bounds.py)."""
    hosts = [f"127.0.0.{n}" for n in range(1, MAX_SESSIONS + 2)]
    clients = [Client(url(rtc_server), source=host) for host in hosts[:MAX_SESSIONS]]
    try:
        for client in clients:
            await client.connect()
        assert sessions(rtc_server) == MAX_SESSIONS
        refused = await Client(url(rtc_server), source=hosts[-1]).offer()
        assert refused.status_code == 429 and refused.headers["Retry-After"], refused.text
        assert f"all {MAX_SESSIONS} (--rtc-max-sessions)" in refused.json()["error"]["message"]
        await clients.pop().close()
        await wait_sessions(rtc_server, MAX_SESSIONS - 1, 10)
        clients.append(Client(url(rtc_server), source=hosts[MAX_SESSIONS - 1]))
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


class _Heard:
    """Stands in for the ASR session: keeps what the listener feeds it."""

    def __init__(self) -> None:
        self.samples: list[np.ndarray] = []

    async def feed_samples(self, samples: np.ndarray) -> None:
        self.samples.append(samples)


def _native_thread_ids() -> set[int]:
    """The process's threads that Python did not start: FFmpeg's among them. Python's own come and go with other
    tests (an executor's worker started meanwhile stays) and are left out."""
    python = {thread.native_id for thread in threading.enumerate()}
    return {int(task.name) for task in Path("/proc/self/task").iterdir()} - python


async def test_an_ended_utterance_gives_back_its_resampler_threads() -> None:
    """FFmpeg's resampler runs threads (a thread per CPU) unless told not to, which PyAV before 18.1.1 cannot be; an
    utterance must not keep them until the garbage collector runs.

    The soak benchmark found them piling up, two per utterance, to 105 threads for two browsers.
    """
    with ThreadPoolExecutor(1) as executor:
        executor.submit(int).result()  # its one thread exists before counting
        before = _native_thread_ids()
        heard = _Heard()
        listener = Listener(heard, executor)  # type: ignore[arg-type]
        for index in range(5):
            frame = av.AudioFrame.from_ndarray(np.full((1, 1920), 1000, dtype=np.int16), format="s16", layout="stereo")
            frame.sample_rate, frame.pts = 48000, index * 960
            listener.add(frame)
        await listener.drain()
        assert sum(len(piece) for piece in heard.samples) > 1000  # resampled to 16 kHz mono
        graph = _native_thread_ids() - before  # the filter graph's threads, if any
        listener.close()
        deadline = time.monotonic() + 5
        while graph & _native_thread_ids() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert not graph & _native_thread_ids()


# -- hands-free -----------------------------------------------------------------------

COMMANDS = ("Turn on the kitchen light.", "What time is it?")
NOBODY = 5.5  # seconds of silence before the first command: past --no-speech-seconds (5), a turn with nothing said


async def said(server: Server, text: str) -> np.ndarray:
    """The server's own Piper voice saying `text`, as a browser's microphone track carries it."""
    async with httpx.AsyncClient(timeout=60) as http:
        answer = await http.post(f"{server.http_url}/v1/audio/speech", json={"input": text, "response_format": "wav"})
    answer.raise_for_status()
    return speech(answer.content)


def seconds(*parts: np.ndarray) -> float:
    return sum(len(part) for part in parts) / RATE


async def test_hands_free_answers_each_turn_without_stop(rtc_server: Server, record_property) -> None:
    """Two commands with a pause between, after a silence: one infer per command as the speaker pauses, no stop
    sent, each the text a start/stop of the same audio gets; the silence alone is no turn. A `stop` sent as the
    second turn ends is answered after it, in order."""
    commands = [await said(rtc_server, text) for text in COMMANDS]
    client = Client(url(rtc_server))
    await client.connect()
    try:
        plain = [(await client.utterance(command)).text for command in commands]
        ok = utterances(rtc_server, "ok")
        played = [pause(NOBODY), commands[0], pause(2.0), commands[1], pause(5.0)]
        client.send("start", {"hands_free": True})
        began = time.monotonic()
        client.track.play(np.concatenate(played))
        turns = [await client.turn()]
        ending = await client.until("turn-end")
        client.send("stop")  # while the second turn is answered, before the next has opened: answered after it
        turns.append(ending + await client.turn())
        answered = time.monotonic() - began
        last = await client.turn()
    finally:
        await client.close()

    for turn, text, command in zip(turns, plain, COMMANDS, strict=True):
        ended = [message for message in turn if message["type"] == "turn-end"]
        assert len(ended) == 1 and ended[0]["obj"]["reason"] in ("command", "complete", "silence"), turn
        # no word lost to the turn's end: as right as the start/stop decode (on a Piper take, random, that one may
        # slip on the first word itself: "current on the kitchen light.")
        assert turn[-1]["type"] == "infer", turn
        assert wer([command], [turn[-1]["obj"]["text"]]) <= wer([command], [text]), (turn, plain)
        assert normalise(text), plain
        assert 0 < turn[-1]["obj"]["infer_time"] < 5000, turn  # from the last word
    assert answered < seconds(*played), "the turns came only when the audio ended"  # not at a stop
    assert last[-1]["type"] == "infer" and last[-1]["obj"]["text"] == "", last  # the stop's turn: nothing said
    assert not [message for message in last if message["type"] == "turn-end"], last
    assert utterances(rtc_server, "ok") == ok + 3  # two turns and the stop's; the silence alone was none
    record_property("last_word_to_infer_ms", [round(turn[-1]["obj"]["infer_time"]) for turn in turns])
    ends = [next(message["obj"] for message in turn if message["type"] == "turn-end") for turn in turns]
    print(f"hands-free turns: {[(end, turn[-1]['obj']) for end, turn in zip(ends, turns, strict=True)]}")


async def test_stop_in_hands_free_ends_the_turn_and_the_listening(rtc_server: Server) -> None:
    """`stop` mid-command answers what was said so far at once, and no turn follows; closing mid-turn frees all."""
    command = await said(rtc_server, "Turn on the lights in the living room and close the blinds.")
    half = len(command) // 2
    cancelled = utterances(rtc_server, "cancelled")
    client = Client(url(rtc_server))
    await client.connect()
    try:
        client.send("start", {"hands_free": True, "vad_sensitivity": "relaxed"})
        client.track.play(command[:half])
        await client.track.played()
        client.send("stop")
        stopped = await client.until("infer", "error")
        client.track.play(np.concatenate([command[half:], pause(0.5), command, pause(2.0)]))
        after = await client.quiet(seconds(command) * 1.5 + 2.0)
        client.send("stop")
        refused = await client.receive(10)
        client.send("start", {"hands_free": True})  # and once more, left by a client that goes mid-turn
        client.track.play(command)
        await client.track.played()
    finally:
        await client.close()
    assert stopped[-1]["type"] == "infer" and not [m for m in stopped if m["type"] == "turn-end"], stopped
    words = normalise(stopped[-1]["obj"]["text"]).split()
    assert words[:2] == ["turn", "on"] and "blinds" not in words, stopped  # what was said before the stop
    assert not [message for message in after if message["type"] in ("partial", "turn-end", "infer")], after
    assert refused["type"] == "error" and refused["obj"]["code"] == "not-started", refused
    await wait_sessions(rtc_server, 0, 10)
    assert utterances(rtc_server, "cancelled") == cancelled + 1
    assert rtc_server.metric("wis_requests_in_progress", frontend="webrtc", route="utterance") == 0


@pytest.mark.parametrize(
    ("given", "end_of_turn"),
    [
        ({"hands_free": True}, "default"),
        ({"hands_free": "on", "vad_sensitivity": "aggressive"}, "aggressive"),
        ({"vad_sensitivity": "relaxed"}, None),  # a sensitivity alone is not hands-free
        ({}, None),
    ],
)
def test_hands_free_params_ask_the_server_to_end_the_turn(given: dict, end_of_turn: str | None) -> None:
    assert Params.parse(given, "start's obj").request().end_of_turn == end_of_turn
    assert Params.parse({"hands_free": False}, "start's obj").over(Params.parse(given, "the query")).hands_free is False


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
    settings = Settings.from_args(argv, environ={}).rtc
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


class Published:
    """Docker's `-p LOW-HIGH:LOW-HIGH/udp` in miniature, in a thread: what comes to 127.0.0.1:P goes to TARGET:P.

    As Docker's proxy does, each sender gets its own socket towards the target, and what the target sends
    back to that socket leaves from 127.0.0.1:P to the sender. The server's sockets are bound to TARGET
    only, so nothing sent to 127.0.0.1 reaches them but through here.
    """

    def __init__(self, target: str, low: int, high: int) -> None:
        self.target = target
        self.forwarded = 0  # datagrams to the target
        self.returned = 0  # datagrams back to senders
        self._selector = selectors.DefaultSelector()
        self._upstream: dict[tuple[socket.socket, tuple], socket.socket] = {}
        for port in range(low, high + 1):
            front = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            front.bind(("127.0.0.1", port))
            front.setblocking(False)
            self._selector.register(front, selectors.EVENT_READ, None)
        self._running = True
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while self._running:
            for key, _ in self._selector.select(0.1):
                sock: socket.socket = key.fileobj  # type: ignore[assignment]
                try:
                    data, sender = sock.recvfrom(65536)
                    if key.data is None:  # a sender to 127.0.0.1:P
                        self._towards_target(sock, sender).send(data)
                        self.forwarded += 1
                    else:  # the target answering
                        front, to = key.data
                        front.sendto(data, to)
                        self.returned += 1
                except OSError:  # e.g. ICMP unreachable after the peer closed
                    continue

    def _towards_target(self, front: socket.socket, sender: tuple) -> socket.socket:
        upstream = self._upstream.get((front, sender))
        if upstream is None:
            upstream = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            upstream.bind((self.target, 0))
            upstream.connect((self.target, front.getsockname()[1]))
            upstream.setblocking(False)
            self._selector.register(upstream, selectors.EVENT_READ, (front, sender))
            self._upstream[(front, sender)] = upstream
        return upstream

    def close(self) -> None:
        self._running = False
        self._thread.join()
        for key in list(self._selector.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
        self._selector.close()


class OutsideClient(Client):
    """A browser that can reach the server only at PUBLIC: it hears nothing from any other address.

    Like a LAN browser and a container's own address: the answer's other candidates are dropped
    before it is applied, and datagrams from anywhere but PUBLIC (the server's direct checks from
    its bound address) are ignored, so ICE, DTLS, SCTP and RTP all go through the published ports.
    """

    public: str = "127.0.0.1"

    async def offer(self) -> httpx.Response:
        await self.pc.setLocalDescription(await self.pc.createOffer())
        for transport in {self.sender.transport.transport, self.pc.sctp.transport.transport}:
            for protocol in transport.iceGatherer._connection._protocols:
                heard = protocol.datagram_received
                protocol.datagram_received = lambda data, addr, heard=heard: (
                    heard(data, addr) if addr[0] == self.public else None
                )
        offer = {"sdp": self.pc.localDescription.sdp, "type": "offer"}
        async with httpx.AsyncClient(timeout=30) as http:
            response = await http.post(self.url, json=offer)
        if response.status_code == 200:
            self.answer = response.json()["sdp"]
            kept = [line for line in self.answer.split("\r\n") if not _other_candidate(line, self.public)]
            await self.pc.setRemoteDescription(RTCSessionDescription("\r\n".join(kept), "answer"))
        return response


def _other_candidate(line: str, address: str) -> bool:
    return line.startswith("a=candidate:") and line.split()[4] != address


def own_ipv4() -> str:
    """This machine's first non-loopback IPv4 address: where aioice binds a host candidate."""
    found = get_host_addresses(use_ipv4=True, use_ipv6=False)
    if not found:
        pytest.skip("no IPv4 address but loopback: aioice gathers no IPv4 host candidate")
    return found[0]


@pytest.fixture(scope="module")
def nat_ports() -> tuple[int, int]:
    return free_range(3)


@pytest.fixture(scope="module")
def nat_server(
    data_dir: Path, tmp_path_factory: pytest.TempPathFactory, nat_ports: tuple[int, int]
) -> Iterator[Server]:
    """A server in a container's place: it names 127.0.0.1 in its answers, its sockets stay on its own addresses."""
    running = start_server(
        ["--data-dir", str(data_dir), "--asr-model", "tiny.en", "--rtc-ports", f"{nat_ports[0]}-{nat_ports[1]}"],
        tmp_path_factory.mktemp("rtc-nat-server"),
        env={"WIS_RTC_PUBLIC_ADDRESS": "127.0.0.1"},
    )
    yield running
    assert_stops_cleanly(running)


async def test_the_public_address_is_named_and_reached_through_published_ports(nat_server: Server, nat_ports) -> None:
    """--rtc-public-address: the answer names it (ports kept), and a browser reaching only it gets its transcript."""
    own = own_ipv4()
    published = Published(own, *nat_ports)
    client = OutsideClient(url(nat_server))
    try:
        await client.connect()
        heard = await client.utterance(speech(str(SECOND)), trailing_silence=0.5)
        await client.close()
        await wait_sessions(nat_server, 0, 10)  # its goodbye came through the published port too
    finally:
        await client.close()
        published.close()
    assert heard.infer["type"] == "infer", heard.messages
    assert wer([reference(SECOND)], [heard.text]) < 0.15, heard.text

    low, high = nat_ports
    found = ice.candidates(client.answer)
    ipv4 = [(host, port) for host, port, kind in found if "." in host]
    assert ipv4 and all(host == "127.0.0.1" and low <= port <= high for host, port in ipv4), found
    assert own not in client.answer  # no c= line or candidate names the socket's own address
    assert all(":" in host and host in get_host_addresses(False, True) for host, _, _ in found if "." not in host)
    for section in client.answer.split("m=")[1:]:
        listed = ice.candidates(section)
        assert len(listed) == len(set(listed)), section  # each sent once per media section
    assert published.forwarded > 50 and published.returned > 10, vars(published)  # audio came this way


@pytest.mark.parametrize(
    ("address", "family"),
    [("192.0.2.7", "IP4"), ("2001:db8::7", "IP6")],
)
def test_advertise_rewrites_host_candidates_of_the_family_once_per_port(address: str, family: str) -> None:
    """aiortc's answer shape: c= names the first candidate, candidates repeat per section (two interfaces, one port)."""
    section = (
        "m=audio 40001 UDP/TLS/RTP/SAVPF 111\r\n"
        "c=IN IP4 172.18.0.2\r\n"
        "a=candidate:a1 1 udp 2130706431 172.18.0.2 40001 typ host\r\n"
        "a=candidate:b1 1 udp 2130706431 172.19.0.2 40001 typ host\r\n"
        "a=candidate:c1 1 udp 2130706431 172.19.0.2 40002 typ host\r\n"
        "a=candidate:d1 1 udp 2130706431 fd00::2 40003 typ host\r\n"
        "a=candidate:e1 1 udp 1694498815 198.51.100.9 5000 typ srflx raddr 172.18.0.2 rport 40001\r\n"
        "a=end-of-candidates\r\n"
    )
    sdp = "v=0\r\no=- 1 0 IN IP4 0.0.0.0\r\ns=-\r\n" + section + section.replace("m=audio", "m=application")
    sent = ice.advertise(sdp, address)
    assert ice.advertise(sdp, None) == sdp
    assert sent.startswith("v=0\r\no=- 1 0 IN IP4 0.0.0.0\r\n") and sent.endswith("\r\n")
    per_section = sent.split("m=")[1:]
    assert len(per_section) == 2
    for text in per_section:
        got = ice.candidates(text)
        if family == "IP4":
            assert f"c=IN IP4 {address}" in text
            assert got == [
                (address, 40001, "host"),  # two interfaces on port 40001: once
                (address, 40002, "host"),
                ("fd00::2", 40003, "host"),  # the other family keeps its own
                ("198.51.100.9", 5000, "srflx"),
            ], text
            assert "raddr 172.18.0.2" in text  # a reflexive candidate is left as it is
        else:
            assert "c=IN IP4 172.18.0.2" in text
            assert [host for host, _, _ in got] == ["172.18.0.2", "172.19.0.2", "172.19.0.2", address, "198.51.100.9"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [("192.168.1.20", "192.168.1.20"), (" 2001:DB8:0::20 ", "2001:db8::20"), ("127.0.0.1", "127.0.0.1")],
)
def test_the_public_address_setting(value: str, expected: str) -> None:
    assert Settings.from_args(["--rtc-public-address", value], environ={}).rtc.rtc_public_address == expected
    assert Settings.from_args([], environ={"WIS_RTC_PUBLIC_ADDRESS": value}).rtc.rtc_public_address == expected
    assert Settings.from_args([], environ={}).rtc.rtc_public_address is None


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("wis.example.com", "expected an IP address such as 192.168.1.20 or 2001:db8::20 (not a host name)"),
        ("192.168.1", "expected an IP address"),
        ("0.0.0.0", "give a unicast one"),
        ("::", "give a unicast one"),
        ("fe80::1%eth0", "or %zone"),
        ("224.0.0.1", "give a unicast one"),
    ],
)
def test_a_bad_public_address_is_refused(value: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        Settings.from_args(["--rtc-public-address", value], environ={})
    assert "--rtc-public-address" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        Settings.from_args([], environ={"WIS_RTC_PUBLIC_ADDRESS": value})
    err = capsys.readouterr().err
    assert "WIS_RTC_PUBLIC_ADDRESS" in err and message in err, err


def test_a_bad_public_address_stops_the_server_at_startup(tmp_path: Path) -> None:
    """The real process: an exit with the reason, before any model is loaded."""
    server = start_server(["--rtc-public-address", "my-docker-host"], tmp_path, wait=False)
    assert server.process.wait(timeout=60) == 2
    assert "--rtc-public-address: expected an IP address" in server.log, server.log


# -- wake words -------------------------------------------------------------------------


async def test_a_wake_word_is_heard_on_the_track_then_the_command_transcribed(rtc_server: Server) -> None:
    """As the console's page does it: `wake`, the microphone says "Okay Nabu", `detection` comes while it streams;
    the command after it is an utterance as usual, and `wake-stop` then has nothing more to say."""
    wake_word, command = await said(rtc_server, "Okay Nabu."), await said(rtc_server, "Turn on the kitchen light.")
    client = Client(url(rtc_server))
    await client.connect()
    try:
        client.send("wake", {"names": ["okay_nabu", "hey_jarvis"]})
        client.track.play(np.concatenate([pause(1.0), wake_word]))
        detection = (await client.until("detection", "error", timeout=30))[-1]
        assert detection["type"] == "detection" and detection["obj"]["name"] == "okay_nabu", detection
        assert 1000 < detection["obj"]["timestamp"] < 1000 + seconds(wake_word) * 1000 + 600, detection
        await client.track.played()
        heard = await client.utterance(command)
        assert wer(["Turn on the kitchen light."], [heard.text]) == 0, heard.messages
        client.send("wake-stop")
        client.send("ping")
        assert [message["type"] for message in await client.until("pong")] == ["pong"]  # no not-detected

        client.send("wake", {"names": "hey_jarvis"})
        client.track.play(wake_word)
        await client.track.played()
        client.send("wake-stop")
        assert (await client.until("not-detected", "detection", "error"))[-1]["type"] == "not-detected"
    finally:
        await client.close()


async def test_wake_messages_that_cannot_be_followed_are_errors_and_the_connection_carries_on(
    rtc_server: Server,
) -> None:
    client = Client(url(rtc_server))
    await client.connect()
    try:
        for obj, code in (({"names": ["hey_siri"]}, "unknown-wake-word"), ({"names": 7}, "bad-message")):
            client.send("wake", obj)
            error = (await client.until("error"))[-1]
            assert error["obj"]["code"] == code, error
        client.send("wake-stop")
        assert (await client.until("error"))[-1]["obj"]["code"] == "not-started"
        client.send("ping")
        assert (await client.until("pong"))[-1]["type"] == "pong"
    finally:
        await client.close()


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
