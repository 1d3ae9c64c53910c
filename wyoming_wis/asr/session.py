"""The one ASR session type: audio in as it arrives, partial texts while it does, a transcript at the end.

Wyoming audio chunks, an HTTP body and a WebRTC track all feed a session the
same way. While a speaker talks, the session scores the audio with the VAD and,
when the model has nothing else to do, decodes what has been said so far:

- every second or so during speech (less often when a decode is slow), a
  quick greedy draft, to send partial text;
- as soon as the speaker has paused (`PAUSE`, 64 ms), a full decode of the
  audio so far with the pause padded with silence to the VAD's padding
  (`padded`): exactly what a final decode at the end of that pause decodes,
  so when the client ends the request during the pause, as Home Assistant
  does after hearing silence, the transcript is already there.

Pieces of long audio already decoded are kept, so at the end only what
changed is decoded. Audio that arrives much faster than real time (a file)
is not a speaker: it is decoded once, at the end.

A request may leave the end of the turn to the server (`end_of_turn`): then the
session has a turn detector (`Turn`, wyoming_wis/turns/detector.py), which it
asks at each step of the VAD whether the speaker is done, and `turn_end()`
returns as soon as they are; audio after that end is not part of the turn.

With a noise suppressor (`--noise-suppression`, `denoise.py`) the session keeps only the cleaned audio: the VAD,
the end of the turn and Whisper all hear the same sound, at the raw audio's sample positions (the cleaner gives
back exactly as many samples, its delay taken off), up to 43 ms later than it came.

Every frontend goes through the same lifecycle: open a session (`Core.open_asr`),
feed it, `finish` it (which counts the transcript in the metrics), and `close`
it whatever happened, most simply by using it as an async context manager.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Protocol

import numpy as np

from .. import metrics
from ..audio import WHISPER_RATE, AudioFormat, PcmConverter
from ..budget import Hold
from ..errors import AudioTooLong, WisError
from ..scheduler import patience
from .buffer import AudioBuffer
from .turn import Reason, TurnEnd
from .vad import PAD, PAUSE, WINDOW, Piece, SpeechDetector

if TYPE_CHECKING:
    from .decoder import Decoded, Logprobs, Options
    from .denoise import Cleaner
    from .engine import Transcript, WhisperEngine

_LOGGER = logging.getLogger(__name__)

VAD_STEP = 2 * WINDOW  # score new audio in steps of this many samples, to pace drafts
TURN_VAD_STEP = WINDOW  # where the session ends the turn: a window at a time, to see a pause as soon as it can
MIN_INTERVAL = 1.0  # seconds of audio between partial decodes, at the least
LIVE_RATE = 1.5  # audio arriving faster than this times real time is a file
_LIVE_SLACK = 1.0  # seconds of audio a live client may send ahead (buffers, network)

OnText = Callable[[str], Awaitable[None]]
LIGHT_BYTES = 256 * 1024  # bytes a piece of audio and the buffer's growth may copy to be kept on the event loop


class Turn(Protocol):
    """What ends a turn the server ends itself (`turns/detector.py` `TurnDetector`): asked as audio arrives and at
    each step of the VAD while the speaker is live, it ends the turn through `AsrSession.end_turn`."""

    def arrived(self, session: AsrSession) -> None: ...

    async def judge(self, session: AsrSession, audio: np.ndarray) -> bool: ...

    @property
    def judging(self) -> bool: ...

    async def landed(self) -> None: ...

    def close(self) -> None: ...


class AsrSession:
    def __init__(
        self,
        engine: WhisperEngine,
        options: Options,
        *,
        frontend: str,
        max_seconds: float,
        hold: Hold,
        on_text: OnText | None = None,
        turn: Turn | None = None,
        drafts: bool = False,
        cleaner: Cleaner | None = None,
    ) -> None:
        """`on_text`, if given, receives stable text as it is recognised, in pieces that join into the final text.

        `frontend` labels the transcript in the metrics. `hold` is the session's share of the memory budget: the
        audio buffer is counted in it before it grows, and given back by `close`. With a `turn` detector the
        session ends the turn itself, where the detector says; with `drafts` it decodes drafts while the speaker
        talks there too (otherwise only at pauses: the model stays free for them).
        `cleaner` cleans the audio as it comes, in its own threads; the session closes it.
        """
        self.engine = engine
        # a turn is judged on its words' times too (aligned to the text decoded, which they do not change)
        self.options = dataclasses.replace(options, words=True) if turn is not None else options
        self.frontend = frontend
        self.seconds = 0.0  # audio received so far
        self._on_text = on_text
        self._converter: PcmConverter | None = None
        self._audio = AudioBuffer(hold, max_seconds)
        self._detector = SpeechDetector()
        self._decoded = _Decoded()
        self._stable = _StableText()
        self._arrived = asyncio.Event()
        self._converting = asyncio.Lock()
        self._follower: asyncio.Task[None] | None = None
        self._first_audio: float | None = None
        self._finishing = False
        self._turn = turn
        self._speech: asyncio.Future[int] = asyncio.get_running_loop().create_future()  # where speech began
        self._speaking_drafts = drafts or turn is None  # drafts while the speaker talks
        self._ended: asyncio.Future[TurnEnd] = asyncio.get_running_loop().create_future()
        self._cleaner = cleaner

    @property
    def max_seconds(self) -> float:
        """The most audio the session takes."""
        return self._audio.max_seconds

    @property
    def hold(self) -> Hold:
        """The session's share of the memory budget: its audio, and what its request holds besides."""
        return self._audio.hold

    async def feed(self, pcm: bytes, audio_format: AudioFormat) -> None:
        """Add audio; the format may change between pieces. It is converted (and cleaned) in a worker thread, or
        on the loop where that is a small piece's copy (`_light`); feed one piece at a time. Audio after the end
        of the turn is dropped."""
        async with self._converting:  # the end of a turn may finish the session while a piece is converted
            if self._ended.done():
                return
            self._count(audio_format.seconds(len(pcm)))
            changed = self._converter is None or self._converter.source != audio_format

            def keep() -> None:  # growing the buffer copies all of it (up to 38 MB)
                if changed:
                    self._flush()
                    self._converter = PcmConverter(audio_format)
                assert self._converter is not None
                self._keep(self._converter.convert(pcm))

            if not changed and self._light(len(pcm)):
                keep()
            else:
                await self._in_worker(keep)
        self._arrive()

    def _light(self, size: int) -> bool:
        """Whether keeping a piece of `size` bytes is a copy so small that a worker thread would cost more: audio
        that is only scaled (`PcmConverter.resamples`), under LIGHT_BYTES with the buffer's growth.

        A stream's pieces are small (Home Assistant's 64 ms, 2 KiB), and a hop to a thread for each queued them
        behind every other stream's in asyncio's threads, whose handovers of the GIL took longer than the work:
        Home Assistant's 5 s request, 80 pieces, took 1.45 s to be heard while 20 uploads streamed.
        """
        converter = self._converter
        if self._cleaner is not None or converter is None or converter.resamples:
            return False
        return size + self._audio.growth_bytes(size // converter.source.width) <= LIGHT_BYTES

    async def feed_samples(self, samples: np.ndarray, *, cleaned: bool = False) -> None:
        """Add audio already at 16 kHz mono float32 (a decoded file), with no conversion on the event loop.
        `cleaned`: audio a session of this server has cleaned already (its `audio()`), not to be cleaned twice."""
        self._count(len(samples) / WHISPER_RATE)
        if self._cleaner is None:
            self._flush()
            self._audio.append(samples)
        else:
            async with self._converting:  # one piece at a time through the cleaner
                await self._in_worker(
                    lambda: (self._flush(), self._audio.append(samples) if cleaned else self._keep(samples))
                )
        self._arrive()

    def _count(self, seconds: float) -> None:
        """Count the audio against the limit before converting or keeping it."""
        self.seconds += seconds
        if self.seconds > self.max_seconds:
            raise AudioTooLong(f"Audio is longer than the limit of {self.max_seconds:g} seconds")

    def _arrive(self) -> None:
        """New audio is kept: end a turn that has reached its most speech, and wake the follower."""
        if self._first_audio is None:
            self._first_audio = time.monotonic()
        self._audio.arrived()
        if self._turn is not None and not self._ended.done() and self._live(slack=0.0):
            self._turn.arrived(self)  # a file is not a speaker: it ends with its audio-stop, however long
        if (self._on_text is not None or self._turn is not None) and self._follower is None:
            # work ahead of need: no client deadline of the request that started it applies; its client's it is
            with patience(None):
                self._follower = asyncio.create_task(self._follow())
        self._arrived.set()

    async def __aenter__(self) -> AsrSession:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, err: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    async def finish(self, audio_ended: float | None = None) -> Transcript:
        """The transcript of everything fed; sends the rest of the text to `on_text` first.

        `audio_ended` is when the client's audio ended (`time.perf_counter()`; by default now): the metrics
        count the wait for the transcript from then (from the last speech, for a turn the session ended), and the
        seconds transcribed.
        """
        ended = time.perf_counter() if audio_ended is None else audio_ended
        self._finishing = True
        self._arrived.set()
        if self._follower is not None:
            await asyncio.gather(self._follower, return_exceptions=True)  # lets a decode in flight land
        await self.end_audio()
        audio = self.audio()
        await self.engine.score(self._detector, audio)
        speech_end = self._detector.speech_end()
        heard = audio if speech_end is None else padded(audio, speech_end)  # as a pause's decode heard it
        if self._on_text is not None:
            await self._decode_in_order(heard)
        transcript = await self._transcribe(heard)
        await self._publish(transcript, final=True)
        transcript = transcript.until(len(audio) / WHISPER_RATE)
        turn = self._ended.result() if self._audio.turn_ended else None
        if turn is None:
            metrics.transcribed(self.frontend, self.engine.name, transcript.duration, ended)
        else:
            metrics.transcribed(
                self.frontend, self.engine.name, transcript.duration, turn.speech_ended, turn_ended=turn.reason
            )
        return transcript

    async def end_audio(self) -> None:
        """No more audio comes: keep what the converter and the noise suppressor still hold (`finish` does)."""
        async with self._converting:
            if self._cleaner is None:
                self._flush()
            else:
                cleaner = self._cleaner
                await self._in_worker(lambda: (self._flush(), self._audio.append(cleaner.flush())))

    def close(self) -> None:
        """Stop work ahead of need and give the buffer's memory back to the budget; call once the request ends,
        answered or not. `audio()` stays readable."""
        self._finishing = True
        if self._cleaner is not None:
            self._cleaner.close()
        if self._follower is not None:
            self._follower.cancel()
        if self._turn is not None:
            self._turn.close()
        if not self._speech.done():
            self._speech.cancel()
        if not self._ended.done():
            self._ended.cancel()  # nobody waits for an end that will not come
        elif not self._ended.cancelled():
            self._ended.exception()  # seen: a frontend that did not wait for the end has no use for its error
        self.hold.close()

    @property
    def turn_over(self) -> bool:
        """Whether the server has ended the turn (or the session is closed): audio fed now is dropped."""
        return self._ended.done()

    @property
    def samples(self) -> int:
        """Audio kept so far, at 16 kHz."""
        return self._audio.samples

    @property
    def vad(self) -> SpeechDetector:
        """Where the speech is in the audio so far, as far as it is scored."""
        return self._detector

    def after_turn(self) -> np.ndarray:
        """The audio that came after the end of the turn (none before it ends): the start of a next turn. Call it
        with no `feed` in flight, whose piece would be part of it."""
        if not self._ended.done() or self._ended.cancelled() or self._ended.exception() is not None:
            return np.zeros(0, dtype=np.float32)
        return self._audio.since(self._ended.result().samples)

    async def speech_start(self) -> int:
        """The sample where the speaker's speech began, once the session's VAD has heard it (where it follows the
        audio: a request with `end_of_turn`, or a listener of partial text)."""
        return await asyncio.shield(self._speech)

    async def turn_end(self) -> TurnEnd:
        """Once the server judges the speaker's turn ended (a request with `end_of_turn` only); `finish` then
        transcribes the turn. Raises what stopped the judging (e.g. a busy server)."""
        return await asyncio.shield(self._ended)

    # -- ahead of the end ------------------------------------------------------

    async def _follow(self) -> None:
        try:
            await self._follow_audio()
        except Exception as err:  # a bug: logged; a turn the server ends fails with it (its frontend says so)
            _LOGGER.exception("Error following the audio")
            if not self._ended.done():
                self._ended.set_exception(err)
        finally:  # a judgement in flight lands first: its decode is the transcript `finish` needs
            if self._turn is not None:
                await self._turn.landed()

    async def _follow_audio(self) -> None:
        decoded_at, interval = 0, MIN_INTERVAL  # samples received at the last decode; seconds between decodes
        while not self._finishing:
            await self._arrived.wait()
            self._arrived.clear()
            audio = self.audio()
            if self._finishing or len(audio) - self._detector.scored < (
                TURN_VAD_STEP if self._turn is not None else VAD_STEP
            ):
                continue
            try:
                await self.engine.score(self._detector, audio)
            except WisError as err:  # busy: what is said so far is scored at the end
                _LOGGER.debug("No partial transcript: %s", err)
                continue
            if not self._speech.done() and (start := self._detector.speech_start()) is not None:
                self._speech.set_result(start)
            # a file is not a speaker: not even its first second, which the slack for a live client's buffers lets in
            if self._turn is not None and not self._finishing and self._live(slack=0.0):
                try:
                    ended = await self._turn.judge(self, audio)
                except WisError as err:  # e.g. busy: the turn is judged again later, or ends on silence
                    _LOGGER.debug("Turn not judged: %s", err)
                    continue
                except Exception as err:  # a bug: the frontend reports it
                    if not self._ended.done():
                        self._ended.set_exception(err)
                    return
                if ended or self._ended.done():  # or the most speech a turn may hold was reached meanwhile
                    return
            speech_end = self._detector.speech_end()
            if self._finishing or speech_end is None or not self._due(len(audio), speech_end, decoded_at, interval):
                continue
            silence = len(audio) - speech_end
            started = time.monotonic()
            try:  # a pause is decoded as the end would decode it: its decode is the transcript's
                transcript = await (self.ahead(padded(audio, speech_end)) if silence >= PAUSE else self._draft(audio))
            except WisError as err:  # e.g. busy: partial results are a bonus
                _LOGGER.debug("No partial transcript: %s", err)
                continue
            if transcript is None:
                continue
            elapsed = time.monotonic() - started
            decoded_at, interval = len(audio), max(MIN_INTERVAL, 2 * elapsed)
            _LOGGER.debug("Decoded %.1f s ahead in %.2f s: %r", len(audio) / WHISPER_RATE, elapsed, transcript.text)
            try:  # after a pause of PAD the text is as good as final; else only words two decodes agree on
                await self._publish(transcript, final=silence >= PAD)
            except ConnectionError:
                return

    def end_turn(self, reason: Reason, samples: int, speech_end: int | None) -> bool:
        """End the turn at `samples` (its speech at `speech_end`, which arrived when the arrivals say), unless it
        has ended already; True. The turn's detector calls it."""
        if self._ended.done():
            return True
        arrived = None if speech_end is None else self._audio.arrival(speech_end)
        kept = self._audio.until(samples)
        self._audio.end_turn(kept if speech_end is None else padded(kept, speech_end))
        self._ended.set_result(TurnEnd(reason, samples, arrived, speech_end))
        _LOGGER.debug("Turn ended (%s) after %.2f s", reason, samples / WHISPER_RATE)
        return True

    def _due(self, samples: int, speech_end: int, decoded_at: int, interval: float) -> bool:
        """Whether a decode now is worth its cost."""
        if not self._live() or not self.engine.idle or (self._turn is not None and self._turn.judging):
            return False  # (a judgement's decode is the pause's: `ahead` takes it once it lands)
        silence = samples - speech_end
        if silence >= PAD:  # speech has ended: its text goes out as final (decoded at PAUSE already, or now)
            return decoded_at < speech_end + PAD
        if silence >= PAUSE:  # a pause: decode it once, exactly as the end would; where the session ends the turn,
            # its detector does, when it judges the pause (at its sensitivity's `check`)
            return self._turn is None and decoded_at <= speech_end
        if not self._speaking_drafts:
            return False  # a turn the session judges itself: keep the model free for the pause
        return samples - decoded_at >= interval * WHISPER_RATE

    def _live(self, slack: float = _LIVE_SLACK) -> bool:
        """Whether audio arrives at about the pace it was spoken, give or take `slack` seconds of it."""
        elapsed = time.monotonic() - (self._first_audio or time.monotonic())
        return self.seconds <= LIVE_RATE * elapsed + slack

    async def _transcribe(self, audio: np.ndarray) -> Transcript:
        """Decode the speech in `audio`, or reuse the last result if its pieces are the same."""
        pieces = self._detector.pieces(len(audio))
        if (latest := self._decoded.latest(pieces)) is not None:
            return latest
        transcript = await self.engine.transcribe_pieces(
            audio, self._detector, pieces, options=self.options, known=self._decoded.known
        )
        self._decoded.last = (pieces, transcript)
        return transcript

    async def ahead(self, audio: np.ndarray) -> Transcript | None:
        """`_transcribe` at a pause, before the end. A piece whose text the short window does not trust is not
        decoded again now (the standard pass's temperature fallback takes seconds, and holds the model while the
        speaker may go on: a pause of 64 ms may end on a word's first sound): None, and that piece is decoded at
        the end."""
        pieces = self._detector.pieces(len(audio))
        if (latest := self._decoded.latest(pieces)) is not None:
            return latest
        judged = self._decoded.known | self._decoded.unsettled
        options = dataclasses.replace(self.options, judging=True)
        transcript = await self.engine.transcribe_pieces(audio, self._detector, pieces, options=options, known=judged)
        for piece, decoded in judged.items():
            (self._decoded.unsettled if decoded.unsettled else self._decoded.known)[piece] = decoded
        if any(judged[piece].unsettled for piece in pieces):
            return None
        self._decoded.last = (pieces, transcript)
        return transcript

    async def _decode_in_order(self, audio: np.ndarray) -> None:
        """Decode what is left a batch at a time from the start, sending text as it comes.

        For audio that came faster than speech (a file), so that a listener reads the
        beginning before the end is decoded; the first piece goes alone, to be quick.
        """
        pieces = self._detector.pieces(len(audio))
        todo = [index for index, piece in enumerate(pieces) if piece not in self._decoded.known]
        group = 1
        while len(todo) > group:
            end = todo[group - 1] + 1
            prefix = await self.engine.transcribe_pieces(
                audio, self._detector, pieces[:end], options=self.options, known=self._decoded.known
            )
            await self._publish(prefix, final=True)
            todo, group = todo[group:], self.engine.batcher.max_batch

    async def _draft(self, audio: np.ndarray) -> Transcript:
        pieces = self._detector.pieces(len(audio))
        options = dataclasses.replace(self.options, draft=True)
        return await self.engine.transcribe_pieces(
            audio, self._detector, pieces, options=options, known=self._decoded.drafts
        )

    async def _publish(self, transcript: Transcript, final: bool) -> None:
        """Send the stable words of `transcript` not sent yet, with their tokens' log-probabilities if asked."""
        if self._on_text is None:
            return
        sent = self._stable.sent
        if new := self._stable.update(transcript.text, final):
            logprobs = transcript.logprobs_of(sent, len(new.split())) if self.options.logprobs else ()
            await self._on_text(Delta(new, logprobs))

    # -- audio buffer ---------------------------------------------------------

    def audio(self) -> np.ndarray:
        """All audio so far, or the turn's once it has ended; a view that later audio does not change."""
        return self._audio.audio()

    def _flush(self) -> None:
        """Keep a resampler's last samples; blocking where a cleaner cleans them (in `_in_worker`, then)."""
        if self._converter is not None:
            self._keep(self._converter.flush())
            self._converter = None

    def _keep(self, samples: np.ndarray) -> None:
        """Keep newly converted samples, cleaned first where the session has a cleaner; blocking."""
        self._audio.append(samples if self._cleaner is None else self._cleaner.clean(samples))

    async def _in_worker(self, work: Callable[[], object]) -> None:
        """Run `work` (converting, cleaning, keeping: all grow with the audio) off the event loop: in the cleaner's
        threads where there is one, else in asyncio's."""
        if self._cleaner is None:
            await asyncio.to_thread(work)
        else:
            await self._cleaner.run(work)


def padded(audio: np.ndarray, speech_end: int, pad: int = PAD) -> np.ndarray:
    """`audio` with silence added up to `pad` after `speech_end`, as if the pause had lasted that long.

    Whisper, given speech that stops right after a word, tends to finish the sentence itself ("set a timer for"
    became "set a timer for it"); faster-whisper's own `transcribe()` pads with silence too.
    """
    missing = speech_end + pad - len(audio)
    return audio if missing <= 0 else np.concatenate([audio, np.zeros(missing, dtype=np.float32)])


@dataclass
class _Decoded:
    """What a session has decoded, reused while the audio it covers does not change."""

    known: dict[Piece, Decoded] = field(default_factory=dict)  # decoded pieces
    drafts: dict[Piece, Decoded] = field(default_factory=dict)
    unsettled: dict[Piece, Decoded] = field(default_factory=dict)  # decoded pieces whose text is not final (`ahead`)
    last: tuple[list[Piece], Transcript] | None = None  # the last transcript, and its pieces

    def latest(self, pieces: list[Piece]) -> Transcript | None:
        """The last transcript, if it was of these pieces."""
        return self.last[1] if self.last is not None and self.last[0] == pieces else None


class _StableText:
    """Words that two decodes in a row agree on, sent once each (local agreement).

    A partial decode may still change its last words when more audio comes;
    a word two decodes agree on rarely does. Words are compared without case
    and punctuation, which early decodes of a sentence often lack. At the end,
    the rest of the final text follows, unless the final text changed words
    already sent; the final transcript itself is always complete.
    """

    def __init__(self) -> None:
        self._previous: list[str] = []
        self._sent: list[str] = []  # as compared

    @property
    def sent(self) -> int:
        """Words sent so far."""
        return len(self._sent)

    def update(self, text: str, final: bool) -> str:
        words = text.split()
        keys = [_key(word) for word in words]
        agreed = len(keys) if final else len(_common_prefix(self._previous, keys))
        self._previous = keys
        if agreed <= len(self._sent) or keys[: len(self._sent)] != self._sent:
            return ""
        new = words[len(self._sent) : agreed]
        first = not self._sent
        self._sent = keys[:agreed]
        return ("" if first else " ") + " ".join(new)


def _key(word: str) -> str:
    return re.sub(r"[^\w']", "", word.lower())


def _common_prefix(a: list[str], b: list[str]) -> list[str]:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


class Delta(str):
    """Text an ASR session sends as it is recognised (`on_text`): a str, with the log-probabilities of its
    tokens (`logprobs`) where the request asked for them."""

    logprobs: Logprobs

    def __new__(cls, text: str, logprobs: Logprobs = ()) -> Delta:
        delta = super().__new__(cls, text)
        delta.logprobs = logprobs
        return delta
