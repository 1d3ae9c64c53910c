"""The OpenAPI 3.0 description of the HTTP API, served at /api/openapi.json and shown at /api/docs.

`OPERATIONS` describes each route by (method, path); `document` publishes the ones the
application registered, so the description never names a route that is not there, and a
test fails if a registered route is not described. 3.0 rather
than 3.1 because the bundled Swagger UI (4.x) reads 3.0.

Every limit, default and choice a request is checked against comes from the constant the
check itself uses, so the description can be no looser than the code (tests/test_fuzz_http.py
sends requests generated from it and expects each one to be accepted).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from openai_audio.names import OPENAI_ASR_MODEL
from wyoming_wis import __version__
from wyoming_wis.audio import CHANNEL_COUNTS, ENCODINGS, MAX_RATE, MIN_RATE, UPLOAD_FORMATS
from wyoming_wis.core import MAX_PROMPT_CHARS, SAYABLE, VOICE_NAME, WHISPER_LANGUAGES
from wyoming_wis.requests import MAX_BEAM_SIZE, SENSITIVITIES, SpeechRequest
from wyoming_wis.served import MICRO_WAKE, OPEN_WAKE
from wyoming_wis.values import MAX_SPEED, MIN_SPEED

from . import openai_speech, openai_transcriptions, origin, transcript_formats, willow
from .fields import MAX_JSON_BYTES
from .openai_transcriptions import CHUNKING, THRESHOLD, VAD_KEYS, VAD_MS
from .security import CREDENTIALS, OPEN_RESOURCES, Credentials

OPENAPI_VERSION = "3.0.3"
JSON = "application/json"
# The longest text this server speaks for one request: OpenAI's limit, or --max-text-chars if that is less
SPEECH_CHARS = web.AppKey("speech_chars", int)

# -- building blocks --------------------------------------------------------------


def _schema(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {JSON: {"schema": schema}}}


def _errors(*statuses: int) -> dict[str, Any]:
    return {str(status): {"$ref": f"#/components/responses/{ERROR_RESPONSES[status][0]}"} for status in statuses}


def _query(name: str, description: str, schema: dict[str, Any] | None = None, required: bool = False) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": required,
        "description": description,
        "schema": schema or STRING,
    }


def _header(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "header", "required": False, "description": description, "schema": schema}


def _format_header(name: str, description: str, limits: dict[str, Any]) -> dict[str, Any]:
    """One of the x-audio-* headers of a Willow device's format, with what it means when left out."""
    return _header(name, description, {"type": "integer", "default": willow.FORMAT_HEADERS[name], **limits})


def _session_description(kind: str, whose: str) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["sdp", "type"],
        "description": f"{whose} WebRTC session description, as RTCPeerConnection.localDescription gives it",
        "properties": {"sdp": {"type": "string", "pattern": r"\S"}, "type": {"type": "string", "enum": [kind]}},
    }


def _speech_text(characters: int) -> dict[str, Any]:
    """Text to speak: not too long, with something to say, and no NUL (the core refuses anything else)."""
    return {
        "type": "string",
        "maxLength": characters,
        "pattern": f"^[^\\x00]*{SAYABLE.pattern}[^\\x00]*$",
        "description": f"The text to speak: at most {characters} characters, with a letter or a digit",
    }


def _page(tag: str, summary: str) -> dict[str, Any]:
    """A page open without credentials."""
    html = {"description": "HTML page", "content": {"text/html": {"schema": STRING}}}
    return {"tags": [tag], "summary": summary, "responses": {"200": html}}


def _files(tag: str, summary: str) -> dict[str, Any]:
    """A page's files, by name."""
    asset = {"name": "asset", "in": "path", "required": True, "schema": STRING}
    return {
        "tags": [tag],
        "summary": summary,
        "parameters": [asset],
        "responses": {"200": {"description": "The file"}, **_errors(404)},
    }


STRING = {"type": "string"}
BOOLEAN = {"type": "boolean"}
BINARY = {"type": "string", "format": "binary"}
AUDIO = "audio/*"  # an uploaded recording's part, in one of UPLOAD_FORMATS
FORMATS = ", ".join(UPLOAD_FORMATS.values())  # what an uploaded recording may be
BEAM_SIZE = {"type": "integer", "minimum": 1, "maximum": MAX_BEAM_SIZE}
VAD_SENSITIVITY = {"type": "string", "enum": list(SENSITIVITIES), "default": SENSITIVITIES[0]}
VOICE_NAME_STRING = {"type": "string", "pattern": VOICE_NAME.pattern}
ASR_LANGUAGE = {
    "type": "string",
    "enum": list(WHISPER_LANGUAGES),
    "description": "Whisper's code, or auto to detect it; other spellings (en-US, EN) are read as the same "
    "language. A model trained on English only (tiny.en) takes en alone.",
}
NULLABLE_STRING = {"type": "string", "nullable": True}
RETRY_AFTER = {"Retry-After": {"description": "Seconds to wait before trying again", "schema": {"type": "integer"}}}
X_CACHE = {
    "X-Cache": {
        "description": "Whether the speech came from the speech cache",
        "schema": {"type": "string", "enum": ["HIT", "MISS", "BYPASS"]},
    }
}

# status -> (component name, description, extra headers)
ERROR_RESPONSES: dict[int, tuple[str, str, dict[str, Any]]] = {
    400: ("BadRequest", "A field is wrong; `param` names it", {}),
    401: ("Unauthorized", "No valid credentials (API key or HTTP Basic); see WWW-Authenticate", {}),
    403: (
        "Forbidden",
        "A browser's request by a name that is not this server's (--allowed-host), or a page of another origin "
        "posting (--cors-origin); for /audio/willow.wav, a server that keeps no recording (it has no credentials)",
        {},
    ),
    404: (
        "NotFound",
        "Unknown model, voice, speaker or path; or a voice the Hugging Face Hub has, with downloads off (the message "
        "says how to allow them)",
        {},
    ),
    413: (
        "PayloadTooLarge",
        "The body is over its route's limit, which the message states: --max-upload-mb for an upload; less for "
        f"speech with a reference recording, a JSON body ({MAX_JSON_BYTES} bytes) or a WebRTC offer",
        {},
    ),
    415: ("UnsupportedMediaType", "The audio cannot be decoded, or the body is not multipart/form-data", {}),
    429: ("TooManyRequests", "The model's queue is full; try again after Retry-After", RETRY_AFTER),
    502: (
        "BadGateway",
        "A voice's first use fetched it from the Hugging Face Hub, and that failed; the message says why",
        {},
    ),
    503: ("Loading", "The models are still loading; try again after Retry-After", RETRY_AFTER),
}

# What both uploads take; what transcriptions take besides (OpenAI's translations take neither include[] nor
# chunking_strategy); and the rules between fields.
_UPLOAD_FIELDS: dict[str, Any] = {
    "file": {
        **BINARY,
        "description": f"Audio in one of these formats: {FORMATS}; at least {openai_transcriptions.MIN_SECONDS:g} s",
    },
    "model": {
        "type": "string",
        "default": OPENAI_ASR_MODEL,
        "description": "A loaded Whisper model",
    },
    "language": {**ASR_LANGUAGE, "description": "Detected when absent. " + ASR_LANGUAGE["description"]},
    "prompt": {"type": "string", "maxLength": MAX_PROMPT_CHARS, "description": "Text as if said just before"},
    "response_format": {
        "type": "string",
        "enum": list(transcript_formats.FORMATS),
        "default": transcript_formats.DEFAULT,
    },
    "temperature": {
        "type": "number",
        "minimum": openai_transcriptions.MIN_TEMPERATURE,
        "maximum": openai_transcriptions.MAX_TEMPERATURE,
        "default": openai_transcriptions.MIN_TEMPERATURE,
    },
    "timestamp_granularities[]": {
        "type": "array",
        "items": {"type": "string", "enum": list(openai_transcriptions.GRANULARITIES)},
        "description": f"Only with response_format {transcript_formats.VERBOSE}",
    },
    "stream": {
        "type": "boolean",
        "default": False,
        "description": "Server-Sent Events transcript.text.delta, then transcript.text.done",
    },
}
_TRANSCRIPTION_FIELDS: dict[str, Any] = {
    "include[]": {
        "type": "array",
        "items": {"type": "string", "enum": list(openai_transcriptions.INCLUDE)},
        "description": "logprobs: each token of the text with the model's log-probability of it, in the "
        f"reply (response_format {transcript_formats.DEFAULT} only) or in each streamed event",
    },
    CHUNKING: {
        "type": "string",
        "enum": [openai_transcriptions.AUTO_CHUNKING],
        "description": f"auto, or a {openai_transcriptions.SERVER_VAD} object as {CHUNKING}[...] fields "
        "(or as one JSON string): checked, then the server's own VAD cuts the audio at its pauses",
    },
    f"{CHUNKING}[type]": {"type": "string", "enum": [openai_transcriptions.SERVER_VAD]},
    f"{CHUNKING}[threshold]": {"type": "number", "minimum": THRESHOLD[0], "maximum": THRESHOLD[1]},
    **{f"{CHUNKING}[{key}]": {"type": "integer", "minimum": VAD_MS[0], "maximum": VAD_MS[1]} for key in VAD_KEYS[1:]},
}
_TIMES_RULE: dict[str, Any] = {
    "anyOf": [  # times come only with verbose_json
        {"not": {"required": ["timestamp_granularities[]"]}},
        {
            "required": ["response_format"],
            "properties": {"response_format": {"enum": [transcript_formats.VERBOSE]}},
        },
    ]
}
_TRANSCRIPTION_RULES: list[dict[str, Any]] = [
    {
        "anyOf": [  # logprobs only with json, the default
            {"not": {"required": ["include[]"]}},
            {"properties": {"response_format": {"enum": [transcript_formats.DEFAULT]}}},
        ]
    },
    {
        "anyOf": [  # a server_vad object has its type
            {"required": [f"{CHUNKING}[type]"]},
            {"not": {"anyOf": [{"required": [f"{CHUNKING}[{key}]"]} for key in VAD_KEYS]}},
        ]
    },
    {"not": {"required": [CHUNKING, f"{CHUNKING}[type]"]}},  # auto, or an object: not both
]


def _upload(properties: dict[str, Any], rules: list[dict[str, Any]]) -> dict[str, Any]:
    """An upload's multipart/form-data fields."""
    return {
        "type": "object",
        "required": ["file"],
        "additionalProperties": False,  # others are ignored, but only a name a part's header can carry
        "properties": properties,
        "allOf": rules,
    }


SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "description": "OpenAI's error envelope, used for every error",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["message", "type", "param", "code"],
                "properties": {
                    "message": STRING,
                    "type": {"type": "string", "enum": ["invalid_request_error", "server_error"]},
                    "param": NULLABLE_STRING,
                    "code": NULLABLE_STRING,
                },
            }
        },
    },
    "TranscriptionRequest": _upload(_UPLOAD_FIELDS | _TRANSCRIPTION_FIELDS, [_TIMES_RULE, *_TRANSCRIPTION_RULES]),
    "TranslationRequest": _upload(_UPLOAD_FIELDS, [_TIMES_RULE]),
    "Usage": {
        "type": "object",
        "properties": {"type": {"type": "string", "enum": ["duration"]}, "seconds": {"type": "number"}},
    },
    "Transcription": {
        "type": "object",
        "required": ["text"],
        "properties": {
            "text": STRING,
            "usage": _schema("Usage"),
            "logprobs": {
                "type": "array",
                "description": "With include[]=logprobs: each token of the text",
                "items": {
                    "type": "object",
                    "required": ["token", "bytes", "logprob"],
                    "properties": {
                        "token": STRING,
                        "bytes": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 255}},
                        "logprob": {"type": "number", "maximum": 0},
                    },
                },
            },
        },
    },
    "VerboseTranscription": {
        "type": "object",
        "required": ["task", "language", "duration", "text", "segments"],
        "properties": {
            "task": {"type": "string", "enum": ["transcribe", "translate"]},
            "language": STRING,
            "duration": {"type": "number"},
            "text": STRING,
            "segments": {"type": "array", "items": _schema("Segment")},
            "words": {"type": "array", "items": _schema("Word")},
            "usage": _schema("Usage"),
        },
    },
    "Segment": {
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "seek": {"type": "integer"},
            "start": {"type": "number"},
            "end": {"type": "number"},
            "text": STRING,
            "tokens": {"type": "array", "items": {"type": "integer"}},
            "temperature": {"type": "number"},
            "avg_logprob": {"type": "number"},
            "compression_ratio": {"type": "number"},
            "no_speech_prob": {"type": "number"},
        },
    },
    "Word": {
        "type": "object",
        "properties": {"word": STRING, "start": {"type": "number"}, "end": {"type": "number"}},
    },
    "SpeechRequest": {
        "type": "object",
        "required": ["input"],
        "properties": {
            "input": _schema("SpeechText"),
            "model": {"type": "string", "description": f"{', '.join(openai_speech.OPENAI_TTS_MODELS)} or a voice name"},
            "voice": {
                "oneOf": [
                    VOICE_NAME_STRING,
                    {"type": "object", "properties": {"id": VOICE_NAME_STRING}, "required": ["id"]},
                ],
                "description": "A voice of ours or an OpenAI voice name",
            },
            "response_format": {
                "type": "string",
                "enum": list(ENCODINGS),
                "default": openai_speech.DEFAULT_FORMAT,
            },
            "speed": {"type": "number", "minimum": MIN_SPEED, "maximum": MAX_SPEED},
            "stream_format": {
                "type": "string",
                "enum": list(openai_speech.STREAM_FORMATS),
                "default": openai_speech.DEFAULT_STREAM_FORMAT,
            },
            "speaker": {"type": "string", "description": "A speaker of a multi-speaker voice"},
            "language": {"type": "string", "description": "For voices that speak several"},
            "cache": {"type": "boolean", "default": SpeechRequest.cached, "description": "false synthesises afresh"},
        },
    },
    "SpeechFromReference": {
        "allOf": [
            _schema("SpeechRequest"),
            {
                "type": "object",
                "required": ["reference_audio"],
                "properties": {
                    "reference_audio": {
                        **BINARY,
                        "description": f"3-30 s of one person speaking ({FORMATS}): XTTS speaks in that voice, "
                        "for this request only; also accepted as speaker_wav",
                    }
                },
            },
        ]
    },
    "Recording": {
        "type": "object",
        "required": ["audio_file"],
        "additionalProperties": False,
        "properties": {"audio_file": {**BINARY, "description": f"The recording: {FORMATS}"}},
    },
    "WakeRecording": {
        "type": "object",
        "required": ["file"],
        "additionalProperties": False,
        "properties": {"file": {**BINARY, "description": f"The recording: {FORMATS}"}},
    },
    "WakeWords": {
        "type": "object",
        "required": ["wake_words"],
        "properties": {
            "wake_words": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["name", "phrase", "family", "languages"],
                    "properties": {
                        "name": {"type": "string", "description": "What `names` takes"},
                        "phrase": {"type": "string", "description": "What the speaker says"},
                        "family": {"type": "string", "enum": [MICRO_WAKE, OPEN_WAKE]},
                        "languages": {"type": "array", "items": STRING},
                    },
                },
            }
        },
    },
    "WakeDetections": {
        "type": "object",
        "required": ["detections", "audio_duration"],
        "properties": {
            "detections": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["name", "timestamp", "probability"],
                    "properties": {
                        "name": {"type": "string", "description": "The wake word, as named in the request"},
                        "timestamp": {"type": "integer", "description": "ms into the audio where it was heard"},
                        "probability": {"type": "number", "minimum": 0, "maximum": 1},
                    },
                },
            },
            "audio_duration": {"type": "integer", "description": "ms of audio heard"},
        },
    },
    "ClonedVoice": {
        "type": "object",
        "properties": {
            "status": {"type": "string", "description": "Added speaker 'NAME'"},
            "voice": {
                "type": "object",
                "properties": {
                    "name": STRING,
                    "model": STRING,
                    "created": STRING,
                    "source_seconds": {"type": "number"},
                    "source_bytes": {"type": "integer"},
                },
            },
        },
    },
    "Model": {
        "type": "object",
        "required": ["id", "object", "created", "owned_by"],
        "properties": {
            "id": STRING,
            "object": {"type": "string", "enum": ["model"]},
            "created": {"type": "integer"},
            "owned_by": STRING,
        },
    },
    "ModelList": {
        "type": "object",
        "properties": {
            "object": {"type": "string", "enum": ["list"]},
            "data": {"type": "array", "items": _schema("Model")},
        },
    },
    "VoiceList": {
        "type": "object",
        "properties": {
            "voices": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "id": STRING,
                        "name": STRING,
                        "languages": {"type": "array", "items": STRING},
                        "speakers": {"type": "array", "items": STRING},
                        "description": NULLABLE_STRING,
                        "engine": STRING,
                        "installed": {
                            "type": "boolean",
                            "description": "false: a voice the Hugging Face Hub has, fetched on its first use",
                        },
                    },
                },
            },
            "openai": {
                "type": "object",
                "additionalProperties": STRING,
                "description": "The voice each OpenAI voice name means",
            },
            "downloads": {
                "type": "boolean",
                "description": "Whether a voice not installed is fetched on its first use (--allow-download)",
            },
        },
    },
    "Health": {
        "type": "object",
        "properties": {
            "status": {"type": "string", "enum": ["ok"]},
            "asr": {"type": "object", "additionalProperties": _schema("EngineState")},
            "tts": {"type": "object", "additionalProperties": _schema("EngineState")},
        },
    },
    "EngineState": {
        "type": "object",
        "properties": {"state": {"type": "string", "enum": ["loaded", "unloaded"]}, "pending": {"type": "integer"}},
    },
    "WillowTranscript": {
        "type": "object",
        "required": ["language", "text"],
        "properties": {
            "language": STRING,
            "text": STRING,
            "infer_time": {"type": "number", "description": "ms, with stats=true"},
            "audio_duration": {"type": "number", "description": "ms, with stats=true"},
            "infer_speedup": {"type": "number", "nullable": True, "description": "with stats=true"},
            "total_time": {"type": "number", "description": "ms, with stats=true"},
        },
    },
    "Offer": _session_description("offer", "The browser's"),
    "Answer": _session_description("answer", "The server's"),
}

_TRANSCRIPT_RESPONSES: dict[str, Any] = {
    "200": {
        "description": "The transcript in the asked response_format, or events when stream=true",
        "content": {
            JSON: {"schema": {"oneOf": [_schema("Transcription"), _schema("VerboseTranscription")]}},
            "text/plain": {"schema": STRING},
            "application/x-subrip": {"schema": STRING},
            "text/vtt": {"schema": STRING},
            "text/event-stream": {"schema": STRING},
        },
    },
    **_errors(400, 404, 413, 415, 429, 503),
}

_TRANSCRIPTION_REQUEST = {
    "multipart/form-data": {"schema": _schema("TranscriptionRequest"), "encoding": {"file": {"contentType": AUDIO}}}
}
_TRANSLATION_REQUEST = {
    "multipart/form-data": {"schema": _schema("TranslationRequest"), "encoding": {"file": {"contentType": AUDIO}}}
}


def _decoding_query(language: str) -> list[dict[str, Any]]:
    """How a query string asks Whisper to decode, alike for Willow and WebRTC; `language`: what the route calls it."""
    return [
        _query(language, "Language of the speech; detected when absent", ASR_LANGUAGE),
        _query("detect_language", "Detect the language even where --language names one", BOOLEAN),
        _query("beam_size", "Beam search width (default: --beam-size)", BEAM_SIZE),
    ]


_WILLOW_QUERY = [
    _query("model", "A loaded Whisper model (default: the first)"),
    *_decoding_query("force_language"),
    _query("translate", "Translate to English", BOOLEAN),
    _query("stats", "Add timings (ms) to the answer", BOOLEAN),
]
_DEVICE_AUDIO = [  # how a device describes the raw audio of its body (/api/willow, and /api/wake without a file)
    _header(
        "x-audio-codec",
        "pcm (raw), wav (PCM after a RIFF header) or amrwb (AMR-WB storage format)",
        {"type": "string", "enum": list(willow.CODECS), "default": willow.DEFAULT_CODEC},
    ),
    _format_header("x-audio-sample-rate", "Hz", {"minimum": MIN_RATE, "maximum": MAX_RATE}),
    _format_header("x-audio-bits", "Bits per sample", {"enum": list(willow.SAMPLE_BITS)}),
    _format_header("x-audio-channel", "Channels", {"enum": list(CHANNEL_COUNTS)}),
]
_RECORDING = {
    "multipart/form-data": {"schema": _schema("Recording"), "encoding": {"audio_file": {"contentType": AUDIO}}}
}

_WILLOW_ANSWER = {"200": _json(_schema("WillowTranscript"), "The transcript"), **_errors(400, 404, 413, 415, 429, 503)}

OPERATIONS: dict[tuple[str, str], dict[str, Any]] = {
    ("post", "/v1/audio/transcriptions"): {
        "tags": ["OpenAI"],
        "summary": "Transcribe audio",
        "description": "chunking_strategy (auto, or a server_vad object's threshold, prefix_padding_ms and "
        "silence_duration_ms) is checked and accepted, but the server's own VAD always cuts long audio at its "
        "pauses, with the run-up and padding Whisper needs: another threshold or padding would lose words. "
        "include[]=logprobs adds each token of the text with the model's log-probability of it (given the audio, "
        "the prompt and the tokens before it) to the json reply, to each transcript.text.delta (its own tokens) and "
        "to transcript.text.done (all of them); with another response_format it is refused, as OpenAI does. usage "
        "is the seconds of audio, as whisper-1 reports it.",
        "requestBody": {
            "required": True,
            "content": _TRANSCRIPTION_REQUEST,
        },
        "responses": _TRANSCRIPT_RESPONSES,
    },
    ("post", "/v1/audio/translations"): {
        "tags": ["OpenAI"],
        "summary": "Translate speech into English text",
        "requestBody": {
            "required": True,
            "content": _TRANSLATION_REQUEST,
        },
        "responses": _TRANSCRIPT_RESPONSES,
    },
    ("post", "/v1/audio/speech"): {
        "tags": ["OpenAI"],
        "summary": "Speak text",
        "description": "The audio is sent as it is made: chunked bytes, or speech.audio.delta events. "
        "As multipart/form-data with a reference recording, speaks in a voice cloned from it (XTTS).",
        "requestBody": {
            "required": True,
            "content": {
                JSON: {"schema": _schema("SpeechRequest")},
                "multipart/form-data": {
                    "schema": _schema("SpeechFromReference"),
                    "encoding": {"reference_audio": {"contentType": AUDIO}},
                },
            },
        },
        "responses": {
            "200": {
                "description": "Speech in the asked response_format, or events when stream_format=sse",
                "headers": X_CACHE,
                "content": {
                    **{encoding.media_type: {"schema": BINARY} for encoding in ENCODINGS.values()},
                    "text/event-stream": {"schema": STRING},
                },
            },
            **_errors(400, 404, 413, 415, 429, 502, 503),
        },
    },
    ("get", "/v1/models"): {
        "tags": ["OpenAI"],
        "summary": "Models a request may name",
        "responses": {"200": _json(_schema("ModelList"), "Loaded Whisper and XTTS models, then OpenAI's names")},
    },
    ("get", "/v1/models/{model_id}"): {
        "tags": ["OpenAI"],
        "summary": "One model",
        "parameters": [{"name": "model_id", "in": "path", "required": True, "schema": STRING}],
        "responses": {"200": _json(_schema("Model"), "The model"), **_errors(404, 503)},
    },
    ("get", "/v1/realtime"): {
        "tags": ["OpenAI"],
        "summary": "Live transcription: OpenAI's Realtime API, transcription sessions, over a WebSocket",
        "description": "Open with a WebSocket (Upgrade: websocket) and ?intent=transcription; the header OpenAI-Beta: "
        "realtime=v1 (or the subprotocol openai-beta.realtime-v1) picks the beta shape. The client sends JSON events: "
        "session.update (or transcription_session.update), input_audio_buffer.append (base64 PCM, 24 kHz, or "
        "G.711), .commit and .clear; the server sends session.created/updated, input_audio_buffer.speech_started, "
        ".speech_stopped, .committed and .cleared, conversation.item.input_audio_transcription.delta, .completed "
        "and .failed, and error (code, param, the client's event_id). With server_vad or semantic_vad the server "
        "ends each turn on what was said; with turn_detection null the client's commit does. 400 without "
        "intent=transcription or without the upgrade; 429 at --realtime-max-sessions where no session is idle or "
        "held by an address holding two more. A client event is at most 64 KiB of JSON (an append's audio aside) "
        "in a frame of at most 1 MiB; audio is read at most twice real time past a 10 s burst.",
        "parameters": [_query("intent", "transcription: the only kind of session served", STRING, required=True)],
        "responses": {
            "101": {"description": "Switching protocols: the session's events follow on the WebSocket"},
            **_errors(400, 401, 403, 429, 503),
        },
    },
    ("post", "/v1/realtime/calls"): {
        "tags": ["OpenAI"],
        "summary": "Live transcription over WebRTC: OpenAI's Realtime API, transcription sessions, as a call",
        "description": "The client's offer (the microphone's audio track and a data channel named oai-events, every "
        "ICE candidate gathered) in, the SDP answer out, as OpenAI's SDK sends it (client.realtime.calls.create): "
        "multipart/form-data with the part sdp and, optionally, session (JSON: a GA session.update's session, type "
        "transcription, applied before any audio), or the offer alone as an application/sdp body. The track's audio "
        "is transcribed; the events of /v1/realtime (but for input_audio_buffer.append) go both ways on oai-events, "
        "session.created first. The call counts among the WebRTC connections (--rtc-max-sessions, shared with "
        "/api/rtc/asr): 429 when they are all open and none is idle or held by an address holding two more; 503 "
        "also when --rtc-ports "
        "has no free port.",
        "requestBody": {
            "required": True,
            "content": {
                "multipart/form-data": {
                    "schema": {
                        "type": "object",
                        "required": ["sdp"],
                        "properties": {
                            "sdp": {**STRING, "description": "The client's offer"},
                            "session": {**STRING, "description": "The session as JSON, as session.update sends it"},
                        },
                    },
                    "encoding": {"session": {"contentType": JSON}},  # sdp: text (the SDK sends application/sdp)
                },  # or a raw application/sdp body (the description says so): no fuzzer writes SDP
            },
        },
        "responses": {
            "201": {
                "description": "The answer, with the server's candidates",
                "headers": {"Location": {"description": "/v1/realtime/calls/{call_id}", "schema": STRING}},
                "content": {"application/sdp": {"schema": STRING}},
            },
            **_errors(400, 401, 403, 404, 413, 415, 429, 503),
        },
    },
    ("post", "/v1/realtime/calls/{call_id}/hangup"): {
        "tags": ["OpenAI"],
        "summary": "End a call, from the address that made it",
        "parameters": [{"name": "call_id", "in": "path", "required": True, "schema": STRING}],
        "responses": {"200": {"description": "The call is over"}, **_errors(401, 403, 404)},
    },
    ("get", "/v1/audio/voices"): {
        "tags": ["OpenAI"],
        "summary": "Voices, their languages and speakers",
        "responses": {"200": _json(_schema("VoiceList"), "Every voice"), **_errors(503)},
    },
    ("get", "/health"): {
        "tags": ["Operations"],
        "summary": "State of every model (open without credentials)",
        "responses": {"200": _json(_schema("Health"), "Serving"), **_errors(503)},
    },
    ("head", "/health"): {
        "tags": ["Operations"],
        "summary": "Whether the server serves (open without credentials)",
        "responses": {"200": {"description": "Serving"}, "503": {"description": "Models still loading"}},
    },
    ("get", "/metrics"): {  # described ahead of the route (Prometheus); published once registered
        "tags": ["Operations"],
        "summary": "Prometheus metrics",
        "responses": {
            "200": {"description": "Prometheus text exposition", "content": {"text/plain": {"schema": STRING}}}
        },
    },
    ("get", "/api/ping"): {
        "tags": ["Willow"],
        "summary": "Ping",
        "responses": {
            "200": _json({"type": "object", "properties": {"message": {"type": "string", "enum": ["pong"]}}}, "Pong")
        },
    },
    ("get", "/api/tts"): {
        "tags": ["Willow"],
        "summary": "Speak text as a WAV streamed as it is made",
        "parameters": [
            _query("text", "The text to speak", _schema("SpeechText"), required=True),
            _query("voice", "A loaded voice (default: the first)", VOICE_NAME_STRING),
            _query(
                "speaker", "A voice name, as older firmware sends it; ignored if no voice has it", VOICE_NAME_STRING
            ),
            _query("language", "For voices that speak several"),
            _query("nocache", "Any value skips the speech cache"),
            _query("format", "Accepted for older firmware; always WAV"),
        ],
        "responses": {
            "200": {
                "description": "WAV (16-bit mono) streamed as it is made",
                "headers": X_CACHE,
                "content": {"audio/wav": {"schema": BINARY}},
            },
            **_errors(400, 404, 429, 502, 503),
        },
    },
    ("post", "/api/willow"): {
        "tags": ["Willow"],
        "summary": "Transcribe what a Willow device streams while the user speaks",
        "description": "Chunked transfer encoding; each chunk is transcribed as it arrives.",
        "parameters": [
            *_WILLOW_QUERY,
            _query(
                "save_audio",
                "Keep the recording as heard, at /audio/willow.wav, if the server has credentials (without, it keeps "
                "none)",
                BOOLEAN,
            ),
            *_DEVICE_AUDIO,
        ],
        "requestBody": {"required": True, "content": {"application/octet-stream": {"schema": BINARY}}},
        "responses": _WILLOW_ANSWER,
    },
    ("post", "/api/asr"): {
        "tags": ["Willow"],
        "summary": "Transcribe a whole recording",
        "parameters": _WILLOW_QUERY,
        "requestBody": {"required": True, "content": _RECORDING},
        "responses": _WILLOW_ANSWER,
    },
    ("post", "/api/tts"): {
        "tags": ["Willow"],
        "summary": "Clone a voice (XTTS) from a recording, as WIS's XTTS server does",
        "parameters": [_query("speaker", "The new voice's name", VOICE_NAME_STRING, required=True)],
        "requestBody": {"required": True, "content": _RECORDING},
        "responses": {"200": _json(_schema("ClonedVoice"), "The voice, stored"), **_errors(400, 404, 415, 503)},
    },
    ("get", "/audio/willow.wav"): {
        "tags": ["Willow"],
        "summary": "The last recording sent with save_audio=true, as the server heard it",
        "responses": {
            "200": {"description": "16 kHz WAV", "content": {"audio/x-wav": {"schema": BINARY}}},
            **_errors(404),
        },
    },
    ("head", "/audio/willow.wav"): {
        "tags": ["Willow"],
        "summary": "Whether a recording is saved",
        "responses": {"200": {"description": "A recording is saved"}, "404": {"description": "None yet"}},
    },
    ("get", "/api/wake"): {
        "tags": ["Wake words"],
        "summary": "The wake words offered, both families",
        "responses": {"200": _json(_schema("WakeWords"), "Every wake word offered"), **_errors(503)},
    },
    ("post", "/api/wake"): {
        "tags": ["Wake words"],
        "summary": "The wake words heard in a recording, or in audio streamed as it is recorded",
        "description": f"A file (multipart, field file: {FORMATS}), or a body of raw audio described by x-audio-* "
        "headers, as /api/willow takes it (chunked transfer encoding: heard as it arrives). Each wake word is heard "
        "again once --wake-refractory-seconds of audio have passed. 404 for a wake word that is not offered.",
        "parameters": [
            _query("names", "Wake words to listen for, comma-separated (default: okay_nabu)"),
            *_DEVICE_AUDIO,
        ],
        "requestBody": {
            "required": True,
            "content": {
                "multipart/form-data": {
                    "schema": _schema("WakeRecording"),
                    "encoding": {"file": {"contentType": AUDIO}},
                },
                "application/octet-stream": {"schema": BINARY},
            },
        },
        "responses": {
            "200": _json(_schema("WakeDetections"), "Every detection, in order"),
            **_errors(400, 404, 413, 415, 429, 503),
        },
    },
    ("post", "/api/rtc/asr"): {
        "tags": ["WebRTC"],
        "summary": "Connect a browser over WebRTC: transcripts of its microphone on a data channel",
        "description": "The browser's offer (an Opus audio track and a data channel, every ICE candidate "
        "gathered) in, the answer out. On the data channel, JSON {type, message?, obj?}: the browser sends "
        "ping, start and stop (obj: model, language, beam_size, detect_language, partials, hands_free, "
        "vad_sensitivity), wake (obj.names: wake words to listen for) and wake-stop; the server sends pong, partial "
        "(obj.text: the stable text so far), infer (obj: text, language, audio_duration, infer_time, model), "
        "detection (obj: name, timestamp, probability), not-detected, log and error (obj.code). Hands-free, the "
        "server ends each turn at a pause (turn-end, obj.reason), answers it with infer and listens for the next, "
        "until stop. "
        "429 when --rtc-max-sessions connections are open; 503 also when --rtc-ports has no free port.",
        "parameters": [
            _query("model", "A loaded Whisper model for this connection's utterances (default: the first)"),
            *_decoding_query("language"),
            _query("partials", "Send partial messages while the user speaks (default true)", BOOLEAN),
            _query("hands_free", "The server ends each turn when the user pauses, and listens for the next", BOOLEAN),
            _query("vad_sensitivity", "Hands-free: how soon a pause ends a turn", VAD_SENSITIVITY),
        ],
        "requestBody": {"required": True, "content": {JSON: {"schema": _schema("Offer")}}},
        "responses": {
            "200": _json(_schema("Answer"), "The answer, with the server's candidates"),
            **_errors(400, 404, 413, 429, 503),
        },
    },
    ("get", "/api/openapi.json"): {
        "tags": ["Documentation"],
        "summary": "This description (open without credentials)",
        "responses": {"200": _json({"type": "object"}, "OpenAPI 3.0 document")},
    },
    ("get", "/api/docs"): _page("Documentation", "Interactive documentation (Swagger UI; open without credentials)"),
    ("get", "/api/docs/{asset}"): _files("Documentation", "Swagger UI's files, served from the package"),
    ("get", "/"): _page(
        "Pages", "The console: models, voices, status, transcribe, speak, clone (open without credentials)"
    ),
    ("get", "/rtc"): _page(
        "Pages", "Press to talk: the microphone over WebRTC, partial and final text (open without credentials)"
    ),
    ("get", "/realtime"): _page(
        "Pages",
        "Hands-free transcription over OpenAI's Realtime API (/v1/realtime): the microphone as 24 kHz PCM, each "
        "turn's text as it is spoken (open without credentials)",
    ),
    ("get", "/static/{asset}"): _files("Pages", "The pages' scripts, stylesheet and icon, served from the package"),
}

SECURITY_SCHEMES = {
    "bearer": {"type": "http", "scheme": "bearer", "description": "--api-key, as the OpenAI SDK sends it"},
    "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key", "description": "--api-key"},
    "basic": {"type": "http", "scheme": "basic", "description": "--api-user/--api-password (Willow devices)"},
}

# -- the document -----------------------------------------------------------------


def setup(app: web.Application, max_text_chars: int) -> None:
    """What the description says of this server's own limits (--max-text-chars); the rest is the same on every
    server."""
    app[SPEECH_CHARS] = min(openai_speech.MAX_INPUT, max_text_chars)


def registered(app: web.Application) -> set[tuple[str, str]]:
    """(method, path) of every route the application serves, lower-case methods as OpenAPI spells them."""
    routes = set()
    for route in app.router.routes():
        info = route.resource.get_info() if route.resource is not None else {}
        path = info.get("formatter") or info.get("path")  # dynamic ({name}) or plain
        if path is not None:
            routes.add((route.method.lower(), path))
    return routes


def _security(creds: Credentials) -> list[dict[str, list[str]]]:
    """The ways a request may pass; each dict is one alternative."""
    ways: list[dict[str, list[str]]] = []
    if creds.bearer:
        ways += [{"bearer": []}, {"apiKey": []}]
    if creds.basic:
        ways.append({"basic": []})
    return ways


def document(app: web.Application) -> dict[str, Any]:
    """The description of what `app` serves, with its security schemes when credentials are required."""
    creds = app.get(CREDENTIALS, Credentials())
    security = _security(creds)
    paths: dict[str, dict[str, Any]] = {}
    for method, path in sorted(registered(app) & OPERATIONS.keys()):
        operation = dict(OPERATIONS[method, path])
        if path not in origin.OPEN_RESOURCES:  # a browser's request may be refused on any other route
            operation["responses"] = {**operation["responses"], **_errors(403)}
        if security:
            if path in OPEN_RESOURCES:
                operation["security"] = []
            else:
                operation["responses"] = {**operation["responses"], **_errors(401)}
        paths.setdefault(path, {})[method] = operation
    components: dict[str, Any] = {
        "schemas": {**SCHEMAS, "SpeechText": _speech_text(app[SPEECH_CHARS])},
        "responses": {
            name: {"description": description, "headers": headers, "content": {JSON: {"schema": _schema("Error")}}}
            for name, description, headers in ERROR_RESPONSES.values()
        },
    }
    doc: dict[str, Any] = {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "wyoming-wis",
            "version": __version__,
            "description": "Local speech server: OpenAI's audio API and Willow Inference Server's API on Whisper, "
            "Piper and XTTS. Errors use OpenAI's envelope.",
        },
        "paths": paths,
        "components": components,
    }
    if security:
        components["securitySchemes"] = {
            name: scheme for name, scheme in SECURITY_SCHEMES.items() if any(name in way for way in security)
        }
        doc["security"] = security
    return doc
