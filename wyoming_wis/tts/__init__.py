"""Text-to-speech: voices, how they speak, and the phrase-by-phrase speech stream."""

from .cache import SpeechCache
from .params import SpeechParams
from .piper import PiperEngine
from .stream import Piece, SpeechStream

__all__ = ["PiperEngine", "SpeechCache", "Piece", "SpeechParams", "SpeechStream"]
