"""One stream's wake word detectors: 16 kHz audio in, the phrases heard out, each with its time in the stream.

Blocking, and one call at a time: a stream's calls run in turn in the wake engine's worker threads. Each stream has
detectors of its own, since both families' models carry state from one piece of audio to the next (microWakeWord's
streaming layers; openWakeWord's last windows of features, see oww.py, whose interpreters are the threads'): one
stream's audio never reaches another's. Features are computed once per stream for all its models of a family.

Times are of the audio, not the clock: a detection is stamped where the audio that made it ends, and a model is
not heard again for its refractory time of audio after that, however fast the audio came.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pymicro_wakeword import MicroWakeWord, MicroWakeWordFeatures

from ..audio import NATIVE, WHISPER_RATE, AudioFormat, PcmConverter, s16
from . import oww
from .models import MICRO, WakeModel, tflite_library

RATE = WHISPER_RATE  # both families listen at 16 kHz, 16-bit mono (NATIVE)
# What a stream's microWakeWord detectors hold (bench/wake.py, memory: 0.18 MB a stream for one model), with room;
# openWakeWord's is oww.STREAM_BYTES for all of a stream's models.
MICRO_BYTES = 256 * 1024  # each microWakeWord model
# Audio is heard in whole steps of 10 ms: microWakeWord makes a feature every 10 ms; openWakeWord's features take
# any length (an embedding every 80 ms), and a window held back until 80 ms more had come would be heard 50 ms late.
MICRO_STEP = 160  # samples


@dataclass(frozen=True)
class Heard:
    """A wake word heard in a stream."""

    name: str  # as the client asked for it
    model: str
    milliseconds: int  # where in the stream the audio that made the detection ends
    probability: float


def footprint(chosen: Sequence[tuple[str, WakeModel]]) -> int:
    """Bytes a stream's detectors for these models hold."""
    micro = sum(model.family == MICRO for _, model in chosen)
    return micro * MICRO_BYTES + (oww.STREAM_BYTES if micro < len(chosen) else 0)


@dataclass
class _Detector:
    name: str  # as asked
    model: WakeModel
    refractory: int  # samples
    run: MicroWakeWord | tuple[str, int]  # openWakeWord: its key for the thread's interpreter (oww.classifier_key)
    quiet_until: int = 0  # sample offset before which it is not heard again
    above: int = 0  # openWakeWord: activations in a row


@dataclass
class Listener:
    """Detectors for the models a stream asked for, and where the stream is."""

    detectors: list[_Detector]
    samples: int = 0  # 16 kHz samples microWakeWord has heard (openWakeWord counts its own)
    _micro: MicroWakeWordFeatures | None = None
    _open: oww.OpenFeatures | None = None
    _converter: PcmConverter | None = None
    _pending: bytearray = field(default_factory=bytearray)  # 16-bit samples short of a step

    @classmethod
    def open(cls, chosen: Sequence[tuple[str, WakeModel]], refractory_seconds: float) -> Listener:
        """Load a detector per model (a few milliseconds each: the files are memory-mapped). Blocking."""
        library = tflite_library()
        detectors = []
        for name, model in chosen:
            refractory = model.refractory_seconds if model.refractory_seconds is not None else refractory_seconds
            if model.family == MICRO:
                run: MicroWakeWord | tuple[str, int] = MicroWakeWord(
                    model.name,
                    wake_word=model.phrase,
                    tflite_model=model.path,
                    probability_cutoff=model.cutoff,
                    sliding_window_size=model.window,
                    trained_languages=list(model.languages),
                    libtensorflowlite_c_path=library,
                )
            else:
                run = oww.classifier_key(model.path)
            detectors.append(_Detector(name, model, int(refractory * RATE), run))
        families = {detector.model.family for detector in detectors}
        micro = MicroWakeWordFeatures() if MICRO in families else None
        features = oww.OpenFeatures.start() if families - {MICRO} else None
        return cls(detectors, _micro=micro, _open=features)

    def feed(self, pieces: Sequence[tuple[bytes, AudioFormat]]) -> list[Heard]:
        """Listen to more of the stream, heard together (openWakeWord's windows are cheaper in blocks); the format
        may change between pieces."""
        for pcm, audio_format in pieces:
            if audio_format != NATIVE or self._converter is not None:
                if self._converter is None or self._converter.source != audio_format:
                    self._converter = PcmConverter(audio_format)
                pcm = s16(self._converter.convert(pcm))
            self._pending += pcm
        usable = len(self._pending) - len(self._pending) % (2 * MICRO_STEP)  # whole 10 ms steps, heard at once
        heard = self._step(bytes(self._pending[:usable])) if usable else []
        del self._pending[:usable]
        return heard

    def close(self) -> None:
        for detector in self.detectors:
            if isinstance(detector.run, MicroWakeWord):
                detector.run.close()

    def _step(self, pcm: bytes) -> list[Heard]:
        heard: list[Heard] = []
        if self._micro is not None:
            for start in range(0, len(pcm), 2 * MICRO_STEP):
                self.samples += MICRO_STEP
                for features in self._micro.process_streaming(pcm[start : start + 2 * MICRO_STEP]):
                    for detector in self.detectors:
                        if detector.model.family == MICRO:
                            probability = detector.run.process_streaming_prob(features)  # type: ignore[union-attr]
                            heard += self._judge(detector, probability or 0.0, self.samples)
        if self._open is not None:
            for end, embeddings in self._open.hear(pcm):
                for detector in self.detectors:
                    if isinstance(detector.run, tuple):
                        heard += self._judge(detector, oww.probability(detector.run, embeddings), end)
        return heard

    def _judge(self, detector: _Detector, probability: float, at: int) -> list[Heard]:
        """A model's probability for the audio up to sample `at`: a detection, if it is one."""
        if probability <= detector.model.cutoff:
            detector.above = 0
            return []
        detector.above += 1
        if detector.model.family != MICRO and detector.above < detector.model.window:
            return []
        if at < detector.quiet_until:
            return []
        detector.quiet_until = at + detector.refractory
        return [Heard(detector.name, detector.model.name, at * 1000 // RATE, round(float(probability), 3))]
