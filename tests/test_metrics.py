"""GET /metrics on the shared server: it parses, passes promtool, and counts what every frontend did.

One module fixture scrapes, does a known set of requests over Wyoming (the
`wyoming` client) and HTTP (the `openai` SDK, httpx), and scrapes again; the
tests compare the two scrapes. Tests run one at a time, so on the shared server
the differences are exactly what was done here.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import openai
import pytest
from helpers import CORPUS, Pcm, Server, collect_speech, load_audio, read_until, synthesize, transcribe
from prometheus_client.parser import text_string_to_metric_families
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeVoice

SHORT = CORPUS / "LJ001-0004.flac"  # 5.1 s
VOICE = "en_US-joe-medium"
PCM_RATE = 24000  # OpenAI's pcm: 16-bit mono at 24 kHz

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@dataclass
class Done:
    """What the fixture did, and the scrapes around it."""

    before: Samples
    after: Samples
    text: str  # the second scrape, as sent
    content_type: str
    wyoming_audio: Pcm  # what was transcribed over Wyoming
    wyoming_speech: Pcm  # what the Wyoming synthesis sent
    wyoming_streamed: Pcm  # what the streamed Wyoming synthesis sent
    http_audio_seconds: float  # what the HTTP transcription reported
    http_speech_bytes: int  # pcm bytes of the three HTTP syntheses
    cache_headers: list[str]

    def delta(self, name: str, **labels: str) -> float:
        return value(self.after, name, **labels) - value(self.before, name, **labels)


def parse(text: str) -> Samples:
    """Every sample by name and labels; parsing fails on anything that is not the text format."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def label_values(samples: Samples, name: str, label: str) -> set[str]:
    return {dict(labels)[label] for sample, labels in samples if sample == name and label in dict(labels)}


async def scrape(http: httpx.AsyncClient) -> httpx.Response:
    response = await http.get("/metrics")
    assert response.status_code == 200, response.text
    return response


@pytest.fixture(scope="module")
async def done(server: Server) -> AsyncIterator[Done]:
    unique = int(time.time() * 1000) % 1_000_000  # texts no other test speaks: their first synthesis is a miss
    wyoming_text, http_text = f"Wyoming metrics check {unique}.", f"Web metrics check {unique}."
    streamed_text = f"Streamed metrics check {unique}."
    async with httpx.AsyncClient(base_url=server.http_url, timeout=120) as http:
        before = parse((await scrape(http)).text)
        audio = load_audio(SHORT)
        async with server.client() as client:
            heard = await transcribe(client, audio)
            assert heard.type == "transcript", heard
            speech = await synthesize(client, wyoming_text)
            await client.write_event(SynthesizeStart(voice=SynthesizeVoice(name=VOICE)).event())
            for word in streamed_text.split(" "):  # as an LLM writes it
                await client.write_event(SynthesizeChunk(text=word + " ").event())
            await client.write_event(Synthesize(text=streamed_text, voice=SynthesizeVoice(name=VOICE)).event())
            await client.write_event(SynthesizeStop().event())
            streamed = collect_speech(await read_until(client, "synthesize-stopped"))
            stranger = SynthesizeVoice(name=VOICE, speaker="bob")
            await client.write_event(Synthesize(text="Hello.", voice=stranger).event())
            refused = (await read_until(client, "audio-stop"))[-1]
            assert refused.type == "error" and refused.data["code"] == "unknown-speaker", refused

        api = openai.AsyncOpenAI(base_url=server.http_url + "/v1", api_key="unused", max_retries=0, timeout=120)
        with SHORT.open("rb") as file:
            result = await api.audio.transcriptions.create(file=file, model="whisper-1", response_format="verbose_json")
        speech_bytes, cache_headers = 0, []
        for cached in (True, True, False):
            response = await api.audio.speech.with_raw_response.create(
                model="tts-1", voice=VOICE, input=http_text, response_format="pcm", extra_body={"cache": cached}
            )
            cache_headers.append(response.headers["X-Cache"])
            speech_bytes += len(response.content)
        with pytest.raises(openai.BadRequestError):
            await api.audio.speech.create(model="tts-1", voice=VOICE, input="")
        assert (await http.get("/no-such-route")).status_code == 404

        response = await scrape(http)
    yield Done(
        before,
        parse(response.text),
        response.text,
        response.headers["Content-Type"],
        audio,
        speech.pcm,
        streamed.pcm,
        result.duration,
        speech_bytes,
        cache_headers,
    )


def test_exposition_is_prometheus_text_that_promtool_accepts(done: Done) -> None:
    assert done.content_type.startswith("text/plain; version="), done.content_type
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: ./run.sh test installs it (Debian's prometheus package)"
    checked = subprocess.run([promtool, "check", "metrics"], input=done.text, capture_output=True, text=True)
    assert checked.returncode == 0 and not (checked.stdout + checked.stderr).strip(), checked
    assert value(done.after, "process_resident_memory_bytes") > 0


def test_requests_are_counted_by_frontend_route_and_status(done: Done) -> None:
    wyoming = {"frontend": "wyoming"}
    assert done.delta("wis_requests_total", **wyoming, route="transcribe", status="ok") == 1
    assert done.delta("wis_requests_total", **wyoming, route="synthesize", status="ok") == 1
    assert done.delta("wis_requests_total", **wyoming, route="synthesize-stream", status="ok") == 1
    assert done.delta("wis_requests_total", **wyoming, route="synthesize", status="unknown-speaker") == 1
    http = {"frontend": "http"}
    assert done.delta("wis_requests_total", **http, route="/v1/audio/transcriptions", status="200") == 1
    assert done.delta("wis_requests_total", **http, route="/v1/audio/speech", status="200") == 3
    assert done.delta("wis_requests_total", **http, route="/v1/audio/speech", status="400") == 1
    assert done.delta("wis_requests_total", **http, route="unmatched", status="404") == 1
    assert done.delta("wis_requests_total", **http, route="/metrics", status="200") == 1  # the first scrape
    # Routes are templates, never paths a client made up.
    assert label_values(done.after, "wis_requests_total", "route") >= {"/v1/audio/speech", "unmatched"}
    assert "/no-such-route" not in done.text


def test_requests_in_progress(done: Done) -> None:
    assert value(done.after, "wis_requests_in_progress", frontend="http", route="/metrics") == 1  # this scrape
    for route in ("transcribe", "synthesize", "synthesize-stream"):
        assert value(done.after, "wis_requests_in_progress", frontend="wyoming", route=route) == 0
    for route in ("/v1/audio/transcriptions", "/v1/audio/speech"):
        assert value(done.after, "wis_requests_in_progress", frontend="http", route=route) == 0


def test_transcription_latency_after_the_end_of_audio_and_seconds_transcribed(done: Done) -> None:
    for frontend, seconds in (("wyoming", done.wyoming_audio.seconds), ("http", done.http_audio_seconds)):
        labels = {"frontend": frontend, "model": "base"}
        assert done.delta("wis_asr_after_end_of_audio_seconds_count", **labels) == 1
        assert 0 < done.delta("wis_asr_after_end_of_audio_seconds_sum", **labels) < 30
        assert done.delta("wis_asr_audio_seconds_total", **labels) == pytest.approx(seconds, abs=0.01)
    assert done.delta("wis_asr_audio_seconds_total", frontend="wyoming", model="tiny.en") == 0


def test_time_to_first_audio_and_seconds_of_speech_sent(done: Done) -> None:
    wyoming, http = {"frontend": "wyoming", "model": VOICE}, {"frontend": "http", "model": VOICE}
    assert done.delta("wis_tts_time_to_first_audio_seconds_count", **wyoming) == 2  # one-shot and streamed
    assert done.delta("wis_tts_time_to_first_audio_seconds_count", **http) == 3
    for labels in (wyoming, http):
        assert 0 < done.delta("wis_tts_time_to_first_audio_seconds_sum", **labels) < 30
    wyoming_sent = done.wyoming_speech.seconds + done.wyoming_streamed.seconds
    assert done.wyoming_streamed.seconds > 1
    assert done.delta("wis_tts_audio_seconds_total", **wyoming) == pytest.approx(wyoming_sent, abs=1e-6)
    sent = done.http_speech_bytes / (2 * PCM_RATE)
    assert sent > 1 and done.delta("wis_tts_audio_seconds_total", **http) == pytest.approx(sent, rel=0.02)


def test_speech_cache_hits_misses_and_bypasses(done: Done) -> None:
    assert done.cache_headers == ["MISS", "HIT", "BYPASS"]
    assert done.delta("wis_tts_cache_phrases_total", result="miss") == 3  # Wyoming's two texts, then the HTTP one
    assert done.delta("wis_tts_cache_phrases_total", result="hit") == 1
    assert done.delta("wis_tts_cache_phrases_total", result="bypass") == 1


def test_queue_wait_and_inference_per_engine(done: Done) -> None:
    for engine, model, least in (("whisper", "base", 2), ("piper", VOICE, 4)):
        labels = {"engine": engine, "model": model}
        calls = done.delta("wis_inference_seconds_count", **labels)
        assert calls >= least, (engine, calls)
        assert done.delta("wis_queue_wait_seconds_count", **labels) == calls  # every call waited, then ran
        assert done.delta("wis_inference_seconds_sum", **labels) > 0
        assert done.delta("wis_busy_rejections_total", **labels) == 0
        assert value(done.after, "wis_queue_depth", **labels) == 0
        assert value(done.after, "wis_inference_in_progress", **labels) == 0
    assert done.delta("wis_inference_seconds_count", engine="whisper", model="tiny.en") == 0


def test_where_whisper_calls_spend_their_time(done: Done) -> None:
    """Each stage of a Whisper call counts its seconds: parts of the calls' own run time, by model."""
    stages = ("encode", "language", "search", "words", "logprobs", "fallback")
    spent = {stage: done.delta("wis_asr_decode_seconds_total", model="base", stage=stage) for stage in stages}
    assert spent["encode"] > 0 and spent["search"] > 0, spent
    assert spent["logprobs"] == 0, spent  # no request asked for them
    assert sum(spent.values()) <= done.delta("wis_inference_seconds_sum", engine="whisper", model="base"), spent
    assert all(done.delta("wis_asr_decode_seconds_total", model="tiny.en", stage=stage) == 0 for stage in stages)


def test_model_load_state(done: Done) -> None:
    assert value(done.after, "wis_model_loaded", kind="asr", model="base") == 1
    assert value(done.after, "wis_model_loaded", kind="asr", model="tiny.en") == 1
    assert value(done.after, "wis_model_loaded", kind="tts", model=VOICE) == 1
