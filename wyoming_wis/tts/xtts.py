"""XTTS-v2 through coqui-tts (PyTorch): 17 languages, studio speakers, and voices cloned from a short recording.

The model is the folder of the XTTS-v2 release (config.json, model.pth, vocab.json,
speakers_xtts.pth), loaded with coqui-tts's own `Xtts.load_checkpoint`.

One call uses the model at a time: coqui's GPT keeps the conditioning of the call
in progress on the module itself (`store_prefix_emb`), so two generations at once
would mix their voices. Extra scheduler workers therefore only wait for the lock;
the scheduler's queue is still what bounds the backlog.

A cloned voice is its conditioning latents, computed once from the reference
recording and stored as `voices_dir/NAME.safetensors` with a `NAME.json` sidecar,
so it costs nothing at speaking time and survives a restart.
"""

from __future__ import annotations

import asyncio
import importlib
import io
import json
import logging
import os
import re
import tempfile
import textwrap
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import av
import numpy as np
import torch
from safetensors.torch import load_file, save_file
from sentence_stream import SentenceBoundaryDetector
from TTS.tts.configs.xtts_config import XttsConfig
from TTS.tts.models.xtts import Xtts

from ..audio import AudioFormat
from ..catalog import Found
from ..errors import AudioTooLong, BadRequest, StartupError, TextTooLong, UnknownSpeaker, UnsupportedLanguage
from ..runtime import Runtime
from ..scheduler import Scheduler
from .params import SpeechParams

_LOGGER = logging.getLogger(__name__)

MAX_REFERENCE_BYTES = 10 * 1024 * 1024
MIN_REFERENCE_SECONDS = 3.0
MAX_REFERENCE_SECONDS = 30.0
STREAM_CHUNK_TOKENS = 20  # GPT tokens per streamed piece (~0.9 s of speech for XTTS-v2), as coqui's default
STREAM_QUEUE_PIECES = 4  # pieces a worker may run ahead of a slow reader before it waits
_VOICE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_VOICE_SUFFIX = ".safetensors"
_LATENT_KEYS = ("gpt_cond_latent", "speaker_embedding")


@dataclass(frozen=True)
class XttsVoice:
    """What XTTS speaks with: the GPT conditioning and the decoder's speaker embedding."""

    name: str
    gpt_cond_latent: torch.Tensor  # [1, 32, GPT width]
    speaker_embedding: torch.Tensor  # [1, 512, 1]
    cloned: bool


class XttsEngine:
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
        self._voices = self._load_voices()
        stat = (folder / "model.pth").stat()  # a changed model must not be mistaken for the old one
        self.identity = f"{found.name}:{folder}:{stat.st_size}:{stat.st_mtime_ns}"
        self.description = f"XTTS-v2 {found.name} ({len(self.languages)} languages, voice cloning)"
        self.scheduler = Scheduler(f"xtts-{found.name}", workers, queue_size)
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
    def speakers(self) -> list[str]:
        """Studio speakers of the release, then the cloned voices."""
        return list(self._builtin) + sorted(self._voices)

    @property
    def cloned_voices(self) -> list[str]:
        return sorted(self._voices)

    def voice(self, speaker: str | None) -> XttsVoice:
        """A speaker by name; None is the first studio speaker (or cloned voice)."""
        if not speaker:
            for voice in (*self._builtin.values(), *self._voices.values()):
                return voice
            raise UnknownSpeaker(f"XTTS model {self.name!r} has no speakers: clone a voice or send a reference")
        voice = self._voices.get(speaker) or self._builtin.get(speaker)
        if voice is None:
            known = ", ".join(self.speakers[:20]) + (", ..." if len(self.speakers) > 20 else "")
            raise UnknownSpeaker(f"XTTS model {self.name!r} has no speaker {speaker!r} (speakers: {known or 'none'})")
        return voice

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

    async def synthesize(
        self,
        text: str,
        speaker: str | None = None,
        language: str | None = None,
        *,
        speaker_wav: bytes | None = None,
        params: SpeechParams | None = None,
    ) -> bytes:
        """All of the speech as 16-bit mono PCM at `format.rate`."""
        voice = None if speaker_wav is not None else self.voice(speaker)
        _check_reference_size(speaker_wav)
        return await self.scheduler.run(
            self.synthesize_sync, text, voice, self.language(language), speaker_wav, params or self.params
        )

    def synthesize_sync(
        self,
        text: str,
        voice: XttsVoice | None,
        language: str,
        speaker_wav: bytes | None = None,
        params: SpeechParams | None = None,
    ) -> bytes:
        """Blocking, for a worker thread; `speaker_wav` (any audio file) replaces `voice` when given."""
        voice = self._request_voice(voice, speaker_wav)
        with self._lock:
            return b"".join(self._speak(text, voice, language, params or self.params, chunk_tokens=0))

    async def stream(
        self,
        text: str,
        speaker: str | None = None,
        language: str | None = None,
        *,
        speaker_wav: bytes | None = None,
        params: SpeechParams | None = None,
    ) -> AsyncIterator[bytes]:
        """Speech in pieces as XTTS writes it: the first one leaves long before the sentence is done.

        The worker thread hands pieces over through a bounded pipe, so a slow reader
        holds the worker back instead of piling up audio; a reader that stops early
        ends the synthesis at the next piece.
        """
        voice = None if speaker_wav is not None else self.voice(speaker)
        code = self.language(language)
        _check_reference_size(speaker_wav)
        pipe = _Pipe(asyncio.get_running_loop(), STREAM_QUEUE_PIECES)
        job = asyncio.ensure_future(
            self.scheduler.run(self._stream_sync, pipe, text, voice, code, speaker_wav, params or self.params)
        )
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

    def _stream_sync(
        self,
        pipe: _Pipe,
        text: str,
        voice: XttsVoice | None,
        language: str,
        speaker_wav: bytes | None,
        params: SpeechParams,
    ) -> None:
        if pipe.closed:
            return
        voice = self._request_voice(voice, speaker_wav)
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

    # -- cloning ------------------------------------------------------------

    async def clone(self, name: str, audio: bytes) -> dict[str, Any]:
        """Store a new voice (or replace a cloned one) from a recording of 3-30 s in any format PyAV reads."""
        name = self._check_new_name(name)
        _check_reference_size(audio)
        voice, info = await self.scheduler.run(self._clone_sync, name, audio)
        self._voices[name] = voice
        return info

    def remove(self, name: str) -> None:
        """Forget a cloned voice and delete its files."""
        if name not in self._voices:
            raise UnknownSpeaker(f"XTTS model {self.name!r} has no cloned voice {name!r}")
        del self._voices[name]
        for suffix in (_VOICE_SUFFIX, ".json"):
            (self.voices_dir / f"{name}{suffix}").unlink(missing_ok=True)

    def _check_new_name(self, name: str) -> str:
        if not isinstance(name, str) or not _VOICE_NAME.match(name) or ".." in name:
            raise BadRequest(
                f"Invalid voice name {name!r}: use 1-64 letters, digits, '-', '_' or '.', "
                "starting with a letter or digit"
            )
        if name in self._builtin:
            raise BadRequest(f"{name!r} is a studio speaker of XTTS model {self.name!r}; choose another name")
        return name

    def _clone_sync(self, name: str, audio: bytes) -> tuple[XttsVoice, dict[str, Any]]:
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
        _write_atomic(self.voices_dir / f"{name}.json", json.dumps(info, indent=2).encode())
        tensors = {key: getattr(voice, key).detach().cpu().contiguous() for key in _LATENT_KEYS}
        _write_atomic(self.voices_dir / f"{name}{_VOICE_SUFFIX}", tensors)
        _LOGGER.info("Cloned XTTS voice %s from %.1f s of audio", name, info["source_seconds"])
        return voice, info

    def _request_voice(self, voice: XttsVoice | None, speaker_wav: bytes | None) -> XttsVoice:
        """The request's voice: a reference recording, used for this request only and never stored, wins."""
        if speaker_wav is None:
            assert voice is not None
            return voice
        samples = _decode(speaker_wav, self.reference_rate)  # outside the lock: it does not need the model
        with self._lock:
            return self._conditioning("(reference)", samples, cloned=False)

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

    def _load_voices(self) -> dict[str, XttsVoice]:
        voices: dict[str, XttsVoice] = {}
        width = self.config.model_args.gpt_n_model_channels
        for path in sorted(self.voices_dir.glob(f"*{_VOICE_SUFFIX}")):
            name = path.name[: -len(_VOICE_SUFFIX)]
            if not _VOICE_NAME.match(name) or name in self._builtin:
                _LOGGER.warning("Ignoring XTTS voice file %s: its name is not a valid voice name", path)
                continue
            try:
                tensors = load_file(path)
                latent, embedding = (tensors[key] for key in _LATENT_KEYS)
                if latent.ndim != 3 or latent.shape[-1] != width or embedding.shape != (1, 512, 1):
                    raise ValueError(f"shapes {tuple(latent.shape)} and {tuple(embedding.shape)} are not this model's")
            except Exception as err:  # a damaged or foreign file must not stop the server
                _LOGGER.warning("Ignoring XTTS voice file %s: %s", path, err)
                continue
            voices[name] = XttsVoice(name, latent, embedding, cloned=True)
        return voices


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


def _check_reference_size(audio: bytes | None) -> None:
    if audio is None:
        return
    if not audio:
        raise BadRequest("The reference audio is empty")
    if len(audio) > MAX_REFERENCE_BYTES:
        raise AudioTooLong(
            f"The reference audio is {len(audio) / 1e6:.1f} MB; the limit is {MAX_REFERENCE_BYTES / 1e6:.0f} MB"
        )


def _decode(audio: bytes, rate: int) -> np.ndarray:
    """Any file PyAV reads, as mono float32 at `rate`, checked for length and silence."""
    _check_reference_size(audio)
    limit = int(MAX_REFERENCE_SECONDS * rate)
    pieces: list[np.ndarray] = []
    count = 0
    try:
        with av.open(io.BytesIO(audio), mode="r") as container:
            if not container.streams.audio:
                raise BadRequest("The reference has no audio stream")
            resampler = av.AudioResampler(format="flt", layout="mono", rate=rate)
            for frame in container.decode(container.streams.audio[0]):
                for out in resampler.resample(frame):
                    pieces.append(out.to_ndarray()[0].copy())
                    count += out.samples
                if count > limit:  # stop early: a small file may hold hours of audio
                    raise AudioTooLong(
                        f"The reference audio is longer than {MAX_REFERENCE_SECONDS:.0f} s; "
                        f"use {MIN_REFERENCE_SECONDS:.0f}-{MAX_REFERENCE_SECONDS:.0f} s of clear speech"
                    )
            pieces.extend(out.to_ndarray()[0].copy() for out in resampler.resample(None))
    except (av.FFmpegError, ValueError, IndexError) as err:
        raise BadRequest(f"Cannot read the reference audio: {err}") from err
    samples = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.float32)
    seconds = len(samples) / rate
    if seconds > MAX_REFERENCE_SECONDS:
        raise AudioTooLong(f"The reference audio is {seconds:.1f} s; the limit is {MAX_REFERENCE_SECONDS:.0f} s")
    if seconds < MIN_REFERENCE_SECONDS:
        raise BadRequest(
            f"The reference audio is {seconds:.1f} s; XTTS needs at least {MIN_REFERENCE_SECONDS:.0f} s of speech"
        )
    if not np.isfinite(samples).all() or float(np.abs(samples).max()) < 1e-4:
        raise BadRequest("The reference audio is silent")
    return np.clip(samples, -1.0, 1.0).astype(np.float32, copy=False)


def _write_atomic(path: Path, content: bytes | dict[str, torch.Tensor]) -> None:
    """Write a file whole or not at all: a temporary file in the same folder, then a rename."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as file:
            if isinstance(content, bytes):
                file.write(content)
        if not isinstance(content, bytes):
            save_file(content, temporary)
        with open(temporary, "rb") as file:
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


__all__ = ["XttsEngine", "XttsVoice", "MAX_REFERENCE_BYTES", "MIN_REFERENCE_SECONDS", "MAX_REFERENCE_SECONDS"]
