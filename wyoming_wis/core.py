"""The core every frontend shares: resident models and the sessions built on them.

Frontends ask the core for an ASR session or a speech stream by model or voice
name; they never touch an engine's internals or load a model themselves.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import TypeVar

from .asr import AsrSession, Bias, WhisperEngine
from .asr.session import OnText
from .catalog import Catalog, Found
from .config import Settings
from .errors import StartupError, UnknownModel
from .runtime import Runtime
from .tts import PiperEngine, SpeechCache, SpeechParams, SpeechStream
from .tts.voices import Voice, VoiceRegistry

_LOGGER = logging.getLogger(__name__)
Engine = TypeVar("Engine", WhisperEngine, PiperEngine)


class Core:
    def __init__(
        self,
        settings: Settings,
        runtime: Runtime,
        asr: list[WhisperEngine],
        voices: list[PiperEngine],
        registry: VoiceRegistry,
    ) -> None:
        self.settings = settings
        self.runtime = runtime
        self.asr = {engine.name: engine for engine in asr}
        self.default_asr = asr[0]
        self.voices = registry
        self._piper = {engine.found.path: engine for engine in voices}  # loaded Piper models, by file
        self._loading = asyncio.Lock()
        self.speech_cache = (
            SpeechCache(
                settings.data_dir[0] / "cache" / "speech",
                int(settings.speech_cache_mb * 1024 * 1024),
                settings.speech_cache_days * 86400,
            )
            if settings.speech_cache_mb
            else None
        )

    @classmethod
    def load(cls, settings: Settings) -> Core:
        """Find, load and warm up every configured model; blocking, and may take seconds."""
        started = time.monotonic()
        catalog = Catalog(settings.data_dir, settings.allow_download)
        runtime = Runtime.from_settings(settings)
        language = None if settings.language.lower() == "auto" else settings.language
        asr = [
            WhisperEngine(
                catalog.asr_model(name),
                runtime,
                workers=settings.asr_workers,
                queue_size=settings.queue_size,
                beam_size=settings.beam_size,
                max_batch=settings.max_batch,
                default_language=language,
                task=settings.task,
                bias=Bias(settings.initial_prompt, tuple(settings.hotwords)),
            )
            for name in dict.fromkeys(settings.asr_model)
        ]
        voices = [_piper(catalog.voice(name), runtime, settings) for name in dict.fromkeys(settings.voice)]
        _unique_names(asr)
        _unique_names(voices)
        registry = VoiceRegistry(catalog, [voice.found for voice in voices], voices[0].name)
        core = cls(settings, runtime, asr, voices, registry)
        for engine in core.engines:
            engine.warm_up()
        _LOGGER.info(
            "Loaded Whisper %s and voices %s on %s (%s) in %.1f s",
            ", ".join(core.asr),
            ", ".join(voice.name for voice in voices),
            runtime.device,
            runtime.compute_type,
            time.monotonic() - started,
        )
        return core

    @property
    def engines(self) -> list[WhisperEngine | PiperEngine]:
        return [*self.asr.values(), *self._piper.values()]

    def asr_engine(self, name: str | None) -> WhisperEngine:
        if not name:
            return self.default_asr
        engine = self.asr.get(name)
        if engine is None:
            raise UnknownModel(f"Unknown speech-to-text model {name!r} (loaded: {', '.join(self.asr)})")
        return engine

    def asr_session(
        self,
        model: str | None = None,
        language: str | None = None,
        names: Sequence[str] = (),
        terms: Sequence[str] = (),
        on_text: OnText | None = None,
    ) -> AsrSession:
        """A session for one request; `on_text` gets partial text as it is recognised (if enabled)."""
        engine = self.asr_engine(model)
        return AsrSession(
            engine,
            engine.options(language, names, terms),
            self.settings.max_audio_seconds,
            on_text if self.settings.partial_results else None,
        )

    async def unload_idle_models(self) -> None:
        """Run until cancelled: free Whisper models idle for `--unload-after` seconds."""
        idle = self.settings.unload_after
        while True:
            await asyncio.sleep(min(idle / 2, 10.0))
            for engine in self.asr.values():
                await asyncio.to_thread(engine.unload_if_idle, idle)

    async def refresh_voices(self) -> list[Voice]:
        """The voice list, after picking up changed voice files and manifest."""
        if self.voices.stale:  # most requests skip the thread hop
            await asyncio.to_thread(self.voices.refresh)
        return self.voices.voices

    async def speech_stream(
        self,
        voice: str | None = None,
        speaker: str | None = None,
        language: str | None = None,
        speed: float | None = None,
        cached: bool = True,
    ) -> SpeechStream:
        """A stream in the voice's own manner, at `speed` if given (0.25 to 4); `cached=False` skips the cache.

        A voice not loaded yet is loaded now, once, in a worker thread.
        """
        await self.refresh_voices()
        chosen = self.voices.get(voice, language)
        engine = await self._engine(chosen.model)
        params = chosen.params(engine.params).but(speed=speed)
        cache = self.speech_cache if cached else None
        return SpeechStream(engine, speaker or chosen.speaker, self.settings.max_text_chars, params, cache)

    async def _engine(self, model: Found) -> PiperEngine:
        engine = self._piper.get(model.path)
        if engine is None:
            async with self._loading:
                engine = self._piper.get(model.path)
                if engine is None:
                    engine = await asyncio.to_thread(_piper, model, self.runtime, self.settings)
                    self._piper[model.path] = engine
        return engine

    def close(self) -> None:
        for engine in self.engines:
            engine.close()


def _piper(found: Found, runtime: Runtime, settings: Settings) -> PiperEngine:
    params = SpeechParams(settings.speed, settings.noise_scale, settings.noise_w, settings.sentence_silence)
    return PiperEngine(found, runtime, workers=settings.tts_workers, queue_size=settings.queue_size, params=params)


def _unique_names(engines: list[Engine]) -> list[Engine]:
    seen: set[str] = set()
    for engine in engines:
        if engine.name in seen:
            raise StartupError(f"Two models are both called {engine.name!r}; load each one once")
        seen.add(engine.name)
    return engines
