"""Piper voices through piper-tts (onnxruntime), one engine per loaded voice.

onnxruntime sessions may be shared by threads and piper-tts guards its espeak
phonemizer with its own lock, so one voice serves several requests at once.

A Piper voice is one VITS graph: encoder, duration predictor and flow turn
phonemes into latent frames (one per 256 samples), then a HiFi-GAN decoder turns
frames into sound, which is most of the work. The engine runs the graph cut in
two (onnx.utils.Extractor), latents first, then the decoder on pieces of at most
3 s, so nobody waits long behind someone else's sentence; for the sentence a
listener is waiting for, the first piece is short. The decoder is a stack of
convolutions that sees about a dozen frames either side, so each piece is
decoded with CONTEXT_FRAMES of its neighbours and trimmed: the pieces join into
the same samples as one whole decode, without a seam (tested). A sentence of
more than MAX_PHONEMES is made in parts, cut after a clause or a word, so no
length of sentence (or of number: "9,999,999" is 78 phonemes) costs more memory.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import onnx.utils
import onnxruntime
from piper import PiperVoice
from piper.config import PiperConfig

from ..audio import AudioFormat
from ..catalog import Found
from ..errors import UnknownSpeaker
from ..runtime import Placement, Runtime
from ..served import PIPER, Entry
from ..values import quote
from .params import SpeechParams
from .phrasing import split
from .stream import Utterance, speech_model_entry

_LOGGER = logging.getLogger(__name__)

FIRST_FRAMES = 24  # the first piece a waiting listener hears: about 0.28 s at 22.05 kHz
CONTEXT_FRAMES = 12  # what the decoder sees either side of a frame (10 already joins within 1/32767)
MAX_PIECE = 256  # frames (3 s of sound): one worker decodes that in about a quarter of a second
# Phonemes the graph before the decoder takes at once. Its attention holds (phonemes)² numbers: one
# sentence of 4,724 phonemes took 5.7 GB. Peak over a fresh voice (joe-medium, 2 threads): 113 phonemes
# +15 MB, 330 +34 MB, 442 +56 MB, 595 +108 MB, 811 +206 MB, 1,182 +339 MB, 2,365 +1,186 MB. 400 phonemes
# is 20 s of speech, longer than sentences are spoken.
MAX_PHONEMES = 400
DECODER = "/dec/"  # where torch.onnx.export puts the VITS decoder's nodes
LOUDNESS_TEXTS = ("Okay, the kitchen lights are on.", "It is twenty one degrees.", "Sorry, I did not get that.")


@dataclass
class _Latents:
    """A sentence's decoder inputs: `frames` latent frames, plus any speaker conditioning."""

    feeds: dict[str, np.ndarray]
    latent: str

    @property
    def frames(self) -> int:
        return int(self.feeds[self.latent].shape[-1])

    def window(self, start: int, end: int) -> dict[str, np.ndarray]:
        return {**self.feeds, self.latent: self.feeds[self.latent][..., start:end]}


class PiperEngine:
    def __init__(self, found: Found, placement: Placement, *, params: SpeechParams | None = None) -> None:
        self.name = found.name
        self.found = found
        self.params = params or SpeechParams()  # this voice's defaults; requests may change them
        _LOGGER.info("Loading Piper voice %s from %s (%s)", found.name, found.path, found.source)
        with open(f"{found.path}.json", encoding="utf-8") as file:
            config = json.load(file)
        self._front, self._decoder, self._latent = _split_at_decoder(found, _opener(placement, found.name))
        self.voice = PiperVoice(config=PiperConfig.from_dict(config), session=self._front.shared)
        self.languages, self.speakers, self.description = describe(found.name, config)
        self.format = AudioFormat(rate=self.voice.config.sample_rate, width=2, channels=1)
        stat = found.path.stat()  # a changed voice file must not be mistaken for the old one
        self.identity = f"{found.name}:{found.path}:{stat.st_size}:{stat.st_mtime_ns}"
        self.scheduler = placement.scheduler(PIPER, found.name)
        self.gain = self._loudness_gain()

    def speaker_id(self, speaker: str | None) -> int | None:
        """Speaker by name (or number) for multi-speaker voices; None is the default."""
        if not speaker:
            return None
        id_map = self.voice.config.speaker_id_map
        if speaker in id_map:
            return id_map[speaker]
        if speaker.isdigit() and int(speaker) < self.voice.config.num_speakers:
            return int(speaker)
        known = ", ".join(self.speakers) if self.speakers else "none, it has one speaker"
        raise UnknownSpeaker(f"Voice {self.name!r} has no speaker {quote(speaker)} (speakers: {known})")

    async def stream(self, utterance: Utterance) -> AsyncIterator[bytes]:
        """16-bit mono PCM at `format.rate`, then `sentence_silence`, in pieces.

        Each sentence is made in steps, latents then pieces of sound, and an
        `urgent` phrase (the listener is waiting for it) starts with a short
        piece. Every step is queued by the listener's deadline, and uses every
        core if it is the only one running. A Piper voice speaks its own
        language, whatever the request's.
        """
        params, pace, urgent = utterance.params, utterance.pace, utterance.urgent
        feeds = self._feeds(self.speaker_id(utterance.speaker), params)
        frame = self.voice.config.hop_length / self.format.rate
        for ids in await self.scheduler.run(self._phoneme_ids, utterance.text, pace=pace):
            if self._decoder is None:
                yield await self.scheduler.run(self._whole, ids, feeds, self._alone, pace=pace)
                continue
            at = pace.seconds  # where this sentence starts in the listener's audio
            latents = await self.scheduler.run(self._latents, ids, feeds, self._alone, pace=pace)
            for start, end in _pieces(latents.frames, FIRST_FRAMES if urgent else 0):
                yield await self.scheduler.run(
                    self._decode, latents, start, end, self._alone, pace=pace, at=at + start * frame
                )
            urgent = False  # the rest of the phrase is made while its start plays
        if params.sentence_silence:
            yield bytes(int(params.sentence_silence * self.format.rate) * self.format.bytes_per_frame)

    @property
    def _alone(self) -> bool:
        """Whether a step submitted now would run on its own."""
        return self.scheduler.pending == 0

    def warm_up(self) -> None:
        """Run each session once, so the first requests do not pay for onnxruntime's first runs."""
        feeds = self._feeds(None, self.params)
        for ids in self._phoneme_ids("Ready."):
            self._whole(ids, feeds, alone=True)
            self._whole(ids, feeds, alone=False)

    def close(self) -> None:
        self.scheduler.close()

    def entry(self) -> Entry:
        return speech_model_entry(self, PIPER)

    # -- blocking steps, for the scheduler's threads -------------------------

    def _phoneme_ids(self, text: str) -> list[list[int]]:
        """Each sentence espeak finds, in parts of at most MAX_PHONEMES, cut where a speaker would pause."""
        return [
            self.voice.phonemes_to_ids(part)
            for phonemes in self.voice.phonemize(text)
            if (known := self._known(phonemes))
            for part in split(known, MAX_PHONEMES)
        ]

    def _known(self, phonemes: list[str]) -> list[str]:
        """The phonemes the voice has ids for. piper-tts drops the others too, but logs a warning for each:
        raw phonemes in a text ("[[€€€…]]", which Piper reads in any text) made a log line per character."""
        known = self.voice.config.phoneme_id_map
        return [phoneme for phoneme in phonemes if phoneme in known] if known else phonemes

    def _feeds(self, speaker_id: int | None, params: SpeechParams) -> dict[str, np.ndarray]:
        """The graph's inputs other than the phonemes."""
        config = self.voice.config
        scales = [
            config.noise_scale if params.noise_scale is None else params.noise_scale,
            config.length_scale / params.speed,
            config.noise_w_scale if params.noise_w is None else params.noise_w,
        ]
        feeds = {"scales": np.array(scales, dtype=np.float32)}
        if config.num_speakers > 1:
            feeds["sid"] = np.array([config.default_speaker_id if speaker_id is None else speaker_id], dtype=np.int64)
        return feeds

    def _whole(self, ids: list[int], feeds: dict[str, np.ndarray], alone: bool) -> bytes:
        if self._decoder is None:
            return self._pcm(_run_all(self._front.get(alone), ids, feeds)[0].reshape(-1))
        latents = self._latents(ids, feeds, alone)
        return self._decode(latents, 0, latents.frames, alone)

    def _latents(self, ids: list[int], feeds: dict[str, np.ndarray], alone: bool) -> _Latents:
        assert self._latent is not None
        session = self._front.get(alone)
        names = [output.name for output in session.get_outputs()]
        return _Latents(dict(zip(names, _run_all(session, ids, feeds), strict=True)), self._latent)

    def _decode(self, latents: _Latents, start: int, end: int, alone: bool) -> bytes:
        """Samples for frames [start, end), decoded with context either side and trimmed to fit."""
        assert self._decoder is not None
        first, last = max(0, start - CONTEXT_FRAMES), min(latents.frames, end + CONTEXT_FRAMES)
        audio = self._decoder.get(alone).run(None, latents.window(first, last))[0].reshape(-1)
        hop = len(audio) // (last - first)
        return self._pcm(audio[(start - first) * hop : (end - first) * hop])

    def _pcm(self, audio: np.ndarray) -> bytes:
        return np.clip(audio * (self.gain * 32767), -32767, 32767).astype(np.int16).tobytes()

    def _loudness_gain(self) -> float:
        """One gain for the voice, so pieces of a sentence (and its sentences) share a loudness.

        Piper scales each sentence to full scale after making all of it, which a
        stream cannot wait for; instead the loudest of a few set sentences sets it.
        """
        self.gain, feeds = 1.0, self._feeds(None, SpeechParams(noise_scale=0.0, noise_w=0.0))
        peaks = [
            np.abs(np.frombuffer(self._whole(ids, feeds, alone=True), dtype=np.int16)).max() / 32767
            for text in LOUDNESS_TEXTS
            for ids in self._phoneme_ids(text)
        ]
        return 1.0 / max(0.05, *peaks)


def _pieces(frames: int, first: int) -> list[tuple[int, int]]:
    """Frame ranges: a `first` piece (if any), then the rest in equal pieces of at most MAX_PIECE."""
    if frames - first < first:
        first = 0
    count = max(1, -(-(frames - first) // MAX_PIECE))
    ends = [first + (frames - first) * index // count for index in range(count + 1)]
    return [(0, first)] * bool(first) + list(zip(ends, ends[1:], strict=False))


def _run_all(session: onnxruntime.InferenceSession, ids: list[int], feeds: dict[str, np.ndarray]) -> list[Any]:
    inputs = {"input": np.array([ids], dtype=np.int64), "input_lengths": np.array([len(ids)], dtype=np.int64), **feeds}
    wanted = {item.name for item in session.get_inputs()}  # a config may name speakers its graph does not take
    return session.run(None, {name: value for name, value in inputs.items() if name in wanted})


def _split_at_decoder(found: Found, open_part: Callable[[str], _Part]) -> tuple[_Part, _Part | None, str | None]:
    """The graph up to the decoder and the decoder, and the name of the latents between them.

    A graph without named decoder nodes (very old exports) stays whole, and
    speaks a sentence at a time.
    """
    model = onnx.load(str(found.path))
    graph = model.graph
    nodes = [node for node in graph.node if node.name.startswith(DECODER)]
    if not nodes:
        _LOGGER.warning("Voice %s: no decoder found in its graph, so it speaks a sentence at a time", found.name)
        return open_part(str(found.path)), None, None
    latent = nodes[0].input[0]  # the first decoder node reads the latents
    made = {name for node in nodes for name in node.output}
    weights = {tensor.name for tensor in graph.initializer}
    inputs = list(dict.fromkeys(name for node in nodes for name in node.input if name and name not in made | weights))
    extractor = onnx.utils.Extractor(model)
    # Sessions opened from files hold about 60 MB less than from bytes; the files go once they are read.
    with tempfile.TemporaryDirectory(prefix="wis-piper-") as folder:
        front, decoder = os.path.join(folder, "front.onnx"), os.path.join(folder, "decoder.onnx")
        onnx.save(extractor.extract_model([item.name for item in graph.input], inputs), front)
        onnx.save(extractor.extract_model(inputs, [item.name for item in graph.output]), decoder)
        return open_part(front), open_part(decoder), latent


@dataclass
class _Part:
    """A graph (or part of one) opened twice: with every core, for a step that runs on its own,
    and with a worker's share of them, for steps side by side."""

    alone: onnxruntime.InferenceSession
    shared: onnxruntime.InferenceSession

    def get(self, alone: bool) -> onnxruntime.InferenceSession:
        return self.alone if alone else self.shared


def _opener(placement: Placement, name: str) -> Callable[[str], _Part]:
    threads = placement.runtime.cpu_threads
    alone, shared = (_session_options(count) for count in (threads, placement.worker_threads))
    providers = _providers(placement.runtime, name)

    def open_part(path: str) -> _Part:
        first = onnxruntime.InferenceSession(path, sess_options=alone, providers=providers)
        if alone.intra_op_num_threads == shared.intra_op_num_threads:
            return _Part(first, first)
        return _Part(first, onnxruntime.InferenceSession(path, sess_options=shared, providers=providers))

    return open_part


def _session_options(threads: int) -> onnxruntime.SessionOptions:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = max(1, threads)
    options.inter_op_num_threads = 1
    # Memory patterns are planned and kept per input shape, and every phrase has its own length: with them on,
    # a busy server's memory grew by 250 MiB in 600 phrases and kept growing; off, it levels out, as fast.
    options.enable_mem_pattern = False
    # onnxruntime's arena keeps the most a session ever took, and a voice has four: after one long sentence
    # a server kept 235 MB more, for good. Without it, memory goes back (7-17 MB more once trimmed), the
    # server idles 55 MB smaller and peaks no higher, and it speaks about as fast (2,048 characters of
    # numbers: 17.0-20.0 s against 17.5-17.9 s; 4,096 of words: 8.1-9.1 s against 7.9 s).
    options.enable_cpu_mem_arena = False
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # idle threads would steal cores
    return options


def describe(name: str, config: dict[str, Any]) -> tuple[list[str], list[str], str]:
    """Languages, speakers and a description of a voice, from its .onnx.json alone."""
    language = config.get("language", {}).get("code") or config.get("espeak", {}).get("voice", "")
    quality = config.get("audio", {}).get("quality", "")
    description = f"{config.get('dataset', name)} ({language}, {quality or 'piper'})"
    return [language], list(config.get("speaker_id_map", {})), description


def _providers(runtime: Runtime, name: str) -> list[Any]:
    providers: list[Any] = ["CPUExecutionProvider"]
    if runtime.device == "cuda":
        if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
            providers.insert(0, ("CUDAExecutionProvider", {"device_id": runtime.device_index}))
        else:
            _LOGGER.warning(
                "Piper voice %s runs on the CPU: onnxruntime has no CUDA support here (install onnxruntime-gpu)", name
            )
    return providers
