"""Whisper on windows that fit the speech, several pieces of speech in one CTranslate2 call.

Whisper always sees 30 s: shorter audio is padded with silence, and encoding
that window costs the same for a 2 s command as for 30 s of speech. Here each
piece gets the smallest window of 10, 15, 20, 25 or 30 s that holds it with at
least 5 s of silence after it, a few times cheaper for a voice command. Whisper
needs that silence: given no room after the speech it tends to loop or stop
early. Only a beam search that transcribes is safe there: greedy decoding in a short
window changes words that it gets right in the full one, and translation is worse in
it, so the task `translate` gets the full window, and a transcript is decoded in a
short one with a beam of at least FITTED_MIN_BEAM, whatever the beam asked for (a
draft, only a preview, excepted): there beam 5 costs little more than greedy decoding
in it, and a few times less than greedy in the full window. What still looks wrong (a loop, a
text too long for the audio, empty text where the VAD heard speech, a very unlikely
text) is decoded again the standard way, with faster-whisper's full 30 s window and
temperature fallback; not for a draft, nor for a decode that judges a pause (the
server's end of the turn): a pause whose words need that is not an end, and its
decode waits for the end.

A language detected without much certainty in a short window is detected again
in the full one: the two disagree only then, and the full one is what Whisper
was trained on.

Word times are found for the text already decoded (cross-attention alignment on
the same encoder output), so asking for them never changes the text. So are the
tokens' log-probabilities, where a request asks for them (`TokenLogprob`).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import re
import time
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np
from faster_whisper import WhisperModel
from faster_whisper.tokenizer import Tokenizer
from faster_whisper.transcribe import merge_punctuations

from .. import metrics
from ..audio import WHISPER_RATE

_LOGGER = logging.getLogger(__name__)

MIN_WINDOW = 10  # seconds
WINDOW_STEP = 5  # seconds: windows come in a few sizes, so that pieces share batches
MIN_SILENCE = 5  # seconds of window after the speech, at the least
FULL_WINDOW = 30  # seconds: Whisper's own window
FITTED_MIN_BEAM = 5  # the smallest beam a transcript is decoded with in a fitted window (6 % more than greedy there)
MAX_PROMPT_TOKENS = 200  # of bias text; Whisper allows 223 before the transcript
TEXT_SHARE = 0.5  # of MAX_PROMPT_TOKENS, the most a prompt's text keeps ahead of its words (more if they leave room)
FULL_WINDOW_TOKENS = 448 // 2 - 3  # the most the standard pass may add after its longest prompt (448 in all)
PROMPT_CHARS = 16 * MAX_PROMPT_TOKENS  # the end of a prompt that holds its last tokens, with room
WORD_COUNTS = 4096  # names and terms whose token counts are kept (a household's, and what clients repeat)
_TOKENS_PER_SECOND = 10  # more than any speech needs; a text longer than that is a loop
_MAX_COMPRESSION = 2.0  # gzip ratio above which a text is repetitive (Whisper uses 2.4 on 30 s)
_MIN_LOGPROB = -1.0  # mean token log-probability below which a text is a guess
SURE_LANGUAGE = 0.7  # detected in a short window less surely than this: detected again in the full one
FALLBACK_TEMPERATURES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)  # faster-whisper's, tried in turn while a text fails
MIN_WORD = 0.02  # seconds: the shortest a timed word may last
PREPEND_PUNCTUATIONS = "\"'“¿([{-"  # joined to the word after them, as faster-whisper's transcribe() does
APPEND_PUNCTUATIONS = "\"'.。,，!！?？:：”)]}、"  # joined to the word before them
_NO_SPEECH = 0.6  # with a low log-probability too, the piece is silence
_TINY = 1e-45  # a probability that underflowed to 0, as a log-probability: about -103.3
_REPEATS = (  # a phrase of 3+ words said twice; a word or two said 4 times in a row ("Zone-Zone-Zone-Zone");
    # a sentence said twice ("Done. Done.": base, now and then, for a lone word). Each costs only a full-window
    # decode, where a speaker who did say it twice is heard saying it twice.
    re.compile(r"\b(\w+(?:\W+\w+){2,}?)\W+\1\b", re.IGNORECASE),
    re.compile(r"\b(\w+(?:\W+\w+)?)(?:\W+\1\b){3}", re.IGNORECASE),
    re.compile(r"\b(\w[^.!?]*[.!?])\s+\1(?!\w)", re.IGNORECASE),
)


@dataclass(frozen=True)
class Prompt:
    """Bias text, as if said just before the audio: text (the server's --initial-prompt, a request's own prompt),
    then names and words the speaker is likely to say, the likeliest first.

    Whisper reads MAX_PROMPT_TOKENS of it at most, and `Decoder.prompt_tokens` decides which: the text keeps its
    end, up to TEXT_SHARE of them where there are words; the words fill the rest whole and in order, up to the
    first that does not fit; and the text gets whatever room the words leave.
    """

    text: str = ""
    words: tuple[str, ...] = ()

    def __contains__(self, part: str) -> bool:
        return part in self.text or any(part in word for word in self.words)


class Fitted(NamedTuple):
    """A prompt as Whisper reads it: its tokens, and the names and words among them."""

    tokens: tuple[int, ...]
    words: tuple[str, ...]


@dataclass(frozen=True)
class Options:
    """How to decode one request."""

    language: str | None  # None: detect per piece
    task: str = "transcribe"  # or "translate" (to English)
    prompt: Prompt = Prompt()  # bias text: names and words the speaker is likely to say
    draft: bool = False  # a preview while audio still arrives: greedy, and no second pass
    judging: bool = False  # at a pause, to judge the end of the turn: no second pass (the transcript's, if trusted)
    words: bool = False  # time each word (aligned to the text decoded; it does not change the text)
    temperature: float = 0.0  # above 0: sample at this temperature (in the standard pass), no fallback
    beam_size: int | None = None  # None: the decoder's own (engines always give the server's --beam-size)
    logprobs: bool = False  # score each token of the text decoded (`TokenLogprob`; it does not change the text)

    @property
    def final(self) -> bool:
        """A text the short window does not trust is decoded again the standard way (see the module's docstring)."""
        return not (self.draft or self.judging)

    @property
    def standard(self) -> bool:
        """Decoded by faster-whisper's standard pass from the start: the short window cannot do this
        (a draft is only a preview, and skips it)."""
        return not self.draft and self.temperature > 0


@dataclass(frozen=True)
class Decoding:
    """What an ASR request resolves to (`Core.resolve`): the model that decodes it, and how. Equal values decode
    alike."""

    model: str  # the Whisper engine's name
    options: Options


@dataclass(frozen=True)
class Job:
    """One piece of speech to decode."""

    audio: np.ndarray  # 16 kHz mono float32
    options: Options
    prompt_tokens: tuple[int, ...]  # bias text, tokenised
    align: bool = False  # time the text's words: asked for, or to find speech that the text left out
    household: bool = False  # Home Assistant's (shares.trusted): never in one call with a stranger's audio

    @property
    def window(self) -> int:
        """Seconds of Whisper window this piece is decoded in."""
        options = self.options
        if not options.draft and options.task == "translate":
            return FULL_WINDOW
        return window_seconds(len(self.audio) / WHISPER_RATE)

    def beam(self, asked: int) -> int:
        """The beam it is decoded with in its window, `asked` that one: in a window shorter than the full one, a
        transcript (not a draft) gets at least FITTED_MIN_BEAM, as greedy decoding there changes words."""
        short = self.window < FULL_WINDOW and not self.options.draft
        return max(asked, FITTED_MIN_BEAM) if short else asked

    @property
    def batch_key(self) -> tuple[int, int, bool, bool, int | None, bool]:
        """Jobs with the same key can share one CTranslate2 call: same window size, same search,
        and the transcript starting at the same position; and Home Assistant's apart from strangers': on a CPU a
        call's time grows with its batch (2 cores, Whisper base: 0.55 s for one 6 s clip, 1.80 s for four), and
        Home Assistant never waits for strangers."""
        options = self.options
        return self.window, len(self.prompt_tokens), options.draft, options.standard, options.beam_size, self.household


@dataclass(frozen=True)
class TokenLogprob:
    """One token of a text, and the model's log-probability of it given the audio, the prompt and the tokens
    before it: scored in one teacher-forced pass of the decoder over the text decoded (CTranslate2's `align`,
    the pass that times words), on the same encoder output and after the same prompt as the decode, among the
    text tokens (Whisper's special tokens, the end of text among them, left out of the softmax)."""

    token: bytes  # UTF-8, though a token may hold only part of a character
    logprob: float  # at most 0

    @property
    def text(self) -> str:
        return self.token.decode("utf-8", errors="replace")


Logprobs = tuple[TokenLogprob, ...]


@dataclass(frozen=True)
class Word:
    start: float
    end: float
    word: str  # as Whisper wrote it, with its leading space


@dataclass(frozen=True)
class Segment:
    """A timed stretch of text, with the decoder's measures of how sure it was."""

    start: float
    end: float
    text: str
    tokens: tuple[int, ...] = ()
    avg_logprob: float = 0.0
    compression_ratio: float = 0.0
    no_speech_prob: float = 0.0
    temperature: float = 0.0
    words: tuple[Word, ...] = ()
    logprobs: Logprobs = ()  # of the text's tokens, if asked for

    def shifted(self, seconds: float) -> Segment:
        """The same segment `seconds` later (a piece's times are relative to the piece)."""
        words = tuple(Word(w.start + seconds, w.end + seconds, w.word) for w in self.words)
        return replace(self, start=self.start + seconds, end=self.end + seconds, words=words)

    def until(self, seconds: float) -> Segment:
        """The same segment with no time past `seconds` (the end of audio decoded padded with silence)."""
        words = tuple(Word(min(w.start, seconds), min(w.end, seconds), w.word) for w in self.words)
        return replace(self, start=min(self.start, seconds), end=min(self.end, seconds), words=words)


@dataclass(frozen=True)
class Decoded:
    text: str
    language: str
    segments: list[Segment] = field(default_factory=list)  # timed: from the full-window pass, or stretches apart
    retried: str | None = None  # why the short window was not trusted
    unsettled: bool = False  # not trusted and not decoded again (a draft's, a judgement's): no final text
    tokens: tuple[int, ...] = ()  # of `text`, from the short window
    avg_logprob: float = 0.0
    no_speech_prob: float = 0.0
    words: tuple[Word, ...] = ()  # of `text`, from the short window, if asked for
    language_probability: float = 1.0  # how sure detection was (1 when the language was given)
    logprobs: Logprobs = ()  # of `tokens`, if asked for

    @property
    def mean_logprob(self) -> float:
        """The text's mean token log-probability: the fitted window's, or the full window's segments' by tokens."""
        tokens = sum(len(segment.tokens) for segment in self.segments)
        if not tokens:
            return self.avg_logprob
        return sum(segment.avg_logprob * len(segment.tokens) for segment in self.segments) / tokens


def window_seconds(seconds: float) -> int:
    steps = math.ceil((seconds + MIN_SILENCE) / WINDOW_STEP)
    return min(FULL_WINDOW, max(MIN_WINDOW, steps * WINDOW_STEP))


class Decoder:
    """Batches of jobs in, texts out; blocking, for a worker thread."""

    def __init__(self, whisper: WhisperModel, beam_size: int, name: str) -> None:
        """`name`: the model's, for the metrics of where its calls' time goes."""
        self.whisper = whisper
        self.name = name
        self.beam_size = beam_size
        self.multilingual: bool = whisper.model.is_multilingual
        self._tokenizers: dict[tuple[str, str], Tokenizer] = {}
        self._word_counts: dict[str, int] = {}  # tokens of " word," by word
        self._last_encoded: tuple[tuple[int, bytes], object] | None = None  # (`_encoded`'s key, its output)

    def prompt_tokens(self, prompt: Prompt) -> Fitted:
        """The prompt as Whisper reads it: at most MAX_PROMPT_TOKENS tokens, fitted as `Prompt` says.

        Only the end of the text is tokenised (MAX_PROMPT_TOKENS tokens never span more than PROMPT_CHARS), and
        no special token is kept: a client's "<|endoftext|>" is text, not Whisper's marker.
        """
        text = prompt.text.strip()
        text_tokens = self._encode(" " + text[-PROMPT_CHARS:]) if text else []
        room = MAX_PROMPT_TOKENS - min(len(text_tokens), int(MAX_PROMPT_TOKENS * TEXT_SHARE))
        chosen: list[str] = []
        used = 0
        for word in prompt.words:
            used += self._word_tokens(word)
            if used > room:
                break
            chosen.append(word)
        word_tokens = self._encode(" " + ", ".join(chosen) + ".") if chosen else []
        while len(word_tokens) > room:  # (a word's count alone may differ by a token where punctuation joins)
            chosen.pop()
            word_tokens = self._encode(" " + ", ".join(chosen) + ".") if chosen else []
        if len(chosen) < len(prompt.words):
            _LOGGER.debug("The prompt holds %d of its %d names and words", len(chosen), len(prompt.words))
        kept = MAX_PROMPT_TOKENS - len(word_tokens)
        return Fitted(tuple((text_tokens[-kept:] if kept else []) + word_tokens), tuple(chosen))

    def rare(self, word: str) -> bool:
        """Whether Whisper's tokenizer splits `word` (as a word of a sentence): a name's own word, not a common one.
        A plural whose singular it does not split is common too: " blind" + "s" ("Close the blinds in the office",
        with names "Office" and "Office Blinds", was decoded again without them, 0.13 s more).

        Cached with the prompt's words (it is asked of each word of their names after every decode)."""
        split = self._word_tokens(word) > 2  # its tokens and the comma after it
        return split and not (word.endswith("s") and self._word_tokens(word[:-1]) <= 2)

    def _word_tokens(self, word: str) -> int:
        count = self._word_counts.get(word)
        if count is None:
            if len(self._word_counts) >= WORD_COUNTS:
                self._word_counts.clear()
            count = self._word_counts[word] = len(self._encode(f" {word},"))
        return count

    def _encode(self, text: str) -> list[int]:
        tokenizer = self._tokenizer("transcribe", "en")
        return [token for token in tokenizer.encode(text) if token < tokenizer.eot]

    def decode(self, jobs: list[Job]) -> list[Decoded]:
        """Decode jobs that share one batch key."""
        if jobs[0].options.standard:
            return [self._full_window(job, job.options.language, "a temperature asked for") for job in jobs]
        window = max(job.window for job in jobs) * WHISPER_RATE
        encoded = self._encoded(jobs, window)
        languages, sure = self._languages(jobs, encoded)
        tokenizers = [
            self._tokenizer(job.options.task, language) for job, language in zip(jobs, languages, strict=True)
        ]
        prompts = [self._prompt(job, tokenizer) for job, tokenizer in zip(jobs, tokenizers, strict=True)]
        limits = [_max_new_tokens(job) for job in jobs]
        with self._stage("search"):
            results = self.whisper.model.generate(
                encoded,
                prompts,
                beam_size=jobs[0].beam(self._beam_size(jobs[0].options)),
                max_length=max(len(prompt) + limit for prompt, limit in zip(prompts, limits, strict=True)),
                return_scores=True,
                return_no_speech_prob=True,
            )
        decoded = []
        rows = zip(jobs, languages, sure, tokenizers, results, limits, strict=True)
        for job, language, probability, tokenizer, result, limit in rows:
            tokens = [token for token in result.sequences_ids[0] if token < tokenizer.eot]
            text = tokenizer.decode(tokens).strip()
            logprob, no_speech = result.scores[0], result.no_speech_prob
            if no_speech > _NO_SPEECH and logprob < _MIN_LOGPROB:
                decoded.append(Decoded("", language))
                continue
            problem = _problem(text, len(tokens), limit, logprob)
            if problem and not job.options.final:  # nothing worth showing or judging yet
                decoded.append(Decoded("", language, retried=problem, unsettled=True))
            elif problem:  # in the language detected here, as sure as it was here
                decoded.append(replace(self._full_window(job, language, problem), language_probability=probability))
            else:
                scores = {"tokens": tuple(tokens), "avg_logprob": logprob, "no_speech_prob": no_speech}
                decoded.append(Decoded(text, language, **scores, language_probability=probability))
        if any(job.align for job in jobs):
            with self._stage("words"):
                decoded = self._time_words(jobs, encoded, tokenizers, decoded)
        if any(job.options.logprobs for job in jobs):
            with self._stage("logprobs"):
                decoded = self._score_tokens(jobs, encoded, prompts, decoded)
        return decoded

    @contextlib.contextmanager
    def _stage(self, stage: str) -> Iterator[None]:
        """Count the time the block takes as `stage` (`metrics.DECODE_STAGES`)."""
        started = time.perf_counter()
        try:
            yield
        finally:
            metrics.decoded(self.name, stage, time.perf_counter() - started)

    def _score_tokens(
        self, jobs: list[Job], encoded: object, prompts: list[list[int]], decoded: list[Decoded]
    ) -> list[Decoded]:
        """Score the tokens of the texts decoded in the short window, for the jobs that ask: one pass over the
        batch for each prompt in it (the decode's own, which `align` ends with <|notimestamps|> itself).

        Pieces decoded again in the full window were scored in that pass.
        """
        frames = [len(job.audio) // self.whisper.feature_extractor.hop_length for job in jobs]
        scored = list(decoded)
        todo = [
            index
            for index, (job, result) in enumerate(zip(jobs, decoded, strict=True))
            if job.options.logprobs and result.tokens and not result.segments
        ]
        for start in dict.fromkeys(tuple(prompts[index][:-1]) for index in todo):
            group = [index for index in todo if tuple(prompts[index][:-1]) == start]
            rows = [list(decoded[index].tokens) if index in group else [0] for index in range(len(jobs))]
            results = self.whisper.model.align(encoded, list(start), rows, frames)
            for index in group:
                logprobs = self._logprobs(decoded[index].tokens, results[index].text_token_probs)
                scored[index] = replace(decoded[index], logprobs=logprobs)
        return scored

    def _scored_segments(self, job: Job, result: Decoded) -> Decoded:
        """A full-window pass's segments with their tokens scored, all of them in one pass after the job's prompt
        (each segment's text after those before it), on the audio encoded again in the full window."""
        tokenizer = self._tokenizer(job.options.task, result.language)
        texts = [[token for token in segment.tokens if token < tokenizer.eot] for segment in result.segments]
        tokens = [token for text in texts for token in text]
        if not tokens:
            return result
        encoded = self.whisper.encode(self._features(job.audio, FULL_WINDOW * WHISPER_RATE)[None])
        start = self._prompt(job, tokenizer)[:-1]
        frames = len(job.audio) // self.whisper.feature_extractor.hop_length
        probabilities = self.whisper.model.align(encoded, start, [tokens], frames)[0].text_token_probs
        logprobs = self._logprobs(tokens, probabilities)
        segments, at = [], 0
        for segment, text in zip(result.segments, texts, strict=True):
            segments.append(replace(segment, logprobs=logprobs[at : at + len(text)]))
            at += len(text)
        return replace(result, segments=segments)

    def _logprobs(self, tokens: Sequence[int], probabilities: Sequence[float]) -> Logprobs:
        """Each token's bytes with the log of its probability (the smallest float where it is 0)."""
        vocabulary = self.whisper.hf_tokenizer
        return tuple(
            TokenLogprob(_token_bytes(vocabulary.id_to_token(token)), math.log(max(probability, _TINY)))
            for token, probability in zip(tokens, probabilities, strict=True)
        )

    def _time_words(
        self, jobs: list[Job], encoded: object, tokenizers: list[Tokenizer], decoded: list[Decoded]
    ) -> list[Decoded]:
        """Time the words of the texts decoded in the short window, in one alignment over the whole batch
        for each language in it.

        Pieces decoded again in the full window have their times from that pass already.
        """
        frames = [len(job.audio) // self.whisper.feature_extractor.hop_length for job in jobs]
        timed = list(decoded)
        for tokenizer in dict.fromkeys(tokenizers):
            todo = [
                index
                for index, (job, result) in enumerate(zip(jobs, decoded, strict=True))
                if job.align and result.tokens and not result.segments and tokenizers[index] is tokenizer
            ]
            if not todo:
                continue
            # every row of the batch is aligned (other rows get a stand-in token); only these texts' count
            rows = [list(decoded[index].tokens) if index in todo else [tokenizer.eot] for index in range(len(jobs))]
            alignments = self.whisper.find_alignment(tokenizer, rows, encoded, frames)
            for index in todo:
                seconds = len(jobs[index].audio) / WHISPER_RATE
                timed[index] = replace(decoded[index], words=_words(alignments[index], seconds))
        return timed

    def warm_up(self) -> None:
        """Encode a window of silence and decode a few tokens: loads every kernel once."""
        tokenizer = self._tokenizer("transcribe", "en")
        encoded = self.whisper.encode(self._features(np.zeros(0, dtype=np.float32), MIN_WINDOW * WHISPER_RATE)[None])
        prompt = [*tokenizer.sot_sequence, tokenizer.no_timestamps]
        self.whisper.model.generate(encoded, [prompt], beam_size=self.beam_size, max_length=len(prompt) + 4)

    def _full_window(self, job: Job, language: str | None, problem: str) -> Decoded:
        """The standard faster-whisper pass: 30 s window, temperature fallback (or the request's temperature).

        Its output is capped as ours is, so a loop that faster-whisper would let run long enough to compress
        well (and fall back) ends short: a text that still loops is decoded again at the next temperature.
        """
        _LOGGER.debug("Decoding %.1f s in the full window: %s", len(job.audio) / 16e3, problem)
        limit = min(_max_new_tokens(job), FULL_WINDOW_TOKENS)  # a loop ends where speech would
        temperatures = (job.options.temperature,) if job.options.temperature else FALLBACK_TEMPERATURES
        tried = []
        with self._stage("fallback"):
            while temperatures:
                result = self._standard(job, language, problem, temperatures=temperatures, limit=limit)
                if not _loops(result.text, sum(len(segment.tokens) for segment in result.segments), limit):
                    return self._scored_segments(job, result) if job.options.logprobs else result
                tried.append(result)
                used = max((segment.temperature for segment in result.segments), default=temperatures[0])
                temperatures = tuple(temperature for temperature in temperatures if temperature > used)
            result = min(tried, key=lambda result: compression_ratio(result.text))  # the least repetitive
            return self._scored_segments(job, result) if job.options.logprobs else result

    def _standard(
        self, job: Job, language: str | None, problem: str, *, temperatures: tuple[float, ...], limit: int
    ) -> Decoded:
        """One faster-whisper transcribe() of the job, falling back through `temperatures` as it does."""
        pieces, info = self.whisper.transcribe(
            job.audio,
            language=job.options.language or language,
            task=job.options.task,
            beam_size=self._beam_size(job.options),
            initial_prompt=list(job.prompt_tokens) or None,
            condition_on_previous_text=False,
            max_new_tokens=limit,
            word_timestamps=job.align,
            temperature=list(temperatures),
        )
        segments = [
            Segment(
                piece.start,
                piece.end,
                piece.text.strip(),
                tuple(piece.tokens),
                piece.avg_logprob,
                piece.compression_ratio,
                piece.no_speech_prob,
                piece.temperature or 0.0,
                tidy([(word.start, word.end, word.word) for word in piece.words or ()], piece.start, piece.end),
            )
            for piece in pieces
        ]
        text = " ".join(segment.text for segment in segments if segment.text)
        return Decoded(text, info.language, segments, retried=problem, language_probability=info.language_probability)

    def _encoded(self, jobs: list[Job], window: int) -> object:
        """The encoder's output for the jobs' audio in `window`. A lone piece's is kept for the next call: one that
        names none of the household's names is decoded again at once on the same audio without them (the engine's
        `_decode_pieces`), and the encoder is half of that decode's time (on 2 cores, 0.17 s of 0.36 s)."""
        key = (window, hashlib.blake2b(jobs[0].audio.tobytes(), digest_size=16).digest()) if len(jobs) == 1 else None
        last = self._last_encoded  # (one read: another worker may replace it meanwhile)
        if key is not None and last is not None and last[0] == key:
            return last[1]
        with self._stage("encode"):
            encoded = self.whisper.encode(np.stack([self._features(job.audio, window) for job in jobs]))
        if key is not None:
            self._last_encoded = (key, encoded)
        return encoded

    def _beam_size(self, options: Options) -> int:
        return 1 if options.draft else options.beam_size or self.beam_size

    def _features(self, audio: np.ndarray, window: int) -> np.ndarray:
        """Log-mel of the audio padded with silence to the window, as Whisper was trained."""
        padded = np.pad(audio, (0, window - len(audio)))
        return self.whisper.feature_extractor(padded)[:, : window // self.whisper.feature_extractor.hop_length]

    def _languages(self, jobs: list[Job], encoded: object) -> tuple[list[str], list[float]]:
        """Each job's language, given or detected, and how sure detection was."""
        if not self.multilingual:
            return ["en"] * len(jobs), [1.0] * len(jobs)
        if all(job.options.language for job in jobs):
            return [job.options.language for job in jobs], [1.0] * len(jobs)  # type: ignore[misc]
        with self._stage("language"):
            detected = [found[0] for found in self.whisper.model.detect_language(encoded)]
            unsure = [  # a language the request gives needs no second look
                index
                for index, (_, probability) in enumerate(detected)
                if probability < SURE_LANGUAGE and not jobs[index].options.language
            ]
            if unsure and max(job.window for job in jobs) < FULL_WINDOW:
                window = FULL_WINDOW * WHISPER_RATE
                full = self.whisper.encode(np.stack([self._features(jobs[index].audio, window) for index in unsure]))
                for index, found in zip(unsure, self.whisper.model.detect_language(full), strict=True):
                    detected[index] = found[0]
        rows = list(zip(jobs, detected, strict=True))
        languages = [job.options.language or token[2:-2] for job, (token, _) in rows]
        return languages, [1.0 if job.options.language else probability for job, (_, probability) in rows]

    def _tokenizer(self, task: str, language: str) -> Tokenizer:
        key = (task, language)
        if key not in self._tokenizers:
            self._tokenizers[key] = Tokenizer(
                self.whisper.hf_tokenizer, self.multilingual, task=task, language=language
            )
        return self._tokenizers[key]

    @staticmethod
    def _prompt(job: Job, tokenizer: Tokenizer) -> list[int]:
        previous = [tokenizer.sot_prev, *job.prompt_tokens] if job.prompt_tokens else []
        return [*previous, *tokenizer.sot_sequence, tokenizer.no_timestamps]


def _words(alignment: list[dict], seconds: float) -> tuple[Word, ...]:
    """Words from an alignment of a piece `seconds` long, punctuation joined to its word as Whisper does."""
    merge_punctuations(alignment, PREPEND_PUNCTUATIONS, APPEND_PUNCTUATIONS)
    return tidy([(float(t["start"]), float(t["end"]), t["word"]) for t in alignment], 0.0, seconds)


def tidy(words: Sequence[tuple[float, float, str]], start: float, end: float) -> tuple[Word, ...]:
    """Words in order, none before the one ahead of it, each lasting at least MIN_WORD inside [start, end]
    (an alignment may give a word no time at all)."""
    tidy: list[Word] = []
    for word_start, word_end, text in words:
        if not text:
            continue
        begins = min(max(word_start, tidy[-1].end if tidy else start), end - MIN_WORD)
        tidy.append(Word(round(begins, 3), round(min(max(word_end, begins + MIN_WORD), end), 3), text))
    return tuple(tidy)


def _byte_table() -> dict[str, int]:
    """The byte each character of a byte-level BPE token stands for (GPT-2's scheme, which Whisper's tokenizer
    uses): printable Latin-1 bytes stand for themselves, the other bytes for the characters from U+0100 on."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [byte for byte in range(256) if byte not in printable]
    table = {chr(byte): byte for byte in printable}
    table.update({chr(256 + index): byte for index, byte in enumerate(others)})
    return table


_BYTES = _byte_table()


def _token_bytes(token: str) -> bytes:
    """A token's bytes, from its name in the vocabulary ("Ġthe": b" the")."""
    return bytes(_BYTES[char] for char in token)


def _max_new_tokens(job: Job) -> int:
    return 16 + int(_TOKENS_PER_SECOND * len(job.audio) / WHISPER_RATE)


def _problem(text: str, tokens: int, limit: int, logprob: float) -> str | None:
    """Why a short-window text should not be trusted, or None."""
    if not text:
        return "empty text"
    if loop := _loops(text, tokens, limit):
        return loop
    if logprob < _MIN_LOGPROB:
        return "an unlikely text"
    return None


def _loops(text: str, tokens: int, limit: int) -> str | None:
    """How a text shows a decoding loop, or None."""
    if tokens >= limit:
        return "a text too long for the audio"
    if compression_ratio(text) > _MAX_COMPRESSION or any(repeat.search(text) for repeat in _REPEATS):
        return "a repetition loop"
    return None


def compression_ratio(text: str) -> float:
    """How well the text compresses (gzip, as Whisper measures it): high for a repetition loop."""
    data = text.encode()
    return len(data) / len(zlib.compress(data)) if data else 0.0
