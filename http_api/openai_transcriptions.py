"""POST /v1/audio/transcriptions and /v1/audio/translations, as OpenAI's audio API defines them.

The uploaded file is decoded (uploads.py: any of audio.UPLOAD_FORMATS) in a codec thread and fed to
an ASR session, like any other audio arriving; everything a client can get wrong
is refused before decoding starts, and before the first byte of a streamed answer.
"""

from __future__ import annotations

import time
from typing import Any, BinaryIO

from aiohttp import web

from wyoming_wis.audio import WHISPER_RATE
from wyoming_wis.core import AsrSession
from wyoming_wis.requests import AsrRequest

from . import fields, transcript_formats
from .errors import ApiError, bad_field
from .sse import EventStream
from .state import core_of
from .uploads import decode_upload

routes = web.RouteTableDef()

OPENAI_ASR_MODEL = "whisper-1"  # means our default model
GRANULARITIES = ("segment", "word")
MIN_SECONDS = 0.1  # OpenAI's own minimum
MIN_TEMPERATURE, MAX_TEMPERATURE = 0.0, 1.0  # OpenAI's range; the lowest, no sampling, unless asked


@routes.post("/v1/audio/transcriptions")
async def transcriptions(request: web.Request) -> web.StreamResponse:
    return await _transcribe(request, "transcribe")


@routes.post("/v1/audio/translations")
async def translations(request: web.Request) -> web.StreamResponse:
    return await _transcribe(request, "translate")


async def _transcribe(request: web.Request, task: str) -> web.StreamResponse:
    form = await fields.read_form(request)
    received = time.perf_counter()  # the end of the client's audio
    upload = form.get("file")
    if not isinstance(upload, web.FileField):
        raise bad_field("file", "'file' is required: the audio, as a file in multipart/form-data")
    model = fields.text(form.get("model"), "model")
    response_format = fields.choice(
        form.get("response_format"), "response_format", transcript_formats.FORMATS, transcript_formats.DEFAULT
    )
    temperature = fields.number(form.get("temperature"), "temperature", MIN_TEMPERATURE, MAX_TEMPERATURE)
    granularities = form.getall("timestamp_granularities[]", []) + form.getall("timestamp_granularities", [])
    for granularity in granularities:
        if granularity not in GRANULARITIES:
            raise bad_field("timestamp_granularities[]", f"must be segment or word; got {granularity!r}")
    if granularities and response_format != transcript_formats.VERBOSE:
        raise bad_field("timestamp_granularities[]", "timestamp_granularities[] needs response_format verbose_json")
    words = "word" in granularities
    stream = fields.boolean(form.get("stream"), "stream", False)
    events = EventStream(request) if stream else None

    async def on_text(delta: str) -> None:
        assert events is not None
        await events.send({"type": "transcript.text.delta", "delta": delta})

    asked = AsrRequest(
        model=None if model in (None, OPENAI_ASR_MODEL) else model,
        language=fields.text(form.get("language"), "language"),
        task=task,
        prompt=fields.text(form.get("prompt"), "prompt"),
        words=words,
        temperature=AsrRequest.temperature if temperature is None else temperature,
    )
    async with core_of(request).open_asr(asked, frontend="http", on_text=on_text if stream else None) as session:
        await feed_file(request, session, upload.file)
        transcript = await session.finish(received)
    if events is not None:
        if events.response is None and transcript.text:  # partial results are off: all of it at once
            await on_text(transcript.text)
        done: dict[str, Any] = {"type": "transcript.text.done", "text": transcript.text}
        await events.send(done | {"usage": transcript_formats.usage(transcript)})
        return await events.end()
    return transcript_formats.response(transcript, response_format, task, words)


async def feed_file(request: web.Request, session: AsrSession, file: BinaryIO, param: str = "file") -> None:
    """Decode the upload in a codec thread, counted in the session's share of the memory budget, and give the
    session all of it."""
    samples = await decode_upload(request, file, session.max_seconds, session.hold.set, param)
    if len(samples) < MIN_SECONDS * WHISPER_RATE:
        raise ApiError(
            400, f"Audio file is too short. Minimum audio length is {MIN_SECONDS} seconds.", param, "audio_too_short"
        )
    await session.feed_samples(samples)
