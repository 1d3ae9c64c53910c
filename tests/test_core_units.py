"""Unit tests of core pieces the integration tests cannot corner: audio conversion, scheduling, speakers."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Generator
from pathlib import Path

import numpy as np
import pytest
from helpers import corpus, load_audio

from wyoming_wis.asr import assemble
from wyoming_wis.asr import engine as engine_module
from wyoming_wis.asr.batcher import Batcher
from wyoming_wis.asr.decoder import Decoded, Job, Options, TokenLogprob, Word
from wyoming_wis.audio import SAMPLE_WIDTHS, WHISPER_RATE, AudioFormat, PcmConverter, mono_resampler, pcm_frame
from wyoming_wis.catalog import Catalog, Found
from wyoming_wis.config import Settings
from wyoming_wis.errors import BadRequest, Busy, CannotStore, UnknownSpeaker, UnsupportedAudioFormat
from wyoming_wis.files import atomic_write
from wyoming_wis.runtime import Placement, Runtime
from wyoming_wis.scheduler import Scheduler
from wyoming_wis.tts import PiperEngine

pytestmark = pytest.mark.fast


def test_conversion_does_not_depend_on_how_audio_is_split() -> None:
    """Pieces cut mid-frame (odd byte counts, stereo) resample exactly like the whole."""
    pcm = load_audio(corpus()[1][0], rate=44100, channels=2)
    whole = PcmConverter(AudioFormat(44100, 2, 2))
    expected = np.concatenate([whole.convert(pcm.audio), whole.flush()])

    pieces = PcmConverter(AudioFormat(44100, 2, 2))
    sizes = [1, 3, 1001, 4095, 7]
    out, start, index = [], 0, 0
    while start < len(pcm.audio):
        size = sizes[index % len(sizes)]
        out.append(pieces.convert(pcm.audio[start : start + size]))
        start, index = start + size, index + 1
    out.append(pieces.flush())
    got = np.concatenate(out)
    assert abs(len(got) - pcm.seconds * 16000) < 50
    assert len(got) == len(expected)
    assert np.allclose(got, expected, atol=1e-4)


@pytest.mark.parametrize("width", SAMPLE_WIDTHS)
def test_mono_audio_at_16_khz_is_converted_to_the_samples_libswresample_gives(width: int) -> None:
    """Only the sample format changes, scaled in numpy: the same samples as through FFmpeg, extremes included, and
    a piece cut mid-sample keeps its bytes for the next."""
    source = AudioFormat(WHISPER_RATE, width, 1)
    dtype = np.dtype(np.uint8 if width == 1 else f"<i{width}")
    limits = np.iinfo(dtype)
    samples = np.random.default_rng(width).integers(limits.min, limits.max, 20000, dtype=dtype, endpoint=True)
    samples[:3] = limits.min, limits.max, (int(limits.min) + int(limits.max) + 1) // 2
    pcm = samples.tobytes()
    resampler = mono_resampler("flt", WHISPER_RATE)
    frames = [*resampler.resample(pcm_frame(pcm, source)), *resampler.resample(None)]
    expected = np.concatenate([frame.to_ndarray()[0] for frame in frames])

    converter = PcmConverter(source)
    got = np.concatenate([converter.convert(pcm[at : at + 1001]) for at in range(0, len(pcm), 1001)])
    assert np.array_equal(np.concatenate([got, converter.flush()]), expected)


@pytest.mark.parametrize("audio_format", [AudioFormat(16000, 3, 1), AudioFormat(999, 2, 1), AudioFormat(16000, 2, 17)])
def test_unsupported_formats_are_named(audio_format: AudioFormat) -> None:
    with pytest.raises(UnsupportedAudioFormat) as error:
        PcmConverter(audio_format)
    assert "Unsupported audio format" in error.value.message


async def test_scheduler_bounds_its_queue_and_frees_slots_when_calls_end() -> None:
    scheduler = Scheduler("test", workers=1, queue_size=1)
    release = threading.Event()
    try:
        running = asyncio.ensure_future(scheduler.run(release.wait, 10))
        waiting = asyncio.ensure_future(scheduler.run(lambda: "second"))
        await asyncio.sleep(0.05)
        with pytest.raises(Busy):
            await scheduler.run(lambda: "third")
        assert scheduler.pending == 2

        waiting.cancel()  # a waiting call whose client left is dropped, its slot freed
        await asyncio.sleep(0.05)
        assert scheduler.pending == 1
        release.set()
        assert await running is True
        await asyncio.sleep(0.05)
        assert scheduler.pending == 0
        assert await scheduler.run(lambda: "again") == "again"
    finally:
        release.set()
        scheduler.close()


def test_a_job_cancelled_while_its_worker_decodes_another_frees_the_worker() -> None:
    """A request that goes away (a client gone, a turn judged stale) cancels its jobs. If its worker thread is
    busy decoding another batch meanwhile, it must come back, not wait for a job that will never be run."""
    decoding, release = threading.Event(), threading.Event()

    def decode(jobs: list[Job]) -> list[Decoded]:
        decoding.set()
        release.wait(5)
        return [Decoded("text", "en") for _ in jobs]

    batcher = Batcher(decode, max_batch=8)
    audio = np.zeros(16000, dtype=np.float32)
    mine = batcher.submit([Job(audio, Options("en", draft=True), ()), Job(audio, Options("en"), ())])  # two calls
    worker = threading.Thread(target=batcher.process, args=(mine,), daemon=True)
    worker.start()
    assert decoding.wait(5)  # the worker decodes the first
    batcher.cancel(mine)
    release.set()
    worker.join(5)
    assert not worker.is_alive()
    assert mine[0].decoded.result(0).text == "text"  # taken: decoded all the same
    assert mine[1].decoded.cancelled()  # and the request hears that its second job was dropped
    again = batcher.submit([Job(audio, Options("en"), ())])
    batcher.process(again)
    assert again[0].decoded.result(0).text == "text"  # still serving


def _held_decoder() -> tuple[Callable[[list[Job]], list[Decoded]], threading.Event, threading.Event, list[int]]:
    """A decode that blocks until released, and records each call's size."""
    decoding, release, sizes = threading.Event(), threading.Event(), []

    def decode(jobs: list[Job]) -> list[Decoded]:
        sizes.append(len(jobs))
        decoding.set()
        release.wait(5)
        return [Decoded("text", "en") for _ in jobs]

    return decode, decoding, release, sizes


def test_a_worker_whose_jobs_another_worker_decodes_is_given_back_at_once() -> None:
    """A request whose jobs went into another worker's batch has nothing to decode: its worker returns at once
    instead of waiting for that batch, so a call that comes meanwhile (Home Assistant's) starts beside it."""
    decode, decoding, release, sizes = _held_decoder()
    batcher = Batcher(decode, max_batch=8)
    audio = np.zeros(16000, dtype=np.float32)
    first = batcher.submit([Job(audio, Options("en"), ())])
    second = batcher.submit([Job(audio, Options("en"), ())])  # same call as the first's
    worker = threading.Thread(target=batcher.process, args=(first,), daemon=True)
    worker.start()
    assert decoding.wait(5)
    assert sizes == [2]
    assert first[0].paid_by(first) and second[0].paid_by(first)  # the first's worker decodes both
    assert not second[0].paid_by(second)  # nothing of the second's is left to its own call
    batcher.process(second)  # returns while the batch is still being decoded
    assert not second[0].decoded.done()
    release.set()
    assert second[0].decoded.result(5).text == "text"
    worker.join(5)


def test_home_assistants_jobs_go_first_and_never_share_a_call_with_a_strangers() -> None:
    """Its scheduler starts Home Assistant's call first; its worker must then decode Home Assistant's jobs, not
    the older ones of strangers queued before it, nor take strangers' along (a batch of four takes longer)."""
    decode, _, release, sizes = _held_decoder()
    release.set()
    batcher = Batcher(decode, max_batch=8)
    audio = np.zeros(16000, dtype=np.float32)
    strangers = batcher.submit([Job(audio, Options("en"), ()) for _ in range(3)])
    home = batcher.submit([Job(audio, Options("en"), (), household=True)])
    batcher.process(home)
    assert sizes == [1] and home[0].decoded.done()
    assert not any(slot.decoded.done() for slot in strangers)
    batcher.process(strangers[:1])
    assert sizes == [1, 3]  # strangers' jobs still share one call


@pytest.mark.parametrize(("threads", "workers", "each"), [(2, 2, 1), (8, 2, 4), (4, 3, 1), (1, 2, 1)])
def test_a_models_threads_are_shared_among_its_workers(
    monkeypatch: pytest.MonkeyPatch, threads: int, workers: int, each: int
) -> None:
    """Whisper's CTranslate2 replicas (one per worker) get `--cpu-threads` between them, at least one each: calls
    side by side never run more threads than the model has."""

    class Loaded(Exception):
        pass

    def whisper_model(path: str, **kwargs: object) -> None:
        raise Loaded(kwargs)

    monkeypatch.setattr(engine_module, "WhisperModel", whisper_model)
    placement = Placement(Runtime("cpu", 0, "int8", threads), workers=workers, queue_size=4)
    assert placement.worker_threads == each
    found = Found("base", Path("/nowhere"), "a test")
    with pytest.raises(Loaded) as loaded:
        engine_module.WhisperEngine(found, placement, beam_size=5, max_batch=8, default_language=None)
    kwargs = loaded.value.args[0]
    assert (kwargs["cpu_threads"], kwargs["num_workers"]) == (each, workers)


def test_multi_speaker_voice_lists_and_resolves_speakers(tmp_path: Path) -> None:
    """Speaker names come from the voice config; unknown ones are a clear error."""
    joe = Catalog([tmp_path]).voice("en_US-joe-medium")
    config = json.loads(Path(f"{joe.path}.json").read_text())
    config.update(num_speakers=3, speaker_id_map={"alice": 0, "bob": 1, "carol": 2})
    voices = tmp_path / "voices"
    voices.mkdir()
    shutil.copy(joe.path, voices / "en_US-trio-medium.onnx")
    (voices / "en_US-trio-medium.onnx.json").write_text(json.dumps(config))

    found = Catalog([tmp_path]).voice("en_US-trio-medium")
    settings = Settings.from_args([], environ={})
    engine = PiperEngine(found, Placement(Runtime.from_settings(settings.core), workers=1, queue_size=0))
    try:
        assert engine.speakers == ["alice", "bob", "carol"]
        assert engine.speaker_id("bob") == 1 and engine.speaker_id("2") == 2 and engine.speaker_id(None) is None
        with pytest.raises(UnknownSpeaker) as error:
            engine.speaker_id("dave")
        assert "alice, bob, carol" in error.value.message
        assert engine.format == AudioFormat(22050, 2, 1)
    finally:
        engine.close()


def test_a_stretch_of_speech_the_words_leave_out_is_found_and_filled() -> None:
    """Aligned to audio that holds a sentence it left out, a text draws a word across that stretch; the stretch
    is found, and the text decoded for it goes between the words before and after it, each word in its place."""
    rate = 16000
    piece, stretches = (0, 16 * rate), [(0, 6 * rate), (6 * rate, 10 * rate), (10 * rate, 16 * rate)]
    words = [(0.2, 0.6, " Turn"), (0.6, 0.8, " on"), (0.8, 5.0, " the"), (5.0, 5.8, " lights."), (6.1, 10.4, " And")]
    words += [(10.4, 11.0, " lock"), (11.0, 11.3, " the"), (11.3, 12.0, " door.")]
    text = "".join(word for _, _, word in words).strip()
    result = Decoded(text, "en", words=tuple(Word(*word) for word in words))
    assert assemble.unheard(piece, stretches, result) == [stretches[1]]  # one word's middle in 4 s of speech

    part = Decoded("Bitte schalte das Licht aus.", "de", words=(Word(0.5, 1.0, " Bitte"), Word(1.0, 3.0, " aus.")))
    whole = assemble.filled(piece, result, [(stretches[1], part)])
    assert whole.text == "Turn on the lights. Bitte schalte das Licht aus. And lock the door."
    assert [(s.start, s.end) for s in whole.segments] == [(0.0, 6.0), (6.0, 10.0), (10.0, 16.0)]
    assert [w.word for s in whole.segments for w in s.words] == [
        " Turn",
        " on",
        " the",
        " lights.",
        " Bitte",
        " aus.",
        " And",
        " lock",
        " the",
        " door.",
    ]
    assert whole.segments[2].words[0].start == 10.0  # the word drawn across the stretch starts after it
    assert all(s.start <= w.start < w.end <= s.end for s in whole.segments for w in s.words)

    # a stretch with little said in it, and nothing left out: its words are not written twice
    said = (*result.words[:4], Word(7.0, 7.4, " Yes."), *result.words[5:])
    quiet = Decoded("Turn on the lights. Yes. lock the door.", "en", words=said)
    assert assemble.unheard(piece, stretches, quiet) == [stretches[1]]
    again = Decoded("Yes.", "en", words=(Word(1.0, 1.4, " Yes."),))
    assert assemble.filled(piece, quiet, [(stretches[1], again)]).text == quiet.text


def _scored(*tokens: str) -> tuple[TokenLogprob, ...]:
    """Tokens with made-up log-probabilities, each its own (-0.01, -0.02, ...), to tell them apart."""
    return tuple(TokenLogprob(token.encode(), -(index + 1) / 100) for index, token in enumerate(tokens))


def test_a_filled_text_keeps_each_words_tokens_and_the_tokens_of_words_are_found() -> None:
    """Tokens travel with their words where a left-out stretch is filled in (`filled`), and a transcript finds
    the tokens of any run of its words (what a streamed delta carries): a word's, or its first letter's,
    across segments, with multi-byte characters and punctuation in tokens of their own."""
    rate = 16000
    piece, stretches = (0, 16 * rate), [(0, 6 * rate), (6 * rate, 10 * rate), (10 * rate, 16 * rate)]
    words = [(0.2, 0.6, " Turn"), (0.6, 5.0, " on."), (6.1, 10.4, " Café"), (10.4, 11.0, " lock")]
    tokens = _scored(" Turn", " on", ".", " Caf", "é", " lock")
    result = Decoded("Turn on. Café lock", "en", words=tuple(Word(*word) for word in words), logprobs=tokens)
    part = Decoded("Bitte.", "de", logprobs=_scored(" Bit", "te."), words=(Word(0.5, 1.0, " Bitte."),))
    whole = assemble.filled(piece, result, [(stretches[1], part)])
    assert whole.text == "Turn on. Bitte. Café lock"
    assert [[t.text for t in segment.logprobs] for segment in whole.segments] == [
        [" Turn", " on", "."],
        [" Bit", "te."],
        [" Caf", "é", " lock"],
    ]
    transcript = assemble.transcript([piece], [whole], 16 * rate, Options("en"))
    assert b"".join(token.token for token in transcript.logprobs).decode().strip() == transcript.text
    assert [token.text for token in transcript.logprobs_of(1, 2)] == [" on", ".", " Bit", "te."]
    assert [token.text for token in transcript.logprobs_of(3, 1)] == [" Caf", "é"]
    assert transcript.logprobs_of(5, 1) == ()
    split = [token for word in range(5) for token in transcript.logprobs_of(word, 1)]
    assert split == list(transcript.logprobs)  # every token in one word's, once


def test_a_file_is_replaced_whole_or_left_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "folder" / "entry"
    with atomic_write(path) as file:  # the folder is made
        file.write(b"first")
    with atomic_write(path) as file:
        file.write(b"sec")
        assert path.read_bytes() == b"first"  # not visible until the block ends
        file.write(b"ond")
    assert path.read_bytes() == b"second"
    with pytest.raises(CannotStore, match="disk full"), atomic_write(path) as file:
        file.write(b"half of a thi")
        raise OSError("disk full")
    assert path.read_bytes() == b"second"
    assert [child.name for child in path.parent.iterdir()] == ["entry"]  # no temporary file stays


async def test_a_streamed_call_holds_its_worker_back_and_stops_when_its_reader_leaves() -> None:
    """Scheduler.stream: at most `ahead` items wait for a slow reader; a reader that leaves closes the generator."""
    made: list[int] = []
    closed = threading.Event()

    def count() -> Generator[int, None, None]:
        try:
            for number in range(1000):
                made.append(number)
                yield number
        finally:
            closed.set()  # where a lock the call holds is released

    scheduler = Scheduler("test", workers=1, queue_size=1)
    try:
        items = scheduler.stream(count, ahead=2)
        assert await items.__anext__() == 0
        await asyncio.sleep(0.3)
        assert len(made) <= 4  # the one read, two waiting, one blocked in the hand-off
        await items.aclose()
        assert await asyncio.to_thread(closed.wait, 5)
        await asyncio.sleep(0.05)
        assert scheduler.pending == 0 and len(made) <= 4
        assert [item async for item in scheduler.stream(lambda: (n for n in range(3)), ahead=1)] == [0, 1, 2]
    finally:
        scheduler.close()


async def test_a_streamed_call_gives_its_items_then_its_error() -> None:
    def fail_after_two() -> Generator[int, None, None]:
        yield 1
        yield 2
        raise ValueError("the model failed")

    scheduler = Scheduler("test", workers=1, queue_size=1)
    got: list[int] = []
    try:
        with pytest.raises(ValueError, match="the model failed"):
            async for item in scheduler.stream(fail_after_two, ahead=4):
                got.append(item)
        assert got == [1, 2]
    finally:
        scheduler.close()


def test_xtts_voice_store_keeps_cloned_voices_in_files_without_torch(tmp_path: Path) -> None:
    pytest.importorskip("safetensors", reason="the xtts extra is not installed")
    from wyoming_wis.tts.xtts_voices import Conditioning, VoiceStore

    rng = np.random.default_rng(3)
    voice = Conditioning("grandma", rng.random((1, 32, 8), np.float32), rng.random((1, 512, 1), np.float32), True)
    store = VoiceStore(tmp_path / "voices", model="tiny", width=8, studio=["Studio_One"])
    info = store.save(voice, 4.25, 1234)
    assert info["name"] == "grandma" and info["model"] == "tiny" and info["source_seconds"] == 4.25
    assert sorted(path.name for path in store.folder.iterdir()) == ["grandma.json", "grandma.safetensors"]
    assert json.loads((store.folder / "grandma.json").read_text()) == info

    other = VoiceStore(store.folder, model="tiny", width=8, studio=["Studio_One"])  # another server, or a restart
    assert list(other.voices) == ["grandma"] and other.voices["grandma"].digest == voice.digest
    assert np.array_equal(other.voices["grandma"].gpt_cond_latent, voice.gpt_cond_latent)
    wider = VoiceStore(store.folder, model="big", width=16, studio=[])  # a voice made for another model is left out
    assert not wider.voices
    with pytest.raises(BadRequest, match="studio speaker"):
        store.check_new_name("Studio_One")
    with pytest.raises(BadRequest, match="Invalid voice name"):
        store.check_new_name("../up")

    store.remove("grandma")
    assert not list(store.folder.iterdir()) and not store.voices
    other.rescan()
    assert not other.voices
    with pytest.raises(UnknownSpeaker, match="no cloned voice 'grandma'"):
        store.remove("grandma")


def test_the_pipe_and_the_voice_store_import_without_torch() -> None:
    """Only the XTTS engine imports torch, and only for --xtts."""
    pytest.importorskip("safetensors", reason="the xtts extra is not installed")
    code = "import sys, wyoming_wis.pipe, wyoming_wis.tts.xtts_voices; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
