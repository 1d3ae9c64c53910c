"""An uploaded recording (a multipart file part), decoded in a codec thread: for /v1/audio/transcriptions and
/v1/audio/translations, /api/asr and /api/wake.

The upload's bytes, then its decoded samples, are counted in the request's share of the memory budget before they
are read or made, so a file is refused as busy before it costs memory the server does not have.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import BinaryIO

import numpy as np
from aiohttp import web

from wyoming_wis.audio import WHISPER_RATE, decode_file

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
        size = file.seek(0, io.SEEK_END)
        file.seek(0)
        reserve(size)
        data = file.read()
        return decode_file(
            data,
            WHISPER_RATE,
            max_seconds,
            what=param,
            sample_format=sample_format,
            reserve=lambda made: reserve(size + made),
        )

    return await in_thread(request, decode)
