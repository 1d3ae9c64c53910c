"""Willow Inference Server's API, for Willow devices: speech to text, text to speech and ping.

A Willow device streams what it hears to `POST /api/willow` with chunked transfer
encoding while the user speaks; each chunk goes into the ASR session as it
arrives, so when the last one comes only the tail is left to decode (the device
gives up after 10 s). The format is in `x-audio-*` headers: `pcm`; `wav`, PCM
after a RIFF header, which is skipped; or `amrwb`, decoded frame by frame in a
codec thread. `save_audio=true` keeps the last recording, as the server heard it,
at `/audio/willow.wav`, on a server with credentials only: what a household said is
no file for anyone on the network to fetch. Elsewhere the device is answered as
usual, and nothing is kept.

The device plays `GET /api/tts?text=...` as it arrives, so the answer is a WAV
streamed as it is made. Parameters that older firmware sends and this server has
no use for (`format=WAV`, `speaker=CLB`) are tolerated, as WIS does: `speaker`
picks a voice only if one has that name. `POST /api/tts?speaker=NAME` clones a
voice from `audio_file` (XTTS), as WIS's XTTS container does.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import numpy as np
from aiohttp import web

from wyoming_wis.audio import SAMPLE_WIDTHS, AmrWbDecoder, AudioFormat, write_wav
from wyoming_wis.core import AsrSession, Transcript
from wyoming_wis.errors import UnsupportedAudioFormat
from wyoming_wis.requests import MAX_BEAM_SIZE, AsrRequest, SpeechRequest
from wyoming_wis.scheduler import household_first, patience
from wyoming_wis.shares import current
from wyoming_wis.values import quote

from . import fields
from .errors import ApiError, bad_field
from .limits import PATIENCE
from .openai_speech import MAX_INPUT, send_speech
from .openai_transcriptions import feed_file
from .state import core_of, in_thread
from .uploads import read_upload

_LOGGER = logging.getLogger(__name__)
routes = web.RouteTableDef()


@routes.get("/api/ping")
async def ping(_: web.Request) -> web.Response:
    return web.json_response({"message": "pong"})


@routes.get("/api/tts")
async def tts(request: web.Request) -> web.StreamResponse:
    """Speech as a streamed WAV; `nocache` (any value) skips the speech cache, `X-Cache` tells which it was."""
    query = request.query
    core = core_of(request)
    text = query.get("text", "")
    if not text.strip():
        raise bad_field("text", "'text' is required: the text to speak")
    if len(text) > MAX_INPUT:
        raise bad_field("text", f"'text' is {len(text)} characters; the limit is {MAX_INPUT}")
    await core.refresh_voices()
    voice_name = query.get("voice") or query.get("speaker")  # unknown (WIS's legacy speaker=CLB): a substitute
    language = fields.text(query.get("language"), "language")
    asked = SpeechRequest(voice_name=voice_name, language=language, cached="nocache" not in query)
    stream = await core.speech_stream(asked)
    stream.write(text)
    stream.close()
    return await send_speech(request, stream, "wav")


CODECS = ("pcm", "wav", "amrwb")
DEFAULT_CODEC = "pcm"
# What a device's audio is when its x-audio-* headers do not say
FORMAT_HEADERS = {"x-audio-sample-rate": 16000, "x-audio-bits": 16, "x-audio-channel": 1}
SAMPLE_BITS = tuple(8 * width for width in SAMPLE_WIDTHS)
WAV_HEADER_MAX = 4096  # bytes of RIFF chunks before "data" that are accepted
SAVED_AUDIO = "audio/willow.wav"  # in the data dir: the last recording asked to be kept, as WIS keeps it
RECORDING = web.AppKey("willow_recording", Path)  # where that is: SAVED_AUDIO in the first --data-dir
KEEPS_RECORDING = web.AppKey("willow_keeps_recording", bool)  # whether it is kept: where the API needs credentials
NOT_KEPT = (
    "This server keeps no recording: save_audio=true keeps one only where the API needs credentials (--api-key, "
    "or --api-user and --api-password), so that what was said is no file for anyone on the network to fetch"
)


@routes.post("/api/willow")
async def willow(request: web.Request) -> web.Response:
    """Transcribe the body as it streams in; `{"language", "text"}`, with timings (ms) if `stats` is set."""
    started = time.perf_counter()
    audio_format, codec = device_format(request)
    async with _session(request) as session:

        async def samples(decoded: np.ndarray) -> None:
            await session.feed_samples(decoded)

        await read_device_audio(request, audio_format, codec, session.feed, samples)
        received = time.perf_counter()
        with patience(request.app[PATIENCE]["willow"]):  # the device waits from the end of its audio
            transcript = await session.finish(received)
    if fields.boolean(request.query.get("save_audio"), "save_audio", False):
        if request.app[KEEPS_RECORDING]:
            await _save(request, session)
        else:
            _not_kept()  # the device is answered as usual: it has no use for the recording
    return _answer(request, transcript, started, received)


@routes.get("/" + SAVED_AUDIO)
async def saved_audio(request: web.Request) -> web.FileResponse:
    """The last recording sent with `save_audio=true`, as 16 kHz WAV: what the server heard."""
    core_of(request)  # 503 while the models load, as on every route of the API
    if not request.app[KEEPS_RECORDING]:
        raise ApiError(403, NOT_KEPT, None, "recording_not_kept")
    path = request.app[RECORDING]
    if not path.is_file():
        raise ApiError(404, "No audio saved yet: send POST /api/willow?save_audio=true first", None, "not_found")
    return web.FileResponse(path, headers={"Cache-Control": "no-store"})


@routes.post("/api/asr")
async def asr(request: web.Request) -> web.Response:
    """A whole recording (multipart `audio_file`, in one of audio.UPLOAD_FORMATS): the same answer as /api/willow."""
    started = time.perf_counter()
    form = await fields.read_form(request)
    uploaded = time.perf_counter()  # the end of the client's audio
    upload = _upload(form.get("audio_file"))
    async with _session(request) as session:
        await feed_file(request, session, upload.file, "audio_file")
        received = time.perf_counter()
        transcript = await session.finish(uploaded)
    return _answer(request, transcript, started, received, stats=True)  # WIS always times /api/asr


@routes.post("/api/tts")
async def clone(request: web.Request) -> web.Response:
    """A new XTTS voice called `speaker`, cloned from `audio_file` (3-30 s of one person speaking)."""
    name = request.query.get("speaker")
    if not name:
        raise bad_field("speaker", "'speaker' is required: the name of the new voice")
    core = core_of(request)
    upload = _upload((await fields.read_form(request)).get("audio_file"))
    info = await core.clone_voice(name, await read_upload(request, upload.file))
    return web.json_response({"status": f"Added speaker '{name}'", "voice": info})


def _upload(field: object) -> web.FileField:
    if not isinstance(field, web.FileField):
        raise bad_field("audio_file", "'audio_file' is required: the recording, as a file in multipart/form-data")
    return field


async def read_device_audio(
    request: web.Request,
    audio_format: AudioFormat,
    codec: str,
    pcm: Callable[[bytes, AudioFormat], Awaitable[None]],
    samples: Callable[[np.ndarray], Awaitable[None]],
) -> None:
    """The body as a device streams it, each piece handed on as it arrives: PCM (after a RIFF header, for `wav`) in
    whole frames of its format to `pcm`; AMR-WB decoded in a codec thread (the header's rate is AMR-WB's own, 16 kHz)
    to `samples`, as 16 kHz float32. A stranger's pieces wait while Home Assistant's calls run."""
    who = current()
    if codec == "amrwb":
        decoder = AmrWbDecoder()
        async for chunk in request.content.iter_any():
            if len(decoded := await in_thread(request, decoder.decode, chunk)):
                await samples(decoded)
            await household_first(who)
        if len(decoded := await in_thread(request, decoder.flush)):
            await samples(decoded)
        return
    framer = PcmFramer(audio_format.bytes_per_frame, skip_wav_header=codec == "wav")
    async for chunk in request.content.iter_any():
        if data := framer.take(chunk):
            await pcm(data, audio_format)
        await household_first(who)


async def _save(request: web.Request, session: AsrSession) -> None:
    path = request.app[RECORDING]
    await in_thread(request, write_wav, path, session.audio())


@functools.cache  # once: a device with save_audio=true in its URL sends it with every command
def _not_kept() -> None:
    _LOGGER.warning("save_audio=true ignored. %s", NOT_KEPT)


def _session(request: web.Request) -> AsrSession:
    """An ASR session from WIS's query parameters; `beam_size` and `detect_language` override the server's."""
    query = request.query
    asked = AsrRequest(
        model=query.get("model") or None,
        language=fields.text(query.get("force_language"), "force_language"),
        task="translate" if fields.boolean(query.get("translate"), "translate", False) else "transcribe",
        beam_size=fields.integer(query.get("beam_size"), "beam_size", 1, MAX_BEAM_SIZE),
        detect_language=fields.boolean(query.get("detect_language"), "detect_language", AsrRequest.detect_language),
    )
    return core_of(request).open_asr(asked, frontend="http")


def _answer(
    request: web.Request, transcript: Transcript, started: float, received: float, stats: bool = False
) -> web.Response:
    answer: dict[str, object] = {"language": transcript.language or "", "text": transcript.text}
    if stats or fields.boolean(request.query.get("stats"), "stats", False):
        infer = time.perf_counter() - received
        answer |= {
            "infer_time": round(infer * 1000, 1),
            "audio_duration": round(transcript.duration * 1000, 1),
            "infer_speedup": round(transcript.duration / infer, 1) if infer > 0 else None,
            "total_time": round((time.perf_counter() - started) * 1000, 1),
        }
    return web.json_response(answer)


def device_format(request: web.Request) -> tuple[AudioFormat, str]:
    """The body's format and codec, from a device's `x-audio-*` headers (refused here if they are wrong)."""
    headers = request.headers
    codec = headers.get("x-audio-codec", DEFAULT_CODEC).lower()
    if codec not in CODECS:
        raise bad_field("x-audio-codec", f"x-audio-codec must be one of {', '.join(CODECS)}; got {quote(codec)}")
    values = []
    for header, default in FORMAT_HEADERS.items():
        try:
            values.append(int(headers.get(header, default)))
        except ValueError:
            raise bad_field(header, f"{header} must be a whole number; got {quote(headers[header])}") from None
    rate, bits, channels = values
    if bits % 8:
        allowed = f"{', '.join(map(str, SAMPLE_BITS[:-1]))} or {SAMPLE_BITS[-1]}"
        raise bad_field("x-audio-bits", f"x-audio-bits must be {allowed}; got {bits}")
    try:
        return AudioFormat(rate, bits // 8, channels).validate(), codec
    except UnsupportedAudioFormat as err:
        raise ApiError(400, err.message, "x-audio-sample-rate", "unsupported_audio_format") from err


class PcmFramer:
    """Whole sample frames out of body chunks that split them anywhere, after an optional RIFF header."""

    def __init__(self, frame_bytes: int, skip_wav_header: bool) -> None:
        self.frame_bytes = frame_bytes
        self._header = skip_wav_header
        self._rest = b""

    def take(self, chunk: bytes) -> bytes:
        data = self._rest + chunk
        if self._header:
            at = data.find(b"data", 12)
            if at < 0 or len(data) < at + 8:
                if len(data) > WAV_HEADER_MAX or (len(data) >= 4 and not data.startswith(b"RIFF")):
                    raise bad_field("x-audio-codec", "x-audio-codec is wav but the body is not a RIFF/WAVE file")
                self._rest = data
                return b""
            data, self._header = data[at + 8 :], False
        usable = len(data) - len(data) % self.frame_bytes
        self._rest = data[usable:]
        return data[:usable]
