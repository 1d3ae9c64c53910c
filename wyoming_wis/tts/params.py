"""How a voice speaks: speed, variation and pauses, set per voice and per request."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import BadRequest
from ..values import MAX_NOISE, MAX_SENTENCE_SILENCE, MAX_SPEED, MIN_SPEED


@dataclass(frozen=True)
class SpeechParams:
    """None means the voice's own value (from its .onnx.json)."""

    speed: float = 1.0  # 2.0 speaks twice as fast
    noise_scale: float | None = None  # variation in the voice
    noise_w: float | None = None  # variation in phoneme length
    sentence_silence: float = 0.0  # seconds of silence after each sentence

    def __post_init__(self) -> None:
        if not MIN_SPEED <= self.speed <= MAX_SPEED:
            raise BadRequest(f"speed must be between {MIN_SPEED} and {MAX_SPEED}, got {self.speed}")
        for name in ("noise_scale", "noise_w"):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value <= MAX_NOISE:
                raise BadRequest(f"{name} must be between 0 and {MAX_NOISE:g}, got {value}")
        if not 0.0 <= self.sentence_silence <= MAX_SENTENCE_SILENCE:
            raise BadRequest(
                f"sentence_silence must be between 0 and {MAX_SENTENCE_SILENCE:g} seconds, got {self.sentence_silence}"
            )

    def but(self, **changes: float | None) -> SpeechParams:
        """These parameters with a request's own changes (None leaves a value as it is)."""
        return replace(self, **{name: value for name, value in changes.items() if value is not None})
