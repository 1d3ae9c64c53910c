"""Whisper through faster-whisper / CTranslate2, one engine per loaded model."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
from faster_whisper import WhisperModel

from ..audio import WHISPER_RATE
from ..catalog import Found
from ..errors import UnsupportedLanguage
from ..runtime import Runtime
from ..scheduler import Scheduler
from .session import AsrSession

_LOGGER = logging.getLogger(__name__)


@dataclass(frozen=True)
class Segment:
    start: float
    end: float
    text: str


@dataclass(frozen=True)
class Transcript:
    text: str
    language: str | None  # forced or detected; None only for empty audio with detection on
    duration: float  # seconds of audio
    segments: list[Segment] = field(default_factory=list)


class WhisperEngine:
    """One resident Whisper model; transcriptions run in its scheduler's threads."""

    def __init__(
        self,
        found: Found,
        runtime: Runtime,
        *,
        workers: int,
        queue_size: int,
        beam_size: int,
        default_language: str | None,
    ) -> None:
        self.name = found.name
        self.found = found
        self.beam_size = beam_size
        _LOGGER.info("Loading Whisper %s from %s (%s)", found.name, found.path, found.source)
        self.model = WhisperModel(
            str(found.path),
            device=runtime.device,
            device_index=runtime.device_index,
            compute_type=runtime.compute_type,
            cpu_threads=runtime.cpu_threads,
            num_workers=workers,
        )
        self.multilingual: bool = self.model.model.is_multilingual
        self.languages: list[str] = list(self.model.supported_languages)
        self.default_language: str | None = None
        if default_language:
            try:
                self.default_language = self.language(default_language)
            except UnsupportedLanguage:
                _LOGGER.warning(
                    "Whisper %s does not support --language %s; it will detect", self.name, default_language
                )
        self.scheduler = Scheduler(f"whisper-{found.name}", workers, queue_size)

    def language(self, requested: str | None) -> str | None:
        """A request's language as Whisper names it; None means detect.

        Accepts `en`, `en-US`, `en_US` and `auto`; an English-only model needs no detection.
        """
        if not requested or requested.lower() == "auto":
            return self.default_language or (None if self.multilingual else "en")
        code = requested.replace("_", "-").split("-")[0].lower()
        if code not in self.languages:
            raise UnsupportedLanguage(
                f"Model {self.name!r} does not support language {requested!r}"
                + ("" if self.multilingual else " (it is English-only)")
            )
        return code

    def session(self, language: str | None, max_seconds: float) -> AsrSession:
        return AsrSession(self, self.language(language), max_seconds)

    async def transcribe(self, audio: np.ndarray, language: str | None) -> Transcript:
        return await self.scheduler.run(self.transcribe_sync, audio, language)

    def transcribe_sync(self, audio: np.ndarray, language: str | None) -> Transcript:
        """Transcribe 16 kHz mono float32 audio; blocking, so call it from a worker."""
        duration = len(audio) / WHISPER_RATE
        if len(audio) == 0:
            return Transcript("", language, 0.0)
        pieces, info = self.model.transcribe(audio, language=language, beam_size=self.beam_size)
        segments = [Segment(piece.start, piece.end, piece.text.strip()) for piece in pieces]
        text = " ".join(segment.text for segment in segments if segment.text)
        return Transcript(text, info.language, duration, segments)

    def warm_up(self) -> None:
        """One short pass through encoder and decoder so the first request is not slow."""
        pieces, _ = self.model.transcribe(
            np.zeros(WHISPER_RATE, dtype=np.float32),
            language=self.default_language or self.languages[0],
            beam_size=self.beam_size,
            temperature=0.0,
            max_new_tokens=4,
            condition_on_previous_text=False,
        )
        list(pieces)

    def close(self) -> None:
        self.scheduler.close()
