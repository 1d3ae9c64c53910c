"""Prometheus metrics shared by every frontend: what was asked, how long it took, what is loaded.

The metrics live in one registry of our own, `REGISTRY`, not prometheus-client's
global default: the default is shared with every library in the process, so a
name someone else registers could clash with ours, and /metrics would export
whatever they put there. Ours holds the `wis_*` metrics and the process's own
(memory, CPU, Python); it is made once per process, and every server in the
process counts into it (in production a process is one server; tests compare a
scrape before and after what they do).

Labels are low-cardinality only, never anything per request or per client:
`frontend` (wyoming, http, webrtc, realtime), `route` (a Wyoming request kind, or an HTTP
route's path template), `status` (Wyoming: ok or the error code; HTTP: the
status code), `engine` (whisper, vad, piper, xtts, turn), `kind` (asr, tts, turn),
`model` (a loaded model or voice), `result` (hit, miss, bypass).

Frontends use the helpers here rather than the metric objects: `Request` for
requests and in-flight counts, `transcribed` when a transcript is ready,
`SpeechSent` while speech goes out, `rtc_session` as browsers connect and
leave. Updates are a lock and an add, safe from any thread; what is read at
scrape time (queue depth, running calls, models loaded, the memory budget) is
collected then from the view (`Core.served()`) of each core that the composition
root named with `watch`.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from . import __version__
from .errors import WisError
from .served import WAKE, Served

FRONTENDS = ("wyoming", "http", "webrtc", "realtime")
# Seconds a user may wait: 5 ms (a cached phrase) to 30 s (a long file on a slow CPU).
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)
GCCollector(registry=REGISTRY)


def _latency(name: str, documentation: str, labels: list[str]) -> Histogram:
    """Seconds someone waits, in LATENCY_BUCKETS."""
    return Histogram(name, documentation, labels, buckets=LATENCY_BUCKETS, registry=REGISTRY)


BUILD_INFO = Gauge("wis_build_info", "The server's version; always 1", ["version"], registry=REGISTRY)
BUILD_INFO.labels(__version__).set(1)

REQUESTS = Counter(
    "wis_requests_total",
    "Requests answered, by frontend, route (Wyoming request kind or HTTP route template) and status "
    "(Wyoming: ok or the error code; HTTP: the status code, 499 when the client left first)",
    ["frontend", "route", "status"],
    registry=REGISTRY,
)
IN_PROGRESS = Gauge(
    "wis_requests_in_progress",
    "Requests begun and not yet answered (a Wyoming transcription counts while its audio streams)",
    ["frontend", "route"],
    registry=REGISTRY,
)
QUEUE_WAIT = _latency(
    "wis_queue_wait_seconds",
    "Time a model call waited in its engine's queue before a worker took it",
    ["engine", "model"],
)
INFERENCE = _latency(
    "wis_inference_seconds",
    "Time a model call ran in a worker thread (a Whisper batch, a Piper or XTTS step)",
    ["engine", "model"],
)
WAIT_ESTIMATE = Histogram(
    "wis_wait_estimate_ratio",
    "A model call's time from queued to done over the time its engine expected when the call came (admission "
    "and busy answers go by that estimate; 1 is exact). Calls that came before any had ended are not counted",
    ["engine", "model"],
    buckets=(0.5, 0.7, 0.9, 1.1, 1.3, 1.5, 2.0, 3.0),
    registry=REGISTRY,
)
REJECTED = Counter(
    "wis_busy_rejections_total",
    "Model calls refused because the engine's queue was full (the client got a busy error)",
    ["engine", "model"],
    registry=REGISTRY,
)
TURNS = Counter(
    "wis_turns_total",
    "Turns answered, whatever the frontend (Wyoming, WebRTC, the Realtime API over a WebSocket or a call), by "
    "frontend, what ended the turn (commit: its client; the server's reason: command, complete, silence, max-speech, "
    "no-speech; none: it failed before it ended) and status (ok or the error code)",
    ["frontend", "ended", "status"],
    registry=REGISTRY,
)
AFTER_AUDIO = _latency(
    "wis_asr_after_end_of_audio_seconds",
    "Time from the end of the client's audio (Wyoming audio-stop, end of the HTTP body) to the transcript",
    ["frontend", "model"],
)
AFTER_SPEECH = _latency(
    "wis_asr_after_last_speech_seconds",
    "For turns the server ended itself: time from the arrival of the turn's last speech to the transcript, by why "
    "the turn ended (command, complete, silence, max-speech; a no-speech turn has no speech to count from)",
    ["frontend", "reason"],
)
FIRST_AUDIO = _latency(
    "wis_tts_time_to_first_audio_seconds",
    "Time from a speech request (for streamed text: its first text) to the first audio sent",
    ["frontend", "model"],
)
ASR_SECONDS = Counter(
    "wis_asr_audio_seconds_total",
    "Seconds of audio transcribed",
    ["frontend", "model"],
    registry=REGISTRY,
)
DECODE_STAGES = Counter(
    "wis_asr_decode_seconds_total",
    "Time Whisper's calls spent in each stage of decoding, by model and stage: encode (the audio's window), "
    "language (detecting it), search (the beam search for the text), words (timing the words), logprobs (scoring "
    "the tokens), fallback (faster-whisper's own pass with its 30 s window and temperature fallback, all of it)",
    ["model", "stage"],
    registry=REGISTRY,
)
TTS_SECONDS = Counter(
    "wis_tts_audio_seconds_total",
    "Seconds of speech sent to clients",
    ["frontend", "model"],
    registry=REGISTRY,
)
CACHE = Counter(
    "wis_tts_cache_phrases_total",
    "Phrases looked up in the speech cache: hit, miss, or bypass (the cache was off for the request)",
    ["result"],
    registry=REGISTRY,
)
_CACHE_RESULTS = {result: CACHE.labels(result) for result in ("hit", "miss", "bypass")}
DENOISED = Counter(
    "wis_asr_denoised_seconds_total",
    "Seconds of audio cleaned by the noise suppressor (--noise-suppression) before the VAD and Whisper heard it",
    registry=REGISTRY,
)
RTC_SESSIONS = Gauge(
    "wis_rtc_sessions",
    "Browser WebRTC connections open now (each may stay open for days, mostly idle between utterances)",
    registry=REGISTRY,
)


def exposition() -> bytes:
    """Every metric in Prometheus's text format; blocking (it asks engines whether they are loaded)."""
    return generate_latest(_WithoutCreated())


class _WithoutCreated(Collector):
    """REGISTRY without the `_created` series beside every counter and histogram: they double what is stored,
    and Prometheus's text format does not need them (the process's start time is exported). Left out here, not
    by prometheus_client's switch for them, which is global: it would change every other library's metrics too."""

    def collect(self) -> Iterator[Metric]:
        for metric in REGISTRY.collect():
            created = metric.name + "_created"
            metric.samples = [sample for sample in metric.samples if sample.name != created]
            yield metric


async def scrape() -> bytes:
    """The exposition, made in a thread: a model loading or unloading must not hold up the event loop."""
    return await asyncio.to_thread(exposition)


# -- requests ---------------------------------------------------------------------


def status_of(err: BaseException) -> str:
    """A request's status when it ended with `err`: the error's code, or what happened to the connection."""
    if isinstance(err, WisError):
        return err.code
    if isinstance(err, asyncio.CancelledError):
        return "cancelled"
    if isinstance(err, ConnectionError):
        return "disconnected"
    return "internal-error"


class Request:
    """One request, from when it began to its answer: in progress meanwhile, counted once with its status.

    `count` and `end` are separate for HTTP, where the status is known (and
    counted) when the answer starts, and the request ends once a stream of it is sent.
    """

    __slots__ = ("frontend", "route", "started", "counted", "ended")

    def __init__(self, frontend: str, route: str) -> None:
        self.frontend = frontend
        self.route = route
        self.started = time.perf_counter()
        self.counted = self.ended = False
        IN_PROGRESS.labels(frontend, route).inc()

    @property
    def finished(self) -> bool:
        return self.counted and self.ended

    def count(self, status: str) -> None:
        """Count the request with `status`; only the first call counts."""
        if not self.counted:
            self.counted = True
            REQUESTS.labels(self.frontend, self.route, status).inc()

    def end(self) -> None:
        """No longer in progress; only the first call counts."""
        if not self.ended:
            self.ended = True
            IN_PROGRESS.labels(self.frontend, self.route).dec()

    def done(self, status: str = "ok") -> None:
        self.count(status)
        self.end()

    def failed(self, err: BaseException) -> None:
        self.done(status_of(err))


def rtc_session(opened: bool) -> None:
    """A browser's WebRTC connection opened (True) or closed (False); call each once per connection."""
    if opened:
        RTC_SESSIONS.inc()
    else:
        RTC_SESSIONS.dec()


# -- speech to text and text to speech --------------------------------------------


def transcribed(
    frontend: str, model: str, audio_seconds: float, audio_ended: float | None, *, turn_ended: str | None = None
) -> None:
    """A transcript is ready. `audio_ended` is when the client's audio ended (`time.perf_counter()`), or, for a
    turn the server ended (`turn_ended` says why), when its last speech arrived (None: there was none)."""
    if turn_ended is None:
        AFTER_AUDIO.labels(frontend, model).observe(time.perf_counter() - (audio_ended or time.perf_counter()))
    elif audio_ended is not None:
        AFTER_SPEECH.labels(frontend, turn_ended).observe(time.perf_counter() - audio_ended)
    ASR_SECONDS.labels(frontend, model).inc(audio_seconds)


def decoded(model: str, stage: str, seconds: float) -> None:
    """A stage of a Whisper call took `seconds` (from its worker thread; `DECODE_STAGES`)."""
    DECODE_STAGES.labels(model, stage).inc(seconds)


def turn_answered(frontend: str, ended: str, err: BaseException | None = None) -> None:
    """A turn's transcript went out (`err`: its error did); `ended` says what ended it (`TURNS`)."""
    TURNS.labels(frontend, ended, "ok" if err is None else status_of(err)).inc()


class _Format(Protocol):
    def seconds(self, num_bytes: int) -> float: ...


class _Engine(Protocol):
    name: str


class _Stream(Protocol):
    """What SpeechSent reads of a SpeechStream."""

    engine: _Engine
    format: _Format
    text_at: float | None


class SpeechSent:
    """One reply's speech as a frontend sends it: the time to its first audio, and the seconds sent.

    The time counts from `since`, when the request came (`time.perf_counter()`),
    or if that is not given, from when the stream got its first text: for text
    that streams in (an LLM writing), the wait for the text is not ours.
    """

    __slots__ = ("_first", "_seconds", "_stream", "since")

    def __init__(self, frontend: str, stream: _Stream, since: float | None = None) -> None:
        self.since = since
        self._stream = stream
        self._first: Any = FIRST_AUDIO.labels(frontend, stream.engine.name)
        self._seconds = TTS_SECONDS.labels(frontend, stream.engine.name)

    def sent(self, pcm_bytes: int) -> None:
        """`pcm_bytes` of speech (in the stream's format) have been handed to the client's connection."""
        if not pcm_bytes:
            return
        if self._first is not None:
            since = self.since if self.since is not None else self._stream.text_at
            if since is not None:
                self._first.observe(time.perf_counter() - since)
            self._first = None
        self._seconds.inc(self._stream.format.seconds(pcm_bytes))


def denoised(seconds: float) -> None:
    """The noise suppressor cleaned this much audio of a stream (from its worker thread)."""
    DENOISED.inc(seconds)


def cache_lookup(result: str) -> None:
    """A phrase was looked up in the speech cache: hit, miss, or bypass."""
    _CACHE_RESULTS[result].inc()


# -- what the core serves, read when scraped ---------------------------------------


class _Core(Protocol):
    def served(self) -> Served: ...


_cores: weakref.WeakSet[Any] = weakref.WeakSet()
_collector: _LiveState | None = None


def watch(core: _Core) -> None:
    """Report the core's queue depth, running calls, loaded models and memory budget at every scrape.

    The composition root calls this once the core is loaded (until then /metrics has none of these gauges);
    the first call adds the collector that reads them to REGISTRY.
    """
    global _collector
    if _collector is None:
        _collector = _LiveState()
        REGISTRY.register(_collector)
    _cores.add(core)


class _LiveState(Collector):
    """Gauges read from the cores' views at scrape time, so the hot paths update nothing for them."""

    def collect(self) -> Iterator[Metric]:
        depth = GaugeMetricFamily(
            "wis_queue_depth", "Model calls waiting in an engine's queue", labels=["engine", "model"]
        )
        running = GaugeMetricFamily(
            "wis_inference_in_progress", "Model calls running in an engine's worker threads", labels=["engine", "model"]
        )
        loaded = GaugeMetricFamily(
            "wis_model_loaded",
            "1 while a model is in memory, 0 once unloaded (--unload-after); it loads again on use",
            labels=["kind", "model"],
        )
        held = GaugeMetricFamily(
            "wis_memory_budget_used_bytes", "Client audio and uploads held now, counted in --memory-budget-mb"
        )
        limit = GaugeMetricFamily("wis_memory_budget_bytes", "The memory budget for client data (--memory-budget-mb)")
        listening = GaugeMetricFamily(
            "wis_wake_streams", "Audio streams listening for a wake word model now", labels=["model"]
        )
        household = GaugeMetricFamily(
            "wis_household_names", "Names from Home Assistant as last read (--hass-token), for every transcription"
        )
        views = [core.served() for core in list(_cores)]
        waiting: dict[tuple[str, str], int] = {}
        busy: dict[tuple[str, str], int] = {}
        states: dict[tuple[str, str], int] = {}
        streams: dict[tuple[str], int] = {}
        for view in views:
            for model in view.models:
                for calls in model.calls:
                    if calls.open:
                        key = (calls.engine, model.name)
                        waiting[key] = waiting.get(key, 0) + calls.waiting
                        busy[key] = busy.get(key, 0) + calls.running
                key = (model.kind, model.name)
                states[key] = max(states.get(key, 0), int(model.loaded))
                if model.kind == WAKE:
                    streams[(model.name,)] = streams.get((model.name,), 0) + model.streams
        _add(depth, waiting.items())
        _add(running, busy.items())
        _add(loaded, states.items())
        _add(listening, streams.items())
        if views:
            held.add_metric([], sum(view.budget_used for view in views))
            limit.add_metric([], sum(view.budget_limit for view in views))
            household.add_metric([], max(view.household_names for view in views))
        yield from (depth, running, loaded, held, limit, listening, household)

    def describe(self) -> Iterable[Metric]:
        return []  # names are only known once models load; nothing here clashes with the metrics above


def _add(family: GaugeMetricFamily, values: Iterable[tuple[tuple[str, ...], int]]) -> None:
    for labels, value in sorted(values):
        family.add_metric(list(labels), value)
