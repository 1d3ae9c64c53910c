"""openWakeWord for many streams: one set of TensorFlow Lite interpreters per worker thread, a few KB per stream.

pyopen-wakeword gives every stream interpreters of its own for the melspectrogram and embedding models (4-7 MB a
stream), runs them on TensorFlow Lite's default kernels in a thread pool of their own, and makes each new stream
hear 8 s of silence first (90 embeddings, a third of a second of CPU). The embedding model is nearly all the work:
3.1 ms of CPU a call there, 1.2 ms with TensorFlow Lite's XNNPACK delegate in one thread (BENCHMARKS.md). So here
the models run in the worker thread's own interpreters, with XNNPACK and one thread each (the scheduler's workers
are the parallelism); a stream keeps only the audio, mel frames and embeddings its next windows need; and the
silence every stream starts from is heard once per process and copied.

The windows are pyopen-wakeword's (melspectrogram over 1760 samples every 1280, an embedding over 76 mel frames
every 8, each classifier over the latest embeddings), so a stream's probabilities are the library's to float
rounding (tests/test_wyoming_wake.py compares them). Batching streams together was measured too: it does not make
the embedding model cheaper per window, so each stream's windows run as they come.
"""

from __future__ import annotations

import ctypes
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from pyopen_wakeword.openwakeword import (
    AUTOFILL_SECONDS,
    EMB_FEATURES,
    EMB_STEP,
    MAX_EMB,
    MEL_SAMPLES,
    NUM_MELS,
    SAMPLE_RATE,
    SAMPLES_PER_CHUNK,
    WW_FEATURES,
)
from pyopen_wakeword.wakeword import TfLiteWakeWord

from .models import OPEN, library_dir, tflite_library

MAX_CLASSIFIERS = 32  # classifier interpreters a worker thread keeps (least recently used out first)
# What a stream holds: under 3040 samples, 84 mel frames and MAX_EMB embeddings as float32 (53 KB), with room; the
# interpreters are the threads', not the streams'.
STREAM_BYTES = 96 * 1024


@cache
def _library() -> Any:
    """TensorFlow Lite's C library (pyopen-wakeword declares most of its functions), and what XNNPACK needs."""
    lib = TfLiteWakeWord(tflite_library()).lib
    lib.TfLiteInterpreterOptionsCreate.restype = ctypes.c_void_p
    lib.TfLiteInterpreterOptionsSetNumThreads.argtypes = [ctypes.c_void_p, ctypes.c_int32]
    lib.TfLiteInterpreterOptionsAddDelegate.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.TfLiteInterpreterOptionsDelete.argtypes = [ctypes.c_void_p]
    lib.TfLiteXNNPackDelegateCreate.argtypes = [ctypes.c_void_p]  # NULL: XNNPACK's defaults (one thread)
    lib.TfLiteXNNPackDelegateCreate.restype = ctypes.c_void_p
    lib.TfLiteXNNPackDelegateDelete.argtypes = [ctypes.c_void_p]
    return lib


class _Model:
    """One model file in one thread's interpreter, for one input shape."""

    def __init__(self, path: Path, shape: tuple[int, ...]) -> None:
        lib = self._lib = _library()
        self.model = lib.TfLiteModelCreateFromFile(str(path).encode())
        if not self.model:
            raise ValueError(f"{path} is not a TensorFlow Lite model")
        self.delegate = lib.TfLiteXNNPackDelegateCreate(None)
        options = lib.TfLiteInterpreterOptionsCreate()
        lib.TfLiteInterpreterOptionsSetNumThreads(options, 1)
        lib.TfLiteInterpreterOptionsAddDelegate(options, self.delegate)
        self.interpreter = lib.TfLiteInterpreterCreate(self.model, options)
        lib.TfLiteInterpreterOptionsDelete(options)
        if not self.interpreter:
            self.close()
            raise ValueError(f"{path}: TensorFlow Lite could not load it")
        if shape:
            lib.TfLiteInterpreterResizeInputTensor(
                self.interpreter, 0, (ctypes.c_int32 * len(shape))(*shape), len(shape)
            )
        if lib.TfLiteInterpreterAllocateTensors(self.interpreter) != 0:
            self.close()
            raise ValueError(f"{path}: TensorFlow Lite could not prepare it")
        self._input = lib.TfLiteInterpreterGetInputTensor(self.interpreter, 0)
        self._output = lib.TfLiteInterpreterGetOutputTensor(self.interpreter, 0)
        self.input_shape = tuple(
            lib.TfLiteTensorDim(self._input, axis) for axis in range(lib.TfLiteTensorNumDims(self._input))
        )
        self._result = np.empty(lib.TfLiteTensorByteSize(self._output) // 4, dtype=np.float32)

    def __call__(self, values: np.ndarray) -> np.ndarray:
        """The model's output for one input of `input_shape` (float32, contiguous); a new array."""
        lib = self._lib
        lib.TfLiteTensorCopyFromBuffer(self._input, values.ctypes.data, values.nbytes)
        if lib.TfLiteInterpreterInvoke(self.interpreter) != 0:
            raise RuntimeError("TensorFlow Lite failed to run an openWakeWord model")
        lib.TfLiteTensorCopyToBuffer(self._output, self._result.ctypes.data, self._result.nbytes)
        return self._result.copy()

    def close(self) -> None:
        lib = self._lib
        if getattr(self, "interpreter", None):
            lib.TfLiteInterpreterDelete(self.interpreter)
            self.interpreter = None
        if getattr(self, "delegate", None):  # after the interpreter that used it
            lib.TfLiteXNNPackDelegateDelete(self.delegate)
            self.delegate = None
        if getattr(self, "model", None):
            lib.TfLiteModelDelete(self.model)
            self.model = None

    def __del__(self) -> None:
        self.close()


class _Interpreters(threading.local):
    """The calling thread's interpreters, loaded when it first needs them."""

    def __init__(self) -> None:
        self.mel: _Model | None = None
        self.embedding: _Model | None = None
        self.classifiers: OrderedDict[tuple[str, int], _Model] = OrderedDict()

    def features(self) -> tuple[_Model, _Model]:
        if self.mel is None or self.embedding is None:
            folder = library_dir(OPEN) / "models"
            self.mel = _Model(folder / "melspectrogram.tflite", (1, MEL_SAMPLES))
            self.embedding = _Model(folder / "embedding_model.tflite", (1, EMB_FEATURES, NUM_MELS, 1))
        return self.mel, self.embedding

    def classifier(self, key: tuple[str, int]) -> _Model:
        """A wake word model by (path, modification time): a file replaced in place is loaded again."""
        model = self.classifiers.pop(key, None) or _Model(Path(key[0]), ())
        self.classifiers[key] = model
        while len(self.classifiers) > MAX_CLASSIFIERS:
            self.classifiers.popitem(last=False)[1].close()
        return model


_interpreters = _Interpreters()


def classifier_key(path: Path) -> tuple[str, int]:
    """How a thread finds its interpreter for a wake word model (blocking: reads the file's metadata)."""
    return str(path), path.stat().st_mtime_ns


def probability(key: tuple[str, int], embeddings: np.ndarray) -> float:
    """A wake word model's probability for the latest embeddings (at least as many as it takes)."""
    model = _interpreters.classifier(key)
    windows = model.input_shape[1]
    return float(model(np.ascontiguousarray(embeddings[-windows:]))[0])


@dataclass
class OpenFeatures:
    """A stream's features: what its next windows need, and the latest embeddings."""

    audio: np.ndarray  # float32 samples from where the next melspectrogram window starts
    mels: np.ndarray  # (frames, NUM_MELS) from where the next embedding window starts
    embeddings: np.ndarray  # (MAX_EMB, WW_FEATURES), the newest last

    @classmethod
    def start(cls) -> OpenFeatures:
        """Features after pyopen-wakeword's 8 s of silence, which every stream hears first."""
        silent = _silence()
        return cls(silent.audio.copy(), silent.mels.copy(), silent.embeddings.copy())

    def hear(self, pcm: bytes) -> Iterator[None]:
        """Add 16-bit 16 kHz samples; yields each time an embedding is added (at the end of `embeddings`)."""
        mel, embedding = _interpreters.features()
        # a window's step at a time, so that a long piece is never held as float32 whole
        for start in range(0, len(pcm), 2 * SAMPLES_PER_CHUNK):
            samples = np.frombuffer(pcm[start : start + 2 * SAMPLES_PER_CHUNK], dtype=np.int16).astype(np.float32)
            self.audio = np.concatenate((self.audio, samples))
            while len(self.audio) >= MEL_SAMPLES:
                frames = mel(self.audio[None, :MEL_SAMPLES]).reshape(-1, NUM_MELS) / 10 + 2  # the library's scale
                self.audio = self.audio[SAMPLES_PER_CHUNK:]
                self.mels = np.concatenate((self.mels, frames))
                while len(self.mels) >= EMB_FEATURES:
                    row = embedding(np.ascontiguousarray(self.mels[None, :EMB_FEATURES, :, None]))
                    self.mels = self.mels[EMB_STEP:]
                    self.embeddings[:-1] = self.embeddings[1:]
                    self.embeddings[-1] = row
                    yield


@cache
def _silence() -> OpenFeatures:
    """What every stream has heard before its first piece; heard once (two threads at once would both hear it,
    and agree)."""
    features = OpenFeatures(
        np.zeros(0, dtype=np.float32),
        np.zeros((0, NUM_MELS), dtype=np.float32),
        np.zeros((MAX_EMB, WW_FEATURES), dtype=np.float32),
    )
    for _ in features.hear(bytes(2 * AUTOFILL_SECONDS * SAMPLE_RATE)):
        pass
    return features
