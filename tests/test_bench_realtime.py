"""bench/realtime.py's own arithmetic (issue 40): when a 100 ms append carries a sample, which Realtime turn holds
the last word and when it was answered, what counts as a cut, and what the server's log says about the turn's
end. A wrong number there would mislead the comparison with the Wyoming path without any error."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = str(ROOT / "bench")
sys.path.insert(0, BENCH)
import realtime  # noqa: E402  (bench/ is not a package)
from endpoint import Clip  # noqa: E402

while BENCH in sys.path:  # the benchmarks' bench/rtc.py must not shadow the rtc package for the tests after this
    sys.path.remove(BENCH)

pytestmark = pytest.mark.fast

CLIP = Clip("c", "paused", "test", "Turn on the kitchen light.", "c.wav", 4.0, 2.43, 0.6, 1.6)


def test_a_sample_is_sent_with_the_append_that_holds_it() -> None:
    assert realtime.sent_at(2.43, 0.1, end=True) == pytest.approx(2.5)
    assert realtime.sent_at(2.4, 0.1, end=True) == pytest.approx(2.4)  # speech ending at 2.4 s: in the 2.3-2.4 append
    assert realtime.sent_at(0.3, 0.1, end=False) == pytest.approx(0.4)  # the sample at 0.3 s opens the 0.3-0.4 append
    assert realtime.sent_at(2.43, 0.02, end=True) == pytest.approx(2.44)  # --append-ms 20, the SDK example's
    assert realtime.parse_args(["--append-ms", "20"]).append_ms == 20
    with pytest.raises(SystemExit):
        realtime.parse_args(["--append-ms", "5"])
    assert realtime.sent_at(0.3, 0.01, end=True) == pytest.approx(0.3)


def events(*items: tuple[float, str, str, dict]) -> list[tuple[float, SimpleNamespace]]:
    return [(at, SimpleNamespace(type=kind, item_id=item, **fields)) for at, kind, item, fields in items]


def scored(heard: list[tuple[float, SimpleNamespace]]) -> realtime.RealtimeTurn:
    turn = realtime.RealtimeTurn("rt", CLIP.name, CLIP.kind, "alone", CLIP.text)
    turn.last_sent_s, turn.speech_sent_s = 2.5, 0.4
    committed = {e.item_id: at for at, e in heard if e.type == "input_audio_buffer.committed"}
    realtime.score_realtime(turn, CLIP, heard, committed)
    return turn


def test_the_turn_holding_the_last_word_is_timed_from_its_append() -> None:
    turn = scored(
        events(
            (1.9, realtime.DELTA, "a", {"delta": "Turn on"}),
            (3.05, "input_audio_buffer.speech_stopped", "a", {"audio_end_ms": 2460}),
            (3.06, "input_audio_buffer.committed", "a", {}),
            (3.1, realtime.COMPLETED, "a", {"transcript": "Turn on the kitchen light."}),
        )
    )
    assert not turn.cut and turn.turns == 1
    assert turn.latency_s == pytest.approx(0.6)
    assert turn.stopped_s == pytest.approx(0.55) and turn.audio_end_s == pytest.approx(0.03)
    assert turn.first_delta_s == pytest.approx(1.5) and turn.delta_after_word_s == pytest.approx(-0.6)
    assert turn.text == turn.text_all == "Turn on the kitchen light."


def test_a_turn_ended_in_the_pause_is_a_cut_whose_words_are_the_first_turns() -> None:
    turn = scored(
        events(
            (1.7, "input_audio_buffer.committed", "a", {}),
            (1.75, realtime.COMPLETED, "a", {"transcript": "Turn on the"}),
            (3.1, "input_audio_buffer.committed", "b", {}),
            (3.2, realtime.COMPLETED, "b", {"transcript": "kitchen light."}),
        )
    )
    assert turn.cut and turn.latency_s is None and turn.turns == 2
    assert turn.transcript_s == pytest.approx(3.2)  # the turn holding the last word was answered
    assert turn.text == "Turn on the" and turn.text_all == "Turn on the kitchen light."
    assert turn.error is None


def test_no_answer_for_the_last_word_is_an_error() -> None:
    turn = scored(events((3.1, "input_audio_buffer.committed", "a", {})))
    assert turn.error == "no transcript for the last word" and turn.text is None and turn.latency_s is None


def test_the_servers_log_tells_why_and_when_the_turn_ended() -> None:
    turn = realtime.RealtimeTurn("rt", CLIP.name, CLIP.kind, "alone", CLIP.text)
    lines = [
        "2026-12-05 13:56:42,553 DEBUG wyoming_wis.asr.session: Judged a pause after 0.12 s of silence in 0.29 s:"
        " 'Turn on the' (last word from 0.2 s before the end), turn model 0.20: not complete",
        "2026-12-05 13:56:43,553 DEBUG wyoming_wis.asr.session: Judged a pause after 0.13 s of silence in 0.61 s:"
        " 'Turn on the kitchen light.' (last word from 0.4 s before the end), turn model 0.99: complete",
        "2026-12-05 13:56:44,053 DEBUG wyoming_wis.asr.session: Turn ended (silence) after 3.03 s",
        "2026-12-05 13:56:45,053 DEBUG wyoming_wis.asr.session: Turn ended (no-speech) after 5.00 s",
    ]
    realtime.judge_log(turn, CLIP, lines)
    assert turn.end_reason == "silence" and turn.ended_audio_s == pytest.approx(0.6)
    assert turn.judged_at_s == pytest.approx(0.13) and turn.judge_s == pytest.approx(0.61)
    assert turn.server_log[-1].startswith("wyoming_wis.asr.session: Turn ended (no-speech)")
    server_vad = realtime.SYSTEMS[0]
    assert realtime.held_by_judging([turn], server_vad) == 1  # judged until 0.74 s of silence: the 0.5 s end waited
    assert realtime.held_by_judging([turn], realtime.WYOMING) is None
