"""Fuzzing the Wyoming side: the event reader under random and mutated byte streams, the handler on the live server.

CI runs a fixed, derandomized number of examples (READER_EXAMPLES, HANDLER_EXAMPLES); `bench/fuzz.py` runs
many more and BENCHMARKS.md records how many and what they found. Every crash found is a regression test below.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from fuzz_strategies import byte_streams, event_sequences, frame
from helpers import Server, read_until
from hypothesis import HealthCheck, given, settings
from wyoming.event import Event, async_read_event
from wyoming.info import Describe

from wyoming_wis.errors import BadRequest
from wyoming_wis.wyoming.reader import EventLimits, read_event

READER_EXAMPLES = 400
HANDLER_EXAMPLES = 30
LIMITS = EventLimits()  # the server's defaults
CI = settings(derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))


async def read_all(stream: bytes) -> list[Event | BadRequest]:
    """What read_event makes of a whole stream: events until it ends (None) or a BadRequest, nothing else."""
    reader = asyncio.StreamReader()  # the default 64 KiB line limit, as the server's
    reader.feed_data(stream)
    reader.feed_eof()
    seen: list[Event | BadRequest] = []
    while True:
        try:
            event = await asyncio.wait_for(read_event(reader, LIMITS), 5)
        except BadRequest as err:
            assert err.code == "bad-request" and err.message.startswith("Malformed"), err
            return [*seen, err]
        if event is None:
            return seen
        assert isinstance(event, Event) and isinstance(event.type, str) and isinstance(event.data, dict)
        assert len(event.payload or b"") <= LIMITS.payload_bytes
        assert len(json.dumps(event.data)) <= 2 * LIMITS.data_bytes
        seen.append(event)


def check_reader(stream: bytes) -> None:
    asyncio.run(read_all(stream))  # any other exception, or a hang past 5 s, fails


@settings(CI, max_examples=READER_EXAMPLES)
@given(byte_streams)
def test_the_reader_returns_an_event_none_or_bad_request_for_any_bytes(stream: bytes) -> None:
    check_reader(stream)


# -- regressions: what fuzzing found ----------------------------------------------------


@pytest.mark.parametrize("where", ["header", "data"])
def test_deeply_nested_json_is_a_bad_request_not_a_recursion_error(where: str) -> None:
    nested = b"[" * 20_000 + b"]" * 20_000  # within the 64 KiB header line
    if where == "header":
        stream = nested + b"\n"
    else:
        body = b'{"a": ' + nested + b"}"
        stream = frame({"type": "ping", "data_length": len(body)}, body)
    (outcome,) = asyncio.run(read_all(stream))
    assert isinstance(outcome, BadRequest), outcome


# -- the handler, on the live server -------------------------------------------------------


async def exchange(server: Server, events: list[bytes]) -> list[Event]:
    """Send raw events, then a ping; read every answer until the pong (or the server closes after a bad event)."""
    reader, writer = await asyncio.open_connection(server.host, server.port)
    try:
        writer.write(b"".join(events) + frame({"type": "ping", "data": {"text": "fuzz-end"}}))
        await writer.drain()
        answers: list[Event] = []
        while True:
            event = await asyncio.wait_for(async_read_event(reader), 60)  # the wyoming library's strict reader
            if event is None:
                break  # closed: only after a malformed event, answered with an error
            answers.append(event)
            if event.type == "pong" and event.data.get("text") == "fuzz-end":
                break
        return answers
    finally:
        writer.close()


async def describe_on_a_new_connection(server: Server) -> None:
    async with server.client() as client:
        await client.write_event(Describe().event())
        assert (await read_until(client, "info", timeout=30))[-1].type == "info"


def check_handler(server: Server, events: list[bytes]) -> None:
    async def run() -> None:
        answers = await exchange(server, events)
        for event in answers:
            if event.type == "error":
                assert isinstance(event.data.get("code"), str) and event.data["code"], event.data
                assert event.data["code"] != "internal-error", event.data
        if not answers or answers[-1].type != "pong":
            assert answers and answers[-1].type == "error", [e.type for e in answers]
        await describe_on_a_new_connection(server)

    asyncio.run(run())


@pytest.fixture(scope="module")
def log_before(server: Server) -> int:
    return len(server.log)


@settings(CI, max_examples=HANDLER_EXAMPLES)
@given(events=event_sequences)
def test_the_server_survives_any_event_sequence(server: Server, log_before: int, events: list[bytes]) -> None:
    check_handler(server, events)


def test_no_traceback_in_the_servers_log_after_fuzzing(server: Server, log_before: int) -> None:
    time.sleep(0.5)  # streamed synthesis of the last sequence may still be ending
    new = server.log[log_before:]
    assert "Traceback" not in new and "ERROR" not in new, new
