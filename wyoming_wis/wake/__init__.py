"""Wake words: microWakeWord and openWakeWord models, heard in many streams at once."""

from .engine import WakeEngine, WakeStream
from .listener import Heard
from .models import WakeModel, WakeModels

__all__ = ["Heard", "WakeEngine", "WakeModel", "WakeModels", "WakeStream"]
