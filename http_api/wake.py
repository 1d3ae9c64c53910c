"""POST /api/wake: the wake words heard in a recording, or in audio streamed as a Willow device streams it;
GET /api/wake: the wake words offered.

A file (multipart `file`, in one of audio.UPLOAD_FORMATS) is decoded in a codec thread (uploads.py); a body of raw
PCM, WAV or AMR-WB described by `x-audio-*` headers (as /api/willow takes it) is heard as it arrives, so a long
chunked stream is answered a moment after its last chunk. Either way the answer lists every detection with its time
in the audio, as the Wyoming `detection` event gives it; a recording may last --max-audio-seconds.
"""

from __future__ import annotations

import numpy as np
from aiohttp import web

from wyoming_wis.audio import NATIVE, s16
from wyoming_wis.core import Heard, WakeStream
from wyoming_wis.requests import WakeRequest
from wyoming_wis.served import WAKE

from . import fields
from .errors import bad_field
from .state import core_of
from .uploads import decode_upload
from .willow import device_format, read_device_audio

routes = web.RouteTableDef()


@routes.get("/api/wake")
async def wake_words(request: web.Request) -> web.Response:
    """Every wake word offered: `{"wake_words": [{"name", "phrase", "family", "languages"}]}`."""
    core = core_of(request)
    await core.refresh_wake_words()
    offered = core.served().of_kind(WAKE)
    return web.json_response(
        {
            "wake_words": [
                {"name": model.name, "phrase": model.phrase, "family": model.engine, "languages": list(model.languages)}
                for model in offered
            ]
        }
    )


PIECE_BYTES = 64 * 1024  # a decoded file is fed in pieces of this size, as if it streamed


@routes.post("/api/wake")
async def wake(request: web.Request) -> web.Response:
    """`{"detections": [{"name", "timestamp", "probability"}], "audio_duration"}`; timestamps and duration in ms."""
    names = tuple(name.strip() for value in request.query.getall("names", []) for name in value.split(",") if name)
    core = core_of(request)
    await core.refresh_wake_words()

    async def heard(_: Heard) -> None:
        """Detections are answered together at the end."""

    if request.content_type == "multipart/form-data":
        form = await fields.read_form(request)
        upload = form.get("file")
        if not isinstance(upload, web.FileField):
            raise bad_field("file", "'file' is required: the recording, as a file in multipart/form-data")
        stream = core.open_wake(WakeRequest(names=names, recording=True), heard)
        try:
            await _feed_file(request, stream, upload)
            detections = await stream.drain()
        finally:
            stream.close()
    else:
        audio_format, codec = device_format(request)
        stream = core.open_wake(WakeRequest(names=names, recording=True), heard)
        try:

            async def samples(decoded: np.ndarray) -> None:
                await stream.feed(s16(decoded), NATIVE)

            await read_device_audio(request, audio_format, codec, stream.feed, samples)
            detections = await stream.drain()
        finally:
            stream.close()
    return web.json_response(
        {
            "detections": [
                {"name": found.name, "timestamp": found.milliseconds, "probability": found.probability}
                for found in detections
            ],
            "audio_duration": round(stream.seconds * 1000),
        }
    )


async def _feed_file(request: web.Request, stream: WakeStream, upload: web.FileField) -> None:
    """Decode the upload to 16-bit samples in a codec thread, counted in the stream's share of the memory budget,
    then feed it a piece at a time (each piece copied as it is fed, not the whole file at once)."""
    samples = await decode_upload(request, upload.file, stream.max_seconds, stream.reserve, "file", "s16")
    step = PIECE_BYTES // samples.itemsize
    for start in range(0, len(samples), step):
        await stream.feed(samples[start : start + step].tobytes(), NATIVE)
