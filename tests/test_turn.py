"""When a turn sounds complete: the words-so-far half of the end-of-turn judgement (wyoming_wis/asr/turn.py)."""

from __future__ import annotations

import pytest

from wyoming_wis.asr.decoder import Word
from wyoming_wis.asr.turn import GUESS_START, PATIENCE, RECHECK_THRESHOLD, guessed_ending, sounds_complete
from wyoming_wis.requests import SENSITIVITIES

pytestmark = pytest.mark.fast


@pytest.mark.parametrize(
    "text",
    [
        "Turn on the kitchen light.",
        "turn the lights on",  # a particle, not a preposition waiting for its noun
        "What time is it?",
        "Set a timer for 10 minutes",  # Home Assistant's replies and users' words come without a full stop
        "Turn it off please",
        "Switch the fan off.",
        "Set the thermostat to 21 degrees.",  # a verb that needs no particle
    ],
)
def test_whole_requests_sound_complete(text: str) -> None:
    assert sounds_complete(text, "en")


@pytest.mark.parametrize(
    "text",
    [
        "Turn on the",
        "set a timer for.",  # Whisper puts a full stop after a pause even mid-request
        "Add milk and",
        "What's the weather in...",
        "Turn on the kitchen,",
        "Turn the volume.",  # ... down to four: "turn" and "switch" are not done without on, off, up or down
        "switch the fan",
        "has never",  # ... been surpassed: an adverb that leads into the verb
        # ... the Chinese took impressions: a pause after it judged complete (the turn model said 0.70) cut a
        # reading there
        "has never been surpassed. For although",
        "Keep the heating on until",
        "Play some music without",
        "Make it very",
        "Um",
        "",
        " . ",
    ],
)
def test_open_ended_words_do_not(text: str) -> None:
    assert not sounds_complete(text, "en")
    assert not sounds_complete(text, None)  # a language not named is judged as English too


def test_a_last_word_that_begins_where_the_speech_ends_was_guessed() -> None:
    """Whisper heard "Open the" and wrote "Open the gate.": the made-up word begins at the end of the speech."""
    said = [Word(0.30, 0.52, " Open"), Word(0.52, 0.70, " the")]
    end = 0.74  # seconds: where the VAD heard the speech end
    assert not guessed_ending(said, end)
    assert guessed_ending([*said, Word(end - GUESS_START / 2, end + 0.1, " gate.")], end)
    assert guessed_ending([*said, Word(end - 0.15, end, " it.")], end)  # "Set a timer for it.", seen in CI
    # a said word may be aligned to end well after the speech ("30%"); it began long before the end
    assert not guessed_ending([*said, Word(end - 0.6, end + 0.3, " 30%.")], end)
    assert not guessed_ending([], end)


def test_other_languages_are_left_to_the_model_and_the_silence() -> None:
    """'the' ends no German request, but the English list must not judge German words ("die Tür ist an")."""
    assert sounds_complete("Mach das Licht an", "de")
    assert sounds_complete("Schalte das Licht in der", "de")  # only a trailing-off mark would say otherwise
    assert not sounds_complete("Schalte das Licht in der...", "de")


def test_patience_grows_with_relaxed_and_shrinks_with_aggressive() -> None:
    """Home Assistant's order: aggressive ends soonest, relaxed waits longest, and judges more strictly."""
    assert tuple(PATIENCE) == SENSITIVITIES
    aggressive, default, relaxed = PATIENCE["aggressive"], PATIENCE["default"], PATIENCE["relaxed"]
    assert aggressive.silence < default.silence < relaxed.silence
    assert aggressive.check <= default.check <= relaxed.check
    assert aggressive.settle < default.settle < relaxed.settle
    assert aggressive.threshold < default.threshold < relaxed.threshold
    for patience in PATIENCE.values():
        assert 0 < patience.check <= patience.settle < patience.recheck < patience.silence
        assert patience.threshold < RECHECK_THRESHOLD <= 1  # the second listen, after more silence, is stricter
