"""The ASR pipeline in-process with the real Whisper base: VAD pieces, short windows and their
fallback, micro-batching, long audio, idle unload, the end of a turn."""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import CORPUS, corpus, load_audio, normalise, pink_noise, wer

from wyoming_wis.asr import WhisperEngine
from wyoming_wis.asr import decoder as decoder_module
from wyoming_wis.asr import session as session_module
from wyoming_wis.asr.assemble import Transcript
from wyoming_wis.asr.decoder import Job, Options
from wyoming_wis.asr.engine import SCORE_STEP, names_heard
from wyoming_wis.asr.session import AsrSession, _StableText
from wyoming_wis.asr.turn import PATIENCE, TurnEnd, TurnLimits
from wyoming_wis.asr.vad import LEAD, PAD, PAUSE, SpeechDetector
from wyoming_wis.audio import NATIVE, AudioFormat
from wyoming_wis.budget import MemoryBudget
from wyoming_wis.catalog import Catalog
from wyoming_wis.requests import AsrRequest
from wyoming_wis.runtime import Placement, Runtime
from wyoming_wis.turns.detector import NO_LIMITS, CommandJudge, TurnDetector, TurnState

RATE = 16000


def samples(path: Path) -> np.ndarray:
    return load_audio(path).samples()


def silence(seconds: float) -> np.ndarray:
    return np.zeros(int(seconds * RATE), dtype=np.float32)


@pytest.fixture(scope="module")
def engine(data_dir: Path) -> WhisperEngine:
    """Base with one worker, so that concurrent requests queue and batch."""
    found = Catalog([data_dir], allow_download=False).asr_model("base")
    engine = WhisperEngine(
        found,
        Placement(Runtime("cpu", 0, "int8", 2), workers=1, queue_size=16),
        beam_size=5,
        max_batch=8,
        default_language=None,
    )
    engine.warm_up()
    yield engine
    engine.close()


def test_vad_scored_as_it_arrives_matches_one_pass() -> None:
    """Scoring a growing buffer window by window gives the same speech as scoring it whole."""
    audio = np.concatenate([silence(1.3), samples(corpus()[1][0]), silence(0.9)])
    whole, growing = SpeechDetector(), SpeechDetector()
    whole.update(audio)
    for end in range(1000, len(audio) + 1000, 1000):  # 62.5 ms, not a multiple of the window
        growing.update(audio[:end])
    assert growing.scored == whole.scored
    assert growing.pieces(len(audio)) == whole.pieces(len(audio))
    assert growing.speech_end() == whole.speech_end()


async def test_long_audio_is_scored_in_calls_of_a_bounded_size(
    engine: WhisperEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model call cannot be interrupted: a 10-minute upload scored in one call held the VAD's worker 2.5 s, and
    Home Assistant's transcription behind it (5.2x its time under bench/abuse.py's willow-streams). Scored
    SCORE_STEP at a time, it finds the same speech."""
    audio = np.concatenate([samples(corpus()[0][0]), silence(50.0), samples(corpus()[1][0])])
    ends: list[int] = []
    run = engine.vad.run

    async def counted(function: Callable[..., None], scored: np.ndarray, **costs: object) -> None:
        ends.append(len(scored))
        await run(function, scored, **costs)

    monkeypatch.setattr(engine.vad, "run", counted)
    chunked, whole = SpeechDetector(), SpeechDetector()
    await engine.score(chunked, audio)
    whole.update(audio)
    assert len(ends) >= 3 and ends[-1] == len(audio), ends
    assert all(0 < end - before <= SCORE_STEP for before, end in zip([0, *ends[:-1]], ends, strict=True)), ends
    assert chunked.pieces(len(audio)) == whole.pieces(len(audio))


def test_silence_around_speech_is_cut_off() -> None:
    clip = samples(corpus()[1][0])
    audio = np.concatenate([silence(3), clip, silence(4)])
    detector = SpeechDetector()
    detector.update(audio)
    [(start, end)] = detector.pieces(len(audio))
    assert 3 * RATE - LEAD - 0.2 * RATE <= start <= 3 * RATE - LEAD + 0.3 * RATE  # the speech's run-up is kept
    assert 3 * RATE + len(clip) - 0.3 * RATE <= end <= 3 * RATE + len(clip) + PAD + 0.1 * RATE
    nothing = SpeechDetector()
    nothing.update(silence(5))
    assert nothing.pieces(5 * RATE) == []


async def test_silence_alone_is_empty_without_decoding(engine: WhisperEngine) -> None:
    before = sum(engine.batcher.sizes.values())
    transcript = await engine.transcribe(silence(8), engine.options(AsrRequest(language="en")))
    assert transcript.text == "" and transcript.segments == []
    assert sum(engine.batcher.sizes.values()) == before  # nothing reached Whisper


async def test_noise_without_speech_is_decoded_and_whisper_hears_none(engine: WhisperEngine) -> None:
    """The detector hears no speech in a fan's noise: the transcript is still decoded, and empty because Whisper's
    own no-speech probability says so (the model's verdict, not the gate's)."""
    noise = pink_noise(6, -46).samples()
    detector = SpeechDetector()
    detector.update(noise)
    assert detector.pieces(len(noise)) == []
    before = sum(engine.batcher.sizes.values())
    transcript = await engine.transcribe(noise, engine.options(AsrRequest(language="en")))
    assert sum(engine.batcher.sizes.values()) > before  # Whisper heard it
    assert transcript.text == ""


async def test_speech_the_detector_misses_is_transcribed(engine: WhisperEngine, monkeypatch) -> None:
    """Far from the microphone Silero may score speech under its threshold: a transcript then decodes the audio
    anyway, and Whisper's words come back (here no window counts as speech at all)."""
    path, reference = corpus()[1]
    audio = np.concatenate([silence(0.5), samples(path), silence(0.5)])
    monkeypatch.setattr("wyoming_wis.asr.vad.THRESHOLD", 1.01)  # above any probability: the detector hears nothing
    detector = SpeechDetector()
    detector.update(audio)
    assert detector.pieces(len(audio)) == [] and detector.speech_end() is None
    transcript = await engine.transcribe(audio, engine.options(AsrRequest(language="en")))
    assert wer([reference], [transcript.text]) <= 0.1, transcript.text
    draft = await engine.transcribe_pieces(
        audio, detector, [], options=dataclasses.replace(engine.options(), draft=True)
    )
    assert draft.text == ""  # a preview does not pay for it: only what the detector heard is drafted


def test_short_window_loop_falls_back_to_full_window(engine: WhisperEngine, monkeypatch) -> None:
    """Crafted: a window with almost no silence after the speech makes Whisper base repeat itself.

    The guard sees the loop and the full 30 s window gives the right text.
    """
    path, reference = corpus()[1]  # "in being comparatively modern." (1.9 s)
    audio = samples(path)
    monkeypatch.setattr(decoder_module, "MIN_WINDOW", 1)
    monkeypatch.setattr(decoder_module, "WINDOW_STEP", 1)
    monkeypatch.setattr(decoder_module, "MIN_SILENCE", 0)
    job = Job(audio, Options("en"), ())
    assert job.window == 2
    [decoded] = engine.decoder.decode([job])
    assert decoded.retried == "a repetition loop", decoded
    assert wer([reference], [decoded.text]) == 0, decoded.text

    monkeypatch.undo()  # the real window sizes: no loop, no second pass
    [decoded] = engine.decoder.decode([Job(audio, Options("en"), ())])
    assert decoded.retried is None and wer([reference], [decoded.text]) == 0, decoded


def test_a_full_window_text_that_still_loops_is_decoded_at_the_next_temperature(
    engine: WhisperEngine, monkeypatch
) -> None:
    """The full-window pass is capped to the audio's length, so a loop ends too short for faster-whisper's own
    compression check (2.4) to fall back: ours sees it and goes on from the next temperature."""
    path, reference = corpus()[1]
    real, calls = engine.model.transcribe, []

    def transcribe(audio: np.ndarray, **options: object) -> tuple[list, object]:
        calls.append(options["temperature"])
        segments, info = real(audio, **options)
        segments = list(segments)
        if len(calls) == 1:  # what base wrote for espeak-ng's "Il fait très froid ce matin." at temperature 0
            segments = [dataclasses.replace(segments[0], text=" de la fin de la fin de la fin de", temperature=0.0)]
        return segments, info

    monkeypatch.setattr(engine.model, "transcribe", transcribe)
    decoded = engine.decoder._full_window(Job(samples(path), Options("en"), ()), "en", "a test")
    assert calls == [list(decoder_module.FALLBACK_TEMPERATURES), list(decoder_module.FALLBACK_TEMPERATURES[1:])]
    assert wer([reference], [decoded.text]) == 0, decoded.text


@pytest.mark.parametrize(  # loops that reached final texts in bench/accuracy.py (espeak-ng German, Spanish, French)
    "text",
    ["das Metasthoi-Zone-Zone-Zone-Zone-", "100.00.00.00.00.00.00.00", "les inféprés de la fin de la fin de la fin"],
)
def test_a_word_said_four_times_in_a_row_is_a_loop(text: str) -> None:
    assert decoder_module._problem(text, 10, 100, -0.2) == "a repetition loop"


@pytest.mark.parametrize("text", ["Done. Done.", "Done. done.", "Thank you! Thank you!", "Okay. Lights on. Lights on."])
def test_a_sentence_said_twice_is_decoded_again(text: str) -> None:
    """What base wrote now and then for the bundled voice's "Done" (tests/test_replies.py in CI)."""
    assert decoder_module._problem(text, 10, 100, -0.2) == "a repetition loop"


@pytest.mark.parametrize(
    "text", ["No, no, no, I said the kitchen.", "Bye bye.", "Turn on the fan in Niamh's office.", "Done. Done it."]
)
def test_a_word_said_twice_or_three_times_is_speech(text: str) -> None:
    assert decoder_module._problem(text, 10, 100, -0.2) is None


async def test_concurrent_requests_are_batched_without_cross_talk(engine: WhisperEngine) -> None:
    recordings = corpus()
    engine.batcher.sizes.clear()
    transcripts = await asyncio.gather(
        *(engine.transcribe(samples(path), engine.options(AsrRequest(language="en"))) for path, _ in recordings)
    )
    for (_, reference), transcript in zip(recordings, transcripts, strict=True):
        assert wer([reference], [transcript.text]) < 0.2, (reference, transcript.text)
    assert max(engine.batcher.sizes) >= 2, engine.batcher.sizes  # one worker: the rest queued and shared calls


async def test_long_audio_is_transcribed_whole_with_segments(engine: WhisperEngine) -> None:
    """53 s: longer than one Whisper window. Every sentence is there, with times in order."""
    recordings = corpus()
    audio = np.concatenate([np.concatenate([samples(path), silence(0.3)]) for path, _ in recordings])
    transcript = await engine.transcribe(audio, engine.options(AsrRequest(language="en")))
    assert transcript.duration > 50
    assert wer([" ".join(reference for _, reference in recordings)], [transcript.text]) < 0.1, transcript.text
    assert len(transcript.segments) >= 2
    starts = [segment.start for segment in transcript.segments]
    assert starts == sorted(starts) and transcript.segments[-1].end > 45
    assert all(segment.end > segment.start and segment.text for segment in transcript.segments)


def recordings() -> list[tuple[str, np.ndarray, str]]:
    """Every real recording the tests have: read sentences and spoken names."""
    bias = sorted((CORPUS.parent / "bias").glob("*.wav"))
    return [(path.stem, samples(path), text) for path, text in corpus()] + [
        (path.stem, samples(path), path.with_suffix(".txt").read_text().strip()) for path in bias
    ]


def test_translation_is_decoded_in_the_full_window_and_a_transcript_in_a_fitted_one_with_a_beam() -> None:
    """Greedy decoding in a fitted window changes words, and translation there is worse (issue 20): a transcript
    asked at beam 1 is decoded in a fitted window at FITTED_MIN_BEAM (issue 37: 2.7 times the peer's throughput at
    beam 1, where the full window made it 1.3 times), translation in the full window; a draft stays greedy."""
    command = np.zeros(2 * RATE, dtype=np.float32)
    assert Job(command, Options(None, "translate", beam_size=5), ()).window == decoder_module.FULL_WINDOW
    for asked, draft, decoded_with in [(1, False, 5), (5, False, 5), (1, True, 1)]:
        job = Job(command, Options(None, beam_size=asked, draft=draft), ())
        assert job.window == decoder_module.MIN_WINDOW and job.beam(asked) == decoded_with
    long = Job(np.zeros(27 * RATE, dtype=np.float32), Options(None, beam_size=1), ())
    assert long.window == decoder_module.FULL_WINDOW and long.beam(1) == 1  # as faster-whisper decodes it


@pytest.mark.parametrize("beam", [1, 5])
async def test_no_recording_is_worse_than_faster_whispers_own_transcribe(engine: WhisperEngine, beam: int) -> None:
    """Per utterance, at the same beam on the same model: our words are at least as right as transcribe()'s."""
    worse = []
    for name, audio, reference in recordings():
        ours = (await engine.transcribe(audio, engine.options(AsrRequest(beam_size=beam)))).text
        pieces, _ = engine.model.transcribe(audio, beam_size=beam)
        theirs = " ".join(piece.text.strip() for piece in pieces)
        if wer([reference], [ours]) > wer([reference], [theirs]):
            worse.append((name, ours, theirs))
    assert not worse, worse


GERMAN = (  # 21 words, about 9 s
    "Guten Morgen, ich möchte heute Abend mit meiner Familie in die Stadt fahren, weil dort ein großes Konzert im Park "
    "stattfindet und wir schon lange Karten haben."
)


def espeak(text: str, voice: str) -> np.ndarray:
    """Speech from Debian's espeak-ng, at 16 kHz: a language the bundled recordings do not have."""
    wav = subprocess.run(["espeak-ng", "-v", voice, "-s", "150", "--stdout", text], capture_output=True, check=True)
    return load_audio(wav.stdout).samples()


async def test_no_sentence_is_lost_when_the_language_changes(engine: WhisperEngine) -> None:
    """English, a pause, German, in one piece of audio, language not given: decoded in one language, the German
    would be left out (faster-whisper's transcribe() leaves it out here); it must be there, in German."""
    (path, english), *_ = corpus()
    audio = np.concatenate([samples(path), silence(1.0), espeak(GERMAN, "de")])
    transcript = await engine.transcribe(audio, engine.options())
    german = next((s for s in transcript.segments if s.start >= len(samples(path)) / RATE - 0.5), None)
    assert german is not None and wer([GERMAN], [german.text]) < 0.3, transcript.segments
    assert wer([f"{english} {GERMAN}"], [transcript.text]) < 0.25, transcript.text
    assert transcript.language == "en"


ROOM = "Bitte schalte das Licht im Wohnzimmer aus."  # 7 words, about 2.7 s


async def test_speech_that_the_text_leaves_out_is_decoded_on_its_own(engine: WhisperEngine) -> None:
    """English, a short German request, English, language not given: the whole is surely English, and decoded in
    English Whisper leaves the German out (faster-whisper's transcribe() too). The words' times show a stretch
    of speech without words; decoded on its own, its text goes where it was said."""
    (first, before), (last, after) = corpus()[4], corpus()[7]
    german = espeak(ROOM, "de")
    audio = np.concatenate([samples(first), silence(1.0), german, silence(1.0), samples(last)])
    transcript = await engine.transcribe(audio, engine.options())
    start = (len(samples(first)) + RATE) / RATE
    end = start + len(german) / RATE
    middle = [s for s in transcript.segments if start <= (s.start + s.end) / 2 <= end]
    assert {"licht", "wohnzimmer"} <= set(normalise(" ".join(s.text for s in middle)).split()), transcript.segments
    english = " ".join(s.text for s in transcript.segments if s not in middle)
    assert wer([f"{before} {after}"], [english]) < 0.1, english
    assert transcript.language == "en"

    english = engine.options(AsrRequest(language="en"))
    asked = await engine.transcribe(audio, english)  # English asked for: German stays out
    assert "wohnzimmer" not in normalise(asked.text) and wer([f"{before} {after}"], [asked.text]) < 0.1, asked.text


async def test_a_language_detected_unsurely_in_a_short_window_is_detected_in_the_full_one(
    engine: WhisperEngine,
) -> None:
    """In its fitted 10 s window base takes this German greeting for Vietnamese (40 %), and decoding it so
    writes nothing; in Whisper's 30 s window it hears German, as faster-whisper's transcribe() does."""
    greeting = "Guten Morgen, wie geht es dir heute?"
    transcript = await engine.transcribe(espeak(greeting, "de"), engine.options())
    assert transcript.language == "de"
    assert wer([greeting], [transcript.text]) <= 0.3, transcript.text


async def test_idle_model_is_unloaded_and_reloaded(engine: WhisperEngine) -> None:
    path, reference = corpus()[1]
    assert engine.loaded
    assert not engine.unload_if_idle(3600)  # not idle long enough
    assert engine.unload_if_idle(0)
    assert not engine.loaded
    transcript = await engine.transcribe(samples(path), engine.options(AsrRequest(language="en")))
    assert engine.loaded
    assert wer([reference], [transcript.text]) == 0


def test_stable_text_sends_agreed_words_once() -> None:
    stable = _StableText()
    assert stable.update("Turn on the kit", final=False) == ""  # nothing to agree with yet
    assert stable.update("Turn on the kitchen", final=False) == "Turn on the"
    assert stable.update("Turn on the kitchen light", final=False) == " kitchen"
    assert stable.update("Turn on the kitchen lights.", final=True) == " lights."
    assert stable.update("Turn on the kitchen lights.", final=True) == ""

    cased = _StableText()  # early decodes often lack case and punctuation
    cased.update("printing in the", final=False)
    assert cased.update("Printing, in the only", final=False) == "Printing, in the"

    revised = _StableText()
    revised.update("Turn of the", final=True)
    assert revised.update("Turn off the light.", final=True) == ""  # cannot take back what was sent


async def spoken(session: AsrSession, pcm: bytes, turn: asyncio.Future[TurnEnd] | None = None) -> None:
    """Feed 16 kHz 16-bit `pcm` at the pace it was spoken, 20 ms at a time (until the session ends the turn, where
    `turn` is the future of its `turn_end`)."""
    chunk, started = 640, asyncio.get_running_loop().time()
    for offset in range(0, len(pcm), chunk):
        if turn is not None and turn.done():
            break
        await asyncio.sleep(max(0, started + offset / 32000 - asyncio.get_running_loop().time()))
        await session.feed(pcm[offset : offset + chunk], AudioFormat(RATE, 2, 1))


async def spoken_turn(session: AsrSession, pcm: bytes, turn: asyncio.Future[TurnEnd]) -> tuple[TurnEnd, Transcript]:
    """`spoken` until the session ends the turn: the end, and the transcript."""
    await spoken(session, pcm, turn)
    return await turn, await session.finish()


async def live_turn(
    engine: WhisperEngine,
    pcm: bytes,
    turn_model: Callable[[np.ndarray], Awaitable[float]],
    limits: TurnLimits = NO_LIMITS,
    commands: CommandJudge | None = None,
    detector: TurnDetector | None = None,
) -> tuple[TurnEnd, Transcript]:
    """A session on the default sensitivity (with `commands`, the household's sentences, if given), fed `pcm` as it
    is spoken until it ends the turn: the end, and the transcript. `detector` replaces the one made of those."""
    hold = MemoryBudget(1 << 30).hold()
    options = engine.options(AsrRequest(language="en"))
    turn = detector or TurnDetector("default", limits=limits, turn_model=turn_model, commands=commands)
    session = AsrSession(engine, options, frontend="test", max_seconds=30, hold=hold, turn=turn)
    async with session:
        return await spoken_turn(session, pcm, asyncio.ensure_future(session.turn_end()))


@pytest.mark.parametrize(("second", "reason"), [(0.95, "complete"), (0.6, "silence")])
async def test_a_whole_request_the_turn_model_doubted_is_heard_again(
    engine: WhisperEngine, second: float, reason: str
) -> None:
    """Smart Turn scored whole commands ("What's the temperature inside?") 0.01-0.06 a moment into the pause;
    their words were whole, so it listens again at `recheck`, and only a sure answer then ends the turn early."""
    heard: list[int] = []  # samples the turn model was given, at each call

    async def turn_model(audio: np.ndarray) -> float:
        heard.append(len(audio))
        return 0.1 if len(heard) == 1 else second

    speech = samples(CORPUS / "LJ001-0002.flac")  # "in being comparatively modern."
    pcm = (np.concatenate([silence(0.3), speech, silence(2)]) * 32767).astype("<i2").tobytes()
    patience = PATIENCE["default"]
    end, transcript = await live_turn(engine, pcm, turn_model)
    assert end.reason == reason
    assert len(heard) == 2  # the first look, and once more: a doubt is not heard again and again
    listened_after = (heard[1] - heard[0]) / RATE  # the first call heard 0.2 s (TURN_PAD) of the silence
    assert listened_after >= patience.recheck - 0.2 - patience.check
    assert normalise(transcript.text) == "in being comparatively modern"
    if reason == "complete":  # at the second listen, before the silence would have ended it
        assert end.samples < (0.3 + len(speech) / RATE + patience.silence) * RATE


async def test_a_turn_goes_through_its_states_in_order(engine: WhisperEngine) -> None:
    """The detector's state, read at each step of the VAD: waiting for speech, speaking, the pause judged (its
    decode running), the pause judged and settling, ended; never back to waiting once speech has come."""
    seen: list[TurnState] = []

    async def turn_model(audio: np.ndarray) -> float:
        return 0.99

    detector = TurnDetector("default", turn_model=turn_model)
    judge = detector.judge

    async def watched(session: AsrSession, audio: np.ndarray) -> bool:
        ended = await judge(session, audio)
        if not seen or seen[-1] != detector.state:
            seen.append(detector.state)
        return ended

    detector.judge = watched  # type: ignore[method-assign]
    speech = samples(CORPUS / "LJ001-0008.flac")  # "has never been surpassed."
    pcm = (np.concatenate([silence(0.5), speech, silence(2)]) * 32767).astype("<i2").tobytes()
    end, transcript = await live_turn(engine, pcm, turn_model, detector=detector)
    assert end.reason == "complete" and normalise(transcript.text) == "has never been surpassed"
    order = [TurnState.WAITING, TurnState.SPEAKING, TurnState.JUDGING, TurnState.PAUSED, TurnState.ENDED]
    assert [state for state in order if state in seen] == order, seen
    assert seen.index(TurnState.ENDED) == len(seen) - 1
    assert TurnState.WAITING not in seen[1:], seen


@pytest.mark.parametrize("pause", [0.3, 0.6])
async def test_a_whole_sentence_then_a_pause_shorter_than_settle_is_not_an_end(
    engine: WhisperEngine, pause: float
) -> None:
    """ "Turn on the living room ... lamp": the words before the pause are a request of their own, and the turn model
    (Smart Turn scored such pauses in Piper's takes as high as real ends) is sure the speaker is done. No pause
    shorter than the sensitivity's `settle` ends the turn: the speech after it is part of it, and the turn ends once
    the silence after all of it has settled."""
    heard: list[int] = []

    async def turn_model(audio: np.ndarray) -> float:
        heard.append(len(audio))
        return 0.99

    first, second = samples(CORPUS / "LJ001-0008.flac"), samples(CORPUS / "LJ001-0002.flac")  # two whole sentences
    lead = np.concatenate([silence(0.3), first])
    pcm = (np.concatenate([lead, silence(pause), second, silence(3)]) * 32767).astype("<i2").tobytes()
    patience = PATIENCE["default"]
    end, transcript = await live_turn(engine, pcm, turn_model)
    said = len(lead) + int(pause * RATE) + len(second)
    assert end.reason == "complete" and said < end.samples < said + (patience.silence - 0.1) * RATE
    assert len(heard) >= 2 and heard[0] < len(lead) + int(pause * RATE)  # the first sentence was judged complete
    text = normalise(transcript.text)
    assert text.startswith("has never been surpassed") and text.endswith("comparatively modern"), text


@pytest.mark.parametrize("verdict", [True, None])
async def test_the_turn_model_is_asked_only_where_the_sentences_say_nothing(
    engine: WhisperEngine, verdict: bool | None
) -> None:
    """Words the household's sentences recognise as a whole command end the turn at the first look (reason
    `command`) without the turn model, whose call would have slowed the decode; where they say nothing, the turn
    model is asked as before."""
    judged: list[str] = []
    heard: list[int] = []

    async def commands(text: str, language: str | None) -> bool | None:
        judged.append(text)
        return verdict

    async def turn_model(audio: np.ndarray) -> float:
        heard.append(len(audio))
        return 0.99

    speech = samples(CORPUS / "LJ001-0008.flac")  # "has never been surpassed."
    pcm = (np.concatenate([silence(0.3), speech, silence(2)]) * 32767).astype("<i2").tobytes()
    end, transcript = await live_turn(engine, pcm, turn_model, commands=commands)
    assert judged and normalise(judged[-1]) == "has never been surpassed"
    assert normalise(transcript.text) == "has never been surpassed"
    if verdict:
        assert end.reason == "command" and heard == []
        assert end.samples < (0.3 + len(speech) / RATE + PATIENCE["default"].settle) * RATE  # before it settled
    else:
        assert end.reason == "complete" and heard


async def test_a_judgement_whose_pause_is_over_is_dropped_and_the_next_pause_judged_at_once(
    engine: WhisperEngine,
) -> None:
    """The speaker goes on before a pause's judgement lands (here it lands after the silence would have ended the
    turn) and pauses again: the new pause is judged at once, not after the old judgement, and its whole command
    ends the turn."""
    judged: list[str] = []

    async def commands(text: str, language: str | None) -> bool | None:
        judged.append(text)
        if len(judged) == 1:
            await asyncio.sleep(3)  # the first pause's judgement lands late
        return True

    async def turn_model(audio: np.ndarray) -> float:
        return 0.99

    first, second = samples(CORPUS / "LJ001-0008.flac"), samples(CORPUS / "LJ001-0002.flac")
    pcm = (np.concatenate([silence(0.3), first, silence(0.3), second, silence(2)]) * 32767).astype("<i2").tobytes()
    end, transcript = await live_turn(engine, pcm, turn_model, commands=commands)
    assert len(judged) >= 2 and normalise(judged[0]) == "has never been surpassed", judged
    assert end.reason == "command", (end, judged)  # (before: the first judgement held the turn to the silence)
    assert normalise(transcript.text) == "has never been surpassed in being comparatively modern"


async def test_the_most_speech_a_turn_may_hold_ends_it_while_a_pause_is_judged(engine: WhisperEngine) -> None:
    """A reading that goes on past the limit, its first pause judged by a turn model that takes 4 s: the limit ends
    the turn as the audio reaches it, not once the judgement in flight has come back (seconds later)."""

    async def turn_model(audio: np.ndarray) -> float:
        await asyncio.sleep(4.0)
        return 0.1

    lead = 0.3
    reading = samples(CORPUS / "LJ001-0001.flac")  # 9.7 s: "Printing, in the only sense ...", pausing at commas
    pcm = (np.concatenate([silence(lead), reading]) * 32767).astype("<i2").tobytes()
    limits = TurnLimits(max_speech=3.0, no_speech=5.0)
    end, transcript = await live_turn(engine, pcm, turn_model, limits)
    detector = SpeechDetector()
    detector.update(np.concatenate([silence(lead), reading]))
    start = detector.speech_start()
    assert end.reason == "max-speech" and start is not None
    assert end.samples - start <= (limits.max_speech + 0.1) * RATE, (end.samples - start) / RATE
    assert normalise(transcript.text).startswith("printing in the only sense"), transcript.text


async def test_a_pause_whose_words_are_unclear_is_not_decoded_again_until_the_end(
    engine: WhisperEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pause's decode that the short window does not trust (here every one: an unlikely text) ran faster-whisper's
    standard pass with six temperatures while the speaker might go on, and held the model. Judging, it is left
    unsettled: the pause is not an end, and the text is decoded the standard way once, at the end, right."""
    monkeypatch.setattr(decoder_module, "_problem", lambda *_: "an unlikely text")
    standard_passes: list[bool] = []  # whether the turn had ended, at each
    full_window = engine.decoder._full_window

    def counted(*args: object) -> object:
        standard_passes.append(turn.done())
        return full_window(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(engine.decoder, "_full_window", counted)
    speech = samples(CORPUS / "LJ001-0002.flac")  # "in being comparatively modern."
    pcm = (np.concatenate([silence(0.3), speech, silence(2)]) * 32767).astype("<i2").tobytes()
    options = engine.options(AsrRequest(language="en"))
    hold = MemoryBudget(1 << 30).hold()
    session = AsrSession(engine, options, frontend="test", max_seconds=30, hold=hold, turn=TurnDetector("default"))
    async with session:
        turn = asyncio.ensure_future(session.turn_end())
        end, transcript = await spoken_turn(session, pcm, turn)
    assert end.reason == "silence"
    assert standard_passes == [True], standard_passes  # once, after the end
    assert normalise(transcript.text) == "in being comparatively modern"


async def test_a_pause_is_decoded_as_the_end_would_decode_it_so_an_end_inside_it_waits_for_no_decode(
    engine: WhisperEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that ends the request 0.2 s after the last word (by its own VAD: Home Assistant with
    --external-vad, a Willow device, a Realtime commit) gets the transcript decoded in that pause: a pause is
    decoded once it has lasted PAUSE, padded with silence to PAD as the end is, and the end reuses that decode.
    Before, a pause was decoded once it had lasted PAD (0.3 s), and an end inside it waited for a whole decode."""
    ended = False
    decodes_after_the_end: list[Options] = []
    transcribe_pieces = engine.transcribe_pieces

    async def counted(*args: Any, options: Options, **kwargs: Any) -> Transcript:
        if ended:
            decodes_after_the_end.append(options)
        return await transcribe_pieces(*args, options=options, **kwargs)

    monkeypatch.setattr(engine, "transcribe_pieces", counted)
    pause = 0.2
    assert PAUSE / RATE < pause < PAD / RATE
    speech = samples(CORPUS / "LJ001-0002.flac")  # "in being comparatively modern."
    pcm = (np.concatenate([silence(0.3), speech, silence(pause)]) * 32767).astype("<i2").tobytes()
    texts: list[str] = []

    async def on_text(text: str) -> None:
        texts.append(text)

    hold = MemoryBudget(1 << 30).hold()
    options = engine.options(AsrRequest(language="en"))
    async with AsrSession(engine, options, frontend="test", max_seconds=30, hold=hold, on_text=on_text) as session:
        await spoken(session, pcm)  # (no turn detector: the client ends the request)
        await asyncio.sleep(2)  # the pause's decode lands (after a draft in flight, if any)
        ended = True
        transcript = await session.finish()
    assert decodes_after_the_end == [], decodes_after_the_end
    assert normalise(transcript.text) == "in being comparatively modern"
    assert normalise("".join(texts)) == "in being comparatively modern"  # all of it went out as partial text too


async def test_small_pieces_are_kept_on_the_loop_and_large_ones_in_a_thread(
    engine: WhisperEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Home Assistant's 64 ms pieces go through no thread, where they queued behind every other stream's, but the
    first (which sets up the conversion); a piece (or a buffer to grow) past LIGHT_BYTES still does. The audio kept
    is the same either way."""
    hops: list[int] = []
    to_thread = asyncio.to_thread

    async def counted(work: Callable[[], object]) -> object:
        hops.append(1)
        return await to_thread(work)

    monkeypatch.setattr(session_module.asyncio, "to_thread", counted)
    pcm = (samples(CORPUS / "LJ001-0002.flac") * 32767).astype("<i2").tobytes()
    big = bytes(session_module.LIGHT_BYTES + 2)
    session = AsrSession(
        engine, engine.options(AsrRequest()), frontend="test", max_seconds=30, hold=MemoryBudget(1 << 30).hold()
    )
    async with session:
        for at in range(0, len(pcm), 2048):
            await session.feed(pcm[at : at + 2048], NATIVE)
        assert hops == [1]
        await session.feed(big, NATIVE)
        assert hops == [1, 1]
        kept = session.audio()
    assert np.array_equal(kept[: len(pcm) // 2], np.frombuffer(pcm, "<i2") / np.float32(32768))
    assert len(kept) == (len(pcm) + len(big)) // 2 and not kept[len(pcm) // 2 :].any()


def test_the_prompt_holds_whole_names_in_order_within_its_budget(engine: WhisperEngine) -> None:
    """The budget is MAX_PROMPT_TOKENS by the model's own tokenizer: the request's names and terms, then the
    household's best first, whole, up to the first that does not fit; a long text keeps its end in TEXT_SHARE of it
    (all of it with no names); nothing a client writes becomes one of Whisper's special tokens."""
    tokenizer = engine.decoder._tokenizer("transcribe", "en")
    household = tuple(f"Nuukfjord heater {n}" for n in range(300))
    options = engine.options(AsrRequest(names=("Belax window",), terms=("kWh",)), household)
    tokens = engine.decoder.prompt_tokens(options.prompt).tokens
    text = tokenizer.decode(list(tokens))
    assert len(tokens) <= decoder_module.MAX_PROMPT_TOKENS
    assert text.startswith(" kWh, Belax window, Nuukfjord heater 0, Nuukfjord heater 1,") and text.endswith(".")
    kept = text.strip(" .").split(", ")
    assert kept == ["kWh", "Belax window", *household[: len(kept) - 2]] and len(kept) > 20
    long = " ".join(f"word{n}" for n in range(500))
    both = engine.decoder.prompt_tokens(engine.options(AsrRequest(prompt=long), household).prompt).tokens
    share = int(decoder_module.MAX_PROMPT_TOKENS * decoder_module.TEXT_SHARE)
    assert len(both) <= decoder_module.MAX_PROMPT_TOKENS
    text_part, _, names_part = tokenizer.decode(list(both)).partition(" Nuukfjord heater 0, ")
    assert text_part.endswith("word499") and names_part.startswith("Nuukfjord heater 1, ")
    assert share * 0.9 < len(tokenizer.encode(text_part)) < share * 1.2  # (a cut token re-encodes differently)
    alone = engine.decoder.prompt_tokens(engine.options(AsrRequest(prompt=long)).prompt).tokens
    assert len(alone) == decoder_module.MAX_PROMPT_TOKENS and tokenizer.decode(list(alone)).endswith("word499")
    hostile = engine.options(AsrRequest(prompt="<|endoftext|><|en|> hello", names=("<|nospeech|>",))).prompt
    assert all(token < tokenizer.eot for token in engine.decoder.prompt_tokens(hostile).tokens)


async def test_household_names_make_a_name_right_and_leave_other_speech_alone(engine: WhisperEngine) -> None:
    """The recorded 'Turn off the Quorvex heater.' comes out right with the household's names (and not without);
    the read sentences of the corpus read no worse with 50 names that none of them says."""
    audio = samples(CORPUS.parent / "bias" / "quorvex.wav")
    reference = (CORPUS.parent / "bias" / "quorvex.txt").read_text()
    household = ("Kitchen", "Living room", "Quorvex heater", "Niamh's office", "Belax window")
    plain = (await engine.transcribe(audio, engine.options(AsrRequest(language="en")))).text
    named = (await engine.transcribe(audio, engine.options(AsrRequest(language="en"), household))).text
    assert normalise(plain) != normalise(reference) and normalise(named) == normalise(reference), (plain, named)
    fifty = tuple(
        f"{room} {thing}"
        for room in ("Hyttloft", "Sauna", "Kveldsro", "Bryggeri", "Vesle")
        for thing in ("lamp", "heater", "blind", "speaker", "fan", "plug", "window", "door", "light strip", "vacuum")
    )
    assert len(fifty) == 50
    for path, reference in corpus():
        audio = samples(path)
        plain = (await engine.transcribe(audio, engine.options(AsrRequest(language="en")))).text
        named = (await engine.transcribe(audio, engine.options(AsrRequest(language="en"), fifty))).text
        assert wer([reference], [named]) <= wer([reference], [plain]), (path.name, plain, named)


def test_a_names_own_word_is_one_the_tokenizer_splits_and_a_plural_of_a_common_word_is_common(
    engine: WhisperEngine,
) -> None:
    """`rare` by Whisper's own tokenizer (casefolded words, as `names_heard` asks): a plural whose singular is one
    token is a common word, so a command that says it beside a name is kept as the names decoded it."""
    rare = engine.decoder.rare
    assert [word for word in ("nuukfjord", "hyttloft", "thermostat", "chandelier") if not rare(word)] == []
    common = ("kitchen", "lights", "blinds", "shutters", "radiators", "heaters", "sockets", "spotlights")
    assert [word for word in common if rare(word)] == []
    assert names_heard("Close the blinds in the office.", ("Office", "Office Blinds"), rare)


async def test_speech_that_names_none_of_the_names_is_encoded_once_for_both_decodes(
    engine: WhisperEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A text in which the household's names find no name is decoded again without them, on the same audio: the
    encoder's output of the first decode serves the second (the encoder is half a short decode's time)."""
    whisper, encoded = engine.decoder.whisper, []
    original = whisper.encode

    def encode(features: np.ndarray) -> object:
        encoded.append(features.shape)
        return original(features)

    monkeypatch.setattr(whisper, "encode", encode)
    audio = samples(CORPUS / "LJ001-0008.flac") * 0.99  # "has never been surpassed." (one piece; this test's own)
    household = ("Kitchen", "Quorvex heater", "Belax window")
    calls = []
    decode = engine.decoder.decode
    monkeypatch.setattr(engine.decoder, "decode", lambda jobs: calls.append(len(jobs)) or decode(jobs))
    named = await engine.transcribe(audio, engine.options(AsrRequest(language="en"), household))
    assert normalise(named.text) == "has never been surpassed"
    assert len(calls) == 2 and len(encoded) == 1, (calls, encoded)  # with the names, then without: one encode
    other = samples(CORPUS / "LJ001-0002.flac") * 0.99
    await engine.transcribe(other, engine.options(AsrRequest(language="en")))
    assert len(encoded) == 2  # other audio is encoded anew
