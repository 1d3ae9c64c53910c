"""Whether the words so far are a whole command this household's Home Assistant understands, or stop short of one.

Home Assistant's own matcher (`hassil`) with its own sentences (`home-assistant-intents`), and the household's
areas, floors and names as its slot lists, as Home Assistant's default agent builds them (with an area for the
satellite, as a satellite in an area gives it: "turn up the volume" is whole there). A turn whose judged text is a
`COMMAND` may end at once; one that is a `PREFIX` is not over until the long silence: a sentence stops before a
slot it needs ("set a timer for"), or stops inside a name where its sentence has one ("turn on the living room"
where "Living Room Lamp" is a name; "turn on the kitchen lights" too, whole as it is, where "Kitchen Lights Strip"
is one). A name's first words elsewhere ("close the blinds in the office" beside "Office Blinds": an area there)
do not count. `UNKNOWN` says nothing either way, and the sound decides.

A `Commands` is built once per language and reading of the names (with 426 names 0.55 s in English, 1.75 s in
German, with its first judgement) and judges a text in 3-20 ms, holding the GIL; `Sentences` keeps one per
language for the household of the moment, builds and judges in its one thread, and never makes a turn wait for a
build: until its language is built a turn is judged on its sound alone.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from hassil import Intents, RecognizeResult, TextSlotList, normalize_text, recognize_best
from home_assistant_intents import get_intents

from ..household import Household
from ..values import quote

_LOGGER = logging.getLogger(__name__)
_PREFIX_INTENT = "_prefix"  # the one intent of the sentences' prefixes
# The slot lists of names' and places' first words (not all), for the sentences cut inside a name or a place
_BEGUN = {"name": "begun_name", "area": "begun_place", "floor": "begun_place"}
_SATELLITE = {"area": {"value": "here", "text": "here"}}  # the satellite's area, as Home Assistant's context
_OPENERS, _CLOSERS = "([{<", ")]}>"
MAX_RULE_DEPTH = 4  # rules within rules written out (`_written_out`)
MAX_VARIANTS = 64  # of one sentence, written out
_PUNCTUATION = re.compile(r"[^\w\s']")


class Verdict(enum.Enum):
    COMMAND = "command"  # a whole command: the turn may end now
    PREFIX = "prefix"  # words that stop short of a name or a sentence: not an end before the long silence
    UNKNOWN = "unknown"  # neither: the sound decides


@dataclass(frozen=True)
class Judged:
    verdict: Verdict
    intent: str | None = None  # the command's (COMMAND only)


class Commands:
    """Home Assistant's sentences in one language, with a household's names (none: the generic intents only:
    timers, the time, the weather)."""

    def __init__(self, language: str, household: Household | None = None) -> None:
        """Raises LookupError where Home Assistant has no sentences in `language`."""
        data = get_intents(language)
        if data is None:
            raise LookupError(f"Home Assistant has no sentences in {quote(language)}")
        self.language = language
        self._intents = Intents.from_dict(data)
        self._prefixes = Intents.from_dict(_prefix_sentences(data, _cuts))
        household = household or Household()
        places = [*household.places_in_use, *household.other_places]
        names = [*household.named_entities, *household.other_entities]
        begun_places, begun_names = _first_words(places), _first_words(names)
        self._begun = (
            Intents.from_dict(_prefix_sentences(data, _cuts_in_a_name)) if begun_places or begun_names else None
        )
        self._lists = {
            "area": TextSlotList.from_strings(places),
            "floor": TextSlotList.from_strings(places),
            "name": TextSlotList.from_tuples(
                [
                    (name, name, {"domain": domain} if (domain := household.domain_of.get(name)) else None)
                    for name in names
                ]
            ),
            _BEGUN["name"]: TextSlotList.from_strings(begun_names),
            _BEGUN["area"]: TextSlotList.from_strings(begun_places),
        }

    def warm(self) -> None:
        """Judge once, so that the first turn does not pay for what hassil builds on its first use (0.2-1.3 s, in
        any language: the words need not be its own)."""
        self.judge("turn on the")

    def judge(self, text: str) -> Judged:
        """The verdict on a turn's text so far (see the module's docstring)."""
        words = _words(text)
        if not words:
            return Judged(Verdict.UNKNOWN)
        spoken = " ".join(words)
        if self._begun is not None and self._recognize(spoken, self._begun) is not None:
            return Judged(Verdict.PREFIX)  # (whole or not: "turn on the kitchen lights" + "strip")
        result = self._recognize(spoken, self._intents)
        if result is not None and not any(
            entity.is_wildcard and _words(entity.text)[-1:] == words[-1:] for entity in result.entities_list
        ):  # (not where it ends in a wildcard, "play {search_query}": that takes any more words)
            return Judged(Verdict.COMMAND, result.intent.name)
        return Judged(Verdict.PREFIX if self._recognize(spoken, self._prefixes) is not None else Verdict.UNKNOWN)

    def _recognize(self, spoken: str, sentences: Intents) -> RecognizeResult | None:
        return recognize_best(spoken, sentences, slot_lists=self._lists, intent_context=_SATELLITE)


class Sentences:
    """Each language's `Commands` for the household of the moment (see the module's docstring)."""

    def __init__(self) -> None:
        self._household = Household()
        self._built: dict[str, Commands | None] = {}  # None: Home Assistant has no sentences in that language
        self._building: dict[str, Future[Commands | None]] = {}
        self._lock = threading.Lock()
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="sentences")

    def prepare(self, language: str) -> None:
        """Build `language`'s sentences in the thread, if they are not built or being built."""
        with self._lock:
            if language not in self._built and language not in self._building:
                self._building[language] = self._thread.submit(self._build, language, self._household)

    def set_household(self, household: Household) -> None:
        """A new reading of the names: every language built so far, or being built, is built again with them,
        judged meanwhile with the names before. (The first reading comes while the language the server was started
        with is being built, with no names: that build must not be the last.)"""
        with self._lock:
            self._household = household
            languages = list(dict.fromkeys([*self._built, *self._building]))
        for language in languages:
            self._thread.submit(self._build, language, household)

    async def judge(self, text: str, language: str | None) -> bool | None:
        """Whether a turn's words are a whole command (True), stop short of a name or a sentence (False), or
        neither (None), as `Commands.judge` says; None too where `language`'s sentences are not built yet (they are
        then built) or do not exist."""
        commands = None if language is None else self._built.get(language)
        if commands is None:
            if language is not None:
                self.prepare(language)
            return None
        verdict = (await asyncio.wrap_future(self._thread.submit(commands.judge, text))).verdict
        return {Verdict.COMMAND: True, Verdict.PREFIX: False}.get(verdict)

    def close(self) -> None:
        self._thread.shutdown(wait=False, cancel_futures=True)

    def _build(self, language: str, household: Household) -> Commands | None:
        """In the thread: `language`'s sentences with `household`'s names, judged once (`warm`)."""
        try:
            commands: Commands | None = Commands(language, household)
        except LookupError:
            commands = None
        except Exception:
            _LOGGER.exception("Could not build Home Assistant's sentences in %s", quote(language))
            commands = None
        if commands is not None:
            commands.warm()
        with self._lock:
            if household is self._household or language not in self._built:
                self._built[language] = commands
            self._building.pop(language, None)
        return commands


def _first_words(names: list[str]) -> list[str]:
    """Each name's first words, not all of them: "living", "living room" of "Living Room Lamp"."""
    return sorted({" ".join(words[:size]) for words in map(_words, names) for size in range(1, len(words))})


def _words(text: str) -> list[str]:
    return _PUNCTUATION.sub(" ", normalize_text(text).casefold()).split()


def _prefix_sentences(data: dict[str, Any], cuts: Callable[[str, set[str]], Iterator[str]]) -> dict[str, Any]:
    """The language's intents file, its sentences replaced by their unfinished beginnings (`cuts`: `_cuts` or
    `_cuts_in_a_name`), under one intent."""
    lists = data.get("lists", {})
    wildcards = {name for name, values in lists.items() if isinstance(values, dict) and values.get("wildcard")}
    rules = data.get("expansion_rules", {})
    prefixes: set[str] = set()
    for intent in data["intents"].values():
        for block in intent["data"]:
            for sentence in block["sentences"]:
                prefixes.update(cut for each in _written_out(sentence, rules) for cut in cuts(each, wildcards))
    return {
        "language": data["language"],
        "intents": {_PREFIX_INTENT: {"data": [{"sentences": sorted(prefixes)}]}},
        "lists": lists,
        "expansion_rules": data.get("expansion_rules", {}),
        "skip_words": data.get("skip_words", []),
    }


def _cuts(template: str, wildcards: set[str]) -> Iterator[str]:
    """Where the template stops short of a slot it needs: cut at the top level before a list ("set a timer for"
    before its duration, "turn on [the]" before a name), where the last word said before it is not itself a slot
    ("play some music" may be the whole command: it is not cut before "in {area}"). Within a group it is not cut:
    such a pause is left to the sound. A cut that holds a wildcard (a message, a search) would match anything."""
    parts = list(_top_level(template))
    for end in range(1, len(parts)):
        if not parts[end].startswith("{"):
            continue
        said = [part for part in parts[:end] if not part.startswith("[")]  # (optional parts may be left unsaid)
        cut = " ".join(parts[:end])
        if said and not said[-1].startswith("{") and not _holds_a_wildcard(cut, wildcards):
            yield cut


def _cuts_in_a_name(template: str, wildcards: set[str]) -> Iterator[str]:
    """Where the template stops inside a name, an area or a floor at its top level: the words before it, then a
    name's or a place's first words ("turn on [the] {begun_name}")."""
    parts = list(_top_level(template))
    for end, part in enumerate(parts):
        slot = part[1:-1].split(":")[0] if part.startswith("{") and part.endswith("}") else None
        if slot in _BEGUN:
            cut = " ".join([*parts[:end], f"{{{_BEGUN[slot]}}}"])
            if not _holds_a_wildcard(cut, wildcards):
                yield cut


def _holds_a_wildcard(cut: str, wildcards: set[str]) -> bool:
    return any(f"{{{name}" in cut for name in wildcards)


def _written_out(template: str, rules: Mapping[str, str], depth: int = 0) -> Iterator[str]:
    """The template with each rule that stands alone at its top level written out, once for each of its top-level
    alternatives (`<name>`: `[the] {name}`; `<area>`: `in {area}`, `im {area}`, ...), so that a cut may fall inside
    it; at most MAX_VARIANTS of them."""
    variants = [""]
    for part in _top_level(template):
        rule = rules.get(part[1:-1]) if part.startswith("<") and part.endswith(">") else None
        if rule is None or depth >= MAX_RULE_DEPTH:
            choices = [part]
        else:
            choices = [each for choice in _split(rule, "|") for each in _written_out(choice, rules, depth + 1)]
        variants = [f"{before} {choice}".strip() for before in variants for choice in choices][:MAX_VARIANTS]
    yield from variants


def _split(template: str, separator: str) -> Iterator[str]:
    """The template cut at each `separator` outside every group."""
    depth, start = 0, 0
    for at, char in enumerate(template):
        depth += (char in _OPENERS) - (char in _CLOSERS)
        if char == separator and depth == 0:
            yield template[start:at].strip()
            start = at + 1
    yield template[start:].strip()


def _top_level(template: str) -> Iterator[str]:
    """The template's parts: split at its spaces outside every group, and before a list that follows a group
    with no space (`[<the> ]{name}`)."""
    depth, start = 0, 0
    for at, char in enumerate(template):
        if char == "{" and depth == 0 and at > start:
            yield template[start:at]
            start = at
        if char in _OPENERS:
            depth += 1
        elif char in _CLOSERS:
            depth = max(0, depth - 1)
        elif char == " " and depth == 0:
            if at > start:
                yield template[start:at]
            start = at + 1
    if start < len(template):
        yield template[start:]
