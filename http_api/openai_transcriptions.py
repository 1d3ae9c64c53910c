"""POST /v1/audio/transcriptions and /v1/audio/translations, as OpenAI's audio API defines them.

The uploaded file is decoded (uploads.py: any of audio.UPLOAD_FORMATS) in a codec thread and fed to
an ASR session, like any other audio arriving; everything a client can get wrong
is refused before decoding starts, and before the first byte of a streamed answer.

`chunking_strategy` is checked and then left to the server's own VAD, which always cuts long audio at its
pauses (README, OpenAI API): a client's threshold, padding or silence would cost words where they differ from
ours.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any, BinaryIO

from aiohttp import web
from multidict import MultiDictProxy

from openai_audio.names import our_model, token_logprobs
from wyoming_wis.audio import WHISPER_RATE
from wyoming_wis.core import AsrSession, Delta
from wyoming_wis.requests import AsrRequest
from wyoming_wis.values import quote

from . import fields, transcript_formats
from .errors import ApiError, bad_field
from .sse import EventStream
from .state import core_of
from .uploads import decode_upload

routes = web.RouteTableDef()

GRANULARITIES = ("segment", "word")
MIN_SECONDS = 0.1  # OpenAI's own minimum
MIN_TEMPERATURE, MAX_TEMPERATURE = 0.0, 1.0  # OpenAI's range; the lowest, no sampling, unless asked
INCLUDE = ("logprobs",)  # what include[] may name: the log-probability of each token of the text
CHUNKING = "chunking_strategy"
AUTO_CHUNKING, SERVER_VAD = "auto", "server_vad"
VAD_KEYS = ("threshold", "prefix_padding_ms", "silence_duration_ms")  # of a server_vad object, besides its type
THRESHOLD = (0.0, 1.0)  # the range of a server_vad threshold, as OpenAI gives it
VAD_MS = (0, 10_000)  # of prefix_padding_ms and silence_duration_ms (OpenAI names no bound)
MAX_CHUNKING_JSON = 1024  # characters of chunking_strategy sent as one JSON string


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
            raise bad_field("timestamp_granularities[]", f"must be segment or word; got {quote(granularity)}")
    if granularities and response_format != transcript_formats.VERBOSE:
        raise bad_field("timestamp_granularities[]", "timestamp_granularities[] needs response_format verbose_json")
    words = "word" in granularities
    logprobs = _include_logprobs(form, response_format)
    _check_chunking(form)
    stream = fields.boolean(form.get("stream"), "stream", False)
    events = EventStream(request) if stream else None

    async def on_text(delta: str) -> None:
        assert events is not None
        event: dict[str, Any] = {"type": "transcript.text.delta", "delta": delta}
        if logprobs:
            event["logprobs"] = token_logprobs(delta.logprobs if isinstance(delta, Delta) else ())
        await events.send(event)

    asked = AsrRequest(
        model=our_model(model),
        language=fields.text(form.get("language"), "language"),
        task=task,
        prompt=fields.text(form.get("prompt"), "prompt"),
        words=words,
        logprobs=logprobs,
        temperature=AsrRequest.temperature if temperature is None else temperature,
    )
    async with core_of(request).open_asr(asked, frontend="http", on_text=on_text if stream else None) as session:
        await feed_file(request, session, upload.file)
        transcript = await session.finish(received)
    if events is not None:
        if events.response is None and transcript.text:  # partial results are off: all of it at once
            await on_text(Delta(transcript.text, transcript.logprobs))
        done: dict[str, Any] = {"type": "transcript.text.done", "text": transcript.text}
        if logprobs:
            done["logprobs"] = token_logprobs(transcript.logprobs)
        await events.send(done | {"usage": transcript_formats.usage(transcript)})
        return await events.end()
    return transcript_formats.response(transcript, response_format, task, words, logprobs=logprobs)


def _include_logprobs(form: MultiDictProxy[str | web.FileField], response_format: str) -> bool:
    """Whether include[] (or include) asks for logprobs; OpenAI gives them only in json, and so do we."""
    include = form.getall("include[]", []) + form.getall("include", [])
    for item in include:
        if item not in INCLUDE:
            raise bad_field("include[]", f"'include[]' may name only {', '.join(INCLUDE)}; got {quote(item)}")
    if include and response_format != transcript_formats.DEFAULT:
        raise bad_field("include[]", f"include[]=logprobs needs response_format {transcript_formats.DEFAULT}")
    return bool(include)


def _check_chunking(form: MultiDictProxy[str | web.FileField]) -> None:
    """Refuse a chunking_strategy that is not `auto` or a well-formed server_vad object: as the SDK sends one
    (`chunking_strategy[type]=server_vad`, `chunking_strategy[threshold]`, ...), or as one JSON string."""
    nested = {key for key in form if key.startswith(CHUNKING + "[")}
    plain = form.get(CHUNKING)
    if plain is not None and nested:
        raise bad_field(CHUNKING, f"Send '{CHUNKING}' as one field or as {CHUNKING}[...] fields, not both")
    if nested:
        _check_server_vad({_key(field): form.get(field) for field in nested})
    elif isinstance(plain, str) and plain.lstrip().startswith("{"):
        _check_server_vad(_json_object(plain))
    elif plain is not None and plain != AUTO_CHUNKING:
        raise bad_field(CHUNKING, f"'{CHUNKING}' must be {AUTO_CHUNKING} or a {SERVER_VAD} object; got {quote(plain)}")


def _key(field: str) -> str:
    """The key a `chunking_strategy[key]` field names; one that is not that shape is an unknown key."""
    key = field[len(CHUNKING) + 1 : -1] if field.endswith("]") else field
    if key != "type" and key not in VAD_KEYS:
        raise bad_field(CHUNKING, f"'{CHUNKING}' has no key {quote(key)}")
    return key


def _json_object(text: str) -> dict[str, object]:
    if len(text) > MAX_CHUNKING_JSON:
        raise bad_field(CHUNKING, f"'{CHUNKING}' as JSON is {len(text)} characters; the limit is {MAX_CHUNKING_JSON}")
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        value = None
    if not isinstance(value, dict):
        raise bad_field(CHUNKING, f"'{CHUNKING}' must be {AUTO_CHUNKING} or a JSON object; got {quote(text)}")
    for key in value:
        _key(f"{CHUNKING}[{key}]")
    return value


def _check_server_vad(values: Mapping[str, object]) -> None:
    """A server_vad object's type and its values within their ranges."""
    if values.get("type") != SERVER_VAD:
        got = quote(values.get("type"))
        raise bad_field(f"{CHUNKING}[type]", f"'{CHUNKING}[type]' must be {SERVER_VAD}; got {got}")
    fields.number(values.get("threshold"), f"{CHUNKING}[threshold]", *THRESHOLD)
    for key in VAD_KEYS[1:]:
        fields.integer(values.get(key), f"{CHUNKING}[{key}]", *VAD_MS)


async def feed_file(request: web.Request, session: AsrSession, file: BinaryIO, param: str = "file") -> None:
    """Decode the upload in a codec thread, counted in the session's share of the memory budget, and give the
    session all of it."""
    samples = await decode_upload(request, file, session.max_seconds, session.hold.set, param)
    if len(samples) < MIN_SECONDS * WHISPER_RATE:
        raise ApiError(
            400, f"Audio file is too short. Minimum audio length is {MIN_SECONDS} seconds.", param, "audio_too_short"
        )
    await session.feed_samples(samples)
