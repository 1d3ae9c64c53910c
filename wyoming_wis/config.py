"""Settings: command-line flags, each also readable from a WIS_<FLAG> variable.

Precedence is flag, then environment, then built-in default. One table
(`OPTIONS`) describes every setting, so `--help`, the environment names and the
README stay in step.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from . import __version__
from .values import MAX_NOISE, MAX_SENTENCE_SILENCE, MAX_SPEED, MIN_SPEED, parse_bool

ENV_PREFIX = "WIS_"
DEFAULT_XTTS = "xtts-v2"


@dataclass(frozen=True)
class Option:
    """One setting: its flag, how to parse it and what it is for."""

    flag: str
    help: str
    default: Any = None
    type: Callable[[str], Any] = str
    multiple: bool = False  # repeatable flag; comma-separated in the environment
    switch: bool = False  # flag without a value
    optional_value: bool = False  # `--flag` alone or `--flag VALUE`
    metavar: str | None = None

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.dest.upper()


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


def _task(text: str) -> str:
    if text not in ("transcribe", "translate"):
        raise argparse.ArgumentTypeError(f"expected transcribe or translate, got {text!r}")
    return text


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
    """An IPv4 or IPv6 address a browser can send to (no host name, no zone, not 0.0.0.0 or multicast)."""
    try:
        address = ipaddress.ip_address(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an IP address such as 192.168.1.20 or 2001:db8::20 (not a host name), got {text!r}"
        ) from None
    if address.is_unspecified or address.is_multicast or getattr(address, "scope_id", None):
        raise argparse.ArgumentTypeError(
            f"{text!r} is no address a browser can send to: give a unicast one (not 0.0.0.0, ::, multicast or %zone)"
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


OPTIONS: tuple[Option, ...] = (
    Option(
        "--uri",
        "Where the Wyoming server listens: tcp://HOST:PORT, unix://PATH or stdio://. Repeat to listen on several.",
        default=["tcp://0.0.0.0:10500"],
        multiple=True,
        metavar="URI",
    ),
    Option(
        "--data-dir",
        "Folder for models, voices and state (models/NAME/, voices/NAME.onnx). "
        "Repeat to search several; the first is written to.",
        default=[Path("./data")],
        type=Path,
        multiple=True,
        metavar="DIR",
    ),
    Option(
        "--asr-model",
        "Whisper model to load: a name (base, tiny.en, small, ...) or a path to a CTranslate2 model folder. "
        "Repeat to keep several loaded; the first is the default.",
        default=["base"],
        multiple=True,
        metavar="NAME",
    ),
    Option(
        "--voice",
        "Piper voice to load: a name (en_US-joe-medium, ...) or a path to an .onnx file. "
        "Repeat to keep several loaded; the first is the default.",
        default=["en_US-joe-medium"],
        multiple=True,
        metavar="NAME",
    ),
    Option(
        "--xtts",
        "Also load Coqui XTTS-v2 (voice cloning, 17 languages; needs the xtts extra): a folder, a name in "
        "DATA_DIR/xtts/ or the Hugging Face cache (coqui/XTTS-v2). MODEL defaults to xtts-v2. Off by default.",
        optional_value=True,
        metavar="MODEL",
    ),
    Option(
        "--speed",
        f"How fast voices speak, from {MIN_SPEED:g} to {MAX_SPEED:g} (2 is twice as fast).",
        default=1.0,
        type=_between(MIN_SPEED, MAX_SPEED),
        metavar="FACTOR",
    ),
    Option(
        "--noise-scale",
        f"Piper: variation in the voice, 0 to {MAX_NOISE:g} (default: each voice's own).",
        type=_between(0.0, MAX_NOISE),
        metavar="VALUE",
    ),
    Option(
        "--noise-w",
        f"Piper: variation in how long sounds last, 0 to {MAX_NOISE:g} (default: each voice's own).",
        type=_between(0.0, MAX_NOISE),
        metavar="VALUE",
    ),
    Option(
        "--sentence-silence",
        f"Seconds of silence after each sentence, 0 to {MAX_SENTENCE_SILENCE:g}.",
        default=0.0,
        type=_between(0.0, MAX_SENTENCE_SILENCE),
        metavar="SECONDS",
    ),
    Option(
        "--speech-cache-mb",
        "Disk space for finished speech, so phrases said before are sent at once; 0 turns the cache off.",
        default=200.0,
        type=_between(0.0),
        metavar="MB",
    ),
    Option(
        "--speech-cache-days",
        "How long cached speech is kept.",
        default=30.0,
        type=_positive_float,
        metavar="DAYS",
    ),
    Option(
        "--language",
        "Language of the speech when a request names none (en, de, ...); 'auto' detects it per request.",
        default="auto",
        metavar="LANG",
    ),
    Option(
        "--device",
        "Where models run: auto (CUDA if available), cpu, cuda or cuda:N.",
        default="auto",
        type=_device,
        metavar="DEVICE",
    ),
    Option(
        "--compute-type",
        "CTranslate2 compute type: default (int8 on CPU, float16 on CUDA), int8, int8_float16, float16, float32, ...",
        default="default",
        metavar="TYPE",
    ),
    Option(
        "--beam-size",
        "Whisper beam size. Below 5, speech is decoded in Whisper's full 30 s window, as faster-whisper does: greedy "
        "decoding in the short windows that make commands fast changes words, and there beam 5 costs about as much "
        "as 1.",
        default=5,
        type=_positive_int,
        metavar="N",
    ),
    Option(
        "--task",
        "What Whisper does with speech: transcribe it, or translate it to English.",
        default="transcribe",
        type=_task,
        metavar="TASK",
    ),
    Option(
        "--initial-prompt",
        "Text Whisper sees as if said just before each request, to steer spelling and style.",
        metavar="TEXT",
    ),
    Option(
        "--hotwords",
        "Names and words to bias recognition toward (device and area names, ...), added to every request's "
        "own transcript_names. Repeat, or separate with commas in the environment.",
        default=[],
        multiple=True,
        metavar="WORDS",
    ),
    Option(
        "--partial-results",
        "Transcribe while audio still arrives and send partial transcripts (transcript-chunk); "
        "this is also what makes the final transcript fast.",
        default=True,
        type=parse_bool,
        metavar="BOOL",
    ),
    Option(
        "--max-batch",
        "Most transcription windows decoded together in one batch per Whisper model.",
        default=8,
        type=_positive_int,
        metavar="N",
    ),
    Option(
        "--unload-after",
        "Free a Whisper model's memory after this many idle seconds and reload it on the next request; "
        "0 keeps every model loaded.",
        default=0.0,
        type=_between(0.0),
        metavar="SECONDS",
    ),
    Option(
        "--cpu-threads",
        "Threads each model uses on the CPU; 0 means one per core.",
        default=0,
        type=_non_negative_int,
        metavar="N",
    ),
    Option(
        "--asr-workers",
        "Transcriptions that run at the same time per Whisper model.",
        default=2,
        type=_positive_int,
        metavar="N",
    ),
    Option(
        "--tts-workers",
        "Synthesis steps that run at the same time per voice; each gets `--cpu-threads` / N threads.",
        default=2,
        type=_positive_int,
        metavar="N",
    ),
    Option(
        "--queue-size",
        "Requests that may wait per model or voice before new ones are answered 'busy'.",
        default=16,
        type=_non_negative_int,
        metavar="N",
    ),
    Option(
        "--http-port",
        "Port of the HTTP API (OpenAI-compatible /v1/audio/..., Willow's /api/..., /health) on the same models.",
        default=19000,
        type=_port,
        metavar="PORT",
    ),
    Option("--http-host", "Address the HTTP API listens on.", default="0.0.0.0", metavar="HOST"),
    Option("--no-http", "Do not start the HTTP API.", switch=True, default=False),
    Option(
        "--max-upload-mb",
        "Largest audio file one HTTP request may upload.",
        default=25.0,
        type=_positive_float,
        metavar="MB",
    ),
    Option(
        "--api-key",
        "Key every HTTP request must send, as Authorization: Bearer KEY or X-API-Key: KEY "
        "(/health and the API docs stay open). Better set in the environment, which ps does not show. "
        "Off by default.",
        metavar="KEY",
    ),
    Option(
        "--api-user",
        "User name for HTTP Basic auth on the HTTP API (Willow devices send it from user:password@ in their URL); "
        "needs --api-password. With --api-key too, either is accepted.",
        metavar="USER",
    ),
    Option(
        "--api-password",
        "Password for HTTP Basic auth, with --api-user; better set in the environment.",
        metavar="PASSWORD",
    ),
    Option(
        "--cors-origin",
        "Web origin allowed to call the HTTP API from a browser (https://app.example.com:8443), or * for any. "
        "Repeat, or separate with commas in the environment. Off by default.",
        default=[],
        type=_origin,
        multiple=True,
        metavar="ORIGIN",
    ),
    Option("--ssl-cert", "PEM certificate (chain): serve the HTTP API over HTTPS.", type=Path, metavar="FILE"),
    Option(
        "--ssl-key",
        "PEM private key of --ssl-cert, unless the certificate file holds it.",
        type=Path,
        metavar="FILE",
    ),
    Option(
        "--zeroconf",
        "Announce the Wyoming service to Home Assistant over mDNS; "
        "NAME defaults to a name kept in the data dir, stable across restarts.",
        optional_value=True,
        metavar="NAME",
    ),
    Option(
        "--zeroconf-host",
        "Address to announce over zeroconf (default: the address of the interface that reaches the LAN).",
        metavar="HOST",
    ),
    Option(
        "--allow-download",
        "Allow downloading models and voices missing locally from the Hugging Face Hub (into the first data dir).",
        switch=True,
        default=False,
    ),
    Option(
        "--max-audio-seconds",
        "Longest audio one request may send.",
        default=600.0,
        type=_positive_float,
        metavar="SECONDS",
    ),
    Option(
        "--max-text-chars",
        "Longest text one synthesis request may send.",
        default=10000,
        type=_positive_int,
        metavar="N",
    ),
    Option(
        "--memory-budget-mb",
        "Client data the server may hold at once across every request and frontend: audio buffered for "
        "transcription, uploaded files and their decoded audio. A request that would pass it is answered 'busy' "
        "(HTTP 429 with Retry-After) instead of growing the server's memory.",
        default=256.0,
        type=_positive_float,
        metavar="MB",
    ),
    Option(
        "--wyoming-max-wait",
        "Longest a Wyoming client waits for its answer, from its audio-stop or synthesize: with a queue ahead, a "
        "request that could not be answered sooner is refused at once with 'busy', and one that a worker reaches too "
        "late to finish in time is dropped, since its client (a satellite, Home Assistant) will have given up.",
        default=15.0,
        type=_positive_float,
        metavar="SECONDS",
    ),
    Option(
        "--willow-max-wait",
        "As --wyoming-max-wait, for Willow devices (/api/willow from the end of its audio, /api/tts), which give "
        "up after 10 s.",
        default=10.0,
        type=_positive_float,
        metavar="SECONDS",
    ),
    Option(
        "--http-max-wait",
        "As --wyoming-max-wait, for the other HTTP requests (OpenAI API, /api/asr) and WebRTC.",
        default=30.0,
        type=_positive_float,
        metavar="SECONDS",
    ),
    Option(
        "--send-timeout",
        "Drop a client that takes nothing of an answer for this many seconds: a Wyoming or HTTP client that asks "
        "for speech and stops reading cannot hold its connection, its slot or its audio.",
        default=30.0,
        type=_positive_float,
        metavar="SECONDS",
    ),
    Option(
        "--max-connections",
        "Most Wyoming connections open at once; more get an error event with code 'busy' and are closed.",
        default=64,
        type=_positive_int,
        metavar="N",
    ),
    Option(
        "--idle-timeout",
        "Close a Wyoming connection that sends nothing for this many seconds while the server waits for its next "
        "event (time spent answering a transcription or synthesis does not count). Home Assistant opens a "
        "connection per request and closes it once answered, so it is never cut.",
        default=300.0,
        type=_positive_float,
        metavar="SECONDS",
    ),
    Option(
        "--event-timeout",
        "Seconds a Wyoming event may take to arrive whole once its first byte has come; a half-sent event "
        "then gets an error event with code 'timeout' and the connection is closed.",
        default=30.0,
        type=_positive_float,
        metavar="SECONDS",
    ),
    Option(
        "--max-event-line-bytes",
        "Longest header line (JSON) of a Wyoming event.",
        default=65536,
        type=_positive_int,
        metavar="BYTES",
    ),
    Option(
        "--max-event-data-bytes",
        "Largest data block (data_length) of a Wyoming event; a larger announced length is refused before "
        "anything is read.",
        default=1048576,
        type=_positive_int,
        metavar="BYTES",
    ),
    Option(
        "--max-event-payload-bytes",
        "Largest payload (payload_length, e.g. one audio chunk) of a Wyoming event; a larger announced length is "
        "refused before anything is read.",
        default=1048576,
        type=_positive_int,
        metavar="BYTES",
    ),
    Option(
        "--http-read-timeout",
        "HTTP slow clients: the time a client may take to send a request's headers (counted from connecting or "
        "from the previous answer, so also how long an idle keep-alive connection stays open), and the longest "
        "silence inside a request body, which is answered 408 and closed. Silence, not the whole body: a Willow "
        "device streams its audio at the pace it is spoken.",
        default=30.0,
        type=_positive_float,
        metavar="SECONDS",
    ),
    Option(
        "--rtc-ports",
        "UDP ports browsers' WebRTC audio may use (ICE), LOW-HIGH, or any. A container publishes this range; "
        "each browser connection takes one port per network address of the server.",
        default=PortRange(10000, 10049),
        type=_port_range,
        metavar="LOW-HIGH",
    ),
    Option(
        "--rtc-public-address",
        "Address to name in WebRTC answers instead of the server's own (NAT 1:1), e.g. the Docker host's LAN "
        "address when a container publishes --rtc-ports with the same numbers: the ports stay, the sockets stay "
        "bound where they are. IPv4 or IPv6; it replaces the addresses of its own family only. Off by default.",
        type=_ip_address,
        metavar="ADDRESS",
    ),
    Option(
        "--rtc-stun",
        "STUN server for WebRTC, stun:HOST[:PORT], to learn the server's public address behind NAT. "
        "Off by default: a server on the LAN needs none.",
        type=_ice_url(("stun", "stuns")),
        metavar="URL",
    ),
    Option(
        "--rtc-turn",
        "TURN server to relay WebRTC audio through when browsers cannot reach the server directly: "
        "turn:HOST[:PORT][?transport=udp|tcp] or turns:HOST[:PORT]. Off by default.",
        type=_ice_url(("turn", "turns")),
        metavar="URL",
    ),
    Option("--rtc-turn-user", "User name for --rtc-turn.", metavar="USER"),
    Option("--rtc-turn-password", "Password for --rtc-turn; better set in the environment.", metavar="PASSWORD"),
    Option(
        "--rtc-max-sessions",
        "Most browser WebRTC connections open at once; more are refused with 429.",
        default=16,
        type=_positive_int,
        metavar="N",
    ),
    Option(
        "--rtc-idle-timeout",
        "Close a browser WebRTC connection after this many seconds without an RTP, RTCP or data channel packet "
        "from it (an idle page's data channel still sends heartbeats; a vanished one sends nothing).",
        default=300.0,
        type=_positive_float,
        metavar="SECONDS",
    ),
    Option("--debug", "Log debug messages.", switch=True, default=False),
)


@dataclass
class Settings:
    """Every setting of the server, resolved (defaults live in `OPTIONS`)."""

    uri: list[str]
    data_dir: list[Path]
    asr_model: list[str]
    voice: list[str]
    xtts: str | None  # None: off; "": on with the default model
    speed: float
    noise_scale: float | None
    noise_w: float | None
    sentence_silence: float
    speech_cache_mb: float
    speech_cache_days: float
    language: str
    device: str
    compute_type: str
    beam_size: int
    task: str
    initial_prompt: str | None
    hotwords: list[str]
    partial_results: bool
    max_batch: int
    unload_after: float
    cpu_threads: int
    asr_workers: int
    tts_workers: int
    queue_size: int
    http_port: int
    http_host: str
    no_http: bool
    max_upload_mb: float
    api_key: str | None
    api_user: str | None
    api_password: str | None
    cors_origin: list[str]
    ssl_cert: Path | None
    ssl_key: Path | None
    zeroconf: str | None  # None: off; "": on with the default name
    zeroconf_host: str | None
    allow_download: bool
    max_audio_seconds: float
    max_text_chars: int
    memory_budget_mb: float
    wyoming_max_wait: float
    willow_max_wait: float
    http_max_wait: float
    send_timeout: float
    max_connections: int
    idle_timeout: float
    event_timeout: float
    max_event_line_bytes: int
    max_event_data_bytes: int
    max_event_payload_bytes: int
    http_read_timeout: float
    rtc_ports: PortRange
    rtc_public_address: str | None
    rtc_stun: str | None
    rtc_turn: str | None
    rtc_turn_user: str | None
    rtc_turn_password: str | None
    rtc_max_sessions: int
    rtc_idle_timeout: float
    debug: bool

    @property
    def xtts_model(self) -> str | None:
        """The XTTS model to load, if any."""
        if self.xtts is None:
            return None
        return self.xtts or DEFAULT_XTTS

    @property
    def threads(self) -> int:
        """CPU threads per model, with 0 resolved to the number of cores."""
        return self.cpu_threads or (os.cpu_count() or 1)

    @classmethod
    def from_args(cls, argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> Settings:
        parser = build_parser()
        args = parser.parse_args(argv)
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for option in OPTIONS:
            value = getattr(args, option.dest)
            if value is None and option.env in environ:
                try:
                    value = _from_env(option, environ[option.env])
                except (ValueError, argparse.ArgumentTypeError) as err:
                    parser.error(f"{option.env}={environ[option.env]!r}: {err}")
            if value is None:
                value = list(option.default) if option.multiple else option.default
            values[option.dest] = value
        if bool(values["api_user"]) != bool(values["api_password"]):
            parser.error("--api-user and --api-password go together")
        if values["ssl_key"] and not values["ssl_cert"]:
            parser.error("--ssl-key needs --ssl-cert")
        if values["rtc_turn"] and not (values["rtc_turn_user"] and values["rtc_turn_password"]):
            parser.error("--rtc-turn needs --rtc-turn-user and --rtc-turn-password")
        return cls(**values)


def _from_env(option: Option, text: str) -> Any:
    """Parse an environment value the way the flag would be parsed."""
    text = text.strip()
    if option.switch:
        return parse_bool(text)
    if option.optional_value:
        # WIS_ZEROCONF=1 (or empty) turns it on with the default name; =0 leaves it off; anything else is the value.
        if text == "":
            return ""
        try:
            return "" if parse_bool(text) else None
        except ValueError:
            return text
    if option.multiple:
        values = [option.type(part.strip()) for part in text.split(",") if part.strip()]
        if not values:
            raise ValueError("expected at least one value")
        return values
    return option.type(text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="wyoming-wis",
        description=(
            "Local speech server: Whisper speech-to-text and Piper (optionally XTTS) text-to-speech over the "
            "Wyoming protocol for Home Assistant. Every flag can also be set with an "
            f"environment variable {ENV_PREFIX}<FLAG> (e.g. {ENV_PREFIX}BEAM_SIZE=1)."
        ),
    )
    for option in OPTIONS:
        default = option.default
        if option.multiple and default:
            default = ", ".join(str(item) for item in default)
        shown_default = "" if default is None or default is False or default == [] else f" Default: {default}."
        kwargs: dict[str, Any] = {
            "dest": option.dest,
            "default": None,
            "help": f"{option.help}{shown_default} [env {option.env}]",
        }
        if option.switch:
            kwargs["action"] = "store_const"
            kwargs["const"] = True
        else:
            kwargs["type"] = option.type
            kwargs["metavar"] = option.metavar
            if option.multiple:
                kwargs["action"] = "append"
            if option.optional_value:
                kwargs["nargs"] = "?"
                kwargs["const"] = ""
        parser.add_argument(option.flag, **kwargs)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return parser
