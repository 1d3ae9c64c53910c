"""When a speaker's turn has ended: on sound and on sense, not on a silence timer alone.

Home Assistant's own VAD ends a command after it has heard 0.7 s of silence,
whatever was said: hearing "speech" for about 0.7 s after the last word, it ends
every command about 1.4 s after it. Here a short pause is a moment to look: the
session decodes what was said (the decode the transcript needs anyway) and asks
the turn-taking model (Smart Turn) whether the speaker sounds done. Words that
cannot end a request, a last word Whisper guessed rather than heard, or a model
that hears more coming keep the turn open; a pause judged complete ends it once
it has lasted the sensitivity's `settle`, with the transcript ready. Where only
the model heard more coming, it listens again once the pause has gone on
(`recheck`): a whole request followed by that much silence is usually done,
whatever its tone, and the model, hearing the silence too, mostly says so.
Three limits end every turn: a longer silence, the most speech one turn may
hold, and a wait for speech that never starts.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from ..audio import WHISPER_RATE
from ..requests import SENSITIVITIES
from .decoder import Word
from .vad import PAUSE

if TYPE_CHECKING:
    from .assemble import Transcript

Reason = Literal["command", "complete", "silence", "max-speech", "no-speech"]


@dataclass(frozen=True)
class Patience:
    """How long a sensitivity waits after speech."""

    # Seconds of silence before the turn is judged on its sense (its words, the turn model): at the least a
    # `PAUSE` (each judgement costs a decode)
    check: float
    # Seconds of silence a pause judged complete must last before it ends the turn. Words that are a whole
    # request by themselves ("turn on the living room") are often followed, after a pause, by more ("... lamp"),
    # and the turn model does not hear the difference reliably (bench/turn_signals.py: in Piper's takes such
    # pauses scored a median 0.89, real ends 0.97): no pause shorter than this is ever an end.
    settle: float
    # Seconds of silence after which a pause whose words were whole and heard, but which the turn model did not
    # hear as the end, is heard again: at RECHECK_THRESHOLD it ends the turn.
    recheck: float
    silence: float  # seconds of silence that end any turn, complete-sounding or not
    threshold: float  # the turn model's probability of a complete turn that counts as one


# Home Assistant's own VAD waits 0.7 s of silence by default (1.25 s relaxed, 0.25 s aggressive) after about
# 0.7 s in which it still hears "speech": it ends a command about 1.4 s after its last word. Here the default
# never ends a turn on a pause shorter than its 0.7 s, and ends a whole command as soon as that much silence has
# passed, its transcript already decoded during the pause; words that are not a whole request wait for the
# silence. `aggressive` ends a whole command at once, when its words and the turn model agree: about 0.3 s after
# the last word, at the risk of cutting a speaker who pauses after words that are a request by themselves.
_PAUSE_SECONDS = PAUSE / WHISPER_RATE
PATIENCE: dict[str, Patience] = {
    "default": Patience(check=_PAUSE_SECONDS, settle=0.7, recheck=0.9, silence=1.25, threshold=0.7),
    "relaxed": Patience(check=0.2, settle=1.25, recheck=1.35, silence=1.5, threshold=0.85),
    "aggressive": Patience(check=_PAUSE_SECONDS, settle=_PAUSE_SECONDS, recheck=0.4, silence=0.6, threshold=0.5),
}
assert tuple(PATIENCE) == SENSITIVITIES
# After a longer silence the model hears most pauses as ends, pauses inside a request too (pipecat's note: after
# 0.5 s every command it scored, whole or cut off, was 0.81 or more): the second listen must be surer.
RECHECK_THRESHOLD = 0.9


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
    speech_until: int | None = None  # the sample where that speech ended


# English words a request does not end on: articles, possessives, prepositions that are seldom particles ("turn it
# on" ends on "on"), conjunctions (not "though", which ends a sentence: "Nice day, though."), adverbs that lead
# into another word ("has never"), auxiliaries, and fillers. Other languages: the turn model and the silence judge.
_OPEN_ENDED = frozenset(
    """a an the my your our their his her its these those some every another
    to for of at in with from into onto about by than via per towards toward between during without within
    as and or but because if when while whether although unless until whereas
    very quite rather just never
    is are was were can could would should will shall may might must
    um uh erm hmm er""".split()
)
# Phrasal verbs a command is not complete without their particle: "turn the volume" ... "down to four".
_NEEDS_PARTICLE = frozenset({"turn", "switch"})
_PARTICLES = frozenset({"on", "off", "up", "down"})
_TRAILING_OFF = re.compile(r"(\.\.\.|…|,|;|:|-)\s*$")  # Whisper writes a sentence that trails off this way

# Whisper, given speech that stops mid-request, often finishes the sentence itself ("open the" became "Open the
# gate.", "set a timer for" "set a timer for it."): the word it makes up begins right where the speech ends. A word
# that was said begins earlier. On two builds of bench/turn_signals.py's corpus every last word of a whole request
# but "What time is it?" (0.144-0.164 s) began 0.2 s or more before the speech ended; the made-up ones began up to
# 0.148 s before, Whisper's "it" after 30 Piper takes of "Set a timer for" 0.096-0.136 s, and in one test's take
# 0.15 s. Judging a said word made up costs only the wait for the silence; the other mistake cuts a command in
# two, so the line leaves the made-up words a margin. (Their ends tell less: the alignment stretches a said "30%"
# well into the silence after it.)
GUESS_START = 0.2  # seconds: a last word that begins closer than this to the end of the speech was guessed


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


def heard_whole(transcript: Transcript, speech_end: float) -> bool:
    """Whether a pause's decode (with word times) can be a whole request, its last word heard, not guessed."""
    return sounds_complete(transcript.text, transcript.language) and not guessed_ending(transcript.words, speech_end)


def judged_complete(transcript: Transcript, speech_end: float, probability: float, threshold: float) -> bool:
    """The verdict on a pause: its words are whole (`heard_whole`) and the turn model hears the speaker done
    (`probability` of at least `threshold`)."""
    return probability >= threshold and heard_whole(transcript, speech_end)
