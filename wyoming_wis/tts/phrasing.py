"""Written text into phrases a voice says one at a time, at a cost that does not grow with a sentence's length.

Text is cut into sentences as it arrives, and a sentence longer than MAX_PHRASE_CHARS into phrases:
after a clause (, ; : or a dash), else between words, else, for one over-long "word" (4,096 digits),
anywhere. The first clause of the first sentence goes on its own, as soon as it is written, because a
listener waits for the first sound. A phrase that does not end its sentence is spoken without the
pause after a sentence, so the listener hears one sentence.

Every step scans a character a bounded number of times: what is kept of a sentence still being written
is at most MAX_PHRASE_CHARS, and rescanning it as more arrives costs at most that per write. No pattern
backtracks over a run (of digits, dots, spaces, asterisks): the work runs in worker threads, but a
regular expression holds the GIL, so a slow one would stall every other client all the same.
sentence-stream's detector, used before, rescanned its whole buffer on every chunk and backtracked over
runs of dots and asterisks: 4,000 dots written a character at a time took it 1.9 s, and it grew as n².
Its rules are kept: a sentence ends at . ! ? followed by a space and a capital (or a numbered list
item), at a Chinese full stop or an ellipsis, or at a blank line; not after what looks like an
abbreviation ("Dr."); *emphasis* loses its asterisks.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import TypeVar

from ..errors import BadRequest
from .normalize import normalize

# Characters; also the bound on the text of one phrase for every engine. Piper's own cost grows with
# phonemes, which text can multiply ("9,999,999" is 78 of them), so it bounds those too (piper.MAX_PHONEMES);
# 300 characters of English are about 350 phonemes, so ordinary text is cut here, where the words are.
MAX_PHRASE_CHARS = 300
Units = TypeVar("Units", str, list[str])  # what split() cuts: text, or Piper's phonemes
CLAUSE_MARKS = frozenset(",;:\u2013\u2014")  # and a hyphen between spaces
_ZH_ENDS = "\u3002\uff01\uff1f"
# Each alternative starts where the one before could not, and nothing after a run is required, so a run is
# matched once, whole: a sentence end's mark and closing quotes, a Chinese one, or a blank line.
_ENDS = re.compile(
    r"[.!?\u2026\u061f\u0964\u0965]+[\"')\]}\u2019\u201d\u00bb]*"
    rf"|[{_ZH_ENDS}]+[\u201d\u2019\u300d\u300f\uff09\u300b\u3011\u3015\u3009]*"
    r"|(?:\r?\n){2,}"
)
_SPACES = re.compile(r"\s*")
_LIST_ITEM = re.compile(r"\d+([.)]{0,2})(\s?)")  # "2. " or "3) " after a sentence: the next item
# A clause of at least 4 words ending in , ; : or a dash, followed by more text (each word is matched once:
# giving back characters of \S+ or \s+ fails at once, so the lazy repetition stays linear).
_FIRST_CLAUSE = re.compile(r"^\s*((?:\S+\s+){3,}?\S*[,;:\u2013\u2014])\s+(?=\S)")
_SENTENCE_END = re.compile(rf"[.!?](?:\s|$)|[{_ZH_ENDS}]|(?:\r?\n){{2}}")
SAYABLE = re.compile(r"[^\W_]")  # a letter or digit, in any script
# Markdown emphasis, as sentence-stream removes it; the lookbehind starts a match only at a run's first
# asterisk, and [^*]+ stops at the next one, so a run of asterisks is not rescanned from each of its stars.
_EMPHASIS = re.compile(r"(?<!\*)\*+([^*]+)\*+")
_LINE_STARS = re.compile(r"^[ \t]*\*+", re.MULTILINE)
# Other C0 controls (and DEL) are layout at best: a space. NUL is refused before this (refuse_unspeakable).
_CONTROLS = {code: " " for code in [*range(32), 127] if chr(code) not in "\t\n\r"}


@dataclass(frozen=True)
class Phrase:
    text: str
    ends_sentence: bool = True  # the pause after a sentence (sentence_silence) follows it


def refuse_unspeakable(text: str) -> None:
    """NUL and lone surrogates (which JSON can carry, as "\\ud800") are not text: refuse them, naming them.

    Cheap enough for the event loop: two scans in C, no pattern.
    """
    if "\x00" in text:
        raise BadRequest(f"The text has a NUL character (at {text.index(chr(0))}); send text without it")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise BadRequest(
            f"The text has a lone surrogate, U+{ord(text[err.start]):04X} (at {err.start}), which is not a"
            " character; send UTF-8 text"
        ) from None


def split(units: Units, limit: int) -> list[Units]:
    """`units` (text, or Piper's phonemes) in pieces of at most `limit`, which join into it again.

    A piece ends after a clause (a mark, then space) in its second half, else after its last space, else,
    for a word longer than `limit`, at the limit. Each cut scans at most `limit` units.
    """
    ends, start = [0], 0
    while len(units) - start > limit:
        start = _cut(units, start, start + limit)
        ends.append(start)
    return [units[start:end] for start, end in pairwise([*ends, len(units)])]


def _cut(units: Sequence[str], start: int, stop: int) -> int:
    half, word = start + (stop - start + 1) // 2, None
    for at in range(stop, start, -1):  # a cut before units[at], at the end of a run of spaces
        if word is not None and at < half:
            break  # no clause in the second half: the last space it is
        if not units[at - 1].isspace() or (at < len(units) and units[at].isspace()):
            continue
        before = at - 1
        while before > start and units[before - 1].isspace():
            before -= 1
        if before == start:
            continue  # only spaces before it
        if at >= half and _ends_clause(units, before - 1):
            return at
        word = word or at
    return word or stop


def _ends_clause(units: Sequence[str], at: int) -> bool:
    return units[at] in CLAUSE_MARKS or (units[at] == "-" and at > 0 and units[at - 1].isspace())


class Phrasing:
    """One stream's text into phrases, a batch of written text at a time, in order (not thread-safe).

    `language` is the one normalize() reads the text for.
    """

    def __init__(self, language: str) -> None:
        self.language = language
        self._rest = ""  # text written after the last phrase out: at most MAX_PHRASE_CHARS between batches
        self._scanned = 0  # how much of it is known to hold no sentence end (less a mark's length)
        self._first = True  # whether the first clause may still go on its own

    def add(self, text: str, final: bool = False) -> list[Phrase]:
        """The phrases that `text`, written after what came before, completes; `final` ends the text."""
        text = self._rest + text.translate(_CONTROLS)
        phrases: list[Phrase] = []
        start = scanned = self._first_clause(text, phrases) if self._first else 0
        if not self._first or final:
            start, scanned = self._sentences(text, start, max(start, self._scanned), phrases, final=final)
        rest = text[start:]
        if final:
            phrases += self._say(rest, ends_sentence=True)
            rest = ""
        elif len(rest) > MAX_PHRASE_CHARS:  # a sentence still being written is already long: say its start
            cut = len(rest) - len(split(rest, MAX_PHRASE_CHARS)[-1])
            phrases += self._say(rest[:cut], ends_sentence=False)
            rest, start = rest[cut:], start + cut
        self._first = self._first and not phrases
        self._rest, self._scanned = rest, max(0, scanned - start)
        return phrases

    def _first_clause(self, text: str, phrases: list[Phrase]) -> int:
        """Say the first clause on its own once it is written; returns where the text after it starts."""
        head = text[:MAX_PHRASE_CHARS]  # a longer first clause is cut for its length anyway
        clause, end = _FIRST_CLAUSE.match(head), _SENTENCE_END.search(head)
        if end is not None and (clause is None or end.start() < clause.end(1)):
            self._first = False  # a short first sentence: sentences as usual
            return 0
        if clause is None:
            return 0
        self._first = False
        phrases += self._say(clause[1], ends_sentence=False)
        return clause.end()

    def _sentences(self, text: str, start: int, scan: int, phrases: list[Phrase], *, final: bool) -> tuple[int, int]:
        """Say each complete sentence of text[start:], looking for their ends from `scan` on.

        Returns where the unfinished rest starts, and where to look on once more is written: at a mark that
        the text after it must decide, else just before the end (a blank line may be half written).
        """
        for match in _ENDS.finditer(text, scan):
            ends = _ends_sentence(text, match, final)
            if ends is None:
                return start, match.start()
            if ends:
                phrases += self._say(text[start : match.end()], ends_sentence=True)
                start = match.end()
        return start, max(start, len(text) - 2)

    def _say(self, text: str, ends_sentence: bool) -> list[Phrase]:
        """A sentence (or its start) as phrases: a line each (a list, an address), cut to MAX_PHRASE_CHARS,
        without those with nothing to say (only spaces, punctuation or emoji)."""
        lines = _LINE_STARS.sub("", _EMPHASIS.sub(r"\1", text)).splitlines()
        phrases = []
        for number, line in enumerate(lines, 1):
            if not SAYABLE.search(line):
                continue
            spoken = normalize(line.strip(), self.language)
            pieces = [piece.strip() for piece in split(spoken, MAX_PHRASE_CHARS) if SAYABLE.search(piece)]
            phrases += [Phrase(piece, ends_sentence=False) for piece in pieces[:-1]]
            phrases += [Phrase(piece, ends_sentence or number < len(lines)) for piece in pieces[-1:]]
        return phrases


def _ends_sentence(text: str, match: re.Match[str], final: bool) -> bool | None:
    """Whether a sentence ends with `match` (a mark or a blank line); None if the text after it must tell."""
    mark, end = match[0], match.end()
    if mark[0] in "\r\n":
        return True
    after = _SPACES.match(text, end).end()
    if after == len(text):
        return True if final else None  # at the end of the text: what comes next decides
    if mark[0] in _ZH_ENDS or "\u2026" in mark:
        return True  # after an ellipsis too, whatever follows
    if after == end or (mark == "." and _abbreviation(text, match.start())):
        return False  # 3.5, e.g.x, Dr. Smith
    follows = text[after]
    if follows.isalpha():
        return not follows.islower()  # a capital, or a letter of a script without case
    item = _LIST_ITEM.match(text, after)
    if item is None:
        return False
    if item.end() == len(text) and not final:
        return None
    return bool(item[1] and item[2])


def _abbreviation(text: str, dot: int) -> bool:
    """A word of one to three letters, the first a capital, before the full stop at `dot` (Dr. U. Mrs.)."""
    start = dot
    while start > max(0, dot - 4) and text[start - 1].isalpha():
        start -= 1
    word = text[start:dot]
    return 1 <= len(word) <= 3 and word[0].isupper() and (start == 0 or not (text[start - 1].isalnum()))
