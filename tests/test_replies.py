"""Every reply is heard, on every frontend, however it ends (tests/replies.py): Home Assistant's have no full stop.

Each must be spoken and heard back; a text with nothing to say is refused, never
answered with a WAV of no samples.
"""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest
from helpers import Pcm, Server, collect_speech, load_audio, read_until, synthesize, transcribe, wer
from replies import NOTHING_TO_SAY, REPLIES, words
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop

FRONTENDS = ["wyoming", "wyoming-streamed", "openai", "willow"]


def heard_as_said(text: str, heard: str) -> bool:
    """Compare the words (replies.words: "Okay" is OK, "3.45pm" is 3:45 PM; no emoji). A word in four may be
    misheard ("Turn on the light"); a lone word only has to be heard as one (base hears "Done" as "then" about as
    often as not)."""
    said, heard = (" ".join(words(value)) for value in (text, heard))
    if len(said.split()) == 1:
        return len(heard.split()) == 1
    return wer([said], [heard]) <= 0.25


async def speak(server: Server, frontend: str, text: str) -> Pcm:
    """The reply's audio through one frontend, as that frontend's real clients ask for it."""
    if frontend == "wyoming":
        async with server.client() as client:
            return (await synthesize(client, text)).pcm
    if frontend == "wyoming-streamed":  # as Home Assistant streams an LLM's answer: pieces split mid-word
        async with server.client() as client:
            await client.write_event(SynthesizeStart().event())
            for start in range(0, len(text), 4):
                await client.write_event(SynthesizeChunk(text=text[start : start + 4]).event())
            await client.write_event(Synthesize(text=text).event())
            await client.write_event(SynthesizeStop().event())
            return collect_speech(await read_until(client, "synthesize-stopped")).pcm
    if frontend == "openai":
        api = openai.AsyncOpenAI(base_url=server.http_url + "/v1", api_key="unused", max_retries=0, timeout=60)
        speech = await api.audio.speech.create(model="tts-1", voice="alloy", input=text, response_format="wav")
        return load_audio(speech.content)
    async with httpx.AsyncClient(base_url=server.http_url, timeout=60) as http:  # Willow: GET /api/tts?text=
        answer = await http.get("/api/tts", params={"text": text})
        assert answer.status_code == 200, answer.text
        return load_audio(answer.content)


@pytest.mark.parametrize("frontend", FRONTENDS)
async def test_every_reply_is_spoken_and_heard_back(server: Server, frontend: str) -> None:
    misheard = {}
    for text in REPLIES:
        pcm = await speak(server, frontend, text)
        assert pcm.seconds > 0.25, (frontend, text, pcm.seconds)
        async with server.client() as client:
            heard = (await transcribe(client, pcm)).data["text"]  # at the voice's rate: the server resamples
        if not heard_as_said(text, heard):
            misheard[text] = heard
    assert not misheard, misheard


@pytest.mark.parametrize("text", NOTHING_TO_SAY)
async def test_a_text_with_nothing_to_say_is_refused_on_every_frontend(server: Server, text: str) -> None:
    for events in ([Synthesize(text=text)], [SynthesizeStart(), SynthesizeChunk(text=text), SynthesizeStop()]):
        async with server.client() as client:
            for event in events:
                await client.write_event(event.event())
            error = (await read_until(client, "audio-stop", "synthesize-stopped"))[-1]
            assert error.type == "error" and error.data["code"] == "empty-text", error
            assert await asyncio.wait_for(client.read_event(), 1.0) is None  # and the wait ends
    async with httpx.AsyncClient(base_url=server.http_url, timeout=60) as http:
        for answer in (
            await http.post("/v1/audio/speech", json={"model": "tts-1", "voice": "alloy", "input": text}),
            await http.get("/api/tts", params={"text": text}),
        ):
            assert answer.status_code == 400, answer.text
            assert answer.json()["error"]["param"] in ("input", "text"), answer.text
    warned = [line for line in server.log.splitlines() if "GET '/api/tts' from 127.0.0.1: 400" in line]
    assert warned and "WARNING" in warned[-1], "a client's mistake is logged with its address"
