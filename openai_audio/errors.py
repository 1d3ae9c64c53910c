"""OpenAI's error object for the core's errors: the HTTP status each code answers with, the field it is about,
and its type by that status. The HTTP API answers with them (http_api/errors.py), the Realtime API sends them in
its `error` events (realtime.py), whatever carries them."""

from __future__ import annotations

from typing import Any

from wyoming_wis.errors import WisError

# core error code -> HTTP status and the request field it is about
_STATUS = {
    "bad-request": 400,
    "unknown-model": 404,
    "unknown-voice": 404,
    "not-installed": 404,
    "download-failed": 502,  # Bad Gateway: the hub, upstream of us, failed
    "unknown-speaker": 404,
    "unknown-wake-word": 404,
    "unsupported-language": 400,
    "unsupported-audio-format": 415,
    "bad-audio": 415,
    "audio-too-long": 400,
    "text-too-long": 400,
    "empty-text": 400,
    "busy": 429,
    "cannot-store": 507,  # Insufficient Storage: a full or read-only data dir, or the cloned voices' quota (RFC 4331)
    "timeout": 408,
}
_PARAM = {
    "unknown-model": "model",
    "unknown-voice": "voice",
    "not-installed": "voice",
    "unknown-speaker": "speaker",
    "unknown-wake-word": "names",
    "unsupported-language": "language",
    "unsupported-audio-format": "file",
    "bad-audio": "file",
    "audio-too-long": "file",
    "text-too-long": "input",
    "empty-text": "input",
}


def status(code: str) -> int:
    """The HTTP status a core error code answers with: 500 for one it does not know."""
    return _STATUS.get(code, 500)


def param(code: str) -> str | None:
    """The request field a core error code is about, if one."""
    return _PARAM.get(code)


def error_type(status: int) -> str:
    """OpenAI's error type for an answer of that status."""
    return "server_error" if status >= 500 else "invalid_request_error"


def error_object(err: WisError) -> dict[str, Any]:
    """The core's error as OpenAI's error object."""
    return {"type": error_type(status(err.code)), "code": err.code, "message": err.message, "param": param(err.code)}
