"""Whisper through faster-whisper / CTranslate2, one engine per loaded model.

An engine turns audio into a transcript in four steps: the VAD finds the
pieces worth decoding (`vad.py`), the batcher queues them so that concurrent
requests share CTranslate2 calls (`batcher.py`), the decoder runs each piece
in a window that fits it (`decoder.py`), and the pieces' texts become one
transcript, with any speech a text left out decoded again (`assemble.py`).
Sessions (`session.py`) call the same steps on audio that is still arriving.
"""

from __future__ import annotations

import asyncio
import difflib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
from faster_whisper import WhisperModel
from faster_whisper.tokenizer import _LANGUAGE_CODES

from .. import memory, shares
from ..audio import WHISPER_RATE
from ..catalog import Found
from ..errors import BadRequest, UnsupportedLanguage
from ..languages import OLDER_CODES, whisper_code
from ..requests import AsrRequest
from ..runtime import Placement
from ..served import WHISPER, Calls, Entry
from ..values import quote
from . import assemble
from .assemble import Transcript, plain
from .batcher import Batcher, Slot
from .decoder import Decoded, Decoder, Fitted, Job, Options, Prompt
from .vad import Piece, SpeechDetector

_LOGGER = logging.getLogger(__name__)
AUTO = "auto"  # as a language: detect it
# What a request may name as its language, besides other spellings of these (en-US, EN): every language a
# multilingual Whisper knows (an English-only one knows en alone), and auto.
WHISPER_LANGUAGES = (AUTO, *_LANGUAGE_CODES)
MAX_PROMPT_CHARS = 8192  # a request's own prompt; Whisper reads only its last 200 tokens (about 800 characters)
MAX_WORDS = 1024  # names or terms in one request (Home Assistant sends its devices and areas)
MAX_WORD_CHARS = 256  # in one name or term
# Fixed costs, as seconds of audio, for the schedulers' estimates: without them a stream's many 0.1 s steps
# would make a second of audio look many times dearer than it is.
PIECE_COST = 1.0  # to decode a piece (its window, the prompt, the first tokens)
SCORE_COST = 1.0  # to score new audio for speech (a thread hop, the VAD's state)
SCORE_STEP = 30 * WHISPER_RATE  # samples scored in one call at most: 0.13 s of a worker on 2 cores (10 min: 2.5 s)
MIXED = 0.95  # a piece's language detected less surely than this: it may hold two, and is decoded by stretch
# A stretch that a piece's text left out, decoded on its own less likely than this, stays out: base reads espeak-ng's
# German as Thai or Japanese at -0.69 to -0.98 (most below -0.8), and reads it right at -0.34 to -0.75.
FILLED_MIN_LOGPROB = -0.8
DEFAULTS = AsrRequest()  # a request that asks for nothing of its own
NEAR_NAME = 0.8  # letters alike (difflib's ratio) of a name written nearly ("Kvarnas heater" for "Kvernhus heater")
NEAR_NAME_CHARS = 7  # a shorter name is written right or not at all: "sauna" is not nearly "Saunas"
PROMPT_CACHE = 64  # tokenised prompts kept: the server's own, and the few that each client repeats


@dataclass(frozen=True)
class Bias:
    """What the server always steers Whisper toward; requests add their own text, names and terms."""

    initial_prompt: str | None = None
    hotwords: tuple[str, ...] = ()

    def prompt(
        self,
        names: Sequence[str] = (),
        terms: Sequence[str] = (),
        text: str | None = None,
        household: Sequence[str] = (),
    ) -> Prompt:
        """The prompt: the initial prompt and the request's own text; then the request's terms, --hotwords, the
        request's names and the household's (Home Assistant's, best first), each once whatever its case.

        Of the words, what a request or the flags name comes first: those are the surest (`Prompt` says how the
        budget is shared).
        """
        _check_bias(names, terms, text)
        words: dict[str, str] = {}
        for word in (*terms, *self.hotwords, *names, *household):
            word = " ".join(word.split())
            if word:
                words.setdefault(word.casefold(), word)
        parts = [part.strip() for part in (self.initial_prompt, text) if part and part.strip()]
        return Prompt(" ".join(parts), tuple(words.values()))


class WhisperEngine:
    """One Whisper model; decoding runs in its scheduler's threads."""

    def __init__(
        self,
        found: Found,
        placement: Placement,
        *,
        beam_size: int,
        max_batch: int,
        default_language: str | None,
        task: str = "transcribe",
        bias: Bias | None = None,
    ) -> None:
        self.name = found.name
        self.found = found
        self.task = task
        self.bias = bias or Bias()
        _LOGGER.info("Loading Whisper %s from %s (%s)", found.name, found.path, found.source)
        runtime = placement.runtime
        self.model = WhisperModel(
            str(found.path),
            device=runtime.device,
            device_index=runtime.device_index,
            compute_type=runtime.compute_type,
            cpu_threads=placement.worker_threads,  # each of its CTranslate2 replicas, one per worker
            num_workers=placement.workers,
        )
        self.decoder = Decoder(self.model, beam_size, found.name)
        self.multilingual = self.decoder.multilingual
        self.languages = _languages(self.model)
        self.default_language: str | None = None
        if default_language:
            try:
                self.default_language = self.language(default_language)
            except UnsupportedLanguage:
                _LOGGER.warning(
                    "Whisper %s does not support --language %s; it will detect", self.name, default_language
                )
        self.scheduler = placement.scheduler(WHISPER, found.name)
        # Scoring speech costs up to a second per 10 minutes of audio: in threads of its own (one per core), behind a
        # bounded queue, so that many long streams wait for it (or are refused) without delaying anything else.
        self.vad = replace(placement, workers=runtime.cpu_threads).scheduler("vad", found.name)
        self.batcher = Batcher(self._decode, max_batch)
        self._prompts: OrderedDict[Prompt, Fitted] = OrderedDict()  # least recently used first
        # Loaded or not: decoding holds `_active`; unloading needs it at zero.
        self._load_lock = threading.Lock()
        self._active = 0
        self._last_used = time.monotonic()

    def language(self, requested: str | None) -> str | None:
        """A request's language as Whisper names it; None means detect.

        Accepts any spelling of a tag (`en`, `en-US`, `EN_us`, `zh-Hans`) and `auto`; an English-only
        model needs no detection.
        """
        if not requested or requested.lower() == AUTO:
            return self.default_language or (None if self.multilingual else "en")
        code = whisper_code(requested)
        if code not in self.languages and OLDER_CODES.get(code) in self.languages:
            code = OLDER_CODES[code]
        if code not in self.languages:
            raise UnsupportedLanguage(
                f"Model {self.name!r} does not support language {quote(requested)}"
                + ("" if self.multilingual else " (it is English-only)")
            )
        return code

    def options(self, request: AsrRequest = DEFAULTS, household: Sequence[str] = ()) -> Options:
        """How to decode a request, with the server's bias, the request's own names, terms and prompt, and the
        `household`'s names (from Home Assistant, best first).

        `detect_language` detects the language even where --language names one, unless `language` is given.
        """
        task = request.task or self.task
        if task == "translate" and not self.multilingual:
            task = "transcribe"  # an English-only model has nothing to translate
        prompt = self.bias.prompt(request.names, request.terms, request.prompt, household)
        detect = request.detect_language and self.multilingual and not request.language
        code = None if detect else self.language(request.language)
        beam_size = request.beam_size or self.decoder.beam_size
        return Options(
            code,
            task,
            prompt,
            words=request.words,
            temperature=request.temperature,
            beam_size=beam_size,
            logprobs=request.logprobs,
        )

    @property
    def idle(self) -> bool:
        """No request is running or waiting: spare time for work ahead of need."""
        return self.scheduler.pending == 0

    async def transcribe(self, audio: np.ndarray, options: Options) -> Transcript:
        """Transcribe 16 kHz mono float32 audio of any length."""
        detector = SpeechDetector()
        await self.score(detector, audio)
        return await self.transcribe_pieces(audio, detector, detector.pieces(len(audio)), options=options)

    async def score(self, detector: SpeechDetector, audio: np.ndarray) -> None:
        """Score the speech in `audio` that `detector` has not seen yet, in the VAD's threads, SCORE_STEP at a
        time: a call cannot be interrupted, and between two of a long upload's, Home Assistant's go first."""
        while True:
            end = min(len(audio), detector.scored + SCORE_STEP)
            cost = (end - detector.scored) / WHISPER_RATE + SCORE_COST
            await self.vad.run(detector.update, audio[:end], cost=cost)
            if end == len(audio):
                return

    async def transcribe_pieces(
        self,
        audio: np.ndarray,
        detector: SpeechDetector,
        pieces: list[Piece],
        *,
        options: Options,
        known: dict[Piece, Decoded] | None = None,
    ) -> Transcript:
        """Decode the pieces of `audio` (as `detector` found them) not in `known`, and add them to it.

        The rest of the audio is silence. No speech is left out: a piece whose language was not surely one is
        decoded stretch by stretch, a stretch that a piece's text leaves out is decoded again on its own, and
        audio in which the detector heard no speech at all is decoded whole for a transcript (not for a draft or a
        pause's judgement), where Whisper's own no-speech probability says whether it holds any (digital silence,
        every sample zero, excepted).
        """
        known = {} if known is None else known
        if not pieces and options.final and audio.any():  # the detector heard nothing: let Whisper say so
            pieces = detector.everything(len(audio))
        todo = [piece for piece in pieces if piece not in known]
        if todo:
            checked = not options.draft  # a draft is only a preview: no second look at it
            every = detector.pieces(len(audio), joined=False) if checked else []
            stretches = {piece: assemble.inside(piece, every) for piece in todo}
            aligned = [checked and len(stretches[piece]) > 1 for piece in todo]
            decoded = dict(zip(todo, await self._decode_pieces(audio, todo, options, aligned), strict=True))
            auto = checked and not options.language
            mixed = [piece for piece in todo if auto and decoded[piece].language_probability < MIXED]
            decoded.update(await self._apart(audio, {piece: stretches[piece] for piece in mixed}, options))
            gaps = {
                piece: assemble.unheard(piece, stretches[piece], decoded[piece])
                for piece, align in zip(todo, aligned, strict=True)
                if align and piece not in mixed and decoded[piece].text  # no text: Whisper heard no speech
            }
            decoded.update(await self._fill(audio, gaps, decoded, options))
            known.update(decoded)
        return assemble.transcript(pieces, [known[piece] for piece in pieces], len(audio), options)

    async def _decode_pieces(
        self, audio: np.ndarray, pieces: list[Piece], options: Options, aligned: Sequence[bool] = ()
    ) -> list[Decoded]:
        """Decode pieces of `audio` in the model's batches; `aligned` says which need their words timed.

        Names in the prompt change other words too (50 household names turned a read "as" into "has", and German
        speech into "Nuukfjord lamp, Nuukfjord lamp"), so they only ever add themselves: a text (not a draft's)
        in which `names_heard` finds no name written as speech is decoded again without them, and speech that
        holds no name reads as it would with none.
        """
        aligned = aligned or [False] * len(pieces)
        decoded = await self._decode_batched(audio, pieces, options, aligned)
        fitted = (await self._prompt_tokens(options.prompt)).words
        again = []
        if fitted and not options.draft:  # (in a thread: the check grows with the names)
            heard = await asyncio.to_thread(lambda: [names_heard(d.text, fitted, self.decoder.rare) for d in decoded])
            again = [index for index, named in enumerate(heard) if not named]
        if again:
            plain = replace(options, prompt=Prompt(options.prompt.text))
            redone = await self._decode_batched(audio, [pieces[i] for i in again], plain, [aligned[i] for i in again])
            for index, text in zip(again, redone, strict=True):
                decoded[index] = text
        return decoded

    async def _decode_batched(
        self, audio: np.ndarray, pieces: list[Piece], options: Options, aligned: Sequence[bool]
    ) -> list[Decoded]:
        prompt = (await self._prompt_tokens(options.prompt)).tokens
        household = shares.trusted(shares.current())
        jobs = [
            Job(audio[start:end], options, prompt, align=options.words or align, household=household)
            for (start, end), align in zip(pieces, aligned, strict=True)
        ]
        slots = self.batcher.submit(jobs)
        try:
            await self.scheduler.run(self.batcher.process, slots, cost=lambda: _left(slots))
            return list(await asyncio.gather(*(asyncio.wrap_future(slot.decoded) for slot in slots)))
        except BaseException:
            self.batcher.cancel(slots)
            raise

    async def _apart(
        self, audio: np.ndarray, stretches: dict[Piece, list[Piece]], options: Options
    ) -> dict[Piece, Decoded]:
        """Decode each stretch of speech of the pieces in `stretches` on its own, each in the language detected
        for it.

        A piece joined across pauses whose language was detected without much certainty may be two languages,
        and decoded in one, the other's words are lost (Whisper leaves them out rather than translate them).
        """
        stretches = {piece: found for piece, found in stretches.items() if len(found) > 1}
        every = [stretch for found in stretches.values() for stretch in found]
        if not every:
            return {}
        decoded = dict(zip(every, await self._decode_pieces(audio, every, options), strict=True))
        return {
            piece: assemble.joined(piece, [(part, decoded[part]) for part in found])
            for piece, found in stretches.items()
        }

    async def _fill(
        self, audio: np.ndarray, gaps: dict[Piece, list[Piece]], decoded: dict[Piece, Decoded], options: Options
    ) -> dict[Piece, Decoded]:
        """Decode the stretches that the pieces' texts left out on their own, and put their text in place.

        Each stretch's language is detected: with a language given, one in another language stays out, as
        Whisper left it (the request asked for that language only), and one in that language goes in. A text
        less likely than FILLED_MIN_LOGPROB stays out too: Whisper on a few seconds of a language it knows
        little writes another's script at random, and left out, the words are only missing.
        """
        gaps = {piece: found for piece, found in gaps.items() if found}
        every = [gap for found in gaps.values() for gap in found]
        if not every:
            return {}
        decoded_apart = await self._decode_pieces(audio, every, replace(options, language=None))
        wanted = options.language
        kept = {
            gap: part
            for gap, part in zip(every, decoded_apart, strict=True)
            if wanted in (None, part.language) and part.mean_logprob >= FILLED_MIN_LOGPROB
        }
        _LOGGER.debug("Decoded %d stretches of speech that the text left out; %d kept", len(every), len(kept))
        filled = {piece: [(gap, kept[gap]) for gap in found if gap in kept] for piece, found in gaps.items()}
        return {piece: assemble.filled(piece, decoded[piece], parts) for piece, parts in filled.items() if parts}

    async def _prompt_tokens(self, prompt: Prompt) -> Fitted:
        """The prompt's tokens, tokenised in a worker thread the first time, kept for the next PROMPT_CACHE."""
        tokens = self._prompts.get(prompt)
        if tokens is None:
            tokens = await asyncio.to_thread(self.decoder.prompt_tokens, prompt)
            self._prompts[prompt] = tokens
            while len(self._prompts) > PROMPT_CACHE:
                self._prompts.popitem(last=False)
        self._prompts.move_to_end(prompt)
        return tokens

    def _decode(self, jobs: list[Job]) -> list[Decoded]:
        with self._load_lock:
            if not self.model.model.model_is_loaded:
                started = time.monotonic()
                self.model.model.load_model()
                _LOGGER.info("Reloaded Whisper %s in %.1f s", self.name, time.monotonic() - started)
            self._active += 1
        try:
            return self.decoder.decode(jobs)
        finally:
            with self._load_lock:
                self._active -= 1
                self._last_used = time.monotonic()

    def unload_if_idle(self, idle_seconds: float) -> bool:
        """Free the model's memory if unused for `idle_seconds`; blocking. The next request reloads it."""
        with self._load_lock:
            if (
                self._active
                or not self.idle
                or not self.model.model.model_is_loaded
                or time.monotonic() - self._last_used < idle_seconds
            ):
                return False
            self.model.model.unload_model()
        if (trim := memory.trimmer()) is not None:
            trim()  # so that the unload shows in the process's memory
        _LOGGER.info("Unloaded Whisper %s after %.0f s idle", self.name, idle_seconds)
        return True

    @property
    def loaded(self) -> bool:
        return self.model.model.model_is_loaded

    def entry(self) -> Entry:
        """The model as the core's view lists it (served.py)."""
        return Entry(
            self.name,
            WHISPER,
            tuple(self.languages),
            self.loaded,
            self.found.version,
            f"Whisper {self.name} ({'multilingual' if self.multilingual else 'English only'})",
            multilingual=self.multilingual,
            calls=(Calls.of(self.scheduler), Calls.of(self.vad)),
        )

    def warm_up(self) -> None:
        """One short pass through VAD, encoder and decoder so the first request is not slow."""
        SpeechDetector().update(np.zeros(WHISPER_RATE, dtype=np.float32))
        self.decoder.warm_up()

    def close(self) -> None:
        self.scheduler.close()
        self.vad.close()


def _languages(model: WhisperModel) -> list[str]:
    """The languages the model has a token for: faster-whisper lists all 100 for any multilingual model, but
    only large-v3 and later know the last (Cantonese); asked for it, earlier ones write nonsense."""
    if not model.model.is_multilingual:
        return ["en"]
    first = model.hf_tokenizer.token_to_id("<|en|>")
    ids = {code: model.hf_tokenizer.token_to_id(f"<|{code}|>") for code in model.supported_languages}
    return [code for code, token in ids.items() if token is not None and token - first < model.model.num_languages]


def _left(slots: Sequence[Slot]) -> float:
    """What is left to decode of `slots` by their own call (another request's batch may have taken some), in
    seconds of audio."""
    return sum(len(slot.job.audio) / WHISPER_RATE + PIECE_COST for slot in slots if slot.paid_by(slots))


def names_heard(text: str, names: Sequence[str], rare: Callable[[str], bool]) -> bool:
    """Whether `text` writes one of the prompt's `names` as speech, not as Whisper saying its prompt back.

    A name is written whole (in any case and punctuation), or nearly where it has a `rare` word (NEAR_NAME alike,
    letter by letter: "Baranger Chandelier" for "Varanger Chandelier" is the prompt at work, and more right than
    the text without it; "bathroom light" is not "Bedroom light", a name of common words). Said
    back: a name written twice, two or more and nothing else, or a `rare` word of a name (one Whisper's tokenizer
    splits: "Nuukfjord", not "lamp") outside a name ("Nuukfjord, Vesle lamp, Nuukfjord, Vesle bensoble" for French
    speech that said none).
    """
    spoken = plain(text).split()
    free = [True] * len(spoken)  # words not yet part of a name written
    counts: list[int] = []
    for name in sorted({plain(name) for name in names} - {""}, key=len, reverse=True):  # "Hyttloft lamp" first
        size, found = len(name.split()), 0
        near = len(name) >= NEAR_NAME_CHARS and any(rare(part) for part in name.split())
        for at in range(len(spoken) - size + 1):
            if all(free[at : at + size]) and _alike(" ".join(spoken[at : at + size]), name, near):
                free[at : at + size] = [False] * size
                found += 1
        counts += [found] if found else []
    rest = {word for word, unused in zip(spoken, free, strict=True) if unused}
    if not counts or max(counts) > 1 or (sum(counts) > 1 and not rest):
        return False
    return not any(rare(part) for name in names for part in plain(name).split() if part in rest)


def _alike(written: str, name: str, near: bool) -> bool:
    if written == name:
        return True
    if not near or abs(len(written) - len(name)) > len(name) // 4:
        return False
    return difflib.SequenceMatcher(None, written, name).ratio() >= NEAR_NAME


def _check_bias(names: Sequence[str], terms: Sequence[str], text: str | None) -> None:
    """Refuse bias past its caps before any of it is joined or tokenised."""
    if text is not None and len(text) > MAX_PROMPT_CHARS:
        raise BadRequest(f"The prompt is {len(text)} characters; the limit is {MAX_PROMPT_CHARS}")
    for kind, words in (("names", names), ("terms", terms)):
        if len(words) > MAX_WORDS:
            raise BadRequest(f"{len(words)} transcript {kind}; the limit is {MAX_WORDS}")
        if any(len(word) > MAX_WORD_CHARS for word in words):
            raise BadRequest(f"A transcript {kind[:-1]} is longer than {MAX_WORD_CHARS} characters")
