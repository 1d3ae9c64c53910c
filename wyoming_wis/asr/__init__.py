"""Speech-to-text: Whisper engines and the session every frontend feeds."""

from .decoder import Segment, TokenLogprob, Word
from .engine import Bias, Transcript, WhisperEngine
from .session import AsrSession, Delta

__all__ = ["AsrSession", "Bias", "Delta", "Segment", "TokenLogprob", "Transcript", "WhisperEngine", "Word"]
