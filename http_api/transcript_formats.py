"""A transcript in each of OpenAI's response formats: json, text, srt, vtt, verbose_json."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from openai_audio.names import token_logprobs
from wyoming_wis.core import Transcript

FORMATS = ("json", "text", "srt", "vtt", "verbose_json")
DEFAULT = "json"
VERBOSE = "verbose_json"  # the one with segments' measures, and the only one with word times


def usage(transcript: Transcript) -> dict[str, Any]:
    """What whisper-1 reports: the seconds of audio."""
    return {"type": "duration", "seconds": round(transcript.duration, 3)}


def verbose(transcript: Transcript, task: str, words: bool) -> dict[str, Any]:
    """verbose_json: segments with the decoder's measures; a flat `words` list when word times were asked for."""
    body: dict[str, Any] = {
        "task": task,
        "language": "english" if task == "translate" else transcript.language or "",
        "duration": round(transcript.duration, 3),
        "text": transcript.text,
        "segments": [
            {
                "id": index,
                "seek": int(segment.start * 100),  # in 10 ms frames, as Whisper counts
                "start": round(segment.start, 3),
                "end": round(segment.end, 3),
                "text": segment.text,
                "tokens": list(segment.tokens),
                "temperature": segment.temperature,
                "avg_logprob": segment.avg_logprob,
                "compression_ratio": segment.compression_ratio,
                "no_speech_prob": segment.no_speech_prob,
            }
            for index, segment in enumerate(transcript.segments)
        ],
        "usage": usage(transcript),
    }
    if words:
        body["words"] = [
            {"word": word.word.strip(), "start": round(word.start, 3), "end": round(word.end, 3)}
            for word in transcript.words
        ]
    return body


def _timestamp(seconds: float, separator: str) -> str:
    millis = round(seconds * 1000)
    hours, millis = divmod(millis, 3_600_000)
    minutes, millis = divmod(millis, 60_000)
    secs, millis = divmod(millis, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{separator}{millis:03d}"


def srt(transcript: Transcript) -> str:
    return "".join(
        f"{index}\n{_timestamp(s.start, ',')} --> {_timestamp(s.end, ',')}\n{s.text}\n\n"
        for index, s in enumerate(transcript.segments, start=1)
    )


def vtt(transcript: Transcript) -> str:
    cues = "".join(
        f"{_timestamp(s.start, '.')} --> {_timestamp(s.end, '.')}\n{s.text}\n\n" for s in transcript.segments
    )
    return "WEBVTT\n\n" + cues


def response(
    transcript: Transcript, response_format: str, task: str, words: bool, *, logprobs: bool = False
) -> web.Response:
    if response_format == "text":
        return web.Response(text=transcript.text + "\n", content_type="text/plain")
    if response_format == "srt":
        return web.Response(text=srt(transcript), content_type="application/x-subrip")
    if response_format == "vtt":
        return web.Response(text=vtt(transcript), content_type="text/vtt")
    if response_format == VERBOSE:
        return web.json_response(verbose(transcript, task, words))
    body: dict[str, Any] = {"text": transcript.text, "usage": usage(transcript)}
    if logprobs:
        body["logprobs"] = token_logprobs(transcript.logprobs)
    return web.json_response(body)
