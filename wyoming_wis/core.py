"""The core every frontend shares: resident models and the sessions built on them.

Frontends hand the core a typed request (`requests.py`) and get back an ASR
session or a speech stream; they never touch an engine's internals or load a
model themselves, and what they need of the engines' types is published here.

XTTS (coqui-tts, PyTorch) is an optional extra: it is imported only when
`--xtts` asks for it, so a server without it starts exactly as before.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from . import shares
from .asr import AsrSession, Bias, Delta, TokenLogprob, Transcript, WhisperEngine
from .asr.decoder import Decoding
from .asr.denoise import Suppressor
from .asr.engine import MAX_PROMPT_CHARS, WHISPER_LANGUAGES
from .asr.session import OnText
from .asr.turn import TurnEnd, TurnLimits
from .asr.turn_model import TurnEngine
from .budget import MemoryBudget
from .catalog import Catalog, Found
from .config import DEEPFILTERNET, CoreSettings
from .errors import BadRequest, StartupError, UnknownModel, UnknownVoice, UnknownWakeWord
from .hass_api import HassNames, read_token
from .household import Household
from .hub import KnownVoice
from .requests import (
    MAX_BEAM_SIZE,
    MAX_SILENCE,
    MIN_SILENCE,
    SENSITIVITIES,
    TASKS,
    AsrRequest,
    Frontend,
    SpeechRequest,
    WakeRequest,
)
from .runtime import Placement, Runtime
from .served import PIPER, Entry, Served
from .tts import Piece, PiperEngine, SpeechCache, SpeechParams, SpeechStream
from .tts.phrasing import SAYABLE
from .tts.stream import SpeechEngine
from .tts.voices import VOICE_NAME, XTTS, Voice, VoiceRegistry, check_name
from .turns.commands import Sentences
from .turns.detector import TurnDetector
from .turns.listening import Listening, OnEvent
from .values import quote
from .wake import Heard, WakeEngine, WakeModels, WakeStream
from .wake.engine import OnHeard

if TYPE_CHECKING:
    from .tts.xtts import XttsEngine

# What frontends use of the engines' types, published here so that they import no engine module.
# What frontends take from the core: the types they handle, and the bounds a request is checked against (for their
# own descriptions of what they accept, e.g. the OpenAPI document).
__all__ = [
    "MAX_PROMPT_CHARS",
    "SAYABLE",
    "VOICE_NAME",
    "WHISPER_LANGUAGES",
    "AsrSession",
    "Core",
    "Decoding",
    "Delta",
    "Heard",
    "OnHeard",
    "OnText",
    "Piece",
    "SpeechStream",
    "TokenLogprob",
    "Transcript",
    "TurnEnd",
    "WakeStream",
]

_LOGGER = logging.getLogger(__name__)
CLOSE_SECONDS = 5.0  # how long stopping waits for model calls already running
ON_DEMAND_VOICES = 2  # Piper voices loaded on first use that are kept loaded (a medium voice holds about 160 MB)
VOICE_IDLE_SECONDS = 30.0  # one of them not asked for in this long, and idle, may be closed for another (and,
# past twice as many, any idle one)
XTTS_VOICES = Path("voices") / "xtts"  # cloned voices, one folder per XTTS model, in the first data dir


class Core:
    def __init__(
        self,
        settings: CoreSettings,
        runtime: Runtime,
        *,
        asr: list[WhisperEngine],
        piper: list[PiperEngine],
        voices: VoiceRegistry,
        xtts: Sequence[XttsEngine] = (),
        turn: TurnEngine | None = None,
        wake: WakeEngine | None = None,
        suppressor: Suppressor | None = None,
        hass_token: str | None = None,
    ) -> None:
        self.settings = settings
        self._hass_token = hass_token  # None: names from Home Assistant are off, and no connection is made
        self.household = Household()  # its names, as last read; every transcription's prompt holds what fits
        self.sentences = Sentences()  # Home Assistant's, with those names: a turn that is a whole command ends at once
        self.suppressor = suppressor  # --noise-suppression: cleans every ASR session's audio
        self.wake = wake  # None: --wake-model none
        self.runtime = runtime
        self.asr = {engine.name: engine for engine in asr}
        self.turn = turn  # Smart Turn, when it is found; without it words and silence decide
        self.default_asr = asr[0]
        self.voices = voices  # every voice a client may ask for, by name
        self._known: tuple[object, tuple[Entry, ...]] = (None, ())  # the hub's list, and its voices as entries
        self._piper = {engine.found.path: engine for engine in piper}  # loaded Piper models, by file
        self._configured_piper = frozenset(self._piper)  # the --voice voices: loaded for good
        self._piper_used: dict[Path, float] = {}  # the Piper models loaded on first use: when each was last asked for
        self.xtts = {engine.name: engine for engine in xtts}  # loaded XTTS models; only ever loaded at start
        self._loading = asyncio.Lock()
        self._housekeeping = ThreadPoolExecutor(1, thread_name_prefix="voices")
        self.budget = MemoryBudget(int(settings.memory_budget_mb * 2**20))  # what clients make us hold, all told
        shares.trust(*settings.hass.hass_address)  # Home Assistant: served first, never refused for a stranger's sake
        self.speech_cache = (
            SpeechCache(
                settings.data_dir[0] / "cache" / "speech",
                int(settings.tts.speech_cache_mb * 1024 * 1024),
                settings.tts.speech_cache_days * 86400,
            )
            if settings.tts.speech_cache_mb
            else None
        )

    @classmethod
    def load(cls, settings: CoreSettings) -> Core:
        """Find, load and warm up every configured model; blocking, and may take seconds."""
        started = time.monotonic()
        xtts_class = _xtts_class() if settings.tts.xtts_model else None  # before anything slow: fail fast
        try:
            hass_token = read_token(settings.hass.hass_token, settings.hass.hass_token_file)
        except ValueError as err:
            raise StartupError(str(err)) from err
        suppressor = None
        if settings.asr.noise_suppression == DEEPFILTERNET:  # (also fails fast: the package may be missing)
            suppressor = Suppressor(settings.asr.noise_suppression_limit_db)
            _LOGGER.info(
                "Noise suppression: DeepFilterNet 3, at most %g dB, on every transcription's audio",
                settings.asr.noise_suppression_limit_db,
            )
        catalog = Catalog(settings.data_dir, settings.allow_download)
        if settings.allow_download:
            catalog.hub.fetch_list()  # once per data dir, in the background: the voices the hub has now
        runtime = Runtime.from_settings(settings)
        language = None if settings.asr.language.lower() == "auto" else settings.asr.language
        asr = [
            WhisperEngine(
                catalog.asr_model(name),
                Placement(runtime, settings.asr.asr_workers, settings.queue_size),
                beam_size=settings.asr.beam_size,
                max_batch=settings.asr.max_batch,
                default_language=language,
                task=settings.asr.task,
                bias=Bias(settings.asr.initial_prompt, tuple(settings.asr.hotwords)),
            )
            for name in dict.fromkeys(settings.asr.asr_model)
        ]
        piper = [_piper(catalog.voice(name), runtime, settings) for name in dict.fromkeys(settings.tts.voice)]
        xtts = []
        if xtts_class is not None and settings.tts.xtts_model:
            found = catalog.xtts_model(settings.tts.xtts_model)
            if not VOICE_NAME.match(found.name):
                raise StartupError(f"XTTS model {found.path}: {found.name!r} is not usable as a voice name")
            xtts.append(
                xtts_class(
                    found,
                    Placement(runtime, settings.tts.tts_workers, settings.queue_size),
                    voices_dir=catalog.writable_dir / XTTS_VOICES / found.name,
                    max_voices=settings.tts.max_cloned_voices,
                    params=SpeechParams(settings.tts.speed, sentence_silence=settings.tts.sentence_silence),
                )
            )
        _unique_names(asr)
        _unique_names([*piper, *xtts])
        voices = VoiceRegistry(catalog, [engine.found for engine in piper], piper[0].name, xtts)
        turn = catalog.turn_model(settings.asr.turn_model)
        wake = None
        if settings.wake.wake_model != ["none"]:
            models = WakeModels(settings.data_dir, settings.wake.wake_model)
            wake = WakeEngine(models, settings.wake, workers=settings.threads)
        turn_engine = None if turn is None else TurnEngine(turn)
        core = cls(
            settings,
            runtime,
            asr=asr,
            piper=piper,
            voices=voices,
            xtts=xtts,
            turn=turn_engine,
            wake=wake,
            suppressor=suppressor,
            hass_token=hass_token,
        )
        for engine in core.engines:
            engine.warm_up()
        if language is not None:
            core.sentences.prepare(language)  # in its thread, meanwhile: building and warming take 0.55-1.75 s
        _LOGGER.info(
            "Loaded Whisper %s and voices %s on %s (%s) in %.1f s",
            ", ".join(core.asr),
            ", ".join(engine.name for engine in [*piper, *xtts]),
            runtime.device,
            runtime.compute_type,
            time.monotonic() - started,
        )
        return core

    @property
    def engines(self) -> list[WhisperEngine | PiperEngine | XttsEngine | TurnEngine]:
        return [*self.asr.values(), *self._piper.values(), *self.xtts.values(), *([self.turn] if self.turn else [])]

    def asr_engine(self, name: str | None) -> WhisperEngine:
        if not name:
            return self.default_asr
        engine = self.asr.get(name)
        if engine is None:
            raise UnknownModel(f"Unknown speech-to-text model {quote(name)} (loaded: {', '.join(self.asr)})")
        return engine

    def resolve(self, request: AsrRequest) -> Decoding:
        """The request checked against what is loaded (model, language, task, beam, bias) and made concrete.

        Pure: no session is opened and nothing held, so a frontend may check a request before its audio comes.
        """
        engine = self.asr_engine(request.model)
        if request.beam_size is not None and not 1 <= request.beam_size <= MAX_BEAM_SIZE:
            raise BadRequest(f"beam_size must be 1 to {MAX_BEAM_SIZE}; got {quote(request.beam_size)}")
        if request.task is not None and request.task not in TASKS:
            raise BadRequest(f"task must be one of {', '.join(TASKS)}; got {quote(request.task)}")
        if request.end_of_turn is not None and request.end_of_turn not in SENSITIVITIES:
            allowed = ", ".join(SENSITIVITIES)
            raise BadRequest(f"vad_sensitivity must be one of {allowed}; got {quote(request.end_of_turn)}")
        if request.max_silence is not None and not MIN_SILENCE <= request.max_silence <= MAX_SILENCE:
            raise BadRequest(f"The silence that ends a turn must be {MIN_SILENCE:g} to {MAX_SILENCE:g} s")
        return Decoding(engine.name, engine.options(request, self.household.names))

    def open_asr(self, request: AsrRequest, *, frontend: Frontend, on_text: OnText | None = None) -> AsrSession:
        """A session for one request; use it as an async context manager, or `close` it once the request ends.

        `on_text` gets partial text as it is recognised (if --partial-results). The session's `finish` counts
        the transcript in the metrics, for `frontend`. With `request.end_of_turn`, `session.turn_end()` returns
        once the server judges the speaker done.
        """
        decoding = self.resolve(request)
        asr = self.settings.asr
        if request.end_of_turn and request.language:
            self.sentences.prepare(request.language)  # built by the turn's first pause, where not yet
        return AsrSession(
            self.asr[decoding.model],
            decoding.options,
            frontend=frontend,
            max_seconds=self.settings.max_audio_seconds,
            hold=self.budget.hold(),
            on_text=on_text if asr.partial_results else None,
            turn=None if request.end_of_turn is None else self._turn_detector(request.end_of_turn, request.max_silence),
            drafts=request.drafts,
            cleaner=None if self.suppressor is None else self.suppressor.stream(self.budget.hold()),
        )

    def _turn_detector(self, sensitivity: str, max_silence: float | None) -> TurnDetector:
        """A turn's detector (turns/detector.py): the server's limits, the turn model, the household's sentences."""
        asr = self.settings.asr
        return TurnDetector(
            sensitivity,
            max_silence=max_silence,
            limits=TurnLimits(max_speech=asr.max_turn_seconds, no_speech=asr.no_speech_seconds),
            turn_model=None if self.turn is None else self.turn.complete,
            commands=self.sentences.judge,
        )

    def listen(self, request: AsrRequest, *, frontend: Frontend, on_event: OnEvent, many: bool = False) -> Listening:
        """Turns of a speaker's audio (`turns/listening.py`): one (a transcript per request), or `many` (the next begins
        as one ends); each turn's events go to `on_event`. Checks the request at once; `close` it when done."""
        return Listening(self, request, frontend=frontend, on_event=on_event, many=many)

    @property
    def names_from_hass(self) -> bool:
        """Whether a token was given: then `keep_household` runs, else no connection is made."""
        return self._hass_token is not None

    async def keep_household(self) -> None:
        """Run until cancelled: keep `household` as Home Assistant names things (needs `names_from_hass`)."""
        assert self._hass_token is not None
        hass = self.settings.hass
        names = HassNames(
            hass.hass_api,
            self._hass_token,
            self._set_household,
            on_address=self.household_address,
            plain_host=hass.hass_plain_host,
        )
        _LOGGER.info("Reading names from Home Assistant at %s", names.url)
        await names.run()

    def _set_household(self, household: Household) -> None:
        self.household = household
        self.sentences.set_household(household)

    def household_address(self, address: str) -> None:
        """Home Assistant's IP address, as the names' connection learns it (hass_api.py): its requests go first."""
        _LOGGER.info("Home Assistant is at %s: its requests go first", address)
        shares.trust(*self.settings.hass.hass_address, address)

    async def unload_idle_models(self) -> None:
        """Run until cancelled: free Whisper models idle for `--unload-after` seconds."""
        idle = self.settings.asr.unload_after
        while True:
            await asyncio.sleep(min(idle / 2, 10.0))
            for engine in self.asr.values():
                await asyncio.to_thread(engine.unload_if_idle, idle)

    async def refresh_voices(self, force: bool = False) -> list[Voice]:
        """The voice list, after picking up changed voice files, manifest and cloned voices."""
        if force or self.voices.stale:  # most requests skip the thread hop
            # in a thread of its own: `describe` must not wait behind audio work in asyncio's shared threads
            await asyncio.get_running_loop().run_in_executor(self._housekeeping, self.voices.refresh, force)
        return self.voices.voices

    async def refresh_wake_words(self) -> None:
        """Pick up wake word models added, removed or changed on disk (looked at every few seconds at most)."""
        if self.wake is not None:
            await asyncio.get_running_loop().run_in_executor(self._housekeeping, self.wake.refresh)

    def open_wake(self, request: WakeRequest, on_heard: OnHeard) -> WakeStream:
        """A stream heard for the wake words `request` names; `close` it once the request ends.

        Each detection goes to `on_heard` as soon as it is heard; `drain()` waits for the audio fed so far.
        """
        if self.wake is None:
            raise UnknownWakeWord("This server offers no wake words (--wake-model none)")
        max_seconds = self.settings.max_audio_seconds if request.recording else math.inf
        return self.wake.open(request.names, self.budget.hold(), on_heard, max_seconds)

    async def speech_stream(self, request: SpeechRequest) -> SpeechStream:
        """A stream in the voice's own manner, at the request's speed if given; `cached=False` skips the cache.

        A `reference` recording speaks with a voice cloned from it for this request only, on the named XTTS
        voice's model or else the first one; it is never stored and its speech never cached. A Piper voice not
        loaded yet is loaded now, once, in a worker thread.
        """
        await self.refresh_voices()
        if request.reference is not None:
            return await self._reference_stream(request, request.reference)
        language, speaker = request.language, request.speaker
        if request.voice_name:
            await self._install(request.voice_name)
        chosen = self.voices.get(request.voice_name, language)
        if request.voice_name and self.voices.find(request.voice_name) is None:
            speaker = None  # it was a speaker of the voice that is not here
        engine = await self._engine(chosen)
        if chosen.engine == XTTS and language:
            self.xtts[chosen.model.name].language(language)  # an unsupported language fails now, before any text
        params = chosen.params(engine.params).but(speed=request.speed)
        cache = self.speech_cache if request.cached else None
        max_chars = self.settings.max_text_chars
        # A Piper voice speaks its one language whatever the request says; XTTS speaks the request's.
        spoken = language if chosen.engine == XTTS else None
        return SpeechStream(engine, speaker or chosen.speaker, max_chars, params, cache=cache, language=spoken)

    async def _install(self, name: str) -> None:
        """A voice the hub has and this machine does not: fetched now, once, while others are served
        (--allow-download), or NotInstalled. A name the hub does not have is left to `voices.get`."""
        if self.voices.find(name) is not None:
            return
        fetch = self.voices.catalog.fetch_voice(name)
        if fetch is not None:
            await asyncio.wrap_future(fetch)
            await self.refresh_voices(force=True)

    async def _reference_stream(self, request: SpeechRequest, reference: bytes) -> SpeechStream:
        if not self.xtts:
            raise BadRequest("Speaking with a reference recording needs XTTS: start the server with --xtts")
        if request.voice_name:
            chosen = self.voices.get(request.voice_name)
            if chosen.engine != XTTS:
                raise BadRequest(
                    f"Voice {quote(request.voice_name)} is a Piper voice; a reference recording needs an XTTS voice"
                )
            engine = self.xtts[chosen.model.name]
        else:
            engine = next(iter(self.xtts.values()))
        engine.language(request.language)
        speech = await engine.reference(reference)
        params = engine.params.but(speed=request.speed)
        return SpeechStream(speech, None, self.settings.max_text_chars, params, language=request.language)

    async def clone_voice(self, name: str, audio: bytes, model: str | None = None) -> dict[str, Any]:
        """A new voice from a recording (3-30 s, audio.UPLOAD_FORMATS), stored, listed at once and after restarts.

        Cloning again under a cloned voice's name replaces that voice. Returns what
        was stored: name, model, created, source_seconds, source_bytes. A new voice
        past --max-cloned-voices, or a data dir that refuses it, is CannotStore, with
        nothing stored.
        """
        engine = self._xtts_for_cloning(model)
        check_name(name)
        await self.refresh_voices(force=True)
        if self.voices.taken(name) and name not in engine.cloned_voices:
            raise BadRequest(f"A voice called {quote(name)} exists already; choose another name")
        info = await engine.clone(name, audio)
        await self.refresh_voices(force=True)
        return info

    async def remove_voice(self, name: str) -> None:
        """Delete a cloned voice; other voices cannot be removed this way."""
        check_name(name)
        for engine in self.xtts.values():
            if name in engine.cloned_voices:
                await asyncio.to_thread(engine.remove, name)
                await self.refresh_voices(force=True)
                return
        raise UnknownVoice(f"No cloned voice {quote(name)} (cloned voices: {', '.join(self.cloned_voices) or 'none'})")

    @property
    def cloned_voices(self) -> list[str]:
        return [name for engine in self.xtts.values() for name in engine.cloned_voices]

    def _xtts_for_cloning(self, model: str | None) -> XttsEngine:
        if not self.xtts:
            raise BadRequest("Voice cloning needs XTTS: start the server with --xtts")
        if model is None:
            return next(iter(self.xtts.values()))
        engine = self.xtts.get(model)
        if engine is None:
            raise UnknownModel(f"Unknown XTTS model {quote(model)} (loaded: {', '.join(self.xtts)})")
        return engine

    async def _engine(self, voice: Voice) -> SpeechEngine:
        if voice.engine == XTTS:
            return self.xtts[voice.model.name]
        return await self._piper_engine(voice.model)

    async def _piper_engine(self, model: Found) -> PiperEngine:
        """The loaded model of a Piper voice; one not loaded yet is loaded now, and one loaded on first use too many
        is let go (`_let_go_of_voices`)."""
        engine = self._piper.get(model.path)
        if engine is None:
            async with self._loading:
                engine = self._piper.get(model.path)
                if engine is None:
                    engine = await asyncio.to_thread(_piper, model, self.runtime, self.settings)
                    self._piper[model.path] = engine
        if model.path not in self._configured_piper:
            self._piper_used.pop(model.path, None)
            self._piper_used[model.path] = time.monotonic()  # the newest last
            self._let_go_of_voices()
        return engine

    def _let_go_of_voices(self) -> None:
        """Past ON_DEMAND_VOICES voices loaded on first use, close the least recently asked for that runs nothing
        and was not asked for in VOICE_IDLE_SECONDS (a reply may still be streaming text to it); past twice as many,
        the least recently asked for that runs nothing now. Clients naming one voice after another (every voice of
        the hub, with downloads on) cannot make the server hold them all. A closed voice loads again on its use."""
        now = time.monotonic()
        for keep, idle in ((ON_DEMAND_VOICES, VOICE_IDLE_SECONDS), (2 * ON_DEMAND_VOICES, 0.0)):
            for path, used in list(self._piper_used.items())[:-1]:  # the voice just asked for stays
                if len(self._piper_used) <= keep:
                    break
                engine = self._piper[path]
                if now - used >= idle and engine.scheduler.pending == 0:
                    del self._piper_used[path], self._piper[path]
                    engine.close()
                    _LOGGER.info("Closed Piper voice %s, unused %.0f s, to make room", engine.name, now - used)

    # -- the read-only view frontends and /metrics read (served.py) -------------

    def served(self) -> Served:
        """What this core serves now; cheap, and safe from any thread (metrics read it in a scrape's thread).

        Voices are as last refreshed: `await refresh_voices()` first to pick up changes on disk.
        """
        models = [engine.entry() for engine in self.engines]
        wake = self.wake.entries() if self.wake is not None else []
        resident = {(model.engine, model.name): model for model in models}
        return Served(
            models=(*models, *wake),
            voices=tuple(
                _voice_entry(voice, resident.get((voice.engine, voice.model.name))) for voice in self.voices.voices
            ),
            available_voices=self._available(),
            downloads=self.voices.catalog.allow_download,
            openai_voices=MappingProxyType(self.voices.openai_names),
            partial_results=self.settings.asr.partial_results,
            budget_used=self.budget.used,
            budget_limit=self.budget.limit,
            household_names=len(self.household.names),
        )

    def _available(self) -> tuple[Entry, ...]:
        """The voices the hub has that are not here, in its list's order; entries made once per list."""
        known = self.voices.catalog.hub.voices
        if self._known[0] is not known:
            self._known = (known, tuple(_known_entry(voice) for voice in known.values()))
        here = {voice.name for voice in self.voices.voices}
        return tuple(entry for entry in self._known[1] if entry.name not in here)

    def close(self, timeout: float = CLOSE_SECONDS) -> None:
        """Stop every engine, then wait up to `timeout` s in all for the model calls still running.

        Blocking. Waiting calls are dropped at once; a running call cannot be interrupted, so it is let finish
        (its caller gets the answer) rather than left running in a thread while the process exits.
        """
        for engine in self.engines:
            engine.close()
        if self.wake is not None:
            self.wake.close()
        shares.trust()
        self._housekeeping.shutdown(wait=False)
        self.voices.catalog.hub.close()
        self.sentences.close()
        if self.suppressor is not None:
            self.suppressor.close()
        deadline = time.monotonic() + timeout
        schedulers = [*(engine.scheduler for engine in self.engines), *(engine.vad for engine in self.asr.values())]
        if self.wake is not None:
            schedulers += self.wake.schedulers
        late = [name for scheduler in schedulers for name in scheduler.join(max(0.0, deadline - time.monotonic()))]
        if late:
            _LOGGER.warning("Model calls still running after %.0f s, not waited for: %s", timeout, ", ".join(late))


def _known_entry(voice: KnownVoice) -> Entry:
    """A voice the hub has, as clients see it before its first use."""
    return Entry(
        voice.name,
        PIPER,
        (voice.language,),
        loaded=False,
        version=None,
        description=voice.description,
        speakers=voice.speakers,
        installed=False,
    )


def _voice_entry(voice: Voice, model: Entry | None) -> Entry:
    """A voice, loaded and busy as the model that speaks it (None: a Piper voice not used yet)."""
    return Entry(
        voice.name,
        voice.engine,
        tuple(voice.languages),
        model is not None,
        voice.model.version,
        voice.description,
        speakers=tuple(voice.speakers),
        calls=model.calls if model is not None else (),
    )


def _piper(found: Found, runtime: Runtime, settings: CoreSettings) -> PiperEngine:
    tts = settings.tts
    params = SpeechParams(tts.speed, tts.noise_scale, tts.noise_w, tts.sentence_silence)
    return PiperEngine(found, Placement(runtime, tts.tts_workers, settings.queue_size), params=params)


def _xtts_class() -> type[XttsEngine]:
    """The XTTS engine, imported only now: torch and coqui-tts come with the optional extra."""
    try:
        from .tts.xtts import XttsEngine
    except ImportError as err:
        raise StartupError(
            f"--xtts needs the xtts extra, which is not installed here ({err}). "
            "Install it with: pip install 'wyoming-wis[xtts]'"
        ) from err
    return XttsEngine


def _unique_names(engines: Sequence[WhisperEngine | PiperEngine | XttsEngine]) -> None:
    seen: set[str] = set()
    for engine in engines:
        if engine.name in seen:
            raise StartupError(f"Two models are both called {engine.name!r}; load each one once")
        seen.add(engine.name)
