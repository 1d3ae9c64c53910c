"""Audio formats and conversion through PyAV (libswresample, libavformat, libavcodec).

Whisper wants 16 kHz mono float32; clients send whatever rate, width and channel
count they have. `PcmConverter` is stateful so audio that arrives in pieces is
resampled as one continuous signal. `decode_file` reads a file in one of
UPLOAD_FORMATS; `Encoder` turns PCM into a file format piece by piece, so speech
can be sent as it is made.
"""

from __future__ import annotations

import io
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np

from .errors import AudioTooLong, BadAudio, UnsupportedAudioFormat
from .files import atomic_write

WHISPER_RATE = 16000
MIN_RATE = 1000
MAX_RATE = 384000
MAX_CHANNELS = 16

# Sample width in bytes -> PyAV packed sample format (WAV conventions: 8-bit is unsigned).
_SAMPLE_FORMATS = {1: ("u8", np.uint8), 2: ("s16", np.int16), 4: ("s32", np.int32)}
SAMPLE_WIDTHS = tuple(_SAMPLE_FORMATS)


def _mixable(channels: int) -> bool:
    """Whether FFmpeg has a layout for this many channels, without which it cannot mix them down to mono."""
    try:
        av.AudioLayout(f"{channels}c")
    except ValueError:
        return False
    return True


CHANNEL_COUNTS = tuple(count for count in range(1, MAX_CHANNELS + 1) if _mixable(count))  # not 9, 11, 13 or 15


@dataclass(frozen=True)
class AudioFormat:
    """Raw PCM layout: samples per second, bytes per sample, channels."""

    rate: int
    width: int
    channels: int

    @property
    def bytes_per_frame(self) -> int:
        return self.width * self.channels

    def seconds(self, num_bytes: int) -> float:
        return num_bytes / (self.bytes_per_frame * self.rate)

    def validate(self) -> AudioFormat:
        """Raise UnsupportedAudioFormat unless PCM in this format can be converted."""
        problems = []
        if not MIN_RATE <= self.rate <= MAX_RATE:
            problems.append(f"rate {self.rate} Hz (supported: {MIN_RATE}-{MAX_RATE})")
        if self.width not in _SAMPLE_FORMATS:
            problems.append(f"width {self.width} bytes (supported: {', '.join(map(str, SAMPLE_WIDTHS))})")
        if self.channels not in CHANNEL_COUNTS:
            problems.append(f"{self.channels} channels (supported: {', '.join(map(str, CHANNEL_COUNTS))})")
        if problems:
            raise UnsupportedAudioFormat("Unsupported audio format: " + ", ".join(problems))
        return self


# Whether this PyAV can tell a resampler's filter graph how many threads to start (`mono_resampler`): decided once
# here, by what the class has (a version number said it wrongly for 18.1.1), not tried at each resampler
_ONE_THREAD = {"threads": 1} if hasattr(av.AudioResampler, "threads") else {}


def mono_resampler(sample_format: str, rate: int, frame_size: int | None = None) -> av.AudioResampler:
    """A resampler to mono whose FFmpeg filter graph starts no threads of its own.

    Left alone, the graph starts a thread per CPU, and from PyAV 18.1.1 on the graph and its filters refer to each
    other, so a resampler nobody uses keeps those threads until the garbage collector comes round. PyAV 17 to
    18.1.0 cannot be told, but free the graph as soon as the resampler is dropped.
    """
    return av.AudioResampler(format=sample_format, layout="mono", rate=rate, frame_size=frame_size, **_ONE_THREAD)


class PcmConverter:
    """Convert a stream of PCM bytes in one format to 16 kHz mono float32.

    Mono audio at the rate wanted (Home Assistant's, and most clients') only changes sample format: scaled in
    numpy, as libswresample scales it, to the same samples. A resampler releases the GIL for each piece, and on a
    busy server the event loop then waited for it longer than the piece took to convert.
    """

    def __init__(self, source: AudioFormat, rate: int = WHISPER_RATE) -> None:
        self.source = source.validate()
        self._resampler = None if source.rate == rate and source.channels == 1 else mono_resampler("flt", rate)
        self._remainder = b""  # bytes of an incomplete frame, kept for the next piece

    def convert(self, pcm: bytes) -> np.ndarray:
        data = self._remainder + pcm
        usable = len(data) - len(data) % self.source.bytes_per_frame
        self._remainder = data[usable:]
        if usable == 0:
            return np.zeros(0, dtype=np.float32)
        if self._resampler is None:
            return _scaled(data[:usable], self.source.width)
        return self._collect(self._resampler.resample(pcm_frame(data[:usable], self.source)))

    @property
    def resamples(self) -> bool:
        """Whether the audio goes through libswresample (a rate or channels to change), not only a scale."""
        return self._resampler is not None

    def flush(self) -> np.ndarray:
        """Return what the resampler still holds; call once at the end of the stream."""
        if self._resampler is None:
            return np.zeros(0, dtype=np.float32)
        return self._collect(self._resampler.resample(None))

    @staticmethod
    def _collect(frames: list[av.AudioFrame]) -> np.ndarray:
        if not frames:
            return np.zeros(0, dtype=np.float32)
        return np.concatenate([frame.to_ndarray()[0] for frame in frames])


NATIVE = AudioFormat(WHISPER_RATE, 2, 1)  # 16 kHz 16-bit mono: what Home Assistant sends, and wake words hear


def s16(samples: np.ndarray) -> bytes:
    """Float samples (-1 to 1) as 16-bit PCM."""
    return (np.clip(samples, -1.0, 1.0) * 32767).astype("<i2").tobytes()


def _scaled(pcm: bytes, width: int) -> np.ndarray:
    """Packed mono samples of `width` bytes as float32 from -1 to 1: what libswresample makes of them."""
    _, dtype = _SAMPLE_FORMATS[width]
    samples = np.frombuffer(pcm, dtype=dtype).astype(np.float32)
    if width == 1:  # unsigned, centred on 128
        samples -= 128
    return samples * np.float32(2.0 ** (1 - 8 * width))


def pcm_frame(pcm: bytes, source: AudioFormat) -> av.AudioFrame:
    """Whole frames of packed PCM as one PyAV frame."""
    sample_format, dtype = _SAMPLE_FORMATS[source.width]
    layout = av.AudioLayout("mono" if source.channels == 1 else f"{source.channels}c")
    frame = av.AudioFrame.from_ndarray(
        np.frombuffer(pcm, dtype=dtype).reshape(1, -1), format=sample_format, layout=layout
    )
    frame.sample_rate = source.rate
    return frame


def chunks(pcm: bytes, size: int) -> Iterator[bytes]:
    """Split PCM into pieces of at most `size` bytes."""
    for start in range(0, len(pcm), size):
        yield pcm[start : start + size]


# The containers an uploaded file may be in, by FFmpeg demuxer name, with what people call them: what OpenAI's
# audio API takes (flac, mp3, mp4, mpeg, mpga, m4a, ogg, wav, webm), what a Willow device records (WAV, AMR-WB), and
# what phones and browsers record. Each holds its audio itself: a demuxer that reads another file or a URL (concat,
# hls, sdp, rtp, image2, ...) is not one of them. A name matches any of a demuxer's names: "mov" is
# "mov,mp4,m4a,3gp,3g2,mj2", "matroska" is "matroska,webm".
UPLOAD_FORMATS = {
    "wav": "WAV",
    "flac": "FLAC",
    "mp3": "MP3",
    "ogg": "Ogg",  # Vorbis, Opus or FLAC in it
    "mov": "MP4/M4A",
    "matroska": "WebM/Matroska",
    "aac": "AAC",  # ADTS: raw AAC frames with headers
    "aiff": "AIFF",
    "caf": "CAF",
    "amr": "AMR",
    "mpeg": "MPEG",
}
# What FFmpeg may open for a client's file: those demuxers, and no protocol at all, so that nothing the file names
# (a file, a socket) is opened beside the bytes handed to it.
_READ_OPTIONS = {"format_whitelist": ",".join(UPLOAD_FORMATS), "protocol_whitelist": ""}
_READ_NAMES = ", ".join(UPLOAD_FORMATS.values())  # for errors


def decode_file(
    data: bytes,
    rate: int,
    max_seconds: float,
    *,
    what: str = "audio",
    sample_format: str = "flt",
    reserve: Callable[[int], None] | None = None,
) -> np.ndarray:
    """A file in one of UPLOAD_FORMATS, as mono samples at `rate` (`flt`: float32, `s16`: int16).

    A small file may declare anything: 8 Hz FLAC frames of 65,535 samples each resample to hours.
    So each cost is checked before it is paid: the stream's declared rate and channels before
    decoding, and every frame's own, and its duration, before it is resampled. Raises
    UnsupportedAudioFormat for a rate or channel count out of range, AudioTooLong past `max_seconds`.
    `reserve(size)` is told the bytes the samples will take before they are allocated, and may refuse
    by raising (the memory budget's `Hold.set`).
    """
    reserve = reserve or _take_any
    pieces: list[np.ndarray] = []
    seconds = 0.0  # of the file's audio, before resampling
    size = 0  # bytes of the result so far
    itemsize = 4 if sample_format == "flt" else 2
    try:
        with _open(data, what) as container:
            if not container.streams.audio:
                raise BadAudio(f"The {what} has no audio stream")
            stream = container.streams.audio[0]
            _check_source(stream.codec_context.sample_rate, stream.codec_context.channels, what)
            resampler = mono_resampler(sample_format, rate)
            for frame in itertools.chain(container.decode(stream), [None]):  # None: flush the resampler
                if frame is not None:
                    _check_source(frame.sample_rate, len(frame.layout.channels), what)
                    seconds += frame.samples / frame.sample_rate
                    if seconds > max_seconds:
                        raise AudioTooLong(f"The {what} is longer than the limit of {max_seconds:g} seconds")
                    reserve(size + (frame.samples * rate // frame.sample_rate + _RESAMPLER_SLACK) * itemsize)
                for out in resampler.resample(frame):
                    pieces.append(out.to_ndarray()[0].copy())
                    size += pieces[-1].nbytes
    except (av.FFmpegError, ValueError, IndexError) as err:
        raise BadAudio(f"Cannot read the {what}: {err}") from err
    if not pieces:
        return np.zeros(0, dtype=np.float32 if sample_format == "flt" else np.int16)
    reserve(2 * size)  # the pieces and their concatenation, for a moment
    samples = np.concatenate(pieces)
    pieces.clear()
    reserve(size)
    return samples


_RESAMPLER_SLACK = 64  # samples a resampler may hand out beyond a frame's own, from its filter's delay


def _open(data: bytes, what: str) -> av.container.InputContainer:
    """A client's file, opened by the demuxers of UPLOAD_FORMATS only; BadAudio names them for any other."""
    try:
        return av.open(io.BytesIO(data), mode="r", container_options=_READ_OPTIONS)
    except av.ArgumentError as err:  # FFmpeg's "Invalid argument": a format off the whitelist
        raise BadAudio(f"Cannot read the {what}: its format is not one of {_READ_NAMES}") from err
    except av.FFmpegError as err:  # no demuxer knows it, or its header is damaged
        raise BadAudio(f"Cannot read the {what} as one of {_READ_NAMES}: {err.strerror}") from err


def _take_any(_: int) -> None:
    """No budget to ask."""


def _check_source(rate: int, channels: int, what: str) -> None:
    if not MIN_RATE <= rate <= MAX_RATE or not 1 <= channels <= MAX_CHANNELS:
        raise UnsupportedAudioFormat(
            f"The {what} has {channels} channels at {rate} Hz "
            f"(supported: 1-{MAX_CHANNELS} channels at {MIN_RATE}-{MAX_RATE} Hz)"
        )


class AmrWbDecoder:
    """AMR-WB as a Willow device streams it ("#!AMR-WB\\n", then frames), decoded as it arrives,
    to 16 kHz mono float32; blocking (for a worker thread).

    FFmpeg's AMR parser finds the frames in body chunks that cut them anywhere.
    """

    MAGIC = b"#!AMR-WB\n"

    def __init__(self) -> None:
        self._codec = av.CodecContext.create("amrwb", "r")
        self._resampler = mono_resampler("flt", WHISPER_RATE)
        self._head: bytes | None = b""  # the start of the body until the magic is checked; then None

    def decode(self, data: bytes) -> np.ndarray:
        if self._head is not None:
            data = self._head + data
            if len(data) < len(self.MAGIC) and self.MAGIC.startswith(data):
                self._head = data
                return np.zeros(0, dtype=np.float32)
            if not data.startswith(self.MAGIC):
                raise BadAudio("The AMR-WB audio does not start with #!AMR-WB (single-channel storage format)")
            data, self._head = data[len(self.MAGIC) :], None
        return self._decode(data)

    def flush(self) -> np.ndarray:
        """The last frame the parser holds; call once at the end of the stream."""
        return self._decode(None) if self._head is None else np.zeros(0, dtype=np.float32)

    def _decode(self, data: bytes | None) -> np.ndarray:
        pieces = []
        try:
            for packet in self._codec.parse(data):
                for frame in self._codec.decode(packet):
                    pieces.extend(out.to_ndarray()[0] for out in self._resampler.resample(frame))
        except (av.FFmpegError, ValueError) as err:
            raise BadAudio(f"Cannot decode the AMR-WB audio: {err}") from err
        return np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.float32)


# The files written below are in formats the server chooses (WAV, ENCODINGS) from its own PCM: no client's bytes
# are demuxed there, so they need no whitelist.


def write_wav(path: Path, samples: np.ndarray, rate: int = WHISPER_RATE) -> None:
    """Mono float32 samples as a 16-bit WAV file, replaced in one step (a reader never sees half).

    Made in memory, then written: a disk that refuses it fails one plain write (CannotStore), never FFmpeg's muxer,
    which prints what it cannot hand back."""
    wav = io.BytesIO()
    with av.open(wav, "w", format="wav") as container:
        stream = container.add_stream("pcm_s16le", rate=rate, layout="mono")
        frame = av.AudioFrame.from_ndarray(samples.astype(np.float32).reshape(1, -1), format="flt", layout="mono")
        frame.sample_rate = rate
        container.start_encoding()  # the header, also for no audio at all
        if len(samples):  # FFmpeg refuses an empty frame
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    with atomic_write(path) as file:
        file.write(wav.getvalue())  # a copy: a view of the buffer (getbuffer) left alive stops PyAV resizing it


@dataclass(frozen=True)
class Encoding:
    """A file format speech can be sent in: PyAV container and codec, and its media type."""

    container: str
    codec: str
    media_type: str
    options: tuple[tuple[str, str], ...] = ()  # the muxer's, beyond flush_packets


ENCODINGS = {
    "mp3": Encoding("mp3", "libmp3lame", "audio/mpeg"),
    "opus": Encoding("ogg", "libopus", "audio/ogg", (("page_duration", "100000"),)),  # an Ogg page per 0.1 s
    "aac": Encoding("adts", "aac", "audio/aac"),
    "flac": Encoding("flac", "flac", "audio/flac"),
    "wav": Encoding("wav", "pcm_s16le", "audio/wav"),
    "pcm": Encoding("s16le", "pcm_s16le", "audio/pcm"),
}
OUTPUT_RATE = 24000  # what OpenAI's speech API sends, and what its clients assume for pcm


class _Sink:
    """Where the muxer writes; not seekable, so headers are written once, for a stream
    (a WAV header's sizes stay open-ended: 0xFFFFFFFF)."""

    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: bytes) -> int:
        self.data += data
        return len(data)

    def take(self) -> bytes:
        data, self.data = bytes(self.data), bytearray()
        return data


class Encoder:
    """PCM in any format PcmConverter takes, a file in one of ENCODINGS out, piece by piece;
    blocking (for a worker thread)."""

    def __init__(self, name: str, source: AudioFormat, rate: int = OUTPUT_RATE) -> None:
        encoding = ENCODINGS[name]
        self.media_type = encoding.media_type
        self._source = source.validate()
        self._sink = _Sink()
        # flush_packets: hand every packet to the sink at once, not when an I/O buffer fills
        options = {"flush_packets": "1", **dict(encoding.options)}
        self._container = av.open(self._sink, "w", format=encoding.container, options=options)
        self._stream = self._container.add_stream(encoding.codec, rate=rate, layout="mono")
        context = self._stream.codec_context
        self._resampler = mono_resampler(context.format.name, rate, context.frame_size or None)

    def encode(self, pcm: bytes) -> bytes:
        """What is ready of the file after this audio (the header comes with the first piece)."""
        if pcm:
            self._mux(self._resampler.resample(pcm_frame(pcm, self._source)))
        return self._sink.take()

    def finish(self) -> bytes:
        """The rest of the file: what the resampler and codec still hold, and the trailer."""
        self._mux(self._resampler.resample(None))
        self._container.mux(self._stream.encode(None))
        self._container.close()
        return self._sink.take()

    def _mux(self, frames: list[av.AudioFrame]) -> None:
        for frame in frames:
            self._container.mux(self._stream.encode(frame))
