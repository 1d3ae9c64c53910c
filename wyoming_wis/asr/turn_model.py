"""Smart Turn v3.2: how likely it is that a speaker has finished their turn, from the sound of it.

Silence alone cannot tell "turn on the …" (a pause mid-command) from "turn on the light." (done); the way the
last words were said can. Smart Turn (BSD-2-Clause, by Daily; pipecat-ai ships it) is a Whisper-tiny encoder
with a classifier on top, trained for that: it reads Whisper's log-mel features of the last 8 s of audio and
gives the probability that the turn is complete. It hears the sound alone, so the core weighs it with the
silence so far and the words decoded so far.

The features are computed as pipecat does (pipecat/audio/turn/smart_turn/local_smart_turn_v3.py and
_whisper_features.py, which copy transformers' WhisperFeatureExtractor(chunk_length=8)): the last 8 s, padded
with zeros at the front; normalised to zero mean and unit variance over those 8 s; then Whisper's log-mel
spectrogram, which is faster-whisper's FeatureExtractor (against pipecat's own code on the same speech, noise
and silence: features within 1e-5, probabilities the same; tests/test_turn_model.py checks the features).

When to ask matters as much as what: pipecat asks once its VAD has heard 0.2 s of silence (its default
stop_secs), with the audio from 0.5 s before the speech began. On Piper's commands 0.1-0.2 s into a pause,
complete ones scored 0.79-0.99 and ones cut off mid-sentence 0.04-0.77; after 0.5 s of silence every one of
them scored 0.81 or more.

The model is int8 (weights and activations), and onnxruntime's default int8 kernel on x86-64 CPUs without VNNI
(AVX2 alone, or AVX-512 without VNNI: AMD Zen 2 and 3, Intel Skylake) adds pairs of products in 16 bits, which
saturate: its answers there are not a little off but wrong (on an AVX2 EPYC, "Turn on the kitchen light." said whole
scored 0.02 where exact sums give 0.78, and "Set a timer for" cut off 0.91 where they give 0.17). `EXACT_INT8` has
it sum exactly there, at no cost we could measure (120 ms a call either way); with VNNI, or on ARM, it changes nothing.

One call is 60-200 ms of one core. `TurnEngine` queues calls for one worker at a lower CPU priority, so that
Whisper, which other clients are waiting on, goes first on a busy CPU.
"""

from __future__ import annotations

import logging

import numpy as np
import onnxruntime
from faster_whisper.feature_extractor import FeatureExtractor

from ..audio import WHISPER_RATE
from ..catalog import Found
from ..scheduler import Scheduler
from ..served import TURN, Calls, Entry

_LOGGER = logging.getLogger(__name__)

SECONDS = 8  # of audio the model hears: the last 8 s
SAMPLES = SECONDS * WHISPER_RATE
_VARIANCE_FLOOR = 1e-7  # transformers' (and pipecat's) for normalising silence without dividing by zero
QUEUE_SIZE = 8  # calls that may wait for the worker; past that a call is refused as busy
NICE = 10  # nice levels below the server's that the worker runs at
EXACT_INT8 = "session.x64quantprecision"  # onnxruntime's: int8 products summed without saturating (U8U8, not U8S8)


class TurnModel:
    """The ONNX model, on one thread of the calling worker's (no pool of its own to compete with Whisper's)."""

    def __init__(self, found: Found) -> None:
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        options.add_session_config_entry(EXACT_INT8, "1")  # exact int8 sums on CPUs without VNNI (above)
        self.session = onnxruntime.InferenceSession(
            str(found.path), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self._mel = FeatureExtractor(feature_size=80, sampling_rate=WHISPER_RATE)

    def features(self, audio: np.ndarray) -> np.ndarray:
        """(80, 800) log-mel features of the last 8 s of 16 kHz mono audio, as the model was trained on."""
        if audio.ndim != 1:
            raise ValueError(f"expected mono audio (one dimension), got shape {audio.shape}")
        last = np.asarray(audio[-SAMPLES:], dtype=np.float32)
        padded = np.pad(last, (SAMPLES - len(last), 0))
        normalised = (padded - padded.mean()) / np.sqrt(padded.var() + _VARIANCE_FLOOR)
        return self._mel(normalised, padding=0)

    def complete(self, audio: np.ndarray) -> float:
        """The probability that the speaker has finished, from 16 kHz mono float32 audio of any length. Blocking."""
        features = self.features(audio)[np.newaxis]
        (probability,) = self.session.run(None, {"input_features": features})
        return float(probability[0, 0])


class TurnEngine:
    """The turn model behind a queue of its own, for the core to own beside its Whisper engines."""

    def __init__(self, found: Found, queue_size: int = QUEUE_SIZE) -> None:
        _LOGGER.info("Loading turn-taking model %s from %s (%s)", found.name, found.path, found.source)
        self.name = found.name
        self.found = found
        self.model = TurnModel(found)
        self.scheduler = Scheduler(f"turn-{found.name}", 1, queue_size, engine=TURN, model=found.name, nice=NICE)

    async def complete(self, audio: np.ndarray) -> float:
        """`TurnModel.complete` in the worker. Inside `scheduler.patience(seconds)`, a call that could not be
        answered in time is refused as busy at once: an answer after the turn has ended on silence is no use."""
        return await self.scheduler.run(self.model.complete, audio)

    def warm_up(self) -> None:
        """One call, so the first turn does not pay for onnxruntime's first run."""
        self.model.complete(np.zeros(WHISPER_RATE, dtype=np.float32))

    def close(self) -> None:
        self.scheduler.close()

    def entry(self) -> Entry:
        """The model as the core's view lists it (served.py)."""
        return Entry(
            self.name,
            TURN,
            (),
            True,
            self.found.version,
            f"Smart Turn ({self.found.source}): whether a speaker has finished",
            calls=(Calls.of(self.scheduler),),
        )
