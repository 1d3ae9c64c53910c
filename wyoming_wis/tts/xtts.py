"""XTTS-v2 through coqui-tts (PyTorch): 17 languages, studio speakers, and voices cloned from a short recording.

The model is the folder of the XTTS-v2 release (config.json, model.pth, vocab.json,
speakers_xtts.pth), loaded with coqui-tts's own `Xtts.load_checkpoint`.

One call uses the model at a time: coqui's GPT keeps the conditioning of the call
in progress on the module itself (`store_prefix_emb`), so two generations at once
would mix their voices. Extra scheduler workers therefore only wait for the lock;
the scheduler's queue is still what bounds the backlog.

A cloned voice is its conditioning latents, computed once from the reference
recording and stored as `voices_dir/NAME.safetensors` with a `NAME.json` sidecar,
so it costs nothing at speaking time and survives a restart. Each voice carries a
digest of its latents: the speech cache keys on it, so a voice cloned again under
the same name never gets the old voice's cached speech.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import json
import logging
import textwrap
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save
from sentence_stream import SentenceBoundaryDetector
from TTS.tts.configs.xtts_config import XttsConfig
from TTS.tts.models.xtts import Xtts

from ..audio import AudioFormat, decode_file
from ..catalog import Found
from ..errors import AudioTooLong, BadAudio, BadRequest, StartupError, TextTooLong, UnknownSpeaker, UnsupportedLanguage
from ..files import atomic_write
from ..runtime import Runtime
from ..scheduler import Pace, Scheduler
from ..served import XTTS, Calls, Entry
from .params import SpeechParams
from .voices import check_name, file_stamp

_LOGGER = logging.getLogger(__name__)

MAX_REFERENCE_BYTES = 10 * 1024 * 1024
MIN_REFERENCE_SECONDS = 3.0
MAX_REFERENCE_SECONDS = 30.0
STREAM_CHUNK_TOKENS = 20  # GPT tokens per streamed piece (~0.9 s of speech for XTTS-v2), as coqui's default
STREAM_QUEUE_PIECES = 4  # pieces a worker may run ahead of a slow reader before it waits
_VOICE_SUFFIX = ".safetensors"
_LATENT_KEYS = ("gpt_cond_latent", "speaker_embedding")


@dataclass(frozen=True)
class XttsVoice:
    """What XTTS speaks with: the GPT conditioning and the decoder's speaker embedding."""

    name: str
    gpt_cond_latent: torch.Tensor  # [1, 32, GPT width]
    speaker_embedding: torch.Tensor  # [1, 512, 1]
    cloned: bool

    @cached_property
    def digest(self) -> str:
        """What the voice sounds like, in a few bytes: equal latents, equal digest."""
        digest = hashlib.sha256()
        for tensor in (self.gpt_cond_latent, self.speaker_embedding):
            digest.update(tensor.detach().cpu().float().contiguous().numpy().tobytes())
        return digest.hexdigest()[:16]


class XttsEngine:
    """One XTTS-v2 model: its studio speakers and cloned voices, speaking any of its languages."""

    def __init__(
        self,
        found: Found,
        runtime: Runtime,
        *,
        workers: int,
        queue_size: int,
        voices_dir: Path,
        params: SpeechParams | None = None,
        stream_chunk_tokens: int = STREAM_CHUNK_TOKENS,
    ) -> None:
        self.name = found.name
        self.found = found
        self.params = params or SpeechParams()  # speed and sentence_silence apply; noise settings are Piper's
        self.stream_chunk_tokens = stream_chunk_tokens
        folder = Path(found.path)
        _LOGGER.info("Loading XTTS model %s from %s (%s)", found.name, folder, found.source)
        self.device = _device(runtime, found.name)
        if self.device.type == "cpu":
            torch.set_num_threads(runtime.cpu_threads)
        self.config = XttsConfig()
        self.config.load_json(str(folder / "config.json"))
        with _quiet("transformers.configuration_utils"):
            self.model = Xtts(self.config)  # what the deprecated Xtts.init_from_config does
            self.model.load_checkpoint(self.config, checkpoint_dir=str(folder), eval=True, use_deepspeed=False)
        self.model.to(self.device)
        self._lock = threading.Lock()  # one call on the model at a time, see the module docstring
        args = self.config.model_args
        self.languages: list[str] = _speakable(self.model, self.config.languages)
        self.format = AudioFormat(rate=args.output_sample_rate, width=2, channels=1)
        self.reference_rate: int = self.config.audio.sample_rate  # the rate the conditioning is computed at
        # HiFi-GAN upsamples by output_hop_length, so one GPT token is code_stride_len input samples.
        self._overlap = min(1024, args.gpt_code_stride_len * args.output_sample_rate // args.input_sample_rate)
        self._builtin = _builtin_voices(self.model)
        self.voices_dir = Path(voices_dir)
        try:
            self.voices_dir.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise StartupError(f"Cannot create the XTTS voices dir {self.voices_dir}: {err}") from err
        self._table = threading.Lock()  # guards _voices and _files, changed by clones and rescans
        self._voices: dict[str, XttsVoice] = {}
        self._files: dict[str, tuple[int, int]] = {}  # the stored file each cloned voice was read from
        self.rescan()
        stat = (folder / "model.pth").stat()  # a changed model must not be mistaken for the old one
        self.identity = f"{found.name}:{folder}:{stat.st_size}:{stat.st_mtime_ns}"
        self.description = f"XTTS-v2 {found.name} ({len(self.languages)} languages, voice cloning)"
        self.scheduler = Scheduler(f"xtts-{found.name}", workers, queue_size, engine=XTTS, model=found.name)
        _LOGGER.info(
            "XTTS model %s on %s: %d studio speakers, %d cloned voices in %s",
            found.name,
            self.device,
            len(self._builtin),
            len(self._voices),
            self.voices_dir,
        )

    # -- speakers and languages ---------------------------------------------

    @property
    def studio_speakers(self) -> list[str]:
        return list(self._builtin)

    @property
    def cloned_voices(self) -> list[str]:
        return sorted(self._voices)

    @property
    def speakers(self) -> list[str]:
        """Studio speakers of the release, then the cloned voices."""
        return self.studio_speakers + self.cloned_voices

    def voice(self, speaker: str | None) -> XttsVoice:
        """A speaker by name; None is the first studio speaker (or cloned voice)."""
        voices = self._voices
        if not speaker:
            for voice in (*self._builtin.values(), *voices.values()):
                return voice
            raise UnknownSpeaker(f"XTTS model {self.name!r} has no speakers: clone a voice or send a reference")
        voice = voices.get(speaker) or self._builtin.get(speaker)
        if voice is None:
            known = ", ".join(self.speakers[:20]) + (", ..." if len(self.speakers) > 20 else "")
            raise UnknownSpeaker(f"XTTS model {self.name!r} has no speaker {speaker!r} (speakers: {known or 'none'})")
        return voice

    def speaker_id(self, speaker: str | None) -> tuple[str, str]:
        """The speaker's name and the digest of its latents: a voice cloned again gets a new cache key."""
        voice = self.voice(speaker)
        return voice.name, voice.digest

    def language(self, language: str | None) -> str:
        """XTTS's code for a language ("en-US" -> "en", "zh" -> "zh-cn"); None is English."""
        if not language:
            return "en" if "en" in self.languages else self.languages[0]
        code = language.strip().lower().replace("_", "-")
        for candidate in (code, code.split("-")[0], "zh-cn" if code.startswith("zh") else ""):
            if candidate in self.languages:
                return candidate
        raise UnsupportedLanguage(
            f"XTTS model {self.name!r} does not speak {language!r} (languages: {', '.join(self.languages)})"
        )

    # -- speaking -----------------------------------------------------------

    async def stream(
        self,
        text: str,
        speaker: str | None,
        params: SpeechParams,
        pace: Pace,
        urgent: bool = False,  # XTTS always streams its first sentence in pieces
        language: str | None = None,
    ) -> AsyncIterator[bytes]:
        """Speech in pieces as XTTS writes it: the first one leaves long before the sentence is done."""
        async for piece in self.speak(text, self.voice(speaker), params, pace, language):
            yield piece

    async def speak(
        self, text: str, voice: XttsVoice, params: SpeechParams, pace: Pace, language: str | None = None
    ) -> AsyncIterator[bytes]:
        """`stream` with the voice itself, which may be one made for this request only.

        The worker thread hands pieces over through a bounded pipe, so a slow reader
        holds the worker back instead of piling up audio; a reader that stops early
        ends the synthesis at the next piece.
        """
        code = self.language(language)
        pipe = _Pipe(asyncio.get_running_loop(), STREAM_QUEUE_PIECES)
        job = asyncio.ensure_future(self.scheduler.run(self._stream_sync, pipe, text, voice, code, params, pace=pace))
        job.add_done_callback(lambda _: pipe.finish())
        try:
            while (piece := await pipe.receive()) is not None:
                yield piece
            await job  # the worker's error, if it had one
        finally:
            pipe.close()
            if not job.done():
                job.cancel()  # drops it if it is still waiting for a worker
            elif not job.cancelled():
                job.exception()  # seen; it was raised above unless the reader left early

    async def synthesize(
        self, text: str, speaker: str | None = None, language: str | None = None, params: SpeechParams | None = None
    ) -> bytes:
        """All of the speech at once, each sentence made whole (not streamed)."""
        voice, code = self.voice(speaker), self.language(language)
        return await self.scheduler.run(self.synthesize_sync, text, voice, code, params or self.params)

    def synthesize_sync(self, text: str, voice: XttsVoice, language: str, params: SpeechParams | None = None) -> bytes:
        """Blocking, for a worker thread."""
        with self._lock:
            return b"".join(self._speak(text, voice, language, params or self.params, chunk_tokens=0))

    async def reference(self, audio: bytes) -> ReferenceSpeech:
        """A voice made from a recording for one request: never stored, never listed, never cached."""
        _check_reference_size(audio)
        voice = await self.scheduler.run(self._reference_sync, audio)
        return ReferenceSpeech(self, voice)

    def _reference_sync(self, audio: bytes) -> XttsVoice:
        samples = _decode(audio, self.reference_rate)  # outside the lock: it does not need the model
        with self._lock:
            return self._conditioning("(reference)", samples, cloned=False)

    def _stream_sync(self, pipe: _Pipe, text: str, voice: XttsVoice, language: str, params: SpeechParams) -> None:
        if pipe.closed:
            return
        with self._lock:
            try:
                for piece in self._speak(text, voice, language, params, chunk_tokens=self.stream_chunk_tokens):
                    pipe.send(piece)
            except _ReaderGone:
                _LOGGER.debug("XTTS stream ended early: its reader has gone")

    def _speak(
        self, text: str, voice: XttsVoice, language: str, params: SpeechParams, chunk_tokens: int
    ) -> Iterator[bytes]:
        """PCM pieces, sentence by sentence; chunk_tokens=0 gives one piece per sentence."""
        tokenizer, config = self.model.tokenizer, self.config
        limit = tokenizer.char_limits.get(language.split("-")[0], 250)
        silence = bytes(int(params.sentence_silence * self.format.rate) * self.format.bytes_per_frame)
        for sentence in _sentences(text, limit):
            # coqui asserts this deep inside; a clear error here instead
            if len(tokenizer.encode(sentence.lower(), lang=language)) >= config.model_args.gpt_max_text_tokens:
                raise TextTooLong(f"A sentence is too long for XTTS: {sentence[:60]!r}...")
            chunks = self.model.inference_stream(
                sentence,
                language,
                voice.gpt_cond_latent,
                voice.speaker_embedding,
                stream_chunk_size=chunk_tokens,
                overlap_wav_len=self._overlap,
                temperature=config.temperature,
                length_penalty=config.length_penalty,
                repetition_penalty=config.repetition_penalty,
                top_k=config.top_k,
                top_p=config.top_p,
                speed=params.speed,
                enable_text_splitting=False,
            )
            for chunk in chunks:
                if chunk.numel():
                    yield _pcm(chunk)
            if silence:
                yield silence

    def warm_up(self) -> None:
        if self.speakers:
            self.synthesize_sync("Ready.", self.voice(None), self.language(None))

    def close(self) -> None:
        self.scheduler.close()

    def entry(self) -> Entry:
        """The model as the core's view lists it (served.py): loaded at start, for as long as the server runs."""
        languages, speakers = tuple(self.languages), tuple(self.speakers)
        calls = (Calls.of(self.scheduler),)
        return Entry(
            self.name, XTTS, languages, True, self.found.version, self.description, speakers=speakers, calls=calls
        )

    # -- cloning ------------------------------------------------------------

    async def clone(self, name: str, audio: bytes) -> dict[str, Any]:
        """Store a new voice (or replace a cloned one) from a recording of 3-30 s in any format PyAV reads."""
        name = self._check_new_name(name)
        _check_reference_size(audio)
        return await self.scheduler.run(self._clone_sync, name, audio)

    def remove(self, name: str) -> None:
        """Forget a cloned voice and delete its files; blocking (file system)."""
        with self._table:
            if name not in self._voices:
                raise UnknownSpeaker(f"XTTS model {self.name!r} has no cloned voice {name!r}")
            self._voices = {key: voice for key, voice in self._voices.items() if key != name}
            self._files.pop(name, None)
            for suffix in (_VOICE_SUFFIX, ".json"):
                (self.voices_dir / f"{name}{suffix}").unlink(missing_ok=True)

    def rescan(self) -> None:
        """Pick up voices cloned or removed by another server sharing the data dir; cheap when none were."""
        files = {path.name[: -len(_VOICE_SUFFIX)]: path for path in self.voices_dir.glob(f"*{_VOICE_SUFFIX}")}
        stamps = {name: stamp for name, path in files.items() if (stamp := file_stamp(path)) is not None}
        with self._table:
            if stamps == self._files:
                return
            voices = {name: voice for name, voice in self._voices.items() if stamps.get(name) == self._files.get(name)}
            for name in sorted(stamps.keys() - voices.keys()):
                voice = self._read_voice(name, files[name])
                if voice is not None:
                    voices[name] = voice
            self._voices, self._files = dict(sorted(voices.items())), stamps

    def _check_new_name(self, name: str) -> str:
        if not isinstance(name, str):
            raise BadRequest(f"A voice name must be a string, got {type(name).__name__}")
        check_name(name)
        if name in self._builtin:
            raise BadRequest(f"{name!r} is a studio speaker of XTTS model {self.name!r}; choose another name")
        return name

    def _clone_sync(self, name: str, audio: bytes) -> dict[str, Any]:
        samples = _decode(audio, self.reference_rate)
        with self._lock:
            voice = self._conditioning(name, samples, cloned=True)
        info = {
            "name": name,
            "model": self.name,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "source_seconds": round(len(samples) / self.reference_rate, 3),
            "source_bytes": len(audio),
        }
        path = self.voices_dir / f"{name}{_VOICE_SUFFIX}"
        tensors = {key: getattr(voice, key).detach().cpu().contiguous() for key in _LATENT_KEYS}
        with self._table:
            with atomic_write(self.voices_dir / f"{name}.json") as file:
                file.write(json.dumps(info, indent=2).encode())
            with atomic_write(path) as file:
                file.write(save(tensors))
            self._voices = dict(sorted({**self._voices, name: voice}.items()))
            stamp = file_stamp(path)
            if stamp is not None:
                self._files[name] = stamp
        _LOGGER.info("Cloned XTTS voice %s from %.1f s of audio", name, info["source_seconds"])
        return info

    def _conditioning(self, name: str, samples: np.ndarray, cloned: bool) -> XttsVoice:
        """coqui's get_conditioning_latents, on samples already decoded (it would read a file with torchaudio)."""
        config, rate = self.config, self.reference_rate
        audio = torch.from_numpy(samples).unsqueeze(0).to(self.device)
        if config.sound_norm_refs:
            audio = (audio / audio.abs().max()) * 0.75
        speaker_embedding = self.model.get_speaker_embedding(audio[:, : rate * config.max_ref_len], rate)
        gpt_cond_latent = self.model.get_gpt_cond_latents(
            audio, rate, length=config.gpt_cond_len, chunk_length=config.gpt_cond_chunk_len
        )
        return XttsVoice(name, gpt_cond_latent.detach().cpu(), speaker_embedding.detach().cpu(), cloned)

    def _read_voice(self, name: str, path: Path) -> XttsVoice | None:
        """A stored voice, or None (logged) for a file that is damaged, foreign or badly named."""
        try:
            check_name(name)
            if name in self._builtin:
                raise ValueError(f"{name!r} is a studio speaker's name")
            tensors = load_file(path)
            latent, embedding = (tensors[key] for key in _LATENT_KEYS)
            width = self.config.model_args.gpt_n_model_channels
            if latent.ndim != 3 or latent.shape[-1] != width or embedding.shape != (1, 512, 1):
                raise ValueError(f"shapes {tuple(latent.shape)} and {tuple(embedding.shape)} are not this model's")
        except Exception as err:  # a damaged or foreign file must not stop the server
            _LOGGER.warning("Ignoring XTTS voice file %s: %s", path, err)
            return None
        return XttsVoice(name, latent, embedding, cloned=True)


class ReferenceSpeech:
    """An XTTS engine speaking with a voice made for one request (a SpeechEngine; see stream.py)."""

    def __init__(self, engine: XttsEngine, voice: XttsVoice) -> None:
        self.engine = engine
        self.voice = voice
        self.name = engine.name
        self.identity = f"{engine.identity}:reference:{voice.digest}"
        self.format = engine.format
        self.params = engine.params
        self.languages = engine.languages

    def speaker_id(self, speaker: str | None) -> str:
        return f"reference:{self.voice.digest}"

    def stream(
        self,
        text: str,
        speaker: str | None,
        params: SpeechParams,
        pace: Pace,
        urgent: bool = False,
        language: str | None = None,
    ) -> AsyncIterator[bytes]:
        return self.engine.speak(text, self.voice, params, pace, language)


# -- the pipe from a worker thread to the event loop ------------------------


class _ReaderGone(Exception):
    """The stream's reader has stopped; the worker should stop too."""


class _Pipe:
    """A bounded hand-off of pieces from one worker thread to the event loop.

    The worker blocks while `size` pieces wait to be read; the event loop never
    blocks. Pieces reach the loop through call_soon_threadsafe, in order, and
    always before the worker's completion does.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, size: int) -> None:
        self._loop = loop
        self._slots = threading.Semaphore(size)
        self._pieces: deque[bytes] = deque()
        self._ready = asyncio.Event()
        self._closed = threading.Event()
        self._finished = False

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def send(self, piece: bytes) -> None:
        """From the worker: wait for room, then pass the piece on; raises _ReaderGone once closed."""
        while not self._slots.acquire(timeout=0.1):
            if self._closed.is_set():
                raise _ReaderGone
        if self._closed.is_set():
            raise _ReaderGone
        try:
            self._loop.call_soon_threadsafe(self._push, piece)
        except RuntimeError as err:  # the loop has closed
            raise _ReaderGone from err

    def _push(self, piece: bytes) -> None:
        self._pieces.append(piece)
        self._ready.set()

    def finish(self) -> None:
        """On the loop: the worker is done, nothing more will come."""
        self._finished = True
        self._ready.set()

    async def receive(self) -> bytes | None:
        """The next piece, or None once the worker is done and all was read."""
        while not self._pieces:
            if self._finished:
                return None
            self._ready.clear()
            await self._ready.wait()
        self._slots.release()
        return self._pieces.popleft()

    def close(self) -> None:
        self._closed.set()


# -- helpers ----------------------------------------------------------------


@contextmanager
def _quiet(logger: str) -> Iterator[None]:
    """Mute a logger's warnings for a while.

    The GPT-2 configs that coqui builds have a token vocabulary XTTS never uses, and
    transformers warns on every load that GPT-2's stock bos/eos ids lie outside it.
    """
    log = logging.getLogger(logger)
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def _speakable(model: Xtts, languages: list[str]) -> list[str]:
    """The model's languages whose text front end is installed (Chinese needs pypinyin, Japanese cutlet)."""
    checks = {"zh-cn": lambda: importlib.import_module("pypinyin"), "ja": lambda: model.tokenizer.katsu}
    speakable = []
    for language in languages:
        try:
            checks.get(language, lambda: None)()
        except Exception as err:  # an ImportError, or a Japanese dictionary that fails to load
            _LOGGER.warning("XTTS leaves out language %s: %s", language, err)
            continue
        speakable.append(language)
    return speakable


def _device(runtime: Runtime, name: str) -> torch.device:
    if runtime.device == "cuda":
        if torch.cuda.is_available():
            return torch.device("cuda", runtime.device_index)
        _LOGGER.warning("XTTS model %s runs on the CPU: this PyTorch has no CUDA device", name)
    return torch.device("cpu")


def _builtin_voices(model: Xtts) -> dict[str, XttsVoice]:
    manager = getattr(model, "speaker_manager", None)
    if manager is None:
        return {}
    return {
        name: XttsVoice(name, latents["gpt_cond_latent"], latents["speaker_embedding"], cloned=False)
        for name, latents in manager.speakers.items()
    }


def _sentences(text: str, limit: int) -> Iterator[str]:
    """Sentences, each cut to at most `limit` characters (XTTS's per-language limit)."""
    detector = SentenceBoundaryDetector()
    for sentence in [*detector.add_chunk(text), detector.finish()]:
        sentence = " ".join(sentence.split())
        if sentence:
            yield from textwrap.wrap(sentence, width=limit, break_on_hyphens=False) or [sentence]


def _pcm(wav: torch.Tensor) -> bytes:
    """Float samples in [-1, 1] to 16-bit PCM."""
    samples = wav.detach().float().clamp(-1.0, 1.0).mul(32767.0).round().to(torch.int16)
    return samples.cpu().numpy().tobytes()


def _check_reference_size(audio: bytes) -> None:
    if not isinstance(audio, (bytes, bytearray, memoryview)):
        raise BadAudio(f"The reference audio must be bytes, got {type(audio).__name__}")
    if not audio:
        raise BadAudio("The reference audio is empty")
    if len(audio) > MAX_REFERENCE_BYTES:
        raise BadAudio(
            f"The reference audio is {len(audio) / 1e6:.1f} MB; the limit is {MAX_REFERENCE_BYTES / 1e6:.0f} MB"
        )


def _decode(audio: bytes, rate: int) -> np.ndarray:
    """Any file PyAV reads, as mono float32 at `rate`, checked for length and silence."""
    _check_reference_size(audio)
    try:
        samples = decode_file(audio, rate, MAX_REFERENCE_SECONDS, "reference audio")
    except AudioTooLong as err:
        raise BadAudio(
            f"The reference audio is longer than {MAX_REFERENCE_SECONDS:.0f} s; "
            f"use {MIN_REFERENCE_SECONDS:.0f}-{MAX_REFERENCE_SECONDS:.0f} s of clear speech"
        ) from err
    seconds = len(samples) / rate
    if seconds < MIN_REFERENCE_SECONDS:
        raise BadAudio(
            f"The reference audio is {seconds:.1f} s; XTTS needs at least {MIN_REFERENCE_SECONDS:.0f} s of speech"
        )
    if not np.isfinite(samples).all() or float(np.abs(samples).max()) < 1e-4:
        raise BadAudio("The reference audio is silent")
    return np.clip(samples, -1.0, 1.0).astype(np.float32, copy=False)


__all__ = [
    "ReferenceSpeech",
    "XttsEngine",
    "XttsVoice",
    "MAX_REFERENCE_BYTES",
    "MIN_REFERENCE_SECONDS",
    "MAX_REFERENCE_SECONDS",
]
