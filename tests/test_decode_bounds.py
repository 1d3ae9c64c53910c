"""Uploaded audio is read by a whitelist of demuxers and no protocol (issue 36): a file that names a socket or
another file is refused unopened on every route that decodes an upload, and every documented format still reads.

Today's main bound two UDP ports for a 106-byte SDP upload and waited on them forever in a codec thread, and
answered an ffconcat upload naming a recording with that recording's transcript (200).
"""

from __future__ import annotations

import io
import os
import time
from collections.abc import Callable
from pathlib import Path

import av
import httpx
import numpy as np
import pytest
from helpers import CORPUS, Pcm, Server, amr_wb, load_audio, wav_bytes, wer
from hostile_files import naming, udp_sockets

from wyoming_wis.audio import UPLOAD_FORMATS

SPOKEN = CORPUS / "LJ001-0004.flac"  # 5.1 s
SPOKEN_TEXT = (CORPUS / "LJ001-0004.txt").read_text().strip()
# Every route that decodes an uploaded file, and its field
ROUTES = [
    ("/v1/audio/transcriptions", "file"),
    ("/v1/audio/translations", "file"),
    ("/api/asr", "audio_file"),
    ("/api/wake", "file"),
]
ANSWER_S = 10.0  # an upload not answered by then waits on what FFmpeg opened for it (today: forever)
QUICK_S = 3.0  # a refusal before decoding takes milliseconds; generous for a loaded 2-core machine
RECORDING = "audio/willow.wav"  # where /api/willow?save_audio=true keeps the household's last recording


@pytest.fixture(scope="module")
def recording(server: Server) -> str:
    """A recording of SPOKEN in the server's working directory (in the Docker image: the data dir), by the
    relative path a playlist names it by."""
    path = Path(os.readlink(f"/proc/{server.process.pid}/cwd")) / RECORDING
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(wav_bytes(load_audio(SPOKEN)))
    return RECORDING


@pytest.mark.parametrize("kind", ["sdp", "ffconcat", "hls"])
@pytest.mark.parametrize(("route", "field"), ROUTES)
def test_an_upload_naming_a_socket_or_a_file_is_refused_unopened(
    server: Server, recording: str, route: str, field: str, kind: str
) -> None:
    """415 at once, naming the formats read; no UDP socket bound, no transcript of the file named."""
    name, content = naming(recording)[kind]
    pid = server.process.pid
    sockets = udp_sockets(pid)
    began = time.monotonic()
    try:
        answer = httpx.post(server.http_url + route, files={field: (name, content)}, timeout=ANSWER_S)
    except httpx.ReadTimeout:
        pytest.fail(f"no answer in {ANSWER_S:g} s; the server holds {udp_sockets(pid) - sockets} more UDP sockets")
    took = time.monotonic() - began
    assert answer.status_code == 415, answer.text
    error = answer.json()["error"]
    assert error["code"] == "bad-audio" and f"the {field}" in error["message"], error
    assert "WAV" in error["message"] and "MP4/M4A" in error["message"], error  # the formats read, not FFmpeg's words
    assert took < QUICK_S, took
    assert udp_sockets(pid) == sockets


def _encoded(pcm: Pcm, container: str, codec: str) -> bytes:
    """16 kHz mono 16-bit PCM as a file, by PyAV."""
    out = io.BytesIO()
    with av.open(out, "w", format=container) as muxer:
        stream = muxer.add_stream(codec, rate=pcm.rate, layout="mono")
        context = stream.codec_context
        frame = av.AudioFrame.from_ndarray(np.frombuffer(pcm.audio, "<i2").reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = pcm.rate
        resampler = av.AudioResampler(context.format.name, "mono", pcm.rate, context.frame_size or None)
        for piece in [*resampler.resample(frame), *resampler.resample(None), None]:
            muxer.mux(stream.encode(piece))
    return out.getvalue()


# A recording as each format people name (OpenAI's list, Willow's, phones' and browsers'): its demuxer, how it is made
SAMPLES: dict[str, tuple[str, Callable[[Pcm], bytes]]] = {
    "wav": ("wav", wav_bytes),
    "flac": ("flac", lambda _: SPOKEN.read_bytes()),
    "mp3": ("mp3", lambda pcm: _encoded(pcm, "mp3", "libmp3lame")),
    "ogg": ("ogg", lambda pcm: _encoded(pcm, "ogg", "libopus")),
    "mp4": ("mov", lambda pcm: _encoded(pcm, "mp4", "aac")),
    "m4a": ("mov", lambda pcm: _encoded(pcm, "ipod", "aac")),
    "webm": ("matroska", lambda pcm: _encoded(pcm, "webm", "libopus")),
    "mka": ("matroska", lambda pcm: _encoded(pcm, "matroska", "aac")),
    "aac": ("aac", lambda pcm: _encoded(pcm, "adts", "aac")),
    "aiff": ("aiff", lambda pcm: _encoded(pcm, "aiff", "pcm_s16be")),
    "caf": ("caf", lambda pcm: _encoded(pcm, "caf", "alac")),
    "amr": ("amr", amr_wb),  # AMR-WB, as a Willow device records it
    "mpeg": ("mpeg", lambda pcm: _encoded(pcm, "mpeg", "mp2")),
}


def test_every_format_read_has_a_sample() -> None:
    assert {demuxer for demuxer, _ in SAMPLES.values()} == set(UPLOAD_FORMATS)


@pytest.mark.parametrize("form", SAMPLES)
def test_every_documented_format_is_transcribed(server: Server, form: str) -> None:
    demuxer, make = SAMPLES[form]
    body = make(load_audio(SPOKEN))
    with av.open(io.BytesIO(body)) as container:  # the sample is read by the demuxer it stands for
        assert demuxer in container.format.name.split(","), container.format.name
    answer = httpx.post(
        server.http_url + "/v1/audio/transcriptions",
        files={"file": (f"take.{form}", body)},
        data={"model": "tiny.en"},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    assert wer([SPOKEN_TEXT], [answer.json()["text"]]) < 0.2, answer.text
