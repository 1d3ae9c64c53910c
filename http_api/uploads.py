"""An uploaded recording (a multipart file part), decoded in a codec thread (/v1/audio/transcriptions and
/v1/audio/translations, /api/asr and /api/wake) or read whole (a reference recording to speak or clone with).

The form's own bytes are counted as they arrive (bodies.py), in memory or on disk. What is made of them here is
counted before it is read or made: the copy of the file that the decoder reads (it needs the whole file in memory),
then the decoded samples; the copy is given back once it is freed, so a decoded upload holds only its samples
besides the form. A file is refused as busy before it costs memory the server does not have.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import BinaryIO

import numpy as np
from aiohttp import web

from wyoming_wis.audio import WHISPER_RATE, decode_file

from . import bodies
from .state import in_thread

# Hold this many bytes in all for the upload (`AsrSession.hold.set`, `WakeStream.reserve`); raises Busy if the
# memory budget cannot take them.
Reserve = Callable[[int], None]


async def decode_upload(
    request: web.Request,
    file: BinaryIO,
    max_seconds: float,
    reserve: Reserve,
    param: str = "file",
    sample_format: str = "flt",
) -> np.ndarray:
    """The upload as 16 kHz mono samples (`flt`: float32, `s16`: int16); errors name the form field `param`."""

    def decode() -> np.ndarray:
        size = _size(file)
        reserve(size)
        data = file.read()
        samples = decode_file(
            data,
            WHISPER_RATE,
            max_seconds,
            what=param,
            sample_format=sample_format,
            reserve=lambda made: reserve(size + made),
        )
        del data
        reserve(samples.nbytes)  # the copy is freed: the samples are what the request keeps
        return samples

    return await in_thread(request, decode)


async def read_upload(request: web.Request, file: BinaryIO) -> bytes:
    """The whole upload as bytes, counted in the request's share of the memory budget (429 past it) until the
    request ends."""
    bodies.count(bodies.hold(request), _size(file))
    return await in_thread(request, file.read)


def _size(file: BinaryIO) -> int:
    """Its size in bytes, read from the start on."""
    size = file.seek(0, io.SEEK_END)
    file.seek(0)
    return size
