"""A browser stand-in for the WebRTC frontend: aiortc, an audio track played at real-time pace, a data channel.

It connects as Willow Inference Server's browser client does (a data channel
"chat", the microphone's track, every candidate in the offer, POST to
/api/rtc/asr) and detaches its track between utterances as a browser's
`replaceTrack(null)` does, RTCP BYE included. Used by tests/test_rtc.py and
bench/rtc.py; run as a script it connects, starts an utterance and waits to be
killed (a client that vanishes). A hostile peer reaches into its aiortc SCTP
association: `send_unended` sends fragments of a message that never ends, and
`stop_acknowledging` sends no more SCTP acknowledgements (SACK).
"""

from __future__ import annotations

import asyncio
import contextlib
import fractions
import io
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import av
import httpx
import numpy as np
from aiortc import MediaStreamTrack, RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.rtcsctptransport import SCTP_DATA_FIRST_FRAG, USERDATA_MAX_LENGTH, DataChunk, SackChunk, tsn_plus_one
from aiortc.rtp import RtcpByePacket

RATE = 48000
FRAME = 960  # 20 ms, as browsers send Opus
WEBRTC_STRING = 51  # the SCTP payload protocol of a data channel's text message (RFC 8831)
IN_FLIGHT = 64  # DATA chunks sent ahead of the peer's acknowledgements, as SCTP's congestion window would allow
ACK_WAIT = 5.0  # seconds without an acknowledgement after which the peer is taken to have gone
FLOOD_QUEUE = 1000  # bytes `flood` lets wait in this side's queue: enough to keep the server busy, none lost
CLOSED_POLL = 0.1  # seconds between `flood`'s looks at whether the channel closed while it waits to send


class PlayedTrack(MediaStreamTrack):
    """A microphone that says what it is given (48 kHz mono int16), at the pace it was spoken, then silence."""

    kind = "audio"

    def __init__(self) -> None:
        super().__init__()
        self._queue = np.zeros(0, dtype=np.int16)
        self._sent = 0  # samples
        self._started: float | None = None
        self._empty = asyncio.Event()
        self._empty.set()

    def play(self, samples: np.ndarray) -> None:
        self._queue = np.concatenate([self._queue, samples.astype(np.int16)])
        self._empty.clear()

    async def played(self) -> None:
        """Until everything given to `play` has been sent."""
        await self._empty.wait()

    async def recv(self) -> av.AudioFrame:
        if self._started is None:
            self._started = time.monotonic()
        await asyncio.sleep(max(0.0, self._started + self._sent / RATE - time.monotonic()))
        chunk = np.zeros(FRAME, dtype=np.int16)
        taken = self._queue[:FRAME]
        chunk[: len(taken)] = taken
        self._queue = self._queue[FRAME:]
        if not len(self._queue):
            self._empty.set()
        frame = av.AudioFrame.from_ndarray(chunk.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = RATE
        frame.pts = self._sent
        frame.time_base = fractions.Fraction(1, RATE)
        self._sent += FRAME
        return frame


@dataclass
class Heard:
    """What came back for one utterance."""

    infer: dict[str, Any]  # the infer (or error) message
    partials: list[dict[str, Any]]  # partial messages that came before stop was sent
    messages: list[dict[str, Any]]  # everything, in order
    stop_to_infer: float  # seconds

    @property
    def text(self) -> str:
        return self.infer.get("obj", {}).get("text", "")


@dataclass
class Client:
    """One connection to the server's /api/rtc/asr."""

    url: str
    pc: RTCPeerConnection = field(default_factory=lambda: RTCPeerConnection(RTCConfiguration(iceServers=[])))
    track: PlayedTrack = field(default_factory=PlayedTrack)
    answer: str = ""
    edit: Callable[[str], str] | None = None  # changes the offer's SDP before it is sent (a hostile client)
    source: str | None = None  # the address the offer is sent from (the server shares its places by address)
    label: str = "chat"  # the data channel's (OpenAI's Realtime API: "oai-events")

    def __post_init__(self) -> None:
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.channel = self.pc.createDataChannel(self.label, ordered=True)
        self.channel.on("message", lambda text: self.inbox.put_nowait(json.loads(text)))
        self.sender = self.pc.addTrack(self.track)

    async def offer(self) -> httpx.Response:
        """Send the offer; the server's answer (or error), applied if it is an answer."""
        await self.pc.setLocalDescription(await self.pc.createOffer())  # gathers every candidate
        sdp = self.pc.localDescription.sdp
        offer = {"sdp": self.edit(sdp) if self.edit else sdp, "type": "offer"}
        transport = httpx.AsyncHTTPTransport(local_address=self.source)
        async with httpx.AsyncClient(timeout=30, transport=transport) as http:
            response = await http.post(self.url, json=offer)
        if response.status_code == 200:
            self.answer = response.json()["sdp"]
            await self.pc.setRemoteDescription(RTCSessionDescription(**response.json()))
        return response

    async def connect(self, timeout: float = 20) -> None:
        response = await self.offer()
        assert response.status_code == 200, response.text
        await self.opened(timeout)

    async def opened(self, timeout: float = 20) -> None:
        """Until the data channel is open."""
        opened = asyncio.Event()
        if self.channel.readyState == "open":
            opened.set()
        self.channel.on("open", opened.set)
        await asyncio.wait_for(opened.wait(), timeout)

    def send(self, kind: str, obj: dict[str, Any] | None = None, raw: str | bytes | None = None) -> float:
        """Send a message (or `raw` data); returns when (time.perf_counter())."""
        message: dict[str, Any] = {"type": kind}
        if obj is not None:
            message["obj"] = obj
        self.channel.send(raw if raw is not None else json.dumps(message))
        return time.perf_counter()

    async def receive(self, timeout: float = 60) -> dict[str, Any]:
        return await asyncio.wait_for(self.inbox.get(), timeout)

    async def until(self, *types: str, timeout: float = 60) -> list[dict[str, Any]]:
        """Messages up to and including the first of `types`."""
        seen = []
        while not seen or seen[-1]["type"] not in types:
            seen.append(await self.receive(timeout))
        return seen

    async def utterance(
        self,
        samples: np.ndarray,
        trailing_silence: float = 0.7,
        start: dict[str, Any] | None = None,
        stop: dict[str, Any] | None = None,
    ) -> Heard:
        """start, the samples at real-time pace and some silence, stop; then everything up to infer or error."""
        self.send("start", start)
        self.track.play(np.concatenate([samples, pause(trailing_silence)]))
        await self.track.played()
        early = []
        while not self.inbox.empty():
            early.append(self.inbox.get_nowait())
        stopped = self.send("stop", stop)
        later = await self.until("infer", "error", timeout=120)
        took = time.perf_counter() - stopped
        partials = [message for message in early if message["type"] == "partial"]
        return Heard(later[-1], partials, early + later, took)

    async def turn(self, timeout: float = 60) -> list[dict[str, Any]]:
        """Hands-free: the messages of the next turn the server ends, up to its infer (or error)."""
        return await self.until("infer", "error", timeout=timeout)

    async def quiet(self, seconds: float) -> list[dict[str, Any]]:
        """Everything that comes within `seconds`."""
        heard = []
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                heard.append(await self.receive(left))
            except TimeoutError:
                break
        return heard

    async def detach(self) -> None:
        """As a browser's replaceTrack(null): no more audio, and an RTCP BYE for the stream."""
        self.sender.replaceTrack(None)
        await self.sender.transport._send_rtp(bytes(RtcpByePacket(sources=[self.sender._ssrc])))

    async def send_unended(self, size: int, in_order: bool = True) -> int:
        """Send `size` bytes on the data channel as fragments of one text message that never ends (no fragment
        has the end flag); with `in_order` False the first TSN is skipped, so every fragment arrives out of order.

        Paced by the server's acknowledgements (at most IN_FLIGHT chunks ahead), so none is lost on the way;
        stops when the connection closes or the server stops acknowledging. Returns the bytes sent.
        """
        sctp = self.pc.sctp
        acknowledged = 0
        receive_sack = sctp._receive_sack_chunk

        async def counted(chunk: SackChunk) -> None:
            nonlocal acknowledged
            acknowledged += 1  # a SACK for each packet of DATA
            await receive_sack(chunk)

        sctp._receive_sack_chunk = counted
        tsn = sctp._local_tsn if in_order else tsn_plus_one(sctp._local_tsn)
        sequence = sctp._outbound_stream_seq.get(self.channel.id, 0)
        sent = 0
        while sent < size and self.channel.readyState == "open":
            chunk = DataChunk(flags=SCTP_DATA_FIRST_FRAG if sent == 0 and in_order else 0)
            chunk.tsn, chunk.stream_id, chunk.stream_seq, chunk.protocol = tsn, self.channel.id, sequence, WEBRTC_STRING
            chunk.user_data = b"x" * min(USERDATA_MAX_LENGTH, size - sent)
            await sctp._send_chunk(chunk)
            sent += len(chunk.user_data)
            tsn = sctp._local_tsn = tsn_plus_one(tsn)
            chunks = -(-sent // USERDATA_MAX_LENGTH)
            deadline = time.monotonic() + ACK_WAIT
            while chunks - acknowledged > IN_FLIGHT and self.channel.readyState == "open":
                if time.monotonic() > deadline:
                    return sent
                await asyncio.sleep(0.005)
        return sent

    async def flood(self, kind: str, count: int) -> int:
        """Send `count` messages of `kind` as fast as the server takes them in (this side's queue kept short, as a
        page that waits for `bufferedamountlow`); returns how many were sent before the data channel closed."""
        low = asyncio.Event()
        self.channel.bufferedAmountLowThreshold = FLOOD_QUEUE
        self.channel.on("bufferedamountlow", low.set)
        for sent in range(count):
            if self.channel.readyState != "open":
                return sent
            self.send(kind)
            if self.channel.bufferedAmount > FLOOD_QUEUE:
                low.clear()
                while not low.is_set() and self.channel.readyState == "open":
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(low.wait(), CLOSED_POLL)
        return count

    def stop_acknowledging(self) -> None:
        """Send no SCTP acknowledgement (SACK) from now on: the server's messages stay unacknowledged, as from a
        peer that does not read."""
        sctp = self.pc.sctp

        async def no_sack() -> None:
            sctp._sack_needed = False

        sctp._send_sack = no_sack

    def attach(self, track: PlayedTrack) -> None:
        self.track = track
        self.sender.replaceTrack(track)

    async def close(self) -> None:
        await self.pc.close()


def speech(source: str | bytes) -> np.ndarray:
    """A recording (a path, or a file's bytes) as 48 kHz mono int16, what a browser's microphone track carries."""
    resampler = av.AudioResampler(format="s16", layout="mono", rate=RATE)
    pieces = []
    with av.open(io.BytesIO(source) if isinstance(source, bytes) else source) as container:
        for frame in container.decode(audio=0):
            pieces += [piece.to_ndarray()[0] for piece in resampler.resample(frame)]
    pieces += [piece.to_ndarray()[0] for piece in resampler.resample(None)]
    return np.concatenate(pieces)


def pause(seconds: float) -> np.ndarray:
    """Silence, as the microphone track carries it."""
    return np.zeros(int(seconds * RATE), dtype=np.int16)


async def _vanish(url: str) -> None:
    """Connect, start an utterance, say so, and stay until killed."""
    client = Client(url)
    await client.connect()
    client.send("start")
    print("connected", flush=True)
    await asyncio.sleep(3600)


if __name__ == "__main__":
    asyncio.run(_vanish(sys.argv[1]))
