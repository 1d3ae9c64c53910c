"""Speech-to-text: Whisper engines and the session every frontend feeds."""

from .engine import Bias, Transcript, WhisperEngine
from .session import AsrSession

__all__ = ["AsrSession", "Bias", "Transcript", "WhisperEngine"]
