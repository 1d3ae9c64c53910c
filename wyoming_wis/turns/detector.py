"""Where a speaker's turn ends, for a session the server ends itself: one detector a turn, with an explicit state.

The session (asr/session.py) keeps the audio, scores it with the VAD and decodes it; after each VAD step it asks
its detector (`judge`), and on each piece of audio that arrives (`arrived`). The detector decides on everything
the server knows, in this order:

- the limits: no speech for --no-speech-seconds, speech for --max-turn-seconds (checked as the audio arrives,
  never late behind a judgement in flight);
- the silence: the sensitivity's `silence` ends any turn, and so does the speaker's own silence while Silero
  hears speech further away (`foreground_end`: a TV across the room);
- the words of a pause, once it has lasted the sensitivity's `check`, from the decode the transcript needs anyway:
  Home Assistant's own sentences (`commands`, turns/commands.py) end a whole command at once (reason `command`)
  and keep a command that stops short open; where they say nothing, `asr/turn.py` `judged_complete` weighs the
  words and the turn model (Smart Turn), a pause judged complete ending the turn once it has lasted `settle`, and
  a second listen at `recheck` where only the model doubted.

The judgement runs beside the session's follower, which meanwhile goes on checking the silence: a slow decode (a
busy machine, a long turn) never makes a silence's end late. The states (`TurnState`) are what a test or a log
reads: waiting for speech, speaking, a pause being judged, a pause judged and waiting, ended.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
import math
import time
from collections.abc import Awaitable, Callable

import numpy as np

from ..asr import AsrSession, Transcript
from ..asr.session import padded
from ..asr.turn import (
    PATIENCE,
    RECHECK_THRESHOLD,
    Patience,
    Reason,
    TurnLimits,
    guessed_ending,
    heard_whole,
    judged_complete,
)
from ..audio import WHISPER_RATE
from ..errors import WisError
from ..scheduler import patience

_LOGGER = logging.getLogger(__name__)

# The probability that the speaker's turn is complete, from its audio: the turn model's (asr/turn_model.py)
TurnProbability = Callable[[np.ndarray], Awaitable[float]]
# Whether a turn's words (and their language) are a whole command (True), stop short of one (False), or neither
# (None): Home Assistant's own sentence matcher, `turns/commands.py` `Sentences.judge`
CommandJudge = Callable[[str, str | None], Awaitable[bool | None]]
NO_LIMITS = TurnLimits(max_speech=math.inf, no_speech=math.inf)
TURN_PAD = int(0.2 * WHISPER_RATE)  # silence after speech the turn model hears: as it was trained (and pipecat asks)


class TurnState(enum.Enum):
    WAITING = "waiting"  # no speech heard yet
    SPEAKING = "speaking"  # speech, or a gap shorter than the sensitivity's `check`
    JUDGING = "judging"  # a pause whose words and sound are being judged
    PAUSED = "paused"  # a pause judged: it waits to settle, for a second listen, or for the silence
    ENDED = "ended"


class TurnDetector:
    def __init__(
        self,
        sensitivity: str,
        *,
        max_silence: float | None = None,
        limits: TurnLimits = NO_LIMITS,
        turn_model: TurnProbability | None = None,
        commands: CommandJudge | None = None,
    ) -> None:
        """`sensitivity` names its `PATIENCE`, whose silence `max_silence` cuts where shorter; `limits` bound any
        turn; `turn_model` is asked where the words say nothing, and `commands` judge the words (a whole command
        ends the turn at once)."""
        self.patience = _patience(sensitivity, max_silence)
        self.limits = limits
        self.state = TurnState.WAITING
        self._turn_model = turn_model
        self._commands = commands
        self._judged: int | None = None  # the end of speech whose pause was judged last
        self._doubted: int | None = None  # ... if its words were whole but the turn model heard more coming
        self._complete: int | None = None  # ... if it was judged complete: it ends the turn once it settles
        self._command: int | None = None  # ... if its words were a whole command: it ends the turn at once
        self._judging: asyncio.Task[bool] | None = None  # the judgement of `_judged`'s pause, while it runs

    @property
    def judging(self) -> bool:
        """Whether a judgement runs: its decode is the pause's, which the session takes once it lands."""
        return self._judging is not None and not self._judging.done()

    async def landed(self) -> None:
        """Once a judgement in flight has landed: its decode is the transcript the session's end needs."""
        if self._judging is not None:
            await asyncio.gather(self._judging, return_exceptions=True)

    def close(self) -> None:
        if self._judging is not None:
            self._judging.cancel()

    def arrived(self, session: AsrSession) -> None:
        """New audio is kept: end a turn that has reached its most speech. Here, not in `judge`: a judgement in
        flight (a decode) must not make the limit late."""
        most = self.limits.max_speech * WHISPER_RATE
        if session.samples >= most and not session.turn_over:
            start = session.vad.speech_start()  # (not on every chunk: until `most`, no turn can reach it)
            if start is not None and session.samples - start >= most:
                self._end(session, "max-speech", session.samples, session.samples)

    async def judge(self, session: AsrSession, audio: np.ndarray) -> bool:
        """End the turn if its end has come with `audio` (scored); whether it has ended."""
        samples, start, end = len(audio), session.vad.speech_start(), session.vad.speech_end()
        if start is None or end is None:
            self.state = TurnState.WAITING
            return samples >= self.limits.no_speech * WHISPER_RATE and self._end(session, "no-speech", samples, None)
        silence = (samples - end) / WHISPER_RATE
        if silence >= self.patience.silence:
            return self._end(session, "silence", samples, end)
        own = session.vad.foreground_end()  # a TV across the room speaks on after the speaker: its silence
        if own is not None and (samples - own) / WHISPER_RATE >= self.patience.silence:
            return self._end(session, "silence", samples, own)  # the audio up to now: soft last words stay in
        if silence < self.patience.check:
            self.state = TurnState.SPEAKING
            return False
        judged = await self._judged_pause(session, audio, end, silence)
        self.state = TurnState.JUDGING if self.judging else TurnState.PAUSED
        if not judged or self._complete != end or (silence < self.patience.settle and self._command != end):
            return False
        await session.engine.score(session.vad, session.audio())  # what came while judging: the speaker may go on
        resumed = session.vad.speech_end()  # speech inside the audio judged (a word's tail) was decoded with it
        reason: Reason = "command" if self._command == end else "complete"
        return resumed is not None and resumed <= samples and self._end(session, reason, samples, end)

    def _end(self, session: AsrSession, reason: Reason, samples: int, speech_end: int | None) -> bool:
        self.state = TurnState.ENDED
        return session.end_turn(reason, samples, speech_end)

    async def _judged_pause(self, session: AsrSession, audio: np.ndarray, end: int, silence: float) -> bool:
        """Whether the pause ending at `end` is judged (its verdict in `_complete`); starts its judgement if not.

        One judgement at a time, as a task: its result is taken at the next step after it lands, for the pause it
        judged. One whose speaker has gone on and paused again before it lands is dropped, and the new pause judged
        at once, not once it lands: Silero's 64 ms gaps inside a last word ("ligh|ts", "minu|tes") start a
        judgement before the word is over (in 7 of bench/endpoint.py's 40 plain commands; on 8 such clips the median
        from the last word to the transcript went from 0.51 to 0.46 s). What stopped it (busy) leaves its pause to
        the silence, as a judgement that said no; a bug is raised.
        """
        judging = self._judging
        if judging is not None and not judging.done() and self._judged != end:
            judging.cancel()  # its pause is over: the speaker went on, and has paused again
            judging = self._judging = None
        if judging is not None:
            if not judging.done():
                return False
            self._judging = None
            try:
                complete = judging.result()
            except WisError as err:
                _LOGGER.debug("Turn not judged: %s", err)
                complete = False
            self._complete = self._judged if complete else None
        if self._judged != end:
            self._judged = end
            self._judging = asyncio.create_task(self._sounds_complete(session, audio, end, silence))
            return False
        if self._doubted == end and silence >= self.patience.recheck:
            self._doubted = None
            probability = await self._probability(audio)
            _LOGGER.debug("Listened again after %.2f s of silence: turn model %.2f", silence, probability)
            if probability >= RECHECK_THRESHOLD:
                self._complete = end
        return True

    async def _sounds_complete(self, session: AsrSession, audio: np.ndarray, end: int, silence: float) -> bool:
        """Whether the words so far form a request, and the turn model (if there is one) hears the speaker done.

        Where the household's sentences may judge the words and a pause judged complete must settle anyway, the
        words are judged first and the turn model is asked only if they say nothing: a command's decode then has
        both cores (on two, the turn model beside it made it take 0.52 s where it takes 0.3 s alone), and the turn
        model's answer still comes before the settle. Where a complete pause ends the turn at once (`aggressive`),
        both run together, as without sentences."""
        started = time.perf_counter()
        probability: float | None = None
        if self.patience.silence <= self.patience.settle:  # the silence ends the turn first: only the decode
            transcript, probability = await session.ahead(padded(audio, end)), 1.0  # counts (the transcript)
        elif self._commands is None or self.patience.settle <= self.patience.check:
            transcript, probability = await asyncio.gather(
                session.ahead(padded(audio, end)), self._probability(padded(audio, end, TURN_PAD))
            )
        else:
            transcript = await session.ahead(padded(audio, end))
        if transcript is None:
            _LOGGER.debug("Judged a pause after %.2f s of silence: its words are not clear yet", silence)
            self._doubted = None
            return False
        command = await self._a_command(transcript, end)
        if command is not None:  # the household's sentences say: whole (end now), or stopped short (wait)
            complete, self._doubted = command, None
            self._command = end if command else None
        else:
            if probability is None:
                probability = await self._probability(padded(audio, end, TURN_PAD))
            complete = judged_complete(transcript, end / WHISPER_RATE, probability, self.patience.threshold)
            self._doubted = end if not complete and heard_whole(transcript, end / WHISPER_RATE) else None
        words = transcript.words
        _LOGGER.debug(
            "Judged a pause after %.2f s of silence in %.2f s: %r (last word from %.2f s before the end), a command:"
            " %s, turn model %s: %s",
            silence,
            time.perf_counter() - started,
            transcript.text,
            end / WHISPER_RATE - words[-1].start if words else float("nan"),
            {True: "whole", False: "stopped short", None: "neither"}[command],
            "not asked" if probability is None else f"{probability:.2f}",
            "complete" if complete else "not complete",
        )
        return complete

    async def _a_command(self, transcript: Transcript, end: int) -> bool | None:
        """Whether a pause's words are a whole command (True), stop short of one (False), or neither (None; also
        where the sensitivity's silence ends a turn before it may settle: Realtime's server_vad keeps its silence)."""
        if self._commands is None or self.patience.silence <= self.patience.settle:
            return None
        verdict = await self._commands(transcript.text, transcript.language)
        if verdict and guessed_ending(transcript.words, end / WHISPER_RATE):
            # Whisper may have made the last word up ("set a timer for" + "it"): where the words before it stop
            # short of a command ("turn on the" + "light"), the sound decides; else ("what time is" + a soft "it")
            # the command stands
            before = "".join(word.word for word in transcript.words[:-1])
            if await self._commands(before, transcript.language) is False:
                return None
        return verdict

    async def _probability(self, audio: np.ndarray) -> float:
        """The turn model's probability that the speaker is done; without it (none, or busy), the words decide."""
        if self._turn_model is None:
            return 1.0
        try:
            with patience(self.patience.silence):  # an answer after the silence has ended the turn is no use
                return await self._turn_model(audio)
        except WisError as err:
            _LOGGER.debug("No turn model: %s", err)
            return 1.0


def _patience(sensitivity: str, max_silence: float | None) -> Patience:
    """How long a turn waits: the sensitivity's, its silence cut to `max_silence` if shorter."""
    found = PATIENCE[sensitivity]
    if max_silence is None or max_silence >= found.silence:
        return found
    return dataclasses.replace(found, silence=max_silence)
