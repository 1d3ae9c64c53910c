"""POST /v1/audio/speech, as OpenAI's audio API defines it, plus `speaker`, `language`, `cache`, and
one-off cloning from a recording sent as multipart (XTTS).

Speech is sent as it is made, in the asked format (encoded with PyAV in a codec
thread): as chunked bytes, or as Server-Sent Events with base64 audio. Every field,
the voice, and the engine's first piece of audio are settled before the first byte,
so a mistake or a busy engine is an ordinary error answer, never a broken stream.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import aclosing
from typing import Any

from aiohttp import web

from wyoming_wis import metrics
from wyoming_wis.audio import ENCODINGS, Encoder
from wyoming_wis.core import Piece, SpeechStream
from wyoming_wis.errors import BadAudio
from wyoming_wis.requests import MAX_REFERENCE_BYTES, SpeechRequest
from wyoming_wis.values import MAX_SPEED, MIN_SPEED, quote

from . import bodies, fields, limits
from .errors import ApiError, bad_field
from .operations import started
from .sse import EventStream
from .state import core_of, in_thread
from .uploads import read_upload

_LOGGER = logging.getLogger(__name__)
routes = web.RouteTableDef()

MAX_INPUT = 4096  # characters, as OpenAI allows
OPENAI_TTS_MODELS = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")  # any of these: the voice decides
DEFAULT_FORMAT = "mp3"  # OpenAI's
STREAM_FORMATS = ("audio", "sse")
DEFAULT_STREAM_FORMAT = "audio"


REFERENCE_FIELDS = ("reference_audio", "speaker_wav")  # speaker_wav: what XTTS API servers' clients send
# A multipart request is a reference recording and a few fields (`input` the longest, at most 16 KiB of UTF-8):
# a larger body is refused before it is read, not held until the recording is found too large.
MAX_FORM_BYTES = MAX_REFERENCE_BYTES + 64 * 1024


@routes.post("/v1/audio/speech")
async def speech(request: web.Request) -> web.StreamResponse:
    """JSON as OpenAI defines it; or the same fields as multipart/form-data with a `reference_audio`
    recording, to speak in a voice cloned from it for this request only (XTTS)."""
    reference = None
    if request.content_type == "multipart/form-data":
        limit = bodies.Limit(
            min(MAX_FORM_BYTES, request.client_max_size), "Speech with a reference recording", "reference_audio"
        )
        body: Mapping[str, Any] = await fields.read_form(request, limit)
        reference = await _reference(request, body)
    else:
        body = await fields.read_json(request)
    core = core_of(request)
    model = fields.text(body.get("model"), "model")
    text = body.get("input")
    if not isinstance(text, str) or not text.strip():
        raise bad_field("input", "'input' is required: the text to speak")
    if len(text) > MAX_INPUT:
        raise bad_field("input", f"'input' is {len(text)} characters; the limit is {MAX_INPUT}")
    voice = body.get("voice")  # a voice's name, or OpenAI's custom voice object
    voice_name = voice.get("id") if isinstance(voice, dict) else voice
    response_format = fields.choice(body.get("response_format"), "response_format", tuple(ENCODINGS), DEFAULT_FORMAT)
    stream_format = fields.choice(body.get("stream_format"), "stream_format", STREAM_FORMATS, DEFAULT_STREAM_FORMAT)
    speed = fields.number(body.get("speed"), "speed", MIN_SPEED, MAX_SPEED)
    await core.refresh_voices()
    if model and model not in OPENAI_TTS_MODELS and not core.served().names_voice(model):
        raise ApiError(
            404,
            f"Unknown speech model {quote(model)} (use {', '.join(OPENAI_TTS_MODELS)} or a voice)",
            "model",
            "model_not_found",
        )
    asked = SpeechRequest(
        voice_name=fields.text(voice_name, "voice"),
        speaker=fields.text(body.get("speaker"), "speaker"),
        language=fields.text(body.get("language"), "language"),
        speed=speed,
        cached=fields.boolean(body.get("cache"), "cache", SpeechRequest.cached),
        reference=reference,
    )
    try:
        stream = await core.speech_stream(asked)
    except BadAudio as err:  # only a reference recording is decoded here
        raise ApiError(415, err.message, "reference_audio", err.code) from err
    stream.write(text)
    stream.close()
    return await send_speech(request, stream, response_format, stream_format == "sse", len(text))


async def send_speech(
    request: web.Request, stream: SpeechStream, encoding: str, events: bool = False, characters: int = 0
) -> web.StreamResponse:
    """The stream's speech in `encoding`, as chunked bytes or as events, starting once its first piece is made.

    Until then nothing is sent, so a busy engine is still an ordinary error answer.
    `X-Cache` says whether that first piece came from the speech cache (HIT, MISS or BYPASS).
    The time to the first audio counts from the start of the request.
    """
    sent = metrics.SpeechSent("http", stream, started(request))
    pieces = aiter(stream)
    first = await anext(pieces, None)  # a busy engine fails here, before any answer
    encoder = await in_thread(request, Encoder, encoding, stream.format)  # opens a codec: not on the loop
    cache = "BYPASS" if stream.cache is None else "HIT" if stream.cache_hits else "MISS"
    async with aclosing(_encoded(request, encoder, first, pieces, sent)) as audio:
        if events:
            return await _send_events(request, audio, characters)
        response = web.StreamResponse(headers={"Content-Type": encoder.media_type, "X-Cache": cache})
        response.enable_chunked_encoding()
        await response.prepare(request)
        try:
            async for data in audio:
                await limits.send(request, response, data)
            await limits.send(request, response)
        except ConnectionError:  # gone, or dropped for not reading (limits.send logs that)
            _LOGGER.debug("The client left during speech")  # leaving aclosing stops the synthesis
        return response


async def _reference(request: web.Request, form: Mapping[str, Any]) -> bytes:
    upload = next((form[name] for name in REFERENCE_FIELDS if name in form), None)
    if not isinstance(upload, web.FileField):
        raise bad_field(
            "reference_audio", "multipart speech needs 'reference_audio': a recording of the voice, as a file"
        )
    return await read_upload(request, upload.file)


async def _encoded(
    request: web.Request,
    encoder: Encoder,
    first: Piece | None,
    pieces: AsyncGenerator[Piece, None],
    sent: metrics.SpeechSent,
) -> AsyncGenerator[bytes, None]:
    """The file, piece by piece as the speech is made; the encoder works in a codec thread.

    Speech counts as sent once the bytes it was encoded into are written (the
    consumer asks for more only then); an encoder may hold some back for a while.
    """
    piece, held = first, 0
    try:
        while piece is not None:
            held += len(piece.audio)
            if piece.audio and (data := await in_thread(request, encoder.encode, piece.audio)):
                yield data
                sent.sent(held)
                held = 0
            piece = await anext(pieces, None)
        if data := await in_thread(request, encoder.finish):
            yield data
        sent.sent(held)
    finally:
        await pieces.aclose()  # a client gone mid-stream stops the synthesis


async def _send_events(request: web.Request, audio: AsyncIterator[bytes], characters: int) -> web.StreamResponse:
    events = EventStream(request)
    async for data in audio:
        await events.send({"type": "speech.audio.delta", "audio": base64.b64encode(data).decode()})
        if events.gone:
            break
    usage = {"input_tokens": characters, "output_tokens": 0, "total_tokens": characters}  # characters, not tokens
    await events.send({"type": "speech.audio.done", "usage": usage})
    return await events.end()
