"""bench/endpoint.py's own arithmetic: where a clip's speech ends and where its pause goes, how a turn is streamed
and timed against a server, and what counts as a false cut. A wrong number there would mislead issue 23's
measurements without any error, so each is checked on audio and servers whose answers are known."""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
from wyoming.asr import Transcript
from wyoming.event import async_read_event, async_write_event

ROOT = Path(__file__).resolve().parents[1]
BENCH = str(ROOT / "bench")
sys.path.insert(0, BENCH)
import endpoint  # noqa: E402  (bench/ is not a package)
from asr import Recording  # noqa: E402
from common import RATE, Pcm, silence, wav_bytes  # noqa: E402
from endpoint import Clip, Source, System, Turn, Word  # noqa: E402
from rooms import CONDITIONS, delay  # noqa: E402

while BENCH in sys.path:  # the benchmarks' bench/rtc.py must not shadow the rtc package for the tests after this
    sys.path.remove(BENCH)

pytestmark = pytest.mark.fast


def tone(seconds: float, level: float = 0.3) -> Pcm:
    """A 440 Hz tone standing in for speech."""
    t = np.arange(int(seconds * RATE)) / RATE
    return Pcm((level * 32767 * np.sin(2 * np.pi * 440 * t)).astype(np.int16).tobytes())


def test_in_a_room_the_speech_arrives_later_and_the_noise_goes_on_after_it(tmp_path: Path) -> None:
    """--room: the clip and the silence streamed after it are rendered together, so the noise does not stop with
    the speech; its times move by the sound's path (2.8 m, about 11 ms), and nothing more is appended."""
    pcm = silence(0.3) + tone(0.5) + silence(0.2)
    (tmp_path / "c.wav").write_bytes(wav_bytes(pcm.audio, RATE, 2, 1))
    clip = Clip("c", "paused", "test", "Turn on the light.", "c.wav", pcm.seconds, 0.8, 0.1, 0.6)
    condition = next(condition for condition in CONDITIONS if condition.name == "room 0.8 s + pink 10 dB")
    [moved], folder = endpoint.in_room([clip], tmp_path, condition)
    assert 0.005 < delay(condition) < 0.02
    assert moved.last_speech_s == pytest.approx(0.8 + delay(condition))
    assert moved.resume_s == pytest.approx(0.6 + delay(condition))
    heard = moved.pcm(folder).floats()
    assert len(heard) >= (pcm.seconds + endpoint.TAIL_SECONDS) * RATE
    late = heard[int((pcm.seconds + 2.0) * RATE) :]  # long after the speech and its reverb
    assert np.sqrt(np.mean(late**2)) > 10 ** (-46 / 20)  # the room's noise, 10 dB under the speech at -26 dBFS


def test_the_speech_ends_where_the_sound_does_not_where_whisper_says() -> None:
    """Whisper put the word's end 0.1 s early; a click well after it is not speech."""
    pcm = silence(0.2) + tone(0.5) + silence(0.8) + tone(0.02) + silence(0.5)
    assert endpoint.last_speech(pcm, word_end=0.6) == pytest.approx(0.7, abs=0.011)


def test_a_pause_goes_in_the_quietest_frame_between_two_words() -> None:
    pcm = tone(0.4) + silence(0.15) + tone(0.4)
    offset = endpoint.quietest_cut(pcm, 0.35, 0.6)
    assert 0.4 <= offset / (2 * RATE) < 0.55
    assert offset % (2 * int(endpoint.FRAME_SECONDS * RATE)) == 0  # on a frame boundary


def words(*texts: str) -> list[Word]:
    return [Word(text, index * 0.3, index * 0.3 + 0.2) for index, text in enumerate(texts)]


def test_the_pause_follows_the_words_before_it_counted_as_spoken() -> None:
    assert endpoint.pause_after(words("Set", "a", "timer", "for", "10", "minutes."), "Set a timer for") == 3
    assert endpoint.pause_after(words("And", "milk", "and", "eggs"), "Add") == 0  # misheard, same boundary
    assert endpoint.pause_after(words("Set", "the", "thermostat", "to", "21", "degrees"), "Set the thermostat to") == 3
    with pytest.raises(ValueError):  # "21" is two words: no word ends after "twenty"
        endpoint.pause_after(words("Set", "it", "to", "21", "degrees"), "Set it to twenty")


def test_a_sentence_is_cut_after_the_function_word_nearest_its_middle() -> None:
    said = words("the", "invention", "of", "movable", "metal", "letters", "in", "the", "middle", "of", "the", "age")
    assert endpoint.pause_after(said, "") == 6  # "in": the middle is between 5 and 6; never the first or last


def test_a_paused_clip_keeps_its_times_after_the_inserted_silence(tmp_path: Path) -> None:
    speech = tone(0.4) + silence(0.1) + tone(0.5) + silence(0.2)
    source = Source("x", "paused", "test", Recording("x", "turn on the light", speech), "turn", 0.6)
    clip = endpoint.make_clip(source, [Word("turn", 0.0, 0.4), Word("on", 0.5, 0.95)], tmp_path)
    lead = endpoint.LEAD_SECONDS
    assert {type(value) for value in asdict(clip).values()} == {str, float}  # JSON's own: no numpy scalars
    assert clip.seconds == pytest.approx(lead + speech.seconds + 0.6)
    assert clip.last_speech_s == pytest.approx(lead + 1.0 + 0.6, abs=0.011)
    assert clip.resume_s == pytest.approx(lead + 0.5 + 0.6, abs=0.011) and clip.pause_s == 0.6  # the second word
    audio = np.frombuffer(clip.pcm(tmp_path).audio, dtype=np.int16)
    assert not audio[int((lead + 0.4) * RATE) : int((clip.resume_s - 0.01) * RATE)].any()  # the gap and the pause
    assert np.abs(audio[int((clip.resume_s + 0.01) * RATE) :][: RATE // 10]).max() > 1000  # speech right after


# -- streaming a turn ------------------------------------------------------------------------------


Answer = Callable[[int, bool], bool]  # (audio chunks received, audio-stop seen) -> send the transcript now


async def serve(answer: Answer, seen: list[int]) -> asyncio.Server:
    """A Wyoming ASR server that sends its transcript when `answer` says; `seen`: chunks before audio-stop."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        chunks, answered = 0, False
        try:
            while (event := await async_read_event(reader)) is not None:  # until the client closes, as HA does
                stopped = event.type == "audio-stop"
                chunks += event.type == "audio-chunk"
                if stopped:
                    seen.append(chunks)
                if not answered and answer(chunks, stopped):
                    await async_write_event(Transcript(text="turn on the light").event(), writer)
                    answered = True
        finally:
            writer.close()

    return await asyncio.start_server(handle, endpoint.HOST, 0)


async def stream(answer: Answer, ha_vad: bool, stop: int | None) -> tuple[Turn, list[int]]:
    """A clip of 0.3 s lead-in, speech to 0.5 s and 0.1 s of silence streamed to a server answering as `answer`
    says; the turn, and how many chunks came before each audio-stop."""
    pcm = silence(0.3) + tone(0.2) + silence(0.1)
    clip = Clip("c", "paused", "test", "Turn on the light.", "c.wav", pcm.seconds, 0.5, 0.2, 0.4)
    seen: list[int] = []
    server = await serve(answer, seen)
    async with server:
        port = server.sockets[0].getsockname()[1]
        audio = (pcm + silence(endpoint.TAIL_SECONDS)).audio
        turn = await endpoint.stream_turn(System("x", "x", "x", ha_vad), port, clip, audio, stop, "alone", 5.0)
    return turn, seen


async def test_a_turn_the_server_ends_is_timed_from_the_last_speech_sample() -> None:
    turn, seen = await stream(lambda chunks, _: chunks == 70, False, None)
    assert turn.text == "turn on the light" and not turn.cut and seen == []  # no audio-stop
    assert turn.transcript_s == pytest.approx(0.7, abs=0.05)
    assert turn.latency_s == pytest.approx(0.2, abs=0.05)


async def test_a_turn_ended_before_its_last_word_is_a_false_cut() -> None:
    turn, _ = await stream(lambda chunks, _: chunks == 45, False, None)
    assert turn.cut and turn.latency_s is None and turn.text == "turn on the light"


async def test_the_ha_path_sends_audio_stop_where_its_vad_ended() -> None:
    """HA does not send the chunk at which its VAD ended the command, and sends audio-stop when it was recorded."""
    turn, seen = await stream(lambda _, stopped: stopped, True, 120)
    assert seen == [120] and not turn.cut
    assert turn.stop_s == pytest.approx(1.21, abs=0.05)
    assert turn.latency_s == pytest.approx(turn.transcript_s - 0.5)


async def test_the_ha_path_cut_by_its_vad() -> None:
    turn, seen = await stream(lambda _, stopped: stopped, True, 40)
    assert seen == [40] and turn.cut and turn.latency_s is None


async def test_a_server_that_never_answers_counts_as_no_transcript(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(endpoint, "TAIL_SECONDS", 0.2)
    monkeypatch.setattr(endpoint, "GRACE_SECONDS", 0.2)
    turn, _ = await stream(lambda *_: False, False, None)
    assert turn.text is None and turn.error == "no transcript" and not turn.cut


# -- summaries ------------------------------------------------------------------------------------


def turn(system: str, kind: str, latency: float | None, text: str | None = "turn on the light", cut: bool = False):
    return Turn(system, f"{kind}{latency}", kind, "alone", "Turn on the light.", text, latency_s=latency, cut=cut)


def test_the_summary_counts_cuts_and_missing_transcripts_and_judges_ours_against_the_ha_path() -> None:
    ours, ha = "ours (default)", "HA default path + ours"
    turns = [
        turn(ours, "plain", 0.2),
        turn(ours, "plain", 0.4),
        turn(ours, "paused", None, "turn on", cut=True),
        turn(ours, "paused", 0.3),
        turn(ours, "whole-paused", 0.3),
        turn(ours, "long", None, None),
        *(turn(ha, kind, 1.3) for kind in endpoint.KINDS),
    ]
    systems = [s for s in endpoint.SYSTEMS if s.label in (ours, ha)]
    rows = {(row["system"], row["kind"]): row for row in endpoint.summarise(turns, systems)}
    assert rows[(ours, "paused")]["cuts"] == 1 and rows[(ours, "paused")]["cut_share"] == 0.5
    assert rows[(ours, "all")]["median_s"] == pytest.approx(0.3) and rows[(ours, "all")]["no_transcript"] == 1
    assert rows[(ours, "all")]["wer"] > 0 and rows[(ha, "all")]["wer"] == 0
    judged = {v["target"]: v["pass"] for v in endpoint.verdicts(list(rows.values())) if v["system"] == ours}
    assert judged == {
        "median <= 0.35 s (all)": True,
        "p95 <= 0.6 s (all)": True,
        "false cuts <= 2 % (paused)": False,
        "no false cut (whole-paused)": True,
        "WER <= HA default path + ours (all)": False,
    }


def test_growth_is_against_the_same_clip_alone() -> None:
    alone = [Turn("s", "a", "plain", "alone", "", "", latency_s=0.3), Turn("s", "b", "plain", "alone", "", "")]
    together = [
        Turn("s", "a", "plain", "2 at once", "", "", latency_s=0.34),
        Turn("s", "b", "plain", "2 at once", "", "", latency_s=0.5),  # nothing alone to compare with
    ]
    (row,) = endpoint.growth(alone, together)
    assert row["compared"] == 1 and row["median_growth_s"] == pytest.approx(0.04)


def test_what_ended_each_turn_of_ours_is_the_one_reason_the_server_counted_meanwhile() -> None:
    """The server's `wis_turns_total` read before and after a turn alone: the reason that grew by one ended it."""

    def turns(**counts: int) -> endpoint.Counted:
        return endpoint.Counted(Counter(counts), {})

    before = turns(command=2, silence=1)
    assert endpoint.turn_reason(before, turns(command=3, silence=1)) == "command"
    assert endpoint.turn_reason(before, turns(command=2, silence=1, commit=1)) == "commit"
    assert endpoint.turn_reason(before, before) is None  # none answered (an error before its end)
    assert endpoint.turn_reason(before, turns(command=3, silence=2)) is None  # two: not this one's alone
    turns = [
        Turn("ours (default)", "a", "plain", "alone", "", "", ended_by="command"),
        Turn("ours (default)", "b", "plain", "alone", "", "", ended_by="command"),
        Turn("ours (default)", "c", "long", "alone", "", "", ended_by="complete"),
        Turn("HA default path + peer", "a", "plain", "alone", "", ""),  # not ours: no count
    ]
    assert endpoint.ended_by(turns) == {"ours (default)": {"plain": {"command": 2}, "long": {"complete": 1}}}


def test_whisper_time_in_a_turn_of_ours_is_what_the_server_counted_meanwhile_by_stage() -> None:
    """`wis_asr_decode_seconds_total` read before and after a turn alone: each stage's growth; the medians per kind
    count a stage a turn did not use as 0 s."""
    before = endpoint.Counted(Counter(), {"encode": 1.0, "search": 2.0, "words": 0.5})
    after = endpoint.Counted(Counter(), {"encode": 1.1, "search": 2.25, "words": 0.5, "language": 0.03})
    assert endpoint.whisper_spent(before, after) == pytest.approx({"encode": 0.1, "search": 0.25, "language": 0.03})
    turns = [
        Turn("ours (default)", "a", "plain", "alone", "", "", whisper_s={"encode": 0.1, "search": 0.2}),
        Turn("ours (default)", "b", "plain", "alone", "", "", whisper_s={"encode": 0.3, "search": 0.4, "words": 0.1}),
        Turn("ours (default)", "c", "plain", "alone", "", "", whisper_s={"encode": 0.2, "search": 0.3}),
        Turn("HA default path + peer", "a", "plain", "alone", "", ""),  # not ours: no count
    ]
    assert endpoint.whisper_time(turns) == {
        "ours (default)": {"plain": {"encode": 0.2, "search": 0.3, "words": 0.0, "all": 0.5}}
    }


def test_quick_picks_each_kind_across_its_clips() -> None:
    clips = [Clip(f"{kind}{n}", kind, "", "", "", 1.0, 1.0) for kind in endpoint.KINDS for n in range(10)]
    picked = endpoint.pick(clips)
    assert [c.name for c in picked] == [
        *("plain0", "plain4", "plain9", "paused0", "paused4", "paused9"),
        *("whole-paused0", "whole-paused4", "whole-paused9", "long0"),
    ]


def test_ha_turns_times_each_path_from_the_last_speech_and_finds_its_cuts() -> None:
    """bench/ha_turns.py reads tests/ha/bench_turns.py's rows: ours is cut when its transcript came before the last
    speech sample, Home Assistant's path when its VAD ended before it; a stream that ran out was ended by neither."""
    sys.path.insert(0, BENCH)
    try:
        import ha_turns  # noqa: PLC0415  (bench/ is not a package)
    finally:
        sys.path.remove(BENCH)
    clip = Clip("c", "whole-paused", "piper x1", "Turn on the living room lamp.", "c.wav", 3.0, 2.0, 0.6, 1.6)

    def row(system: str, stt_end: float | None, vad_end: float | None = None, ran_out: bool = False) -> dict:
        times = {"stt_end_s": stt_end, "vad_end_s": vad_end, "ran_out": ran_out}
        return {"clip": "c", "system": system, "heard": "x", "errors": [], "server_reasons": [], **times}

    rows = [row("ours", 2.75), row("ours", 1.5), row("ha-vad", 2.5, 1.8), row("ha-vad", 3.3, 3.29)]
    rows.append(row("ha-vad", 6.0, 6.0, ran_out=True))
    played = ha_turns.turns(rows, {"c": clip})
    assert [turn.cut for turn in played] == [False, True, True, False, False]
    assert [turn.latency_s for turn in played] == [pytest.approx(0.75), None, None, pytest.approx(1.3), None]
    assert [turn.system for turn in played[:3]] == ["ours (default)", "ours (default)", "HA VAD + ours"]
