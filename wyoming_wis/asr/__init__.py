"""Speech-to-text: Whisper engines and the session every frontend feeds."""

from .engine import Transcript, WhisperEngine
from .session import AsrSession

__all__ = ["AsrSession", "Transcript", "WhisperEngine"]
