"""Reading a request's body within a limit: whole (JSON, a WebRTC offer) or as multipart/form-data.

A body's size is checked before it is paid for: a declared Content-Length over the limit is a 413 before a byte is
read, and a body without one (chunked) is refused as soon as more than the limit has come.

Forms are parsed here, not by aiohttp's `request.post()`, which trusts what each part declares: it decodes a text
part with the charset the part names (punycode is quadratic: 1 MiB held the event loop for 16 s; an unknown one was
a 500) and undoes a part's Content-Encoding (gzip: a decompression bomb) and Content-Transfer-Encoding. Here a part
that declares an encoding is refused, a text part is UTF-8 of at most MAX_TEXT_BYTES, the parts are counted, and a
file part is spooled to a temporary file that is closed, and so deleted, when the request ends.

A form costs what it holds, not what each part declares: every byte of it (text, and files in memory or on disk) is
counted in the client's share of the memory budget as it arrives, before it is stored, and given back when the
request ends. At most FORM_MEMORY_BYTES of a whole form is in memory at once; its files go to disk past that. 96
uploads of 24 file parts of 1 MiB each, never ended, once held 2.6 GB in memory outside the budget: aiohttp kept up
to 1 MiB of every part.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from dataclasses import dataclass
from tempfile import SpooledTemporaryFile
from typing import Any

from aiohttp import BodyPartReader, MultipartReader, hdrs, web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.streams import StreamReader
from multidict import MultiDict, MultiDictProxy

from wyoming_wis.budget import Hold
from wyoming_wis.scheduler import household_first
from wyoming_wis.shares import current
from wyoming_wis.values import QUOTE_CHARS, quote

from .errors import ApiError, bad_field
from .state import LOADED, core_of

MAX_TEXT_BYTES = 64 * 1024  # of one text field: the longest we take, speech's `input`, is 4096 characters (16 KiB)
MAX_PARTS = 64  # fields and files in one form: OpenAI's transcription form has about a dozen
TEXT_CHARSETS = frozenset({"utf-8", "us-ascii"})  # what a text part may declare; both are read as UTF-8
PLAIN_TRANSFERS = frozenset({"7bit", "8bit", "binary"})  # Content-Transfer-Encodings that leave the bytes as sent
FORM_MEMORY_BYTES = 1024 * 1024  # of a whole form held in memory at once (aiohttp's figure, for each file part)
CHUNK_BYTES = 64 * 1024  # read from the body at a time
_HELD = web.RequestKey("wis_held", ExitStack)  # the request's temporary files and its share of the budget
_HOLD = web.RequestKey("wis_hold", Hold)  # the request's share of the memory budget, once it holds anything
_Spool = SpooledTemporaryFile[bytes]  # a file part


@dataclass(frozen=True)
class Limit:
    """How large a body may be, and how its 413 says so."""

    size: int  # bytes
    what: str  # the body, as the refusal names it: "A JSON body"
    param: str | None = None  # the field the refusal names

    def refusal(self) -> ApiError:
        return ApiError(413, f"{self.what} may be at most {self.size} bytes", self.param, "request_entity_too_large")

    def check_declared(self, request: web.Request) -> None:
        """413 for a body that says it is too large, before any of it is read."""
        if (request.content_length or 0) > self.size:
            raise self.refusal()


def setup(app: web.Application) -> None:
    app.middlewares.append(_held)


async def read(request: web.Request, limit: Limit) -> bytes:
    """The whole body; 413 for one over the limit, said or found while it arrives; 429 (busy) past the client's
    share of the memory budget (counted once the models have loaded: before, the limit alone bounds it)."""
    limit.check_declared(request)
    held = hold(request) if request.app[LOADED].core is not None else None
    body, data = _Capped(request.content, limit), bytearray()
    while chunk := await body.read(CHUNK_BYTES):
        if held is not None:
            count(held, len(chunk))
        data += chunk
    return bytes(data)


async def read_form(request: web.Request, limit: Limit) -> MultiDictProxy[str | web.FileField]:
    """A multipart/form-data body: text fields as str, files as web.FileField; 413 for a body over the limit, 400 for
    a malformed one or a part this server does not take, 429 (busy) past the client's share of the memory budget."""
    limit.check_declared(request)
    form: MultiDict[str | web.FileField] = MultiDict()
    held = _Form(request)
    try:
        reader = MultipartReader(request.headers, _Capped(request.content, limit))
        while (part := await reader.next()) is not None:
            if len(form) == MAX_PARTS:
                raise ApiError(400, f"A form may have at most {MAX_PARTS} parts", None, "bad_multipart")
            name, value = await _field(part, held)
            form.add(name, value)
    # RuntimeError: a `_charset_` part longer than any charset's name
    except (ValueError, RuntimeError, HttpProcessingError) as err:
        reason = err.message if isinstance(err, HttpProcessingError) else str(err)
        raise ApiError(400, f"Malformed multipart body: {quote(reason)}", None, "bad_multipart") from None
    return MultiDictProxy(form)


def hold(request: web.Request) -> Hold:
    """The request's share of the memory budget (one for all it holds: its form, a copy of an upload), given back
    when the request ends; 503 while the models, and the budget with them, still load."""
    if (held := request.get(_HOLD)) is None:
        held = request[_HOLD] = request[_HELD].enter_context(core_of(request).budget.hold())
    return held


def count(held: Hold, size: int) -> None:
    """Hold `size` bytes more, before they are stored; Busy (429) past the client's share of the budget."""
    held.set(held.size + size)


async def _field(part: MultipartReader | BodyPartReader, held: _Form) -> tuple[str, str | web.FileField]:
    """One part: a file if it has a file name, text if not."""
    if not isinstance(part, BodyPartReader):
        raise ApiError(400, "A form part may not itself be multipart", None, "bad_multipart")
    name = part.name
    if name is None:
        raise ApiError(400, "A form part has no name (Content-Disposition: form-data; name=...)", None, "bad_multipart")
    param = name[:QUOTE_CHARS]
    transfer = part.headers.get(hdrs.CONTENT_TRANSFER_ENCODING, "binary")
    if hdrs.CONTENT_ENCODING in part.headers or transfer.strip().lower() not in PLAIN_TRANSFERS:
        encoding = part.headers.get(hdrs.CONTENT_ENCODING, transfer)
        raise bad_field(param, f"Form field {quote(name)} is encoded ({quote(encoding)}); send it as it is")
    if part.filename:
        return name, await _spooled(part, name, held)
    return name, await _text(part, name, param, held)


async def _text(part: BodyPartReader, name: str, param: str, held: _Form) -> str:
    charset = part.get_charset("utf-8")  # the part's own, or the form's `_charset_`
    if charset.lower() not in TEXT_CHARSETS:
        raise bad_field(param, f"Form field {quote(name)} is in charset {quote(charset)}; send UTF-8")
    data = bytearray()
    while chunk := await part.read_chunk(CHUNK_BYTES):
        if len(data) + len(chunk) > MAX_TEXT_BYTES:
            raise bad_field(param, f"Form field {quote(name)} is over {MAX_TEXT_BYTES} bytes")
        await held.text(len(chunk))
        data += chunk
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise bad_field(param, f"Form field {quote(name)} is not UTF-8 text") from None


async def _spooled(part: BodyPartReader, name: str, held: _Form) -> web.FileField:
    """The file in memory while the form has room there, on disk past it, open until the request ends."""
    spool = held.spool()
    while chunk := await part.read_chunk(CHUNK_BYTES):
        await held.write(spool, chunk)
    spool.seek(0)
    content_type = part.headers.get(hdrs.CONTENT_TYPE, "application/octet-stream")
    return web.FileField(name, part.filename, spool, content_type, part.headers)


class _Form:
    """What one form holds: every byte counted in the request's share of the memory budget before it is stored, at
    most FORM_MEMORY_BYTES of them in memory (text fields, and files until they go to disk), temporary files closed
    when the request ends. Disk writes go through the default executor, not the codec threads: a write never waits
    behind a decode."""

    def __init__(self, request: web.Request) -> None:
        self._request = request
        # While the models load there is no budget yet: a form may then take no more than memory (`_to_disk`).
        self._hold = hold(request) if request.app[LOADED].core is not None else None
        self._in_memory = 0  # bytes of the form in memory
        self._kept: dict[_Spool, int] = {}  # its files still in memory, and their sizes

    def spool(self) -> _Spool:
        """A new file, in memory until `write` moves it to disk (never by itself: its max_size is 0)."""
        spool: _Spool = self._request[_HELD].enter_context(SpooledTemporaryFile())
        self._kept[spool] = 0
        return spool

    async def write(self, spool: _Spool, chunk: bytes) -> None:
        """A chunk of `spool`'s file: in memory while the form has room there, else on disk, the file with it."""
        kept = spool in self._kept and self._in_memory + len(chunk) <= FORM_MEMORY_BYTES
        if not kept:
            await self._to_disk(spool)
        self._count(len(chunk))
        if kept:
            spool.write(chunk)
            self._kept[spool] += len(chunk)
            self._in_memory += len(chunk)
        else:
            await asyncio.to_thread(spool.write, chunk)

    async def text(self, size: int) -> None:
        """Room in memory for `size` bytes more of a text field: the form's files go to disk first; 413 where its
        text alone would pass FORM_MEMORY_BYTES."""
        self._count(size)
        while self._in_memory + size > FORM_MEMORY_BYTES and self._kept:
            await self._to_disk(next(iter(self._kept)))
        if self._in_memory + size > FORM_MEMORY_BYTES:
            message = f"A form's text fields may be at most {FORM_MEMORY_BYTES} bytes in all"
            raise ApiError(413, message, None, "request_entity_too_large")
        self._in_memory += size

    def _count(self, size: int) -> None:
        if self._hold is not None:
            count(self._hold, size)

    async def _to_disk(self, spool: _Spool) -> None:
        """Move a file of the form from memory to disk, if it is not there yet."""
        if spool not in self._kept:
            return
        if self._hold is None:  # no budget to count the disk in while the models load: 503 (loaded now: counted)
            self._hold = hold(self._request)
        await asyncio.to_thread(spool.rollover)
        self._in_memory -= self._kept.pop(spool)


class _Capped:
    """The body as aiohttp's multipart parser reads it, refused once more than the limit has come: no part of the
    parser (the preamble before the first boundary included) reads past it. A stranger's body is read no further
    while Home Assistant's calls run (scheduler.household_first)."""

    def __init__(self, content: StreamReader, limit: Limit) -> None:
        self._content = content
        self._limit = limit
        self._owner = current()

    def __getattr__(self, name: str) -> Any:  # at_eof, unread_data: the body's own
        return getattr(self._content, name)

    async def read(self, n: int = -1) -> bytes:
        await household_first(self._owner)
        return self._within(await self._content.read(n))

    async def readline(self, **kwargs: Any) -> bytes:
        await household_first(self._owner)
        return self._within(await self._content.readline(**kwargs))

    def _within(self, data: bytes) -> bytes:
        if self._content.total_bytes > self._limit.size:
            raise self._limit.refusal()
        return data


@web.middleware
async def _held(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """The request owns its temporary files and its share of the memory budget: the files are closed, then the
    share given back, when its handler returns, whatever happened."""
    with ExitStack() as held:
        request[_HELD] = held
        return await handler(request)
