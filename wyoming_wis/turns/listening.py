"""Turn after turn of one speaker's audio: the one place that decides where a listener's turns end.

Wyoming, WebRTC and the Realtime API listen alike. A frontend opens a `Listening` for a request (`Core.listen`),
feeds it audio as it comes, and translates the events it hears back into its protocol:

- `SpeechStarted`: the session's VAD heard the turn's speech begin (only where the server ends turns);
- `Partial`: the next stable words of the turn, while the speaker talks (with --partial-results);
- `TurnEnded`: the turn is over, ended by the server (`end_of_turn`: the session judged the speaker done, see
  turns/detector.py) or by the client (`commit`: Wyoming's audio-stop, WebRTC's stop, the Realtime
  API's commit), whichever came first;
- `Final` or `Failed`: its transcript, or why there is none. Turns are answered in order.

A listening of one turn (Wyoming: one transcript per transcribe) drops the audio that comes after its turn ended.
A listening may `change` how it decodes (the Realtime API's session.update): from the next turn on, the one being
heard answered as it began, all of them on one clock.
One of many turns (hands-free WebRTC, the Realtime API) opens the next turn at once, starting with the audio that
came after the end, so that no word said meanwhile is lost; a turn of many in which nobody spoke, ended by the
server's wait for speech, is not answered (the next simply starts). Each turn is an `AsrSession`, under the same
limits as any other: the audio limit, the memory budget, the models' queues. At most MAX_ANSWERING turns wait for
their transcripts at once; a client that commits faster than they are decoded is told the server is busy.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np

from .. import metrics
from ..asr import AsrSession, Transcript
from ..asr.decoder import Decoding
from ..asr.session import OnText
from ..audio import WHISPER_RATE, AudioFormat
from ..errors import Busy, WisError
from ..requests import AsrRequest, Frontend
from ..scheduler import patience_from_now

_LOGGER = logging.getLogger(__name__)
MAX_ANSWERING = 4  # turns of one listening waiting for their transcripts at once
MIN_COMMIT_SECONDS = 0.1  # the least audio a turn the client ends may hold (OpenAI's for a commit)


@dataclass(frozen=True)
class SpeechStarted:
    turn: int
    at: float  # seconds into the listening's audio


@dataclass(frozen=True)
class Partial:
    turn: int
    text: str  # the next stable words, to be appended to what came before
    so_far: str  # the turn's stable words so far, these included


@dataclass(frozen=True)
class TurnEnded:
    turn: int
    by: Literal["server", "client"]
    reason: str  # the server's (asr/turn.py Reason), or "commit"
    start: float  # seconds into the listening's audio where the turn began
    end: float  # ... where its speech ended (the server's end) or its audio (the client's)
    ended_at: float  # time.perf_counter() when that speech arrived (the server's end), or of the client's commit


@dataclass(frozen=True)
class Final:
    turn: int
    transcript: Transcript
    ended_at: float  # the turn's TurnEnded.ended_at: the wait for this answer counts from then


@dataclass(frozen=True)
class Failed:
    turn: int
    error: WisError


TurnEvent = SpeechStarted | Partial | TurnEnded | Final | Failed
OnEvent = Callable[[TurnEvent], Awaitable[None]]


class _Turn:
    """One turn: its session, where it began in the listening's audio, and the wait for the server's end."""

    def __init__(self, number: int, session: AsrSession, start: int) -> None:
        self.number = number
        self.session = session
        self.start = start  # samples of the listening's audio before it
        self.text = ""  # its stable words so far (`Partial`)
        self.watch: asyncio.Task[None] | None = None


class Sessions(Protocol):
    """What a listening asks of the core (core.py `Core`): to check a request, and to open each turn's session."""

    def resolve(self, request: AsrRequest) -> Decoding: ...

    def open_asr(self, request: AsrRequest, *, frontend: Frontend, on_text: OnText | None = None) -> AsrSession: ...


class Listening:
    """Audio in, turns out (see the module's docstring); `close` it once the frontend is done with it."""

    def __init__(
        self, core: Sessions, request: AsrRequest, *, frontend: Frontend, on_event: OnEvent, many: bool = False
    ) -> None:
        """`request` is checked at once (`Core.resolve`); each turn opens a session for it."""
        self.decoding = core.resolve(request)
        self.request = request
        self._core = core
        self._frontend = frontend
        self._on_event = on_event
        self._many = many
        self._numbers = itertools.count(1)
        self._turn: _Turn | None = None  # the turn being heard
        self.over = False  # a listening of one turn whose turn has ended (or failed): it takes no more audio
        self._start = 0  # where the next turn begins in the listening's audio (samples at 16 kHz)
        self._answers: set[asyncio.Task[None]] = set()
        self._last_answer: asyncio.Task[None] | None = None  # each answer goes out after the one before
        self._lock = asyncio.Lock()  # feeding and moving to the next turn, one at a time
        self._closed = False

    @property
    def seconds(self) -> float:
        """Audio in the turn being heard, so far."""
        return 0.0 if self._turn is None else self._turn.session.seconds

    @property
    def answering(self) -> bool:
        """Whether a turn that ended is still being answered."""
        return bool(self._answers)

    @property
    def heard(self) -> float:
        """All the audio fed so far, in seconds (at 16 kHz, as sessions keep it)."""
        samples = self._start + (0 if self._turn is None else self._turn.session.samples)
        return samples / WHISPER_RATE

    @property
    def turn(self) -> int | None:
        """The number of the turn being heard; None before its first audio."""
        return None if self._turn is None else self._turn.number

    async def feed(self, pcm: bytes, audio_format: AudioFormat) -> None:
        """Add audio to the turn being heard (opening it, or the next, as needed). An error (e.g. past
        --max-audio-seconds) ends that turn unanswered and is raised; the next audio opens a new one."""
        await self._feed(lambda session: session.feed(pcm, audio_format))

    async def feed_samples(self, samples: np.ndarray) -> None:
        """As `feed`, for audio already at 16 kHz mono float32 (WebRTC's, resampled in its codec threads)."""
        await self._feed(lambda session: session.feed_samples(samples))

    async def _feed(self, feed: Callable[[AsrSession], Awaitable[None]]) -> None:
        async with self._lock:
            turn = await self._current()
            if turn is None:
                return
            try:
                await feed(turn.session)
            except BaseException:
                self._drop(turn)
                raise

    async def commit(self, ended: float | None = None, request: AsrRequest | None = None) -> asyncio.Task[None] | None:
        """The client ends the turn being heard (`ended`: when its audio ended, `time.perf_counter()`; by default
        now); returns the task that answers it. Where the server ended a listening's one turn already, its answer
        (None if it failed). Busy where MAX_ANSWERING turns wait for their transcripts.

        `request` is the client's last word on how to decode this turn (WebRTC's `stop`): where it decodes
        otherwise than the listening's (another model, language, beam), the turn's audio is decoded again with it.
        """
        ended = time.perf_counter() if ended is None else ended
        async with self._lock:
            turn = await self._current()
            if turn is None:
                return self._last_answer
            if len(self._answers) >= MAX_ANSWERING:
                raise Busy(f"{MAX_ANSWERING} turns are still being transcribed; wait for their transcripts")
            return await self._end(turn, "client", "commit", ended=ended, until=turn.session.samples, request=request)

    async def finish(self, ended: float | None = None, request: AsrRequest | None = None) -> None:
        """The client is done (Wyoming's audio-stop, WebRTC's stop): end the turn being heard as `commit` does, and
        return once every turn is answered (a turn's failure goes out as its `Failed`, not raised here)."""
        answer = await self.commit(ended, request)
        if answer is not None:
            await asyncio.gather(answer, return_exceptions=True)
        await self.drain()

    async def change(self, request: AsrRequest) -> None:
        """Decode the turns from the next on as `request` asks (checked at once: an error leaves the listening as it
        was). The turn being heard is answered as it began: ended as a commit would end it if it holds
        MIN_COMMIT_SECONDS of audio (and fewer than MAX_ANSWERING wait), else dropped; a turn the server ended is
        answered as such. Times go on counting from the listening's start."""
        decoding = self._core.resolve(request)
        async with self._lock:
            self.request, self.decoding = request, decoding
            turn = self._turn
            if turn is None:
                return
            if turn.session.turn_over:
                await self._move_on(turn)  # answered under its own request; the next opens under the new one
            elif turn.session.seconds >= MIN_COMMIT_SECONDS and len(self._answers) < MAX_ANSWERING:
                await self._end(turn, "client", "commit", ended=time.perf_counter(), until=turn.session.samples)
            else:
                self._drop(turn)

    async def clear(self) -> None:
        """Drop the audio of the turn being heard, unanswered."""
        async with self._lock:
            if self._turn is not None:
                self._drop(self._turn)

    async def drain(self) -> None:
        """Wait until every turn ended so far is answered."""
        while self._answers:
            await asyncio.gather(*self._answers, return_exceptions=True)

    def close(self) -> None:
        """Stop listening: the turn being heard and the answers in flight are dropped; their memory is freed."""
        self._closed = True
        if self._turn is not None:
            self._drop(self._turn)
        for task in self._answers:
            if task is not asyncio.current_task():  # (an answer's own event may end the listening)
                task.cancel()

    # -- turns -------------------------------------------------------------------

    async def _current(self) -> _Turn | None:
        """The turn audio goes to now (the lock held): the one being heard, or if the server ended it, the next;
        None where a listening's one turn is over."""
        while not self.over:
            turn = self._turn
            if turn is None:
                return await self._open()
            if not turn.session.turn_over:
                return turn
            await self._move_on(turn)  # ended before its watch could move on: now
        return None

    async def _open(self, start: np.ndarray | None = None) -> _Turn:
        """Open the next turn (the lock held); `start` is audio already heard for it (16 kHz, as sessions keep it)."""
        if self._closed:
            raise WisError("Listening has stopped")
        number = next(self._numbers)

        async def on_text(text: str) -> None:
            turn.text += text
            await self._emit(Partial(number, text, turn.text))

        session = self._core.open_asr(self.request, frontend=self._frontend, on_text=on_text)
        turn = self._turn = _Turn(number, session, self._start)
        if self.request.end_of_turn is not None:
            turn.watch = asyncio.create_task(self._watch(turn))
        if start is not None and len(start):
            try:
                await session.feed_samples(start, cleaned=True)
            except BaseException:
                self._drop(turn)
                raise
        return turn

    async def _watch(self, turn: _Turn) -> None:
        """Tell of the turn's speech once the session hears it begin; wait for the server to end the turn, then
        move on."""
        speech, end = asyncio.ensure_future(turn.session.speech_start()), asyncio.ensure_future(turn.session.turn_end())
        try:
            await asyncio.wait((speech, end), return_when=asyncio.FIRST_COMPLETED)
            if speech.done() and not speech.cancelled():
                await self._emit(SpeechStarted(turn.number, (turn.start + speech.result()) / WHISPER_RATE))
            with contextlib.suppress(Exception):  # what stopped the judging is `_move_on`'s to report
                await end
        finally:
            speech.cancel()
            end.cancel()
        async with self._lock:
            if self._turn is turn:
                await self._move_on(turn)

    async def _move_on(self, turn: _Turn) -> None:
        """The server ended the turn (the lock held): answer it, and open the next with the audio that came after
        its end. What stopped the judging (a busy server, a bug) fails the turn."""
        try:
            end = await turn.session.turn_end()  # done: at once
        except WisError as err:
            await self._fail(turn, err)
            return
        except Exception:
            _LOGGER.exception("Error ending a turn")
            await self._fail(turn, WisError("Internal error ending the turn; see the server log"))
            return
        after = turn.session.after_turn()
        if self._many and end.reason == "no-speech":  # nobody spoke: nothing to answer
            self._drop(turn, end.samples)
        else:
            until = end.samples if end.speech_until is None else end.speech_until
            ended = end.speech_ended or time.perf_counter()
            await self._end(turn, "server", end.reason, ended=ended, until=until, kept=end.samples)
        if self._many:
            await self._open(after)

    async def _end(
        self,
        turn: _Turn,
        by: Literal["server", "client"],
        reason: str,
        *,
        ended: float,
        until: int,
        kept: int | None = None,
        request: AsrRequest | None = None,
    ) -> asyncio.Task[None]:
        """Tell the frontend the turn ended (its speech `until` a sample; it `kept` that many, by default all),
        and start answering it (decoded as `request` asks, if given)."""
        self._finish_turn(turn, turn.session.samples if kept is None else kept)
        self.over = not self._many
        start = turn.start / WHISPER_RATE
        await self._emit(TurnEnded(turn.number, by, reason, start, start + until / WHISPER_RATE, ended))
        answer = self._answer(turn, reason, ended, before=self._last_answer, request=request)
        with patience_from_now():  # the turn's own deadline: its client waits for its transcript from its end
            task = self._last_answer = asyncio.create_task(answer)
        self._answers.add(task)
        task.add_done_callback(self._answered)
        return task

    def _answered(self, task: asyncio.Task[None]) -> None:
        """An answer has gone out (or could not: a client that left is no error)."""
        self._answers.discard(task)
        if not task.cancelled() and not isinstance(err := task.exception(), ConnectionError | None):
            _LOGGER.error("Error answering a turn", exc_info=err)

    async def _answer(
        self, turn: _Turn, reason: str, ended: float, *, before: asyncio.Task[None] | None, request: AsrRequest | None
    ) -> None:
        """Transcribe the turn (ended for `reason`); its `Final` (or `Failed`) goes out after the turn before's, and
        counts in the metrics."""
        try:
            async with turn.session:
                if request is None or self._core.resolve(request) == self.decoding:
                    transcript = await turn.session.finish(ended)
                else:
                    transcript = await self._decode_again(turn.session, request, ended)
        except WisError as err:
            outcome: TurnEvent = Failed(turn.number, err)
        except ConnectionError:  # the client left while its partial text was sent
            raise
        except Exception:  # a bug: the client hears of it, the server goes on
            _LOGGER.exception("Error transcribing a turn")
            outcome = Failed(turn.number, WisError("Internal error transcribing the turn; see the server log"))
        else:
            outcome = Final(turn.number, transcript, ended)
        if before is not None:
            await asyncio.gather(before, return_exceptions=True)
        metrics.turn_answered(self._frontend, reason, outcome.error if isinstance(outcome, Failed) else None)
        await self._emit(outcome)

    async def _decode_again(self, session: AsrSession, request: AsrRequest, ended: float) -> Transcript:
        """The turn's audio decoded as `request` asks: its session's decodes ahead are of no use."""
        _LOGGER.debug("Decoding a turn again, as its client asked at its end")
        await session.end_audio()  # all of its audio, cleaned (--noise-suppression) to the end
        session.close()
        async with self._core.open_asr(request, frontend=self._frontend) as again:
            await again.feed_samples(session.audio(), cleaned=True)
            return await again.finish(ended)

    async def _fail(self, turn: _Turn, err: WisError) -> None:
        self._drop(turn)
        self.over = not self._many
        metrics.turn_answered(self._frontend, "none", err)
        await self._emit(Failed(turn.number, err))

    def _drop(self, turn: _Turn, kept: int | None = None) -> None:
        """End the turn unanswered (it `kept` that many samples, by default all); the next audio opens a new one."""
        self._finish_turn(turn, turn.session.samples if kept is None else kept)
        turn.session.close()

    def _finish_turn(self, turn: _Turn, kept: int) -> None:
        """No more audio goes to `turn`; the next begins where its `kept` samples end."""
        if turn.watch is not None and turn.watch is not asyncio.current_task():
            turn.watch.cancel()
        if self._turn is turn:
            self._turn = None
            self._start = turn.start + kept

    async def _emit(self, event: TurnEvent) -> None:
        if not self._closed:
            await self._on_event(event)
