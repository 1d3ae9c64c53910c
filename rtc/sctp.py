"""What a connection's SCTP association (its data channel) may hold for the peer, each way; past it, the peer goes.

aiortc's RTCSctpTransport keeps every DATA chunk a peer sends until its message is whole and in order: a
message whose last fragment never comes, or chunks after a TSN that never comes, are held however many they
are (an audit's 11.4 MiB message held 29 MiB), and aiortc's work per chunk grows with them. Our own messages wait in
its queues until the peer acknowledges them: a peer that never sends a SACK has each reply it provokes kept.

While Home Assistant has a call waiting or running, a stranger's next DATA chunk waits
(`scheduler.household_first`), as its Wyoming or WebSocket events do: eight browsers' pings took a core of event
loop from its transcription. That holds the peer's whole DTLS receive loop, so its datagrams wait in aioice's
queue meanwhile, which is unbounded: past MAX_QUEUED the newest are dropped, as a full socket buffer drops them
(SCTP sends again what was lost).

`bound` holds one association to MAX_HELD each way, as `_survive_bye` (peer.py) handles a receiver: the
instance's own methods are wrapped, nothing else in the process changes. Its answer names MAX_MESSAGE as the
most a message may be (aiortc's own is 256 KiB), and a browser sends none larger, so MAX_HELD is room for a
few of a browser's largest messages at once, where a browser's page sends a few dozen bytes at a time. Past
it, or past MAX_STREAMS streams, `close` is called once with why (figures only, nothing the peer sent), and
the association takes in and queues nothing more meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable

from aioice import Connection
from aiortc import RTCDataChannel
from aiortc.exceptions import InvalidStateError
from aiortc.rtcsctptransport import DataChunk, InboundStream, RTCSctpCapabilities, RTCSctpTransport

from wyoming_wis.scheduler import household_first

from .messages import MAX_MESSAGE

MAX_HELD = 4 * MAX_MESSAGE  # bytes held for one peer each way: its messages not yet whole, ours it has not acked
ITEM_BYTES = 256  # bytes of Python objects a held chunk or message costs besides its data (a DataChunk: 137)
MAX_STREAMS = 16  # SCTP streams a peer may send on: one per data channel, and a browser's page opens one
MAX_QUEUED = 64  # a held peer's datagrams waiting in aioice's queue: more than a sender's window and a second of audio


def bound(association: RTCSctpTransport, owner: str, close: Callable[[str], None]) -> None:
    """Hold `association` (before its answer is made) to MAX_HELD each way and MAX_STREAMS, and its DATA chunks
    from `owner` (shares.owner) while Home Assistant has a call; past the bounds, `close(why)` once."""
    _Bound(association, owner, close)


class _Bound:
    """The wrapped methods of one association, and whether it has passed its bounds."""

    def __init__(self, association: RTCSctpTransport, owner: str, close: Callable[[str], None]) -> None:
        self._association = association
        self._owner = owner
        self._close = close
        self._window = association._advertised_rwnd  # its receive window before any data: less is held data
        self._over = False
        self._receive_data_chunk = association._receive_data_chunk
        self._data_channel_send = association._data_channel_send
        association._receive_data_chunk = self._receive  # type: ignore[method-assign]
        association._data_channel_send = self._send  # type: ignore[method-assign]
        association.getCapabilities = self._capabilities  # type: ignore[method-assign]
        _drop_past(association.transport.transport._connection, MAX_QUEUED)  # its ICE connection's datagrams

    def unread(self) -> int:
        """Bytes held for messages the peer has not finished or that came out of order."""
        association = self._association
        chunks = sum(len(stream.reassembly) for stream in association._inbound_streams.values())
        tsns = len(association._sack_misordered)  # kept even once an unordered message is read
        return self._window - association._advertised_rwnd + ITEM_BYTES * (chunks + tsns)

    def unsent(self) -> int:
        """Bytes of our messages the peer has not acknowledged: queued, or sent and awaiting its SACK."""
        association = self._association
        buffered = sum(channel.bufferedAmount for channel in association._data_channels.values())
        queued = len(association._data_channel_queue) + len(association._outbound_queue) + len(association._sent_queue)
        return buffered + association._flight_size + ITEM_BYTES * queued

    @staticmethod
    def _capabilities() -> RTCSctpCapabilities:
        return RTCSctpCapabilities(maxMessageSize=MAX_MESSAGE)  # the answer's a=max-message-size

    async def _receive(self, chunk: DataChunk) -> None:
        if self._over:
            return  # closing: nothing more is taken in
        await household_first(self._owner)
        if self._over:
            return
        streams = self._association._inbound_streams
        if chunk.stream_id not in streams and len(streams) >= MAX_STREAMS:
            self._exceeded(f"it sent on more than {MAX_STREAMS} SCTP streams (a data channel uses one)")
            return
        await self._receive_data_chunk(chunk)
        if (held := self.unread()) > MAX_HELD:
            self._exceeded(
                f"its messages not yet whole or out of order hold {held} bytes; at most {MAX_HELD} are held "
                f"(its largest message may be {MAX_MESSAGE})"
            )

    def _send(self, channel: RTCDataChannel, data: str | bytes) -> None:
        if self._over:
            raise InvalidStateError("The connection is closing")
        try:
            self._data_channel_send(channel, data)
        except ValueError as err:  # larger than the peer's a=max-message-size: it takes none of our answers
            self._exceeded(f"it takes no message as large as ours ({err})")
            raise InvalidStateError("The connection is closing") from err
        if (held := self.unsent()) > MAX_HELD:
            self._exceeded(f"it has not acknowledged {held} bytes of our messages; at most {MAX_HELD} are held")

    def _exceeded(self, why: str) -> None:
        if not self._over:
            self._over = True
            self._close(why)


def _drop_past(connection: Connection, most: int) -> None:
    """Past `most` datagrams waiting in `connection`'s queue, drop the newest (the instance's method wrapped)."""
    take = connection.data_received

    def data_received(data: bytes, component: int) -> None:
        if connection._queue.qsize() < most:
            take(data, component)

    connection.data_received = data_received  # type: ignore[method-assign]


# What `bound` relies on in aiortc: fail at import, not at the first connection.
_METHODS = ("_receive_data_chunk", "_data_channel_send")
_STATE = ("_advertised_rwnd", "_inbound_streams", "_sack_misordered", "_data_channels", "_data_channel_queue")
_STATE += ("_outbound_queue", "_sent_queue", "_flight_size")
if (
    not all(hasattr(RTCSctpTransport, name) for name in _METHODS)
    or not set(_STATE) <= set(RTCSctpTransport.__init__.__code__.co_names)
    or "reassembly" not in InboundStream.__init__.__code__.co_names
):
    raise ImportError("aiortc changed: RTCSctpTransport's queues or methods are not as rtc/sctp.py expects")
if not hasattr(Connection, "data_received") or "_queue" not in Connection.__init__.__code__.co_names:
    raise ImportError("aioice changed: Connection's queue is not as rtc/sctp.py expects")
