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
rounding (tests/test_wyoming_wake.py compares them). The embedding model is convolutional in time without padding,
so one call over more mel frames gives several windows exactly, for much less than a call each (1.3 ms for one
window, 1.9 ms for five): the windows that a stream's audio completes together, in a round of the wake engine, are
made in one call. Under load rounds come less often and hold more audio a stream, so each window costs less.
(The melspectrogram model cannot be used so: it clips each call's frames to 80 dB below the call's loudest.
Batching streams together does not make a window cheaper either.)

Only the embedding model's calls let go of the GIL: the others are shorter than a worker thread's wait to take it
back while the event loop is busy.
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

# Embedding windows (80 ms apart) one call makes at most: an interpreter for each number per thread, made when first
# needed (the first 5 MB, the others 2-3 MB: they share the model and XNNPACK's packed weights).
MAX_BLOCK = 8
MAX_CLASSIFIERS = 32  # classifier interpreters a worker thread keeps (least recently used out first)
# What a stream holds: under 3040 samples, 76 mel frames and MAX_EMB + 7 embeddings as float32 (57 KB), with room;
# the interpreters are the threads', not the streams'.
STREAM_BYTES = 96 * 1024


class _XnnpackOptions(ctypes.Structure):
    """The first fields of TfLiteXNNPackDelegateOptions, which have kept their places since TensorFlow Lite 2.8,
    and room for the rest (2.17 has two more)."""

    _fields_ = [
        ("num_threads", ctypes.c_int32),  # 0 by default: no thread pool, the calling thread alone
        ("flags", ctypes.c_uint32),
        ("weights_cache", ctypes.c_void_p),
        ("_rest", ctypes.c_byte * 64),
    ]


@cache
def _library() -> Any:
    """TensorFlow Lite's C library (pyopen-wakeword declares most of its functions), and what XNNPACK needs."""
    lib = TfLiteWakeWord(tflite_library()).lib
    lib.TfLiteInterpreterOptionsCreate.restype = ctypes.c_void_p
    lib.TfLiteInterpreterOptionsSetNumThreads.argtypes = [ctypes.c_void_p, ctypes.c_int32]
    lib.TfLiteInterpreterOptionsAddDelegate.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.TfLiteInterpreterOptionsDelete.argtypes = [ctypes.c_void_p]
    lib.TfLiteXNNPackDelegateOptionsDefault.restype = _XnnpackOptions
    lib.TfLiteXNNPackDelegateCreate.argtypes = [ctypes.POINTER(_XnnpackOptions)]
    lib.TfLiteXNNPackDelegateCreate.restype = ctypes.c_void_p
    lib.TfLiteXNNPackDelegateWeightsCacheCreate.restype = ctypes.c_void_p
    lib.TfLiteXNNPackDelegateWeightsCacheFinalizeSoft.argtypes = [ctypes.c_void_p]
    lib.TfLiteXNNPackDelegateWeightsCacheFinalizeSoft.restype = ctypes.c_bool
    lib.TfLiteXNNPackDelegateDelete.argtypes = [ctypes.c_void_p]
    lib.TfLiteTensorData.argtypes = [ctypes.c_void_p]
    lib.TfLiteTensorData.restype = ctypes.c_void_p
    return lib


@cache
def _invoke_holding_gil() -> Any:
    """TfLiteInterpreterInvoke called without letting go of the GIL: for a call shorter than the wait to take it
    back (up to sys.getswitchinterval(), 5 ms, while the event loop is busy)."""
    invoke = ctypes.PyDLL(str(tflite_library())).TfLiteInterpreterInvoke
    invoke.argtypes = [ctypes.c_void_p]
    invoke.restype = ctypes.c_int
    return invoke


@dataclass(frozen=True)
class _Shared:
    """A model file loaded once for every thread's interpreters, its weights packed for XNNPACK once: another
    interpreter of it (another thread, another number of windows) then costs its activations alone."""

    model: int  # TfLiteModel*, never freed
    options: _XnnpackOptions  # XNNPACK's defaults and the weights cache


def _load(path: Path) -> int:
    """A TfLiteModel* for a model file."""
    model = _library().TfLiteModelCreateFromFile(str(path).encode())
    if not model:
        raise ValueError(f"{path} is not a TensorFlow Lite model")
    return model


class _Model:
    """One model file in one thread's interpreter, for one input shape."""

    def __init__(self, path: Path, shape: tuple[int, ...], *, long: bool = False, shared: _Shared | None = None):
        """`long`: its calls take long enough (a millisecond or more) to let other threads run meanwhile."""
        lib = self._lib = _library()
        self._invoke = lib.TfLiteInterpreterInvoke if long else _invoke_holding_gil()
        self._owned = shared is None
        self.model = _load(path) if shared is None else shared.model
        options = lib.TfLiteXNNPackDelegateOptionsDefault() if shared is None else shared.options
        self.delegate = lib.TfLiteXNNPackDelegateCreate(ctypes.byref(options))
        interpreter_options = lib.TfLiteInterpreterOptionsCreate()
        lib.TfLiteInterpreterOptionsSetNumThreads(interpreter_options, 1)
        lib.TfLiteInterpreterOptionsAddDelegate(interpreter_options, self.delegate)
        self.interpreter = lib.TfLiteInterpreterCreate(self.model, interpreter_options)
        lib.TfLiteInterpreterOptionsDelete(interpreter_options)
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
        # the tensors' own memory, written and read in place: no further calls into the library, each of which
        # would let go of the GIL and wait to take it back
        self._input = _tensor(lib, lib.TfLiteInterpreterGetInputTensor(self.interpreter, 0))
        self._output = _tensor(lib, lib.TfLiteInterpreterGetOutputTensor(self.interpreter, 0))
        self.input_shape = self._input.shape

    def __call__(self, values: np.ndarray) -> np.ndarray:
        """The model's output for one input of `input_shape` (float32); a new array."""
        self._input[...] = values
        if self._invoke(self.interpreter) != 0:
            raise RuntimeError("TensorFlow Lite failed to run an openWakeWord model")
        return self._output.reshape(-1).copy()

    def close(self) -> None:
        lib = self._lib
        if getattr(self, "interpreter", None):
            lib.TfLiteInterpreterDelete(self.interpreter)
            self.interpreter = None
        if getattr(self, "delegate", None):  # after the interpreter that used it
            lib.TfLiteXNNPackDelegateDelete(self.delegate)
            self.delegate = None
        if getattr(self, "model", None) and self._owned:
            lib.TfLiteModelDelete(self.model)
        self.model = None

    def __del__(self) -> None:
        self.close()


_sharing = threading.Lock()  # the embedding model's interpreters are made one at a time: they share its weights


def _embedding_model(windows: int) -> _Model:
    """An interpreter of the embedding model for `windows` windows at once, a step apart."""
    shape = (1, EMB_FEATURES + (windows - 1) * EMB_STEP, NUM_MELS, 1)
    with _sharing:
        return _Model(library_dir(OPEN) / "models" / "embedding_model.tflite", shape, long=True, shared=_shared())


@cache
def _shared() -> _Shared:
    """The embedding model, loaded and its weights packed by the first interpreter made of it."""
    lib = _library()
    path = library_dir(OPEN) / "models" / "embedding_model.tflite"
    options = lib.TfLiteXNNPackDelegateOptionsDefault()
    options.weights_cache = lib.TfLiteXNNPackDelegateWeightsCacheCreate()
    shared = _Shared(_load(path), options)
    _Model(path, (1, EMB_FEATURES, NUM_MELS, 1), shared=shared).close()  # packs the weights into the cache
    # soft: later interpreters may still use what it holds (and add nothing)
    if not lib.TfLiteXNNPackDelegateWeightsCacheFinalizeSoft(options.weights_cache):
        raise RuntimeError("XNNPACK could not keep the embedding model's weights")
    return shared


def _tensor(lib: Any, tensor: int) -> np.ndarray:
    """A float32 tensor's memory as an array (valid while its interpreter lives and is not resized)."""
    shape = tuple(lib.TfLiteTensorDim(tensor, axis) for axis in range(lib.TfLiteTensorNumDims(tensor)))
    size = lib.TfLiteTensorByteSize(tensor) // 4
    return np.ctypeslib.as_array((ctypes.c_float * size).from_address(lib.TfLiteTensorData(tensor))).reshape(shape)


class _Interpreters(threading.local):
    """The calling thread's interpreters, loaded when it first needs them."""

    def __init__(self) -> None:
        self._mel: _Model | None = None
        self._embedding: dict[int, _Model] = {}  # by windows
        self.classifiers: OrderedDict[tuple[str, int], _Model] = OrderedDict()

    def mel(self) -> _Model:
        if self._mel is None:
            self._mel = _Model(library_dir(OPEN) / "models" / "melspectrogram.tflite", (1, MEL_SAMPLES))
        return self._mel

    def embedding(self, windows: int) -> _Model:
        if windows not in self._embedding:
            self._embedding[windows] = _embedding_model(windows)
        return self._embedding[windows]

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
    return float(model(embeddings[-windows:])[0])


@dataclass
class OpenFeatures:
    """A stream's features: what its next windows need, and the latest embeddings."""

    audio: np.ndarray  # float32 samples from where the next melspectrogram window starts
    mels: np.ndarray  # (frames, NUM_MELS) from where the next embedding window starts
    embeddings: np.ndarray  # (MAX_EMB + MAX_BLOCK - 1, WW_FEATURES), the newest last
    samples: int = 0  # of the stream's own audio added (the silence it starts from is not counted)

    @classmethod
    def start(cls) -> OpenFeatures:
        """Features after pyopen-wakeword's 8 s of silence, which every stream hears first."""
        silent = _silence()
        return cls(silent.audio.copy(), silent.mels.copy(), silent.embeddings.copy())

    def hear(self, pcm: bytes) -> Iterator[tuple[int, np.ndarray]]:
        """Add 16-bit 16 kHz samples; yields, for each new embedding, where in the stream the audio it was made from
        ends (in samples) and the embeddings up to it, the newest last (a view, good until the next is yielded)."""
        mel = _interpreters.mel()
        # up to a block's worth at a time, so that a long piece is never held as float32 or mel frames whole
        for start in range(0, len(pcm), 2 * SAMPLES_PER_CHUNK * MAX_BLOCK):
            samples = np.frombuffer(pcm[start : start + 2 * SAMPLES_PER_CHUNK * MAX_BLOCK], dtype=np.int16)
            self.audio = np.concatenate((self.audio, samples.astype(np.float32)))
            self.samples += len(samples)
            if len(self.audio) < MEL_SAMPLES:
                continue  # most 10 ms pieces: no chunk complete yet
            frames, chunk_ends = [self.mels], []  # a melspectrogram call a chunk (see above)
            while len(self.audio) >= MEL_SAMPLES:
                frames.append(mel(self.audio[None, :MEL_SAMPLES]).reshape(-1, NUM_MELS) / 10 + 2)  # library's scale
                chunk_ends.append(self.samples - len(self.audio) + MEL_SAMPLES)
                self.audio = self.audio[SAMPLES_PER_CHUNK:]
            before = len(self.mels)
            self.mels = np.concatenate(frames)
            yield from self._embed(before, chunk_ends)

    def _embed(self, before: int, chunk_ends: list[int]) -> Iterator[tuple[int, np.ndarray]]:
        """Make every embedding window the mel frames after the first `before` complete, in blocks."""
        windows = max(0, (len(self.mels) - EMB_FEATURES) // EMB_STEP + 1)
        done = 0
        while done < windows:
            size = min(windows - done, MAX_BLOCK)
            embedding = _interpreters.embedding(size)
            first = done * EMB_STEP
            block = self.mels[None, first : first + embedding.input_shape[1], :, None]
            rows = embedding(block).reshape(size, WW_FEATURES)
            self.embeddings[:-size] = self.embeddings[size:]
            self.embeddings[-size:] = rows
            for index in range(size):
                last_frame = (done + index) * EMB_STEP + EMB_FEATURES - 1  # brought by a chunk of this call
                end = chunk_ends[(last_frame - before) // EMB_STEP]
                yield max(0, end), self.embeddings[: len(self.embeddings) - (size - 1 - index)]
            done += size
        self.mels = self.mels[windows * EMB_STEP :]


@cache
def _silence() -> OpenFeatures:
    """What every stream has heard before its first piece; heard once (two threads at once would both hear it,
    and agree)."""
    features = OpenFeatures(
        np.zeros(0, dtype=np.float32),
        np.zeros((0, NUM_MELS), dtype=np.float32),
        np.zeros((MAX_EMB + MAX_BLOCK - 1, WW_FEATURES), dtype=np.float32),
    )
    for _ in features.hear(bytes(2 * AUTOFILL_SECONDS * SAMPLE_RATE)):
        pass
    return features
