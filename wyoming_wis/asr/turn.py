"""When a speaker's turn has ended: on sound and on sense, not on a silence timer alone.

Home Assistant's own VAD ends a command after 0.7 s of silence, whatever was
said; a pause after "turn on the" ends it too early, and every complete command
waits the full 0.7 s. Here a short pause is only a moment to look: the session
decodes what was said (the decode the transcript needs anyway) and asks the
turn-taking model (Smart Turn) whether the speaker sounds done. Words that
cannot end a request, a last word Whisper guessed rather than heard, or a model
that hears more coming keep the turn open until a longer silence; anything else
ends it at once. Three limits end every turn: that longer silence, the most
speech one turn may hold, and a wait for speech that never starts.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from ..requests import SENSITIVITIES
from .decoder import Word

if TYPE_CHECKING:
    from .assemble import Transcript

Reason = Literal["complete", "silence", "max-speech", "no-speech"]


@dataclass(frozen=True)
class Patience:
    """How long a sensitivity waits after speech."""

    # Seconds of silence before the turn is judged on its sense (its words, the turn model): two of the VAD's
    # windows. It finds one-window gaps between words all the time, and each judgement costs a decode.
    check: float
    silence: float  # seconds of silence that end any turn, complete-sounding or not
    threshold: float  # the turn model's probability of a complete turn that counts as one


# Home Assistant waits 0.25, 0.7 and 1.25 s of silence for these; judged on sense, a complete command ends much
# sooner, and a command that is not complete yet may pause longer than that without being cut.
PATIENCE: dict[str, Patience] = {
    "default": Patience(check=0.064, silence=1.0, threshold=0.7),
    "relaxed": Patience(check=0.2, silence=1.5, threshold=0.85),
    "aggressive": Patience(check=0.064, silence=0.6, threshold=0.5),
}
assert tuple(PATIENCE) == SENSITIVITIES


@dataclass(frozen=True)
class TurnLimits:
    """The server's limits on any turn it ends itself (--max-turn-seconds, --no-speech-seconds)."""

    max_speech: float  # seconds from the first speech: the turn ends even if the speaker goes on
    no_speech: float  # seconds without any speech: the turn ends with nothing said


@dataclass(frozen=True)
class TurnEnd:
    """Why and where a turn ended."""

    reason: Reason
    samples: int  # audio the turn keeps (16 kHz); what came after is not part of it
    speech_ended: float | None  # time.perf_counter() when the turn's last speech had arrived; None: no speech


# English words a request does not end on: articles, possessives, prepositions that are not particles ("turn it
# on" ends on "on"), conjunctions, auxiliaries, and fillers. Other languages: the turn model and the silence judge.
_OPEN_ENDED = frozenset(
    """a an the my your our their his her its these those some every another
    to for of at with from into onto about by than via per towards
    and or but because if when while whether
    is are was were can could would should will shall may might must
    um uh erm hmm er""".split()
)
# Phrasal verbs a command is not complete without their particle: "turn the volume" ... "down to four".
_NEEDS_PARTICLE = frozenset({"turn", "switch"})
_PARTICLES = frozenset({"on", "off", "up", "down"})
_TRAILING_OFF = re.compile(r"(\.\.\.|…|,|;|:|-)\s*$")  # Whisper writes a sentence that trails off this way

# Whisper, given speech that stops mid-request, often finishes the sentence itself ("open the" became "Open the
# gate.", "set a timer for" "set a timer for it."): the word it makes up begins right where the speech ends. A word
# that was said begins earlier. On bench/turn_signals.py's corpus every last word of a whole request began 0.144 s
# or more before the speech ended ("What time is it?" said quickly), and the made-up ones 0.016-0.132 s. Judging a
# said word made up costs only the wait for the silence; the other mistake cuts a command in two. (Their ends
# tell less: the alignment stretches a said "30%" well into the silence after it.)
GUESS_START = 0.14  # seconds: a last word that begins closer than this to the end of the speech was guessed


def sounds_complete(text: str, language: str | None) -> bool:
    """Whether the words so far can be a whole request: some words, not trailing off, not ending on an open word."""
    words = re.findall(r"[\w']+", text.lower())
    if not words or _TRAILING_OFF.search(text):
        return False
    if language not in (None, "en"):
        return True
    if words[0] in _NEEDS_PARTICLE and not _PARTICLES.intersection(words):
        return False
    return words[-1] not in _OPEN_ENDED


def guessed_ending(words: Sequence[Word], speech_end: float) -> bool:
    """Whether the last word (times in seconds, as `speech_end`) is one Whisper made up rather than heard."""
    return bool(words) and words[-1].start > speech_end - GUESS_START


def judged_complete(transcript: Transcript, speech_end: float, probability: float, threshold: float) -> bool:
    """The verdict on a pause, from its decode (with word times): the turn model hears the speaker done
    (`probability` of at least `threshold`), the words can be a whole request, and the last was heard, not guessed."""
    return (
        probability >= threshold
        and sounds_complete(transcript.text, transcript.language)
        and not guessed_ending(transcript.words, speech_end)
    )
