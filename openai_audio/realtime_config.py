"""A Realtime transcription session's configuration: read from a client's update, written back whole.

Two shapes say the same things. The GA one (`session.update`, `session.type = "transcription"`, everything under
`audio.input`) and the beta one still sent by older clients (`transcription_session.update`, with
`input_audio_format`, `input_audio_transcription`, `turn_detection`). An update changes only the fields it names;
`null` clears one (`turn_detection: null`: the client commits each turn itself). What this server does with each
field is said in `Config`; a value it cannot use is a `BadEvent` naming the field.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from wyoming_wis.audio import AudioFormat
from wyoming_wis.core import MAX_PROMPT_CHARS
from wyoming_wis.requests import MAX_SILENCE, MIN_SILENCE, SENSITIVITIES, AsrRequest
from wyoming_wis.values import quote

from .names import OPENAI_ASR_MODEL, our_model

PCM, PCMU, PCMA = "audio/pcm", "audio/pcmu", "audio/pcma"
PCM_RATE = 24000  # OpenAI's only PCM rate; other rates from 8 to 48 kHz are taken too
G711_RATE = 8000
BETA_FORMATS = {"pcm16": PCM, "g711_ulaw": PCMU, "g711_alaw": PCMA}
LOGPROBS = "item.input_audio_transcription.logprobs"
NOISE_REDUCTIONS = ("near_field", "far_field")
# semantic_vad's eagerness, as this server's sensitivities: how soon a turn judged on its words ends
EAGERNESS = {"low": "relaxed", "medium": SENSITIVITIES[0], "auto": SENSITIVITIES[0], "high": "aggressive"}
MAX_PREFIX_MS = 10_000
MIN_SILENCE_MS, MAX_SILENCE_MS = MIN_SILENCE * 1000, MAX_SILENCE * 1000
MAX_TEXT_CHARS = 64  # a model's or language's name


class BadEvent(Exception):
    """A client event this server cannot take: answered with an `error` event, the session goes on."""

    def __init__(self, message: str, code: str = "invalid_value", param: str | None = None) -> None:
        super().__init__(message)
        self.message, self.code, self.param = message, code, param


@dataclass(frozen=True)
class TurnDetection:
    """How turns end. server_vad: the server's judgement of the speaker's words and pause (as for Home Assistant),
    never waiting longer than `silence_duration_ms`; semantic_vad: the same judgement at the sensitivity its
    `eagerness` names. `threshold` is kept and shown but the server's VAD has its own."""

    type: Literal["server_vad", "semantic_vad"] = "server_vad"
    threshold: float = 0.5
    prefix_padding_ms: int = 300  # speech_started's audio_start_ms is this much before the speech
    silence_duration_ms: int = 500
    eagerness: str = "auto"

    @property
    def sensitivity(self) -> str:
        return SENSITIVITIES[0] if self.type == "server_vad" else EAGERNESS[self.eagerness]

    @property
    def max_silence(self) -> float | None:
        return self.silence_duration_ms / 1000 if self.type == "server_vad" else None


@dataclass(frozen=True)
class Config:
    format: str = PCM
    rate: int = PCM_RATE
    model: str = OPENAI_ASR_MODEL  # as the client named it
    language: str | None = None
    prompt: str | None = None
    turn_detection: TurnDetection | None = TurnDetection()
    noise_reduction: str | None = None  # kept and shown; --noise-suppression decides what the server does
    logprobs: bool = False

    @property
    def audio_format(self) -> AudioFormat:
        """The layout of the PCM the session's audio is (G.711 decoded to 16-bit PCM first)."""
        return AudioFormat(self.rate, 2, 1)

    def request(self) -> AsrRequest:
        """What each turn asks of the core."""
        detection = self.turn_detection
        return AsrRequest(
            model=our_model(self.model),
            language=self.language,
            prompt=self.prompt,
            end_of_turn=None if detection is None else detection.sensitivity,
            max_silence=None if detection is None else detection.max_silence,
            logprobs=self.logprobs,
            drafts=True,  # deltas while the speaker talks: what a live caption shows
        )

    def updated(self, session: Any, beta: bool) -> Config:
        """This configuration with what the update's `session` names."""
        if not isinstance(session, dict):
            raise BadEvent("session must be an object", param="session")
        return _beta_update(self, session) if beta else _update(self, session)

    def render(self, session_id: str, beta: bool) -> dict[str, Any]:
        """The whole effective session, in the client's shape."""
        transcription = {"model": self.model, "language": self.language, "prompt": self.prompt or ""}
        detection = None if self.turn_detection is None else _render_detection(self.turn_detection)
        noise = None if self.noise_reduction is None else {"type": self.noise_reduction}
        include = [LOGPROBS] if self.logprobs else []
        common = {"id": session_id, "object": "realtime.transcription_session"}
        if beta:
            beta_format = next(name for name, value in BETA_FORMATS.items() if value == self.format)
            return common | {
                "input_audio_format": beta_format,
                "input_audio_transcription": transcription,
                "turn_detection": detection,
                "input_audio_noise_reduction": noise,
                "include": include,
            }
        audio_format: dict[str, Any] = {"type": self.format} | ({"rate": self.rate} if self.format == PCM else {})
        audio_input = {
            "format": audio_format,
            "transcription": transcription,
            "turn_detection": detection,
            "noise_reduction": noise,
        }
        return common | {"type": "transcription", "audio": {"input": audio_input}, "include": include}


# Where each shape names the transcription, turn detection and noise reduction (`_input`).
_GA_INPUT = ("transcription", "turn_detection", "noise_reduction")  # in session.audio.input
_BETA_INPUT = ("input_audio_transcription", "turn_detection", "input_audio_noise_reduction")  # in session


def _update(config: Config, session: dict[str, Any]) -> Config:
    """A GA `session.update`'s session."""
    if session.get("type", "transcription") != "transcription":
        raise BadEvent(
            f"This server only transcribes: session.type must be transcription, not {quote(session.get('type'))}",
            param="session.type",
        )
    changes: dict[str, Any] = {}
    if "include" in session:
        changes["logprobs"] = _include(session["include"], "session.include")
    audio = _object(session.get("audio"), "session.audio")
    audio_input = _object(audio.get("input"), "session.audio.input")
    if (audio_format := audio_input.get("format")) is not None:
        changes |= _format(_object(audio_format, "session.audio.input.format"))
    changes |= _input(config, audio_input, "session.audio.input.", _GA_INPUT)
    return dataclasses.replace(config, **changes)


def _beta_update(config: Config, session: dict[str, Any]) -> Config:
    """A beta `transcription_session.update`'s session."""
    changes: dict[str, Any] = {}
    if "include" in session:
        changes["logprobs"] = _include(session["include"], "session.include")
    if (beta_format := session.get("input_audio_format")) is not None:
        if beta_format not in BETA_FORMATS:
            raise BadEvent(
                f"input_audio_format must be one of {', '.join(BETA_FORMATS)}; got {quote(beta_format)}",
                param="session.input_audio_format",
            )
        changes["format"] = BETA_FORMATS[beta_format]
        changes["rate"] = PCM_RATE if changes["format"] == PCM else G711_RATE
    changes |= _input(config, session, "session.", _BETA_INPUT)
    return dataclasses.replace(config, **changes)


def _input(config: Config, fields: dict[str, Any], path: str, names: tuple[str, str, str]) -> dict[str, Any]:
    """The transcription, turn detection and noise reduction an update names, as changes to `config`: the GA and beta
    shapes hold them under other `names`, in `fields` at `path`."""
    transcription, detection, noise = names
    changes: dict[str, Any] = {}
    if transcription in fields:
        changes |= _transcription(fields[transcription], path + transcription)
    if detection in fields:
        changes["turn_detection"] = _detection(fields[detection], config.turn_detection, path + detection)
    if noise in fields:
        changes["noise_reduction"] = _noise(fields[noise], path + noise)
    return changes


def _format(value: dict[str, Any]) -> dict[str, Any]:
    kind = value.get("type")
    if kind in (PCMU, PCMA):
        return {"format": kind, "rate": G711_RATE}
    if kind != PCM:
        raise BadEvent(
            f"format.type must be {PCM}, {PCMU} or {PCMA}; got {quote(kind)}", param="session.audio.input.format.type"
        )
    rate = value.get("rate", PCM_RATE)
    if not isinstance(rate, int) or isinstance(rate, bool) or not 8000 <= rate <= 48000:
        raise BadEvent(f"format.rate must be 8000 to 48000 (24000 as OpenAI); got {quote(rate)}", param="rate")
    return {"format": PCM, "rate": rate}


def _transcription(value: Any, param: str) -> dict[str, Any]:
    if value is None:
        return {"model": OPENAI_ASR_MODEL, "language": None, "prompt": None}
    value = _object(value, param)
    changes: dict[str, Any] = {}
    if "model" in value:
        changes["model"] = _text(value["model"], f"{param}.model", MAX_TEXT_CHARS) or OPENAI_ASR_MODEL
    if "language" in value:
        changes["language"] = _text(value["language"], f"{param}.language", MAX_TEXT_CHARS)
    if "prompt" in value:
        changes["prompt"] = _text(value["prompt"], f"{param}.prompt", MAX_PROMPT_CHARS)
    return changes


def _detection(value: Any, current: TurnDetection | None, param: str) -> TurnDetection | None:
    if value is None:
        return None
    value = _object(value, param)
    kind = value.get("type", current.type if current else "server_vad")
    if kind not in ("server_vad", "semantic_vad"):
        raise BadEvent(
            f"turn_detection.type must be server_vad or semantic_vad; got {quote(kind)}", param=f"{param}.type"
        )
    detection = current if current is not None and current.type == kind else TurnDetection(type=kind)
    changes: dict[str, Any] = {}
    if "threshold" in value:
        changes["threshold"] = _number(value["threshold"], f"{param}.threshold", 0.0, 1.0)
    if "prefix_padding_ms" in value:
        changes["prefix_padding_ms"] = int(
            _number(value["prefix_padding_ms"], f"{param}.prefix_padding_ms", 0, MAX_PREFIX_MS)
        )
    if "silence_duration_ms" in value:
        low, high = MIN_SILENCE * 1000, MAX_SILENCE * 1000
        changes["silence_duration_ms"] = int(
            _number(value["silence_duration_ms"], f"{param}.silence_duration_ms", low, high)
        )
    if "eagerness" in value:
        if value["eagerness"] not in EAGERNESS:
            raise BadEvent(
                f"eagerness must be one of {', '.join(EAGERNESS)}; got {quote(value['eagerness'])}",
                param=f"{param}.eagerness",
            )
        changes["eagerness"] = value["eagerness"]
    return dataclasses.replace(detection, **changes)


def _render_detection(detection: TurnDetection) -> dict[str, Any]:
    if detection.type == "semantic_vad":
        return {"type": "semantic_vad", "eagerness": detection.eagerness}
    return {
        "type": "server_vad",
        "threshold": detection.threshold,
        "prefix_padding_ms": detection.prefix_padding_ms,
        "silence_duration_ms": detection.silence_duration_ms,
    }


def _noise(value: Any, param: str) -> str | None:
    if value is None:
        return None
    kind = _object(value, param).get("type")
    if kind not in NOISE_REDUCTIONS:
        raise BadEvent(
            f"noise reduction type must be near_field or far_field; got {quote(kind)}", param=f"{param}.type"
        )
    return kind


def _include(value: Any, param: str) -> bool:
    if value is None:
        return False
    if not isinstance(value, list) or any(item != LOGPROBS for item in value):
        raise BadEvent(f"include may hold only {LOGPROBS}", param=param)
    return bool(value)


def _object(value: Any, param: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadEvent(f"{param} must be an object", param=param)
    return value


def _text(value: Any, param: str, limit: int) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadEvent(f"{param} must be a string", param=param)
    if len(value) > limit:
        raise BadEvent(f"{param} is longer than {limit} characters", param=param)
    return value or None


def _number(value: Any, param: str, low: float, high: float) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or not low <= value <= high:
        raise BadEvent(f"{param} must be a number from {low:g} to {high:g}; got {quote(value)}", param=param)
    return float(value)
