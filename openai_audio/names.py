"""The names OpenAI's audio API uses that this server answers to, and the shapes of what it sends back in both of
its APIs (the REST routes, the Realtime API)."""

from __future__ import annotations

from typing import Any

from wyoming_wis.core import TokenLogprob

OPENAI_ASR_MODEL = "whisper-1"  # means our default model; so do OpenAI's other transcription models:
OPENAI_ASR_MODELS = (OPENAI_ASR_MODEL, "gpt-4o-transcribe", "gpt-4o-mini-transcribe", "gpt-realtime-whisper")


def our_model(name: str | None) -> str | None:
    """The Whisper model a client's `model` names: None (the default) for OpenAI's names."""
    return None if name is None or name in OPENAI_ASR_MODELS else name


def token_logprobs(tokens: tuple[TokenLogprob, ...]) -> list[dict[str, Any]]:
    """Tokens as OpenAI lists them: `token` (text), its `bytes` and its `logprob`."""
    return [{"token": token.text, "bytes": list(token.token), "logprob": token.logprob} for token in tokens]
