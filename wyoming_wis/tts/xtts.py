"""XTTS-v2 through coqui-tts (PyTorch): 17 languages, studio speakers, and voices cloned from a short recording.

The model is the folder of the XTTS-v2 release (config.json, model.pth, vocab.json,
speakers_xtts.pth), loaded with coqui-tts's own `Xtts.load_checkpoint`.

One call uses the model at a time: coqui's GPT keeps the conditioning of the call
in progress on the module itself (`store_prefix_emb`), so two generations at once
would mix their voices. Extra scheduler workers therefore only wait for the lock;
the scheduler's queue is still what bounds the backlog.

This is the only module that imports torch and coqui-tts, and core.py imports it
only for --xtts. What XTTS speaks with (a speaker's `Conditioning`), and where cloned voices are kept, is in
xtts_voices.py.
"""

from __future__ import annotations

import functools
import importlib
import logging
import textwrap
import threading
from collections.abc import AsyncIterator, Generator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sentence_stream import SentenceBoundaryDetector
from TTS.tts.configs.xtts_config import XttsConfig
from TTS.tts.models.xtts import Xtts

from ..audio import AudioFormat
from ..catalog import Found
from ..errors import TextTooLong, UnknownSpeaker, UnsupportedLanguage
from ..runtime import Placement, Runtime
from ..served import XTTS, Entry
from ..values import quote
from .params import SpeechParams
from .stream import Utterance, speech_model_entry
from .xtts_voices import Conditioning, VoiceStore, check_reference_size, decode_reference

_LOGGER = logging.getLogger(__name__)

STREAM_CHUNK_TOKENS = 20  # GPT tokens per streamed piece (~0.9 s of speech for XTTS-v2), as coqui's default
STREAM_QUEUE_PIECES = 4  # pieces a worker may run ahead of a slow reader before it waits


class XttsEngine:
    """One XTTS-v2 model: its studio speakers and cloned voices, speaking any of its languages."""

    def __init__(
        self,
        found: Found,
        placement: Placement,
        *,
        voices_dir: Path,
        max_voices: int | None = None,
        params: SpeechParams | None = None,
        stream_chunk_tokens: int = STREAM_CHUNK_TOKENS,
    ) -> None:
        self.name = found.name
        self.found = found
        self.params = params or SpeechParams()  # speed and sentence_silence apply; noise settings are Piper's
        self.stream_chunk_tokens = stream_chunk_tokens
        folder = Path(found.path)
        _LOGGER.info("Loading XTTS model %s from %s (%s)", found.name, folder, found.source)
        self.device = _device(placement.runtime, found.name)
        if self.device.type == "cpu":
            torch.set_num_threads(placement.runtime.cpu_threads)
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
        self._builtin = _studio_speakers(self.model)
        self.store = VoiceStore(
            voices_dir, model=found.name, width=args.gpt_n_model_channels, studio=self._builtin, max_voices=max_voices
        )
        stat = (folder / "model.pth").stat()  # a changed model must not be mistaken for the old one
        self.identity = f"{found.name}:{folder}:{stat.st_size}:{stat.st_mtime_ns}"
        self.description = f"XTTS-v2 {found.name} ({len(self.languages)} languages, voice cloning)"
        self.scheduler = placement.scheduler(XTTS, found.name)
        _LOGGER.info(
            "XTTS model %s on %s: %d studio speakers, %d cloned voices in %s",
            found.name,
            self.device,
            len(self._builtin),
            len(self.store.voices),
            self.store.folder,
        )

    # -- speakers and languages ---------------------------------------------

    @property
    def studio_speakers(self) -> list[str]:
        return list(self._builtin)

    @property
    def cloned_voices(self) -> list[str]:
        return list(self.store.voices)

    @property
    def speakers(self) -> list[str]:
        """Studio speakers of the release, then the cloned voices."""
        return self.studio_speakers + self.cloned_voices

    def conditioning(self, speaker: str | None) -> Conditioning:
        """A speaker by name; None is the first studio speaker (or cloned voice)."""
        voices = self.store.voices
        if not speaker:
            for conditioning in (*self._builtin.values(), *voices.values()):
                return conditioning
            raise UnknownSpeaker(f"XTTS model {self.name!r} has no speakers: clone a voice or send a reference")
        conditioning = voices.get(speaker) or self._builtin.get(speaker)
        if conditioning is None:
            known = ", ".join(self.speakers[:20]) + (", ..." if len(self.speakers) > 20 else "")
            raise UnknownSpeaker(
                f"XTTS model {self.name!r} has no speaker {quote(speaker)} (speakers: {known or 'none'})"
            )
        return conditioning

    def speaker_id(self, speaker: str | None) -> tuple[str, str]:
        """The speaker's name and the digest of its latents: a voice cloned again gets a new cache key."""
        conditioning = self.conditioning(speaker)
        return conditioning.name, conditioning.digest

    def language(self, language: str | None) -> str:
        """XTTS's code for a language ("en-US" -> "en", "zh" -> "zh-cn"); None is English."""
        if not language:
            return "en" if "en" in self.languages else self.languages[0]
        code = language.strip().lower().replace("_", "-")
        for candidate in (code, code.split("-")[0], "zh-cn" if code.startswith("zh") else ""):
            if candidate in self.languages:
                return candidate
        raise UnsupportedLanguage(
            f"XTTS model {self.name!r} does not speak {quote(language)} (languages: {', '.join(self.languages)})"
        )

    # -- speaking -----------------------------------------------------------

    def stream(self, utterance: Utterance) -> AsyncIterator[bytes]:
        """Speech in pieces as XTTS writes it: the first one leaves long before the sentence is done (so
        `urgent` changes nothing)."""
        return self.speak(utterance, self.conditioning(utterance.speaker))

    def speak(self, utterance: Utterance, conditioning: Conditioning) -> AsyncIterator[bytes]:
        """`stream` with the voice itself, which may be one made for this request only."""
        return self.scheduler.stream(
            functools.partial(self._speak_alone, chunk_tokens=self.stream_chunk_tokens),
            utterance.text,
            conditioning,
            self.language(utterance.language),
            utterance.params,
            ahead=STREAM_QUEUE_PIECES,
            pace=utterance.pace,
        )

    async def synthesize(
        self, text: str, speaker: str | None = None, language: str | None = None, params: SpeechParams | None = None
    ) -> bytes:
        """All of the speech at once, each sentence made whole (not streamed)."""
        conditioning, code = self.conditioning(speaker), self.language(language)
        return await self.scheduler.run(self.synthesize_sync, text, conditioning, code, params or self.params)

    def synthesize_sync(
        self, text: str, conditioning: Conditioning, language: str, params: SpeechParams | None = None
    ) -> bytes:
        """Blocking, for a worker thread."""
        return b"".join(self._speak_alone(text, conditioning, language, params or self.params, chunk_tokens=0))

    async def reference(self, audio: bytes) -> ReferenceSpeech:
        """A voice made from a recording for one request: never stored, never listed, never cached."""
        check_reference_size(audio)
        conditioning = await self.scheduler.run(self._reference_sync, audio)
        return ReferenceSpeech(self, conditioning)

    def _reference_sync(self, audio: bytes) -> Conditioning:
        samples = decode_reference(audio, self.reference_rate)  # outside the lock: it does not need the model
        with self._lock:
            return self._from_recording("(reference)", samples, cloned=False)

    def _speak_alone(
        self, text: str, conditioning: Conditioning, language: str, params: SpeechParams, *, chunk_tokens: int
    ) -> Generator[bytes, None, None]:
        """`_speak` holding the model: a reader that stops early closes it, which lets the model go."""
        with self._lock:
            yield from self._speak(text, conditioning, language, params, chunk_tokens=chunk_tokens)

    def _speak(
        self, text: str, conditioning: Conditioning, language: str, params: SpeechParams, *, chunk_tokens: int
    ) -> Iterator[bytes]:
        """PCM pieces, sentence by sentence; chunk_tokens=0 gives one piece per sentence."""
        tokenizer, config = self.model.tokenizer, self.config
        limit = tokenizer.char_limits.get(language.split("-")[0], 250)
        silence = bytes(int(params.sentence_silence * self.format.rate) * self.format.bytes_per_frame)
        for sentence in _sentences(text, limit):
            # coqui asserts this deep inside; a clear error here instead
            if len(tokenizer.encode(sentence.lower(), lang=language)) >= config.model_args.gpt_max_text_tokens:
                raise TextTooLong(f"A sentence is too long for XTTS: {quote(sentence)}")
            chunks = self.model.inference_stream(
                sentence,
                language,
                torch.from_numpy(conditioning.gpt_cond_latent),
                torch.from_numpy(conditioning.speaker_embedding),
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
            self.synthesize_sync("Ready.", self.conditioning(None), self.language(None))

    def close(self) -> None:
        self.scheduler.close()

    def entry(self) -> Entry:
        return speech_model_entry(self, XTTS)

    # -- cloning ------------------------------------------------------------

    async def clone(self, name: str, audio: bytes) -> dict[str, Any]:
        """Store a new voice (or replace a cloned one) from a recording of 3-30 s in one of audio.UPLOAD_FORMATS."""
        name = self.store.check_new_name(name)
        check_reference_size(audio)
        return await self.scheduler.run(self._clone_sync, name, audio)

    def remove(self, name: str) -> None:
        """Forget a cloned voice and delete its files; blocking (file system)."""
        self.store.remove(name)

    def rescan(self) -> None:
        """Pick up voices cloned or removed by another server sharing the data dir; cheap when none were."""
        self.store.rescan()

    def _clone_sync(self, name: str, audio: bytes) -> dict[str, Any]:
        samples = decode_reference(audio, self.reference_rate)
        with self._lock:
            conditioning = self._from_recording(name, samples, cloned=True)
        info = self.store.save(conditioning, len(samples) / self.reference_rate, len(audio))
        _LOGGER.info("Cloned XTTS voice %s from %.1f s of audio", name, info["source_seconds"])
        return info

    def _from_recording(self, name: str, samples: np.ndarray, cloned: bool) -> Conditioning:
        """coqui's get_conditioning_latents, on samples already decoded (it would read a file with torchaudio)."""
        config, rate = self.config, self.reference_rate
        audio = torch.from_numpy(samples).unsqueeze(0).to(self.device)
        if config.sound_norm_refs:
            audio = (audio / audio.abs().max()) * 0.75
        speaker_embedding = self.model.get_speaker_embedding(audio[:, : rate * config.max_ref_len], rate)
        gpt_cond_latent = self.model.get_gpt_cond_latents(
            audio, rate, length=config.gpt_cond_len, chunk_length=config.gpt_cond_chunk_len
        )
        return Conditioning(name, _numpy(gpt_cond_latent), _numpy(speaker_embedding), cloned)


class ReferenceSpeech:
    """An XTTS engine speaking with a voice made for one request (a SpeechEngine; see stream.py)."""

    def __init__(self, engine: XttsEngine, conditioning: Conditioning) -> None:
        self.engine = engine
        self.conditioning = conditioning
        self.name = engine.name
        self.identity = f"{engine.identity}:reference:{conditioning.digest}"
        self.format = engine.format
        self.params = engine.params
        self.languages = engine.languages

    def speaker_id(self, speaker: str | None) -> str:
        return f"reference:{self.conditioning.digest}"

    def stream(self, utterance: Utterance) -> AsyncIterator[bytes]:
        return self.engine.speak(utterance, self.conditioning)


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


def _studio_speakers(model: Xtts) -> dict[str, Conditioning]:
    manager = getattr(model, "speaker_manager", None)
    if manager is None:
        return {}
    return {
        name: Conditioning(name, _numpy(latents["gpt_cond_latent"]), _numpy(latents["speaker_embedding"]), cloned=False)
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


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    """Latents as the voice store keeps them."""
    return tensor.detach().cpu().float().numpy()


__all__ = ["ReferenceSpeech", "XttsEngine"]
