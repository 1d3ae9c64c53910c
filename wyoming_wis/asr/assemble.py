"""A request's transcript from its pieces' results, and the speech a piece's text left out.

A piece is decoded whole (one short window, or the full-window pass), but it is made of stretches of speech
between pauses. Whisper may write nothing for one of them (a sentence in another language, mostly), and then
the text's words, aligned to the audio, leave that stretch almost empty: `unheard` finds it, the engine decodes
it on its own, and `filled` puts its text back between the words around it.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field, replace

from ..audio import WHISPER_RATE
from .decoder import Decoded, Logprobs, Options, Segment, TokenLogprob, Word, compression_ratio, tidy
from .vad import Piece

HEARD_RATE = 0.5  # words a second: a stretch of speech with fewer words in the text than this was left out
DRAWN = 2.0  # seconds: an aligned word lasting longer was drawn across speech the text left out (said: <= 1.5 s)
_SPACE = frozenset(b" \t\n\r\x0b\x0c")
_NOT_A_WORD = re.compile(r"[^\w']+")  # what `plain` drops around and between words


@dataclass(frozen=True)
class Transcript:
    text: str
    language: str | None  # forced or detected; None only when nothing was said and detection is on
    duration: float  # seconds of audio
    segments: list[Segment] = field(default_factory=list)

    def until(self, seconds: float) -> Transcript:
        """The transcript of audio `seconds` long, decoded padded with silence past its end: no time after it."""
        return replace(self, duration=seconds, segments=[segment.until(seconds) for segment in self.segments])

    @property
    def words(self) -> list[Word]:
        """Every word with its time; empty unless the request asked for word times."""
        return [word for segment in self.segments for word in segment.words]

    @property
    def logprobs(self) -> Logprobs:
        """Every token of the text with its log-probability; empty unless the request asked for them."""
        return tuple(logprob for segment in self.segments for logprob in segment.logprobs)

    def logprobs_of(self, first: int, count: int) -> Logprobs:
        """The tokens of `count` words of the text from its `first`, as `text.split()` counts words: a token
        belongs to the word its first letter is in (a token of spaces alone, to the word after it)."""
        chosen: list[TokenLogprob] = []
        word = -1
        for segment in self.segments:
            inside = False  # the text joins segments with a space
            for logprob in segment.logprobs:
                owner = None
                for byte in logprob.token:
                    if byte in _SPACE:
                        inside = False
                    elif not inside:
                        word, inside = word + 1, True
                    if owner is None and inside:
                        owner = word
                if first <= (word + 1 if owner is None else owner) < first + count:
                    chosen.append(logprob)
        return tuple(chosen)


def segments(result: Decoded, seconds: float) -> list[Segment]:
    """A piece's decoded text as timed segments, from the piece's start; `seconds` is its length."""
    if result.segments:  # timed by the full-window pass, or made of stretches
        return [segment for segment in result.segments if segment.text]
    if not result.text:
        return []
    return [
        Segment(
            0.0,
            seconds,
            result.text,
            result.tokens,
            result.avg_logprob,
            compression_ratio(result.text),
            result.no_speech_prob,
            words=result.words,
            logprobs=result.logprobs,
        )
    ]


def inside(piece: Piece, stretches: list[Piece]) -> list[Piece]:
    """The stretches of speech (the VAD's, not joined across pauses) that make up `piece`."""
    return [stretch for stretch in stretches if stretch[0] >= piece[0] and stretch[1] <= piece[1]]


def unheard(piece: Piece, stretches: list[Piece], result: Decoded) -> list[Piece]:
    """The stretches of `piece` that its text's words (aligned) leave almost empty: fewer than HEARD_RATE a second.

    A stretch left out is not wordless in the alignment: the word before or after it is drawn across it, so
    words are counted by their middles, a word lasting longer than DRAWN not at all (one drawn across a
    German request lasted 3.8 s, its middle inside), and a stretch of a few seconds holding one is still left out.
    """
    timed = segments(result, (piece[1] - piece[0]) / WHISPER_RATE)
    words = [word for segment in timed for word in segment.words if word.end - word.start <= DRAWN]
    left_out = []
    for start, end in stretches:
        first, last = (start - piece[0]) / WHISPER_RATE, (end - piece[0]) / WHISPER_RATE
        said = sum(first <= (word.start + word.end) / 2 < last for word in words)
        if said < (last - first) * HEARD_RATE:
            left_out.append((start, end))
    return left_out


def filled(piece: Piece, result: Decoded, parts: list[tuple[Piece, Decoded]]) -> Decoded:
    """`result` with each part's text (a stretch decoded on its own) put between the words around it.

    A word goes before a part if it starts before the part does: the word drawn across a left-out stretch
    is the one after it, placed too early. Words said inside the stretch (their middle in it, lasting less
    than half of it) give way to the part's, which were decoded from the same audio; where the part is in
    another language, only those it says too: the others were placed there too early as well (an English
    "has" inside a German request).
    """
    seconds = (piece[1] - piece[0]) / WHISPER_RATE
    timed = segments(result, seconds)
    words = [word for segment in timed for word in segment.words]
    tokens = _tokens_of(words, [logprob for segment in timed for logprob in segment.logprobs])
    out: list[Segment] = []
    at = 0.0

    def heard(until: float) -> None:
        nonlocal words, tokens
        before = [word for word in words if word.start < until]
        said = tuple(logprob for word in tokens[: len(before)] for logprob in word)
        words, tokens = words[len(before) :], tokens[len(before) :]
        if text := "".join(word.word for word in before).strip():
            times = tidy([(word.start, word.end, word.word) for word in before], at, until)
            segment = Segment(at, until, text, (), result.avg_logprob, compression_ratio(text), words=times)
            out.append(replace(segment, logprobs=said))

    for (start, end), part in parts:
        first, last = (start - piece[0]) / WHISPER_RATE, (end - piece[0]) / WHISPER_RATE
        heard(first)
        again = None if part.language == result.language else set(plain(part.text).split())
        kept = [not (_said_inside(word, first, last) and _said_again(word, again)) for word in words]
        words = [word for word, keep in zip(words, kept, strict=True) if keep]
        tokens = [word for word, keep in zip(tokens, kept, strict=True) if keep]
        out += [segment.shifted(first) for segment in segments(part, last - first)]
        at = last
    heard(seconds)
    unsettled = result.unsettled or any(part.unsettled for _, part in parts)
    return replace(result, text=" ".join(segment.text for segment in out), segments=out, unsettled=unsettled)


def _tokens_of(words: list[Word], logprobs: list[TokenLogprob]) -> list[Logprobs]:
    """Each word's tokens (none where `logprobs` is empty): a word's text is its tokens' bytes, so tokens are
    dealt out by length; any left over go with the last word."""
    dealt: list[Logprobs] = []
    at = size = end = 0  # tokens dealt, their bytes, and the words' bytes so far
    for word in words:
        end += len(word.word.encode())
        first = at
        while at < len(logprobs) and size < end:
            size += len(logprobs[at].token)
            at += 1
        dealt.append(tuple(logprobs[first:at]))
    if dealt and at < len(logprobs):
        dealt[-1] += tuple(logprobs[at:])
    return dealt


@functools.lru_cache(maxsize=4096)  # a household's names come again in every request
def plain(text: str) -> str:
    """`text`'s words alone, casefolded, as a name or a word is compared ("Niamh’s office." is "niamh's office")."""
    return " ".join(_NOT_A_WORD.sub(" ", text.casefold().replace("\u2019", "'")).split())


def _said_again(word: Word, words: set[str] | None) -> bool:
    """Whether the part's `words` hold `word` (None: the part is in the text's language, and holds it)."""
    return words is None or set(plain(word.word).split()) <= words


def _said_inside(word: Word, first: float, last: float) -> bool:
    return first <= (word.start + word.end) / 2 < last and word.end - word.start < (last - first) / 2


def joined(piece: Piece, parts: list[tuple[Piece, Decoded]]) -> Decoded:
    """The piece's result made of its parts' (each decoded on its own), in the language of the first with text."""
    out = [
        segment.shifted((start - piece[0]) / WHISPER_RATE)
        for (start, end), result in parts
        for segment in segments(result, (end - start) / WHISPER_RATE)
    ]
    language = next((result.language for _, result in parts if result.text), parts[0][1].language)
    unsettled = any(result.unsettled for _, result in parts)
    return Decoded(" ".join(segment.text for segment in out), language, out, unsettled=unsettled)


def transcript(pieces: list[Piece], decoded: list[Decoded], samples: int, options: Options) -> Transcript:
    """The whole request's transcript; word times only if the request asked for them."""
    out = [
        segment.shifted(start / WHISPER_RATE)
        for (start, end), result in zip(pieces, decoded, strict=True)
        for segment in segments(result, (end - start) / WHISPER_RATE)
    ]
    if not options.words:  # words aligned only to find speech left out
        out = [replace(segment, words=()) for segment in out]
    language = next((result.language for result in decoded if result.text), options.language)
    return Transcript(" ".join(segment.text for segment in out), language, samples / WHISPER_RATE, out)
