"""Speech-to-text: Whisper engines and the session every frontend feeds."""

from .decoder import Segment, Word
from .engine import Bias, Transcript, WhisperEngine
from .session import AsrSession

__all__ = ["AsrSession", "Bias", "Segment", "Transcript", "WhisperEngine", "Word"]
