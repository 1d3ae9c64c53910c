"""Willow Inference Server's API as a Willow device uses it, on the shared server (speech to text: to come)."""

from __future__ import annotations

import uuid

import httpx
from helpers import Server
from test_http_openai import assert_speech, decode


def willow_tts(server: Server, **query: str) -> httpx.Response:
    """GET /api/tts read as it streams in, as the device's player does."""
    with httpx.stream("GET", server.http_url + "/api/tts", params=query, timeout=60) as response:
        response.read()
    return response


def test_tts_streams_a_playable_wav_and_tells_the_cache_state(server: Server) -> None:
    # Legacy firmware adds format=WAV&speaker=CLB: tolerated; a new text each run starts uncached.
    text = f"The garage door is closed, code {uuid.uuid4().hex[:4]}."
    first = willow_tts(server, format="WAV", speaker="CLB", text=text)
    assert first.status_code == 200 and first.headers["Content-Type"] == "audio/wav", first.text
    assert first.headers["X-Cache"] == "MISS"
    assert first.headers.get("Transfer-Encoding") == "chunked"  # streamed, not held back to the end
    assert_speech(*decode(first.content))

    again = willow_tts(server, text=text)
    assert again.headers["X-Cache"] == "HIT"
    assert decode(again.content)[0].shape == decode(first.content)[0].shape

    bypass = willow_tts(server, text=text, nocache="1")
    assert bypass.headers["X-Cache"] == "BYPASS"
    assert_speech(*decode(bypass.content))


def test_tts_errors_are_json_and_ping_answers(server: Server) -> None:
    missing = willow_tts(server, speaker="CLB")
    assert missing.status_code == 400
    assert missing.json()["error"]["param"] == "text"
    too_long = willow_tts(server, text="word " * 1000)
    assert too_long.status_code == 400 and too_long.json()["error"]["param"] == "text"
    assert httpx.get(server.http_url + "/api/ping", timeout=10).json() == {"message": "pong"}
