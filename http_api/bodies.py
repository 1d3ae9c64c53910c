"""Reading a request's body within a limit: whole (JSON, a WebRTC offer) or as multipart/form-data.

A body's size is checked before it is paid for: a declared Content-Length over the limit is a 413 before a byte is
read, and a body without one (chunked) is refused as soon as more than the limit has come.

Forms are parsed here, not by aiohttp's `request.post()`, which trusts what each part declares: it decodes a text
part with the charset the part names (punycode is quadratic: 1 MiB held the event loop for 16 s; an unknown one was
a 500) and undoes a part's Content-Encoding (gzip: a decompression bomb) and Content-Transfer-Encoding. Here a part
that declares an encoding is refused, a text part is UTF-8 of at most MAX_TEXT_BYTES, the parts are counted, and a
file part is spooled to a temporary file that is closed, and so deleted, when the request ends.
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

from wyoming_wis.values import QUOTE_CHARS, quote

from .errors import ApiError, bad_field

MAX_TEXT_BYTES = 64 * 1024  # of one text field: the longest we take, speech's `input`, is 4096 characters (16 KiB)
MAX_PARTS = 64  # fields and files in one form: OpenAI's transcription form has about a dozen
TEXT_CHARSETS = frozenset({"utf-8", "us-ascii"})  # what a text part may declare; both are read as UTF-8
PLAIN_TRANSFERS = frozenset({"7bit", "8bit", "binary"})  # Content-Transfer-Encodings that leave the bytes as sent
SPOOL_BYTES = 1024 * 1024  # of a file part kept in memory before it goes to disk (aiohttp's own figure)
CHUNK_BYTES = 64 * 1024  # read from the body at a time
_FILES = web.RequestKey("wis_temporary_files", ExitStack)  # the request's temporary files, closed at its end


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
    app.middlewares.append(_temporary_files)


async def read(request: web.Request, limit: Limit) -> bytes:
    """The whole body; 413 for one over the limit, said or found while it arrives."""
    limit.check_declared(request)
    body, data = _Capped(request.content, limit), bytearray()
    while chunk := await body.read(CHUNK_BYTES):
        data += chunk
    return bytes(data)


async def read_form(request: web.Request, limit: Limit) -> MultiDictProxy[str | web.FileField]:
    """A multipart/form-data body: text fields as str, files as web.FileField; 413 for a body over the limit, 400 for
    a malformed one or a part this server does not take."""
    limit.check_declared(request)
    files: ExitStack = request[_FILES]
    form: MultiDict[str | web.FileField] = MultiDict()
    try:
        reader = MultipartReader(request.headers, _Capped(request.content, limit))
        while (part := await reader.next()) is not None:
            if len(form) == MAX_PARTS:
                raise ApiError(400, f"A form may have at most {MAX_PARTS} parts", None, "bad_multipart")
            name, value = await _field(part, files)
            form.add(name, value)
    # RuntimeError: a `_charset_` part longer than any charset's name
    except (ValueError, RuntimeError, HttpProcessingError) as err:
        reason = err.message if isinstance(err, HttpProcessingError) else str(err)
        raise ApiError(400, f"Malformed multipart body: {quote(reason)}", None, "bad_multipart") from None
    return MultiDictProxy(form)


async def _field(part: MultipartReader | BodyPartReader, files: ExitStack) -> tuple[str, str | web.FileField]:
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
        return name, await _spooled(part, name, files)
    return name, await _text(part, name, param)


async def _text(part: BodyPartReader, name: str, param: str) -> str:
    charset = part.get_charset("utf-8")  # the part's own, or the form's `_charset_`
    if charset.lower() not in TEXT_CHARSETS:
        raise bad_field(param, f"Form field {quote(name)} is in charset {quote(charset)}; send UTF-8")
    data = bytearray()
    while chunk := await part.read_chunk(CHUNK_BYTES):
        data += chunk
        if len(data) > MAX_TEXT_BYTES:
            raise bad_field(param, f"Form field {quote(name)} is over {MAX_TEXT_BYTES} bytes")
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise bad_field(param, f"Form field {quote(name)} is not UTF-8 text") from None


async def _spooled(part: BodyPartReader, name: str, files: ExitStack) -> web.FileField:
    """The file in memory while it is small, on disk past SPOOL_BYTES (written from a thread), open until the
    request ends. The default executor, not the codec threads: a write never waits behind a decode."""
    spool = files.enter_context(SpooledTemporaryFile(SPOOL_BYTES))
    while chunk := await part.read_chunk(CHUNK_BYTES):
        if spool.tell() + len(chunk) > SPOOL_BYTES:  # on disk, or going there with this write
            await asyncio.to_thread(spool.write, chunk)
        else:
            spool.write(chunk)
    spool.seek(0)
    content_type = part.headers.get(hdrs.CONTENT_TYPE, "application/octet-stream")
    return web.FileField(name, part.filename, spool, content_type, part.headers)


class _Capped:
    """The body as aiohttp's multipart parser reads it, refused once more than the limit has come: no part of the
    parser (the preamble before the first boundary included) reads past it."""

    def __init__(self, content: StreamReader, limit: Limit) -> None:
        self._content = content
        self._limit = limit

    def __getattr__(self, name: str) -> Any:  # at_eof, unread_data: the body's own
        return getattr(self._content, name)

    async def read(self, n: int = -1) -> bytes:
        return self._within(await self._content.read(n))

    async def readline(self, **kwargs: Any) -> bytes:
        return self._within(await self._content.readline(**kwargs))

    def _within(self, data: bytes) -> bytes:
        if self._content.total_bytes > self._limit.size:
            raise self._limit.refusal()
        return data


@web.middleware
async def _temporary_files(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """The request owns its temporary files: they are closed when its handler returns, whatever happened."""
    with ExitStack() as files:
        request[_FILES] = files
        return await handler(request)
