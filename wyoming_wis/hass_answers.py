"""Home Assistant's large answers, parsed in a child process and cut down to what household.py reads.

`get_states` of a large home is megabytes: json.loads of 60 MiB in a worker thread held the GIL, and so the event
loop, for 2.3 s (every client's `describe` waited) and took 1.6 GB. A message over hass_api.py's INLINE_BYTES is
therefore handed, as the bytes that came, to a fresh `python -I` that parses it one record at a time (its memory
is the text and one record, not the whole tree) and writes back only each message's envelope (type, id, success,
error) and, of a command's result, what household.ESSENTIALS says is read of each record: for get_states, the
friendly names of the entities exposed to Assist. The server parses that, kilobytes; a child that fails, or
writes more than MAX_CUT_BYTES, is Home Assistant's error, not the server's.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from .household import ESSENTIALS

MAX_CUT_BYTES = 2 * 2**20  # what a child may write back: a large home's essentials are a few hundred kB
CHUNK_BYTES = 2**20  # written to the child at a time, so the pipe holds no second copy of the message
ENVELOPE = ("type", "id", "success", "error")  # what is kept of every message besides a result
# The child: this package's own copy (the server's sys.path is not the child's under -I), then `main`.
CHILD = "import sys; sys.path.insert(0, sys.argv[1]); from wyoming_wis.hass_answers import main; main()"
PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)

_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")


class AnswerError(Exception):
    """The message is not JSON, its cut is too large, or the child failed: the server says so and reads again."""


async def parse_in_child(data: bytes, command: str | None, wanted: Iterable[str] | None, timeout: float) -> Any:
    """The message `data` as a list of messages, each cut down (its result by `command`'s ESSENTIALS, or dropped
    where `command` is None), parsed in a child process; AnswerError if that fails or takes over `timeout` s."""
    header = json.dumps({"command": command, "wanted": None if wanted is None else list(wanted)}).encode()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-I",
        "-c",
        CHILD,
        PACKAGE_ROOT,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None
    try:
        async with asyncio.timeout(timeout):
            try:
                process.stdin.write(header + b"\n")
                view = memoryview(data)
                for start in range(0, len(view), CHUNK_BYTES):
                    process.stdin.write(view[start : start + CHUNK_BYTES])
                    await process.stdin.drain()
                process.stdin.close()
            except (BrokenPipeError, ConnectionResetError):
                pass  # the child ended early: its status and stderr say why
            out = bytearray()
            while chunk := await process.stdout.read(2**16):
                out += chunk
                if len(out) > MAX_CUT_BYTES:
                    raise AnswerError(f"sent a message of which more than {MAX_CUT_BYTES >> 20} MiB is names")
            why = (await process.stderr.read(400)).decode(errors="replace").strip()
            if await process.wait() != 0:
                raise AnswerError(f"sent a message that is not JSON ({why or process.returncode})")
    except TimeoutError:
        raise AnswerError(f"sent a message that took over {timeout:g} s to parse") from None
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    return json.loads(out) if len(out) <= 2**16 else await asyncio.to_thread(json.loads, out)


def main() -> None:
    """The child: a line of JSON (the command and the entity ids wanted), then the message; writes the cut."""
    header = json.loads(sys.stdin.buffer.readline())
    data = sys.stdin.buffer.read()
    try:
        cut = cut_message(data, header["command"], header["wanted"])
    except (ValueError, RecursionError) as err:  # (UnicodeDecodeError and JSONDecodeError are ValueErrors)
        sys.stderr.write(str(err)[:200])
        sys.exit(1)
    sys.stdout.buffer.write(cut)


def cut_message(data: bytes, command: str | None, wanted: Iterable[str] | None) -> bytes:
    """The message (or list of messages) in `data`, each cut to its envelope and its result's essentials, as JSON.

    Records are parsed one at a time, so what is held is the text and one record. Not JSON: ValueError.
    """
    text = data.decode("utf-8")
    path, read = ESSENTIALS.get(command or "", ((), None))
    ids = None if wanted is None else frozenset(wanted)

    def result(at: int) -> tuple[object, int]:
        if read is None:
            return _skipped(text, at)
        return _records(text, at, path, lambda record: read(record, ids))

    def message(at: int) -> tuple[object, int]:
        if text[at : at + 1] != "{":
            return _DECODER.raw_decode(text, at)  # (not an object: hass_api.py says so)
        kept: dict[str, Any] = {}

        def member(key: str | int, at: int) -> int:
            if key == "result":
                value, end = result(at)
            elif key in ENVELOPE:
                value, end = _DECODER.raw_decode(text, at)
            else:
                return _skipped(text, at)[1]
            if value is not _DROPPED:
                kept[str(key)] = value
            return end

        return kept, _members(text, at, member)

    at = _space(text, 0)
    if text[at : at + 1] == "[":  # (Home Assistant sends a list where it coalesces messages)
        messages: list[object] = []

        def each(_: str | int, at: int) -> int:
            value, end = message(at)
            messages.append(value)
            return end

        end = _members(text, at, each)
    else:
        value, end = message(at)
        messages = [value]
    if _space(text, end) != len(text):
        raise ValueError(f"extra data at character {end}")
    return json.dumps(messages, ensure_ascii=False, separators=(",", ":")).encode()


_DROPPED = object()  # a result not read (no command waits for it)


def _records(text: str, at: int, path: tuple[str, ...], read: Callable[[object], object]) -> tuple[object, int]:
    """The value at `at`, along `path` into its objects, cut to what `read` keeps of each record at the path's end
    (an object's values or an array's items); a value of another shape is kept whole (household.py copes)."""
    if text[at : at + 1] not in ("{", "["):
        return _DECODER.raw_decode(text, at)
    is_object = text[at] == "{"
    kept: dict[str, object] | list[object] = {} if is_object else []

    def member(key: str | int, at: int) -> int:
        if path:
            if key != path[0]:
                return _skipped(text, at)[1]
            value, end = _records(text, at, path[1:], read)
        else:
            record, end = _DECODER.raw_decode(text, at)
            value = read(record)
            if value is None:
                return end
        if isinstance(kept, dict):
            kept[str(key)] = value
        else:
            kept.append(value)
        return end

    return kept, _members(text, at, member)


def _skipped(text: str, at: int) -> tuple[object, int]:
    """A value nobody reads: parsed (to find its end, and that it is JSON) and dropped."""
    return _DROPPED, _DECODER.raw_decode(text, at)[1]


def _members(text: str, at: int, take: Callable[[str | int, int], int]) -> int:
    """Each member of the object or array at `at`, handed to `take` with where its value starts (`take` returns
    where it ends), one at a time; returns where the object or array ends. ValueError where it is not JSON."""
    close = "}" if text[at] == "{" else "]"
    at = _space(text, at + 1)
    if text[at : at + 1] == close:
        return at + 1
    index = 0
    while True:
        key: str | int = index
        if close == "}":
            if text[at : at + 1] != '"':
                raise ValueError(f"expected a name at character {at}")
            key, at = _DECODER.raw_decode(text, at)
            at = _space(text, at)
            if text[at : at + 1] != ":":
                raise ValueError(f"expected : at character {at}")
            at = _space(text, at + 1)
        at = _space(text, take(key, at))
        index += 1
        if text[at : at + 1] == close:
            return at + 1
        if text[at : at + 1] != ",":
            raise ValueError(f"expected , or {close} at character {at}")
        at = _space(text, at + 1)


def _space(text: str, at: int) -> int:
    match = _SPACE.match(text, at)
    assert match is not None  # (it matches the empty string)
    return match.end()
