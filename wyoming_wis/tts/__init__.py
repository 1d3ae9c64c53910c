"""Text-to-speech: voices and the sentence-by-sentence speech stream."""

from .piper import PiperEngine
from .stream import SpeechStream

__all__ = ["PiperEngine", "SpeechStream"]
