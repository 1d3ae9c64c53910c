"""Hypothesis strategies for Wyoming byte streams and event sequences (tests/test_fuzz.py, bench/fuzz.py)."""

from __future__ import annotations

import json

from hypothesis import strategies as st

EVENT_TYPES = [
    "describe",
    "ping",
    "select-program",
    "transcribe",
    "detect",
    "audio-start",
    "audio-chunk",
    "audio-stop",
    "synthesize",
    "synthesize-start",
    "synthesize-chunk",
    "synthesize-stop",
]
json_scalars = (
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=False) | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
# A length field: mostly the truth (None), sometimes a lie of any JSON type.
length_lie = st.none() | st.integers(-5, 2**31) | st.sampled_from([True, "10", 1.5, [], {}, 2**64])
RATES, WIDTHS, CHANNELS = [16000, 22050, 8000, 48000, 1, 0, -1], [1, 2, 3, 4, 0], [1, 2, 0, 64]


def frame(header: dict, data: bytes = b"", payload: bytes = b"") -> bytes:
    """One event on the wire: a JSON header line, then its data and payload (lengths as the header says)."""
    return json.dumps(header).encode() + b"\n" + data + payload


@st.composite
def wire_event(draw: st.DrawFn) -> bytes:
    """A framed event whose header fields, lengths and extra data may all be wrong."""
    header: dict = {"type": draw(st.sampled_from(EVENT_TYPES) | st.text(max_size=12) | json_scalars)}
    if draw(st.booleans()):
        header["data"] = draw(st.dictionaries(st.text(max_size=10), json_values, max_size=4) | json_values)
    dicts = st.dictionaries(st.text(max_size=8), json_values, max_size=3).map(lambda d: json.dumps(d).encode())
    extra = draw(st.none() | dicts | st.binary(max_size=40))
    payload = draw(st.binary(max_size=200))
    data_lie, payload_lie = draw(length_lie), draw(length_lie)
    if extra is not None:
        header["data_length"] = len(extra) if data_lie is None else data_lie
    if payload:
        header["payload_length"] = len(payload) if payload_lie is None else payload_lie
    fields = st.sampled_from(["version", "x", "data_length", "payload_length"])
    header.update(draw(st.dictionaries(fields, json_values, max_size=1)))
    return frame(header, extra or b"", payload)


@st.composite
def mutated_stream(draw: st.DrawFn) -> bytes:
    """A few events, then byte-level mutations: truncation, flipped bytes, inserted newlines or brackets."""
    stream = bytearray(b"".join(draw(st.lists(wire_event(), min_size=1, max_size=4))))
    for _ in range(draw(st.integers(0, 3))):
        if not stream:
            break
        at = draw(st.integers(0, len(stream) - 1))
        action = draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        if action == "flip":
            stream[at] ^= draw(st.integers(1, 255))
        elif action == "insert":
            stream[at:at] = draw(st.sampled_from([b"\n", b"{", b"[", b"\x00", b'"', b"\xff", b"9" * 20]))
        elif action == "delete":
            del stream[at]
        else:
            del stream[at:]
    return bytes(stream)


# Deeply nested JSON, in the header line or in the extra data.
nested = st.integers(1, 60_000).map(lambda depth: b"[" * depth + b"]" * depth)
in_data = nested.map(lambda body: b'{"a": ' + body + b"}").map(
    lambda data: frame({"type": "ping", "data_length": len(data)}, data)
)
byte_streams = st.binary(max_size=600) | mutated_stream() | nested.map(lambda body: body + b"\n") | in_data


@st.composite
def handler_event(draw: st.DrawFn) -> bytes:
    """A well-framed event with plausible or odd fields, as a confused client sends it."""
    kind = draw(st.sampled_from([*EVENT_TYPES, "unknown-thing", "error", "transcript"]))
    odd = draw(st.booleans())
    text = st.text(max_size=40)
    names = st.none() | st.sampled_from(["base", "tiny.en", "en_US-joe-medium", "../../etc/passwd", "/tmp/x", ""])
    if kind in ("audio-start", "audio-chunk"):
        data = {
            "rate": draw(st.sampled_from(RATES)),
            "width": draw(st.sampled_from(WIDTHS)),
            "channels": draw(st.sampled_from(CHANNELS)),
        }
    elif kind == "transcribe":
        data = {"name": draw(names), "language": draw(st.none() | st.sampled_from(["en", "xx", "de"]))}
    elif kind == "detect":
        wake_words = st.sampled_from(["okay_nabu", "hey_rhasspy", "ok_nabu_v0.1", "nope", "", "../x"])
        data = {"names": draw(st.none() | st.lists(wake_words, max_size=3))}
    elif kind in ("synthesize", "synthesize-chunk"):
        data = {"text": draw(text)}
        if kind == "synthesize" and draw(st.booleans()):
            data["voice"] = {"name": draw(names), "speaker": draw(st.none() | text)}
    elif kind == "synthesize-start":
        data = {"voice": {"name": draw(names)}} if draw(st.booleans()) else {}
    elif kind == "select-program":
        data = {"name": draw(names | text)}
    else:
        data = {}
    if odd:  # replace one field by a value of any type
        data[draw(st.sampled_from([*data, "text", "rate", "voice", "names"]))] = draw(json_values)
    payload = b""
    if kind == "audio-chunk":
        payload = draw(st.binary(max_size=64) | st.integers(0, 8000).map(bytes))
    body = json.dumps(data).encode()
    header = {"type": kind, "data_length": len(body)}
    if payload:
        header["payload_length"] = len(payload)
    return frame(header, body, payload)


event_sequences = st.lists(handler_event(), min_size=1, max_size=8)
