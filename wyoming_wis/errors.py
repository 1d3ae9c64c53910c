"""Errors a client can cause, each with a stable machine-readable code.

Frontends turn these into their own protocol's errors (a Wyoming `error` event,
an HTTP status with a JSON body); the code never changes once published.
"""


class WisError(Exception):
    """An error to report to the client; the server carries on."""

    code = "internal-error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BadRequest(WisError):
    code = "bad-request"


class UnknownModel(WisError):
    code = "unknown-model"


class UnknownVoice(WisError):
    code = "unknown-voice"


class NotInstalled(UnknownVoice):
    """A voice the hub has but this machine does not, with downloads off: the message says how to allow them."""

    code = "not-installed"


class DownloadFailed(WisError):
    """A fetch from the Hugging Face Hub failed: unreachable, a file missing there, cut short, or not the bytes its
    list says; nothing of it was kept."""

    code = "download-failed"


class UnknownSpeaker(WisError):
    code = "unknown-speaker"


class UnknownWakeWord(WisError):
    code = "unknown-wake-word"


class UnknownProgram(WisError):
    code = "unknown-program"


class UnsupportedLanguage(WisError):
    code = "unsupported-language"


class UnsupportedAudioFormat(WisError):
    code = "unsupported-audio-format"


class AudioTooLong(WisError):
    code = "audio-too-long"


class BadAudio(WisError):
    """Reference audio for a cloned voice that cannot be used: unreadable, too short, too long or too big."""

    code = "bad-audio"


class EmptyText(WisError):
    """Text with nothing to say (only spaces, punctuation or emoji): refused rather than answered with silence."""

    code = "empty-text"


class TextTooLong(WisError):
    code = "text-too-long"


class Busy(WisError):
    """No room now: a full queue, a wait past the client's patience, or the memory budget spent."""

    code = "busy"

    def __init__(self, message: str, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after  # seconds until a retry may succeed, for HTTP's Retry-After


class CannotStore(WisError):
    """Nothing was stored: the data dir is full or read-only, or the quota of what a client may store is spent."""

    code = "cannot-store"


class ShuttingDown(WisError):
    """The server stops (SIGTERM) while the request is open; another replica, or this one restarted, will answer."""

    code = "shutting-down"


class Timeout(WisError):
    """The client went quiet: mid-event, mid-request body, or for too long on an idle connection."""

    code = "timeout"


class StartupError(WisError):
    """The server cannot start as configured; the message says why."""

    code = "startup-error"


class ModelNotFound(StartupError):
    """The message names every place that was searched."""

    code = "model-not-found"
