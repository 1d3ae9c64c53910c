"""One browser connection: its RTCPeerConnection, the audio track it sends, the data channel, and its end.

An utterance runs from `start` to `stop`: audio from the track goes into a
new ASR session meanwhile (between utterances it is read and dropped), the
stable text so far goes out as `partial` messages, and `stop` is answered with
`infer`. Recognition parameters come from the signalling query string, then
`start`'s obj, then `stop`'s obj, each over the one before. Willow Inference
Server's client sends them only at `stop`; since the session was made at
`start`, parameters at `stop` that decode differently (another model,
language, beam size or detection) re-decode the utterance's audio with them,
costing a full decode at the end. A model named at `stop` that is not loaded
only gets a `log` line and the running model answers: WIS's client always
names `large` there. At `start` (or in the query) an unknown model or language
is an `error`, and no utterance starts.

Hands-free (`hands_free` at `start` or in the query) needs no `stop`: the
core's turn controller (`Core.listen`, many turns) ends each turn when the
speaker is done, the turn is answered as a `stop` would be (`turn-end`, then
`infer`), and the next turn begins at once with the same parameters, the audio
said after the end included, until `stop` (which ends the turn in progress as
usual, answered after those before it), a new `start`, or the end of the
connection. A turn in which nobody spoke is not answered; the next simply
starts.

Wake words (`wake` to `wake-stop`) are heard in the same track's audio, apart
from utterances and at the same time as them: each `detection` goes out as soon
as it is heard, and `wake-stop` is answered with `not-detected` if none was.

Between utterances the browser may detach its track (`replaceTrack(null)`);
it then sends an RTCP BYE, on which aiortc would end the track for good. This
server ignores BYE on its receivers, as WIS did, so the track lives on and
audio flows again when the browser re-attaches one. A connection ends when
its state becomes failed or closed (aioice's consent checks fail a vanished
peer in about 30 s), when no RTP, RTCP or data-channel packet has come from
the peer for `--rtc-idle-timeout` seconds (an open data channel's heartbeats
count; this also ends a connection that never got going), when its data
channel would hold more than it may for the peer (rtc/sctp.py: a message that
never ends, a peer that acknowledges nothing), or when the server stops;
everything it holds is freed then. Closing never fails: each step is
guarded, and the connection's place is given back in any case.

That much is `Connection`'s, whatever the data channel speaks: `Peer` is a
connection that speaks Willow's messages, and rtc/realtime_call.py's
`RealtimeCall` one that speaks OpenAI's Realtime API. A connection's protocol
says what its data channels' messages do (`_on_message`), where the track's
frames go (`_hear`) and what it frees when it ends (`_release`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import math
import time
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import Executor
from contextlib import contextmanager
from typing import Any

import av
from aiortc import MediaStreamTrack, RTCDataChannel, RTCPeerConnection, RTCSessionDescription
from aiortc.exceptions import InvalidStateError
from aiortc.mediastreams import MediaStreamError
from aiortc.rtcrtpreceiver import RTCRtpReceiver
from aiortc.rtp import RtcpByePacket

from wyoming_wis import metrics
from wyoming_wis.config import PortRange
from wyoming_wis.core import Core, Heard, WakeStream
from wyoming_wis.errors import UnknownModel, WisError
from wyoming_wis.requests import WakeRequest
from wyoming_wis.scheduler import patience
from wyoming_wis.shares import client, owner
from wyoming_wis.turns.listening import Failed, Final, Partial, TurnEnded, TurnEvent
from wyoming_wis.values import quote

from . import ice, messages, sctp
from .messages import NOT_STARTED, BadMessage, Params
from .offers import NO_AUDIO, NO_CHANNEL, BadOffer
from .track import Listener

_LOGGER = logging.getLogger(__name__)
_IDS = itertools.count(1)
CLOSING_STATES = ("failed", "closed")
CONNECT_TIMEOUT = 30.0  # seconds from the answer for the browser to connect: an offer alone cannot hold a place
CLOSE_TIMEOUT = 5.0  # seconds for each step of closing: aiortc says goodbye (DTLS, SCTP) without waiting for replies


@dataclasses.dataclass
class Limits:
    """What every connection of the server is held to."""

    idle_timeout: float
    ports: PortRange
    public_address: str | None = None  # --rtc-public-address: named in the answer's host candidates
    max_wait: float | None = None  # --http-max-wait: how long a browser waits for its transcript to start


@dataclasses.dataclass(frozen=True)
class Setup:
    """What the signalling gives each connection, whatever it speaks."""

    pc: RTCPeerConnection
    limits: Limits
    executor: Executor | None  # the codec threads, for resampling the track's audio
    on_closed: Callable[[Connection], None]  # gives the connection's place back
    remote: str = "local"  # the browser's address


class Connection:
    """A browser's connection; `answer` its offer, and it runs until the peer goes or `close` is called. What its
    data channel speaks is a subclass's (the hooks under "protocol")."""

    def __init__(self, setup: Setup) -> None:
        self.id = next(_IDS)
        self.remote = setup.remote  # the browser's address, for the log
        self.pc = pc = setup.pc
        self.closed = False
        self._closing: asyncio.Task[None] | None = None
        self._limits = setup.limits
        self._executor = setup.executor
        self._on_closed = setup.on_closed
        self._tasks: set[asyncio.Task[Any]] = set()
        self._reading = False
        self._connected = False  # has been connected, at some point
        self._heard = time.monotonic()  # when the last packet, frame or message came
        self._began = self._heard
        self._packets = 0
        pc.on("datachannel", self._on_datachannel)
        pc.on("track", self._on_track)
        pc.on("connectionstatechange", self._on_state)
        metrics.rtc_session(opened=True)
        self._spawn(self._watch())

    async def answer(self, offer: RTCSessionDescription) -> RTCSessionDescription:
        """The answer to a browser's offer that `offers.check_offer` passed, with candidates in `--rtc-ports`
        (at `--rtc-public-address` if set).

        Raises ValueError (or aiortc's errors) for an offer that cannot be answered after all,
        and ice.PortsExhausted when the port range is full.
        """
        await self.pc.setRemoteDescription(offer)
        audio = [t for t in self.pc.getTransceivers() if t.kind == "audio" and t.receiver.track is not None]
        if not audio or self.pc.sctp is None:  # check_offer's sections, as aiortc took them
            raise BadOffer(NO_AUDIO if not audio else NO_CHANNEL)
        for transceiver in self.pc.getTransceivers():
            if transceiver is not audio[0]:
                transceiver.direction = "inactive"  # one microphone is listened to; nothing else may pile up
        _survive_bye(audio[0].receiver)
        sctp.bound(self.pc.sctp, owner(self.remote), self._overflowed)
        answer = await self.pc.createAnswer()
        with ice.bound_to(self._limits.ports):
            await self.pc.setLocalDescription(answer)
        local = self.pc.localDescription
        ice.check_candidates(local.sdp, self._limits.ports)
        _LOGGER.info("WebRTC connection %d: answered", self.id)
        return RTCSessionDescription(sdp=ice.advertise(local.sdp, self._limits.public_address), type=local.type)

    async def close(self, reason: str) -> None:
        """End the connection and free everything it holds; later calls wait for the first's end.

        The closing goes on if the caller is cancelled meanwhile (a signalling request whose client left).
        """
        if self._closing is None:
            self.closed = True
            self._closing = asyncio.create_task(self._teardown(reason))  # held here until it is done
        await asyncio.shield(self._closing)

    async def _teardown(self, reason: str) -> None:
        """Each step guarded and bounded; the connection's place given back whatever happens."""
        _LOGGER.info("WebRTC connection %d closed: %s", self.id, reason)
        try:
            with self._guarded("freeing what its protocol holds"):
                self._release()
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await self._close_pc()  # stops the receiver, which ends the track and so the reader
            if tasks:
                await asyncio.wait(tasks, timeout=CLOSE_TIMEOUT)
        finally:
            self._on_closed(self)
            metrics.rtc_session(opened=False)

    async def _close_pc(self) -> None:
        """aiortc's close; should it fail part way, each of its steps again, so that no socket stays open."""
        with self._guarded("closing the peer connection"):
            await asyncio.wait_for(self.pc.close(), CLOSE_TIMEOUT)
            return
        for part in self._parts():
            with self._guarded(f"stopping its {type(part).__name__}"):
                await asyncio.wait_for(part.stop(), CLOSE_TIMEOUT)

    def _parts(self) -> list[Any]:
        """What aiortc's close stops, in its order: transceivers and SCTP, then DTLS and ICE transports."""
        pc = self.pc
        dtls = [t.receiver.transport for t in pc.getTransceivers()] + [pc.sctp.transport if pc.sctp else None]
        ice = [transport.transport if transport else None for transport in dtls]
        parts = [*pc.getTransceivers(), pc.sctp, *dtls, *ice]
        return [part for part in dict.fromkeys(parts) if part is not None]  # bundled sections share transports

    @contextmanager
    def _guarded(self, step: str) -> Iterator[None]:
        """A step of closing that may fail: say so, and carry on with the next."""
        try:
            yield
        except Exception as err:  # closing must go on
            _LOGGER.warning("WebRTC connection %d: %s failed: %r", self.id, step, err)
            _LOGGER.debug("WebRTC connection %d: %s failed", self.id, step, exc_info=True)

    # -- events ---------------------------------------------------------------------

    def _on_state(self) -> None:
        state = self.pc.connectionState
        _LOGGER.debug("WebRTC connection %d: %s", self.id, state)
        self._connected |= state == "connected"
        if state in CLOSING_STATES:
            self.close_soon(f"connection {state}")

    def _overflowed(self, why: str) -> None:
        """The data channel holds more than it may for this peer (rtc/sctp.py): the peer goes."""
        _LOGGER.warning("WebRTC client %s (connection %d): %s", self.remote, self.id, why)
        self.close_soon("past its data channel's bounds")

    def close_soon(self, reason: str) -> None:
        """Close, from a callback that cannot wait for it."""
        if not self.closed:
            self._spawn(self.close(reason))

    def _on_track(self, track: MediaStreamTrack) -> None:
        if track.kind == "audio" and not self._reading:
            self._reading = True
            self._spawn(self._read(track))

    def _on_datachannel(self, channel: RTCDataChannel) -> None:
        channel.on("message", lambda data: self._on_data(channel, data))

    def _on_data(self, channel: RTCDataChannel, data: str | bytes) -> None:
        self._heard = time.monotonic()
        self._on_message(channel, data)

    async def _read(self, track: MediaStreamTrack) -> None:
        """Drain the track for the connection's life; each frame to `_hear`."""
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:  # the receiver stopped: the connection is closing
                return
            self._heard = time.monotonic()
            await self._hear(frame)

    @property
    def idle_for(self) -> float:
        """Seconds since the peer's last audio frame or message (or since the answer, if it never connected): a
        browser streaming its microphone is never idle (shares.Holder)."""
        return time.monotonic() - self._heard

    @property
    def busy_since(self) -> float:
        """When it connected; infinity before: an answer never connected to serves no one (shares.Holder)."""
        return self._began if self._connected else math.inf

    # -- protocol -------------------------------------------------------------------

    def _on_message(self, channel: RTCDataChannel, data: str | bytes) -> None:
        """A message on a data channel; raising here would reach aiortc's SCTP transport."""
        raise NotImplementedError

    async def _hear(self, frame: av.AudioFrame) -> None:
        """A frame of the track's audio (48 kHz Opus, decoded)."""
        raise NotImplementedError

    def _release(self) -> None:
        """Free what the protocol holds: the first step of closing, before the peer connection closes."""

    # -- upkeep ---------------------------------------------------------------------

    async def _watch(self) -> None:
        """Close the connection if it has not connected within CONNECT_TIMEOUT (or the idle timeout, if shorter),
        or once no packet has come from the peer for the idle timeout."""
        timeout = self._limits.idle_timeout
        connect = min(CONNECT_TIMEOUT, timeout)
        opened = time.monotonic()
        while True:
            await asyncio.sleep(min(timeout / 4, 10.0))
            if not self._connected and time.monotonic() - opened > connect:
                await self.close(f"not connected within {connect:g} s")
                return
            packets = await self._received()
            if packets != self._packets:
                self._packets, self._heard = packets, time.monotonic()
            if time.monotonic() - self._heard > timeout:
                await self.close(f"nothing heard for {timeout:g} s")
                return

    async def _received(self) -> int:
        """Packets (RTP, RTCP, data channel and its heartbeats) received on the connection's transports.

        Stats that cannot be had count as nothing new, so that a broken connection still times out.
        """
        try:
            report = await self.pc.getStats()
        except Exception as err:  # see the docstring
            _LOGGER.debug("WebRTC connection %d: no stats: %r", self.id, err)
            return self._packets
        return sum(getattr(stats, "packetsReceived", 0) for stats in report.values() if stats.type == "transport")

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (err := task.exception()) is not None:
            _LOGGER.error("WebRTC connection %d: unexpected error", self.id, exc_info=err)


class Peer(Connection):
    """A connection that speaks Willow's messages: utterances from `start` to `stop`, wake words (see the module)."""

    def __init__(self, core: Core, defaults: Params, setup: Setup) -> None:
        self._core = core
        self._defaults = defaults
        self._utterance: _Utterance | None = None  # from `start` to `stop`
        self._wake: _Wake | None = None  # listening for wake words, from `wake` to `wake-stop`
        super().__init__(setup)

    def _on_message(self, channel: RTCDataChannel, data: str | bytes) -> None:
        try:
            message = messages.parse(data)
            if message.type == "ping":
                _send(channel, messages.pong())
            elif message.type == "start":
                self._start(channel, Params.parse(message.obj, "start's obj"))
            elif message.type == "wake":
                self._listen_for_wake_words(channel, messages.wake_names(message.obj))
            elif message.type == "wake-stop":
                self._stop_wake_words(channel)
            else:
                self._stop(channel, Params.parse(message.obj, "stop's obj"))
        except (BadMessage, WisError) as err:
            self._refuse(channel, err)
        except Exception:  # raised here it would reach aiortc's SCTP transport: log it, answer, carry on
            self._report_bug(channel, "handling a message")

    def _release(self) -> None:
        with self._guarded("ending the utterance"):
            if self._utterance is not None:
                utterance, self._utterance = self._utterance, None
                utterance.cancel()
        with self._guarded("ending the wake word listening"):
            if self._wake is not None:
                wake, self._wake = self._wake, None
                wake.end("cancelled")

    # -- wake words -----------------------------------------------------------------

    def _listen_for_wake_words(self, channel: RTCDataChannel, names: tuple[str, ...]) -> None:
        """Hear the track for these wake words from now on; a `wake` while listening starts again with its names."""
        if self._wake is not None:
            self._wake.end("cancelled")
            self._wake = None

        async def heard(found: Heard) -> None:
            _send(channel, messages.detection(found.name, found.milliseconds, found.probability))

        with client(self.remote):
            stream = self._core.open_wake(WakeRequest(names=names), heard)
        self._wake = _Wake(channel, stream, Listener(stream, self._executor))

    def _stop_wake_words(self, channel: RTCDataChannel) -> None:
        wake, self._wake = self._wake, None
        if wake is None:
            raise BadMessage("wake-stop without wake: send wake first", NOT_STARTED)
        self._spawn(self._end_wake_words(channel, wake))

    async def _end_wake_words(self, channel: RTCDataChannel, wake: _Wake) -> None:
        """Hear what is left of the audio; `not-detected` if no wake word was heard."""
        try:
            await wake.listener.drain()
            heard = await wake.stream.drain()
        except WisError as err:
            wake.end(err)
            self._refuse(channel, err)
            return
        except BaseException:
            wake.end("cancelled")
            raise
        wake.end(None)
        if not heard:
            _send(channel, messages.not_detected())

    async def _hear_wake_words(self, frame: av.AudioFrame) -> None:
        wake = self._wake
        if wake is None or not wake.listener.add(frame):
            return
        try:
            await wake.listener.feed()
        except WisError as err:  # e.g. the CPU fell behind: listening ends, the connection stays
            if self._wake is wake:
                self._wake = None
            wake.end(err)
            self._refuse(wake.channel, err)

    # -- utterances -----------------------------------------------------------------

    def _start(self, channel: RTCDataChannel, params: Params) -> None:
        if self._utterance is not None:  # a second start begins again, as WIS's recorder did
            self._utterance.cancel()
            self._utterance = None
            _send(channel, messages.log("Started again; the audio before is dropped"))
        with client(self.remote):
            self._utterance = _Utterance(self._core, channel, params.over(self._defaults), self._executor)

    def _stop(self, channel: RTCDataChannel, params: Params) -> None:
        utterance, self._utterance = self._utterance, None
        if utterance is None:
            raise BadMessage("stop without start: send start first", NOT_STARTED)
        _send(channel, messages.log("Doing ASR..."))
        self._spawn(self._finish(utterance, params, time.perf_counter()))

    async def _finish(self, utterance: _Utterance, params: Params, stopped: float) -> None:
        """Answer the turn in progress (after any before it), decoded with stop's parameters over start's."""
        try:
            final = params.over(utterance.params)
            try:
                decoding = self._core.resolve(final.request())
            except UnknownModel:
                running = utterance.listening.decoding.model
                note = f"Model {quote(final.model)} is not loaded; transcribing with {running}"
                _send(utterance.channel, messages.log(note))
                final = dataclasses.replace(final, model=utterance.params.model)
                decoding = self._core.resolve(final.request())
            with patience(self._limits.max_wait):
                await utterance.stop(final, decoding.model, stopped)
        except WisError as err:
            self._refuse(utterance.channel, err)
        finally:
            utterance.cancel()  # a turn still open (none, but for a failure) is dropped

    async def _hear(self, frame: av.AudioFrame) -> None:
        """A frame to the wake word listening and the running utterance, if any."""
        await self._hear_wake_words(frame)
        utterance = self._utterance
        if utterance is None or not utterance.listener.add(frame):
            return
        try:
            await utterance.listener.feed()
        except WisError as err:  # e.g. past --max-audio-seconds: this utterance ends, the connection stays
            if self._utterance is utterance:
                self._utterance = None
            utterance.failed(err)
            utterance.cancel()
            self._refuse(utterance.channel, err)

    def _report_bug(self, channel: RTCDataChannel, doing: str) -> None:
        """Log the exception being handled, and tell the browser something went wrong."""
        _LOGGER.exception("WebRTC connection %d: unexpected error %s", self.id, doing)
        _send(channel, messages.error("Internal error; see the server log", "internal-error"))

    def _refuse(self, channel: RTCDataChannel, err: BadMessage | WisError) -> None:
        """Tell the browser what went wrong, and the log whose mistake it was."""
        _LOGGER.warning("WebRTC client %s (connection %d): %s (%s)", self.remote, self.id, err.message, err.code)
        _send(channel, messages.error(err.message, err.code))


class _Wake:
    """From `wake` to `wake-stop`: the stream heard for wake words, the track's audio into it, and its count."""

    def __init__(self, channel: RTCDataChannel, stream: WakeStream, listener: Listener) -> None:
        self.channel = channel
        self.stream = stream
        self.listener = listener
        self._request = metrics.Request("webrtc", "wake")

    def end(self, outcome: WisError | str | None) -> None:
        """Free the stream; `outcome`: None when answered, the error, or why it was dropped ("cancelled")."""
        self.listener.close()
        self.stream.close()
        if outcome is None:
            self._request.done()
        elif isinstance(outcome, str):
            self._request.done(outcome)
        else:
            self._request.failed(outcome)


class _Utterance:
    """From `start` to `stop`: the listening (one turn, or hands-free many), the track's audio into it, and each
    turn's text so far and count in the metrics."""

    def __init__(self, core: Core, channel: RTCDataChannel, params: Params, executor: Executor | None) -> None:
        self.channel = channel
        self.params = params
        many = params.hands_free
        self.listening = core.listen(params.request(), frontend="webrtc", on_event=self._on_turn, many=many)
        self.model = self.listening.decoding.model  # the model that answers, as `infer` says
        self.listener = Listener(self.listening, executor)
        self._hearing: metrics.Request | None = metrics.Request("webrtc", "utterance")  # the turn being heard
        self._answering: dict[int, metrics.Request] = {}  # turns ended, until answered
        self._stopped = False

    async def stop(self, final: Params, model: str, stopped: float) -> None:
        """Answer the turn in progress as `final` asks (with `model`), after those ended before it."""
        await self.listener.drain()
        self._stopped = True
        self.model = model
        await self.listening.finish(stopped, final.request())  # a failure is sent by `_on_turn`

    async def _on_turn(self, event: TurnEvent) -> None:
        """The core's turn events, as WIS's messages: `partial` (all the text so far), `turn-end`, `infer`."""
        if isinstance(event, Partial):
            ended = self._stopped or self.listening.turn != event.turn  # then `infer` has it all
            if not ended and self.params.partials is not False:
                language = self.listening.decoding.options.language
                try:
                    _send(self.channel, messages.partial(event.so_far, language), strict=True)
                except InvalidStateError as err:
                    raise ConnectionError("the data channel is closed") from err
        elif isinstance(event, TurnEnded):
            self._answering[event.turn] = self._next_turn()
            if event.by == "server":
                _send(self.channel, messages.turn_end(event.reason))
        elif isinstance(event, Final):
            self._answering.pop(event.turn).done()
            transcript, took = event.transcript, time.perf_counter() - event.ended_at
            infer = messages.infer(transcript.text, transcript.language, transcript.duration, took, self.model)
            _send(self.channel, infer)
        elif isinstance(event, Failed):  # a turn ended, or the one being heard (its end could not be judged)
            request = self._answering.pop(event.turn, None) or self._next_turn()
            if request is not None:
                request.failed(event.error)
            _LOGGER.warning("WebRTC turn failed: %s (%s)", event.error.message, event.error.code)
            _send(self.channel, messages.error(event.error.message, event.error.code))

    def _next_turn(self) -> metrics.Request | None:
        """The turn being heard is over: its count, and (hands-free, not stopped) the next turn's."""
        request = self._hearing
        self._hearing = metrics.Request("webrtc", "utterance") if self.params.hands_free and not self._stopped else None
        return request

    def failed(self, err: WisError) -> None:
        """The turn being heard failed (its audio, e.g. past --max-audio-seconds)."""
        if self._hearing is not None:
            self._hearing.failed(err)

    def cancel(self) -> None:
        """Drop what is still open, counted as cancelled: the turn being heard, and those not answered yet."""
        self.listener.close()
        self.listening.close()
        for request in [self._hearing, *self._answering.values()]:
            if request is not None:
                request.done("cancelled")


def _send(channel: RTCDataChannel, text: str, strict: bool = False) -> None:
    """Send a message; one to a channel that closed meanwhile is dropped, unless `strict`."""
    try:
        channel.send(text)
    except InvalidStateError:
        if strict:
            raise
        _LOGGER.debug("Data channel closed; dropped %s", text[:80])


def _survive_bye(receiver: RTCRtpReceiver) -> None:
    """Ignore RTCP BYE on this receiver, so a browser's replaceTrack(null) does not end the track for good.

    aiortc stops the receiver's decoder on BYE, which ends the track; a browser sends BYE when
    it detaches its track between utterances and carries on with the same transceiver when it
    re-attaches one. Only this server's own receivers get this (an instance attribute; aiortc's
    transport calls `receiver._handle_rtcp_packet`), nothing else in the process; the
    connection still ends by its state, the idle timeout, or `close`.
    """
    handle = receiver._handle_rtcp_packet

    async def handle_rtcp(packet: Any) -> None:
        if isinstance(packet, RtcpByePacket):
            _LOGGER.debug("RTCP BYE ignored: the browser detached its track")
            return
        await handle(packet)

    receiver._handle_rtcp_packet = handle_rtcp  # type: ignore[method-assign]


if not hasattr(RTCRtpReceiver, "_handle_rtcp_packet"):  # what _survive_bye relies on: fail at import, not later
    raise ImportError("aiortc changed: RTCRtpReceiver._handle_rtcp_packet is gone; see rtc/peer.py _survive_bye")
