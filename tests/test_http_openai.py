"""The OpenAI audio API over HTTP, through the official `openai` SDK, on the shared server."""

from __future__ import annotations

import base64
import io
import json
import re
import time
from pathlib import Path

import av
import httpx
import numpy as np
import openai
import pytest
from helpers import CORPUS, Pcm, Server, load_audio, normalise, silence, wav_bytes, wer

SHORT = CORPUS / "LJ001-0004.flac"  # 5.1 s
SHORT_TEXT = (CORPUS / "LJ001-0004.txt").read_text().strip()
SPOKEN = "The kitchen lights are on, and the front door is locked."


@pytest.fixture(scope="module")
def client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.http_url + "/v1", api_key="unused", max_retries=0, timeout=120)


def transcribe(client: openai.OpenAI, path: Path = SHORT, **fields: object) -> object:
    with path.open("rb") as file:
        return client.audio.transcriptions.create(file=file, **{"model": "whisper-1", **fields})  # type: ignore[call-overload]


def decode(data: bytes) -> tuple[np.ndarray, int]:
    """Mono float samples and their rate, from any file PyAV reads."""
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        rate = stream.rate
        resampler = av.AudioResampler(format="flt", layout="mono", rate=rate)
        samples = [out.to_ndarray()[0] for frame in container.decode(stream) for out in resampler.resample(frame)]
    return np.concatenate(samples), rate


def assert_speech(samples: np.ndarray, rate: int) -> None:
    """About as long as the sentence takes to say, and not silence."""
    seconds = len(samples) / rate
    assert 1.5 < seconds < 8, seconds
    assert float(np.sqrt(np.mean(samples**2))) > 0.02


# -- transcription -----------------------------------------------------------------


def test_json_is_the_text_and_the_seconds_of_audio(client: openai.OpenAI) -> None:
    result = transcribe(client)
    assert wer([SHORT_TEXT], [result.text]) < 0.15, result.text
    assert result.usage.type == "duration" and result.usage.seconds == pytest.approx(5.14, abs=0.05)


def test_openais_transcription_models_mean_the_default_one(client: openai.OpenAI) -> None:
    """gpt-4o-transcribe and the rest, as the Realtime API takes them; listed in /v1/models."""
    result = transcribe(client, model="gpt-4o-mini-transcribe")
    assert wer([SHORT_TEXT], [result.text]) < 0.15, result.text
    assert {"whisper-1", "gpt-4o-transcribe", "gpt-realtime-whisper"} <= {model.id for model in client.models.list()}


def test_text_srt_and_vtt_are_plain_bodies(client: openai.OpenAI) -> None:
    text = transcribe(client, response_format="text")
    assert isinstance(text, str) and wer([SHORT_TEXT], [text]) < 0.15, text
    srt = transcribe(client, response_format="srt", model="tiny.en")
    blocks = re.findall(r"(\d+)\n(\d\d:\d\d:\d\d,\d{3}) --> (\d\d:\d\d:\d\d,\d{3})\n(.+)\n\n", srt)
    assert blocks and blocks[0][0] == "1" and blocks[0][1] < blocks[0][2], srt
    assert wer([SHORT_TEXT], [" ".join(block[3] for block in blocks)]) < 0.2, srt
    vtt = transcribe(client, response_format="vtt", model="tiny.en")
    assert vtt.startswith("WEBVTT\n\n"), vtt
    cues = re.findall(r"(\d\d:\d\d:\d\d\.\d{3}) --> (\d\d:\d\d:\d\d\.\d{3})\n(.+)\n\n", vtt)
    assert cues and wer([SHORT_TEXT], [" ".join(cue[2] for cue in cues)]) < 0.2, vtt


def test_verbose_json_has_segments_with_every_field_and_words_on_request(client: openai.OpenAI) -> None:
    plain = transcribe(client, response_format="verbose_json")
    assert plain.language == "en" and plain.duration == pytest.approx(5.14, abs=0.05)
    assert plain.words is None
    segment = plain.segments[0]
    assert segment.id == 0 and 0 <= segment.start < segment.end <= plain.duration + 0.01
    assert segment.tokens and all(isinstance(token, int) for token in segment.tokens)
    assert -1.5 < segment.avg_logprob <= 0 and 0 <= segment.no_speech_prob <= 1
    assert segment.compression_ratio > 0 and segment.temperature == 0
    assert plain.model_extra["task"] == "transcribe"

    timed = transcribe(client, response_format="verbose_json", timestamp_granularities=["word", "segment"])
    words = timed.words
    assert len(words) == pytest.approx(len(SHORT_TEXT.split()), abs=2), words
    assert all(w.start <= w.end for w in words) and [w.start for w in words] == sorted(w.start for w in words)
    assert words[-1].end <= timed.duration + 0.01 and words[-1].end > 3
    assert normalise(" ".join(w.word for w in words)) == normalise(timed.text)
    assert timed.segments and timed.segments[0].text


@pytest.mark.parametrize("clip", sorted(path.stem for path in CORPUS.glob("*.flac")))
def test_asking_for_word_times_never_changes_the_text(client: openai.OpenAI, clip: str) -> None:
    """The same words as plain `json`, each lasting a while, inside its segment, in order."""
    path = CORPUS / f"{clip}.flac"
    plain = transcribe(client, path, response_format="json").text
    timed = transcribe(client, path, response_format="verbose_json", timestamp_granularities=["word", "segment"])
    assert timed.text == plain
    assert normalise(" ".join(word.word for word in timed.words)) == normalise(plain)
    assert all(word.end > word.start for word in timed.words), timed.words
    assert all(a.end <= b.start for a, b in zip(timed.words, timed.words[1:], strict=False)), timed.words
    for word in timed.words:
        assert any(s.start - 0.01 <= word.start and word.end <= s.end + 0.01 for s in timed.segments), word


def test_cantonese_on_a_model_without_it_is_written_as_chinese(client: openai.OpenAI) -> None:
    """Whisper base has no Cantonese token (only large-v3 does); asked for it, the text is bounded and Chinese."""
    started = time.monotonic()
    result = transcribe(client, response_format="verbose_json", language="yue")
    assert result.language == "zh", result
    assert time.monotonic() - started < 30 and len(result.text) < 200, result.text


def test_a_temperature_samples_at_that_temperature(client: openai.OpenAI) -> None:
    result = transcribe(client, response_format="verbose_json", temperature=0.6)
    assert {segment.temperature for segment in result.segments} == {0.6}
    assert wer([SHORT_TEXT], [result.text]) < 0.5, result.text


# openai 3.63 marks `audio.translations.create` deprecated (OpenAI now translates in Realtime sessions); apps still
# call it, and the route serves them
@pytest.mark.filterwarnings("ignore:deprecated:DeprecationWarning")
def test_translation_is_english(client: openai.OpenAI) -> None:
    with SHORT.open("rb") as file:
        result = client.audio.translations.create(file=file, model="whisper-1", response_format="verbose_json")
    assert result.language == "english" and result.model_extra["task"] == "translate"
    assert wer([SHORT_TEXT], [result.text]) < 0.2, result.text


def test_streamed_transcription_sends_deltas_then_the_whole_text(client: openai.OpenAI) -> None:
    events = list(transcribe(client, stream=True))
    assert [event.type for event in events[:-1]] == ["transcript.text.delta"] * (len(events) - 1)
    done = events[-1]
    assert done.type == "transcript.text.done" and len(events) >= 2
    assert "".join(event.delta for event in events[:-1]) == done.text
    assert wer([SHORT_TEXT], [done.text]) < 0.15


LONG_CLIPS = [CORPUS / f"LJ001-000{n}.flac" for n in (1, 3, 5, 7)]  # 40 s of speech, with a second between


def long_upload() -> tuple[str, bytes]:
    """The clips of LONG_CLIPS in one WAV file, as the SDK uploads a (name, bytes) pair."""
    gap = silence(1.0).audio
    return "long.wav", wav_bytes(Pcm(gap.join(load_audio(clip).audio for clip in LONG_CLIPS), 16000, 2, 1))


def test_a_long_upload_streams_its_text_from_the_start(client: openai.OpenAI) -> None:
    """40 s of speech is decoded in pieces from the start, each piece's text sent as soon as it is known."""
    events = list(client.audio.transcriptions.create(file=long_upload(), model="whisper-1", stream=True))
    deltas, done = [event.delta for event in events[:-1]], events[-1]
    assert len(deltas) >= 2 and "".join(deltas) == done.text, deltas
    reference = [" ".join(clip.with_suffix(".txt").read_text().strip() for clip in LONG_CLIPS)]
    assert wer(reference, [deltas[0]]) > 0.4 and wer(reference, [done.text]) < 0.15  # the first is only the start


def spelled(logprobs: list) -> str:
    """The text that tokens spell, from their bytes (the SDK types a json reply's bytes as floats)."""
    return b"".join(bytes(int(byte) for byte in token.bytes) for token in logprobs).decode()


def test_logprobs_are_the_models_for_each_token_of_the_json_text(client: openai.OpenAI) -> None:
    """include[]=logprobs: every token of the text with its bytes and log-probability, and the same text."""
    plain, scored = transcribe(client), transcribe(client, include=["logprobs"])
    assert scored.text == plain.text and scored.usage == plain.usage and plain.logprobs is None
    tokens = scored.logprobs
    assert len(tokens) >= len(scored.text.split()) and spelled(tokens).strip() == scored.text
    assert "".join(token.token for token in tokens).strip() == scored.text
    assert all(-30 < token.logprob <= 0 for token in tokens), tokens
    assert len({round(token.logprob, 4) for token in tokens}) > len(tokens) // 2  # each the model's own, not one
    assert sum(token.logprob for token in tokens) / len(tokens) > -0.5  # clear speech, read as it was said
    sampled = transcribe(client, include=["logprobs"], temperature=0.4)  # faster-whisper's own pass, scored after
    assert spelled(sampled.logprobs).strip() == sampled.text and all(t.logprob <= 0 for t in sampled.logprobs)


def test_streamed_logprobs_come_with_each_delta_and_all_of_them_when_done(client: openai.OpenAI) -> None:
    upload = long_upload()
    events = list(client.audio.transcriptions.create(file=upload, model="whisper-1", stream=True, include=["logprobs"]))
    deltas, done = events[:-1], events[-1]
    assert len(deltas) >= 2 and "".join(delta.delta for delta in deltas) == done.text
    for delta in deltas:  # each delta's tokens spell it
        assert delta.logprobs and spelled(delta.logprobs).strip() == delta.delta.strip(), delta
    streamed = [token.model_dump() for delta in deltas for token in delta.logprobs]
    assert [token.model_dump() for token in done.logprobs] == streamed  # (the SDK types each event's apart)
    assert all(token.logprob <= 0 for token in done.logprobs)
    seconds = (len(upload[1]) - 44) / 32000  # 16-bit mono at 16 kHz after the header
    assert done.usage.type == "duration" and done.usage.model_extra["seconds"] == pytest.approx(seconds, abs=0.01)


def test_chunking_strategies_are_accepted_and_the_servers_vad_cuts(client: openai.OpenAI) -> None:
    """auto and a server_vad object (which the SDK sends as chunking_strategy[...] fields) are checked, then the
    server cuts at the pauses its own VAD finds: values that would lose words change nothing."""
    plain = transcribe(client).text
    assert transcribe(client, chunking_strategy="auto").text == plain
    harsh = {"type": "server_vad", "threshold": 0.99, "prefix_padding_ms": 0, "silence_duration_ms": 0}
    assert transcribe(client, chunking_strategy=harsh).text == plain


# -- speech ------------------------------------------------------------------------


@pytest.mark.parametrize("response_format", ["mp3", "opus", "aac", "flac", "wav", "pcm"])
def test_speech_in_every_format(client: openai.OpenAI, response_format: str) -> None:
    response = client.audio.speech.create(model="tts-1", voice="alloy", input=SPOKEN, response_format=response_format)
    data = response.read()
    if response_format == "pcm":  # raw 16-bit mono at 24 kHz, as OpenAI sends it
        samples, rate = np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768, 24000
    else:
        samples, rate = decode(data)
        assert rate == (48000 if response_format == "opus" else 24000)  # Opus always decodes at 48 kHz
    assert_speech(samples, rate)


def test_speech_says_the_words(client: openai.OpenAI) -> None:
    """Spoken, then heard: the text survives the round trip through both APIs."""
    audio = client.audio.speech.create(model="tts-1", voice="en_US-joe-medium", input=SPOKEN, speed=1.2).read()
    heard = client.audio.transcriptions.create(file=("speech.mp3", audio), model="whisper-1")
    assert wer([SPOKEN], [heard.text]) < 0.2, heard.text


def test_streamed_wav_has_one_header_with_open_ended_sizes(client: openai.OpenAI) -> None:
    with client.audio.speech.with_streaming_response.create(
        model="tts-1", voice="alloy", input=SPOKEN + " Goodbye.", response_format="wav", extra_body={"cache": False}
    ) as response:
        assert response.headers["content-type"] == "audio/wav"
        assert "chunked" in response.headers.get("transfer-encoding", "")
        data = b"".join(response.iter_bytes())
    assert data[:4] == b"RIFF" and data[4:8] == b"\xff\xff\xff\xff"
    assert data.count(b"RIFF") == 1 and data[data.index(b"data") + 4 :][:4] == b"\xff\xff\xff\xff"
    samples = np.frombuffer(data[data.index(b"data") + 8 :], dtype="<i2").astype(np.float32) / 32768
    assert_speech(samples, 24000)


def test_speech_as_server_sent_events(client: openai.OpenAI) -> None:
    response = client.audio.speech.create(
        model="tts-1", voice="alloy", input=SPOKEN, response_format="mp3", extra_body={"stream_format": "sse"}
    )
    assert response.response.headers["content-type"] == "text/event-stream"
    events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")]
    assert [event["type"] for event in events[:-1]] == ["speech.audio.delta"] * (len(events) - 1)
    assert events[-1]["type"] == "speech.audio.done" and events[-1]["usage"]["input_tokens"] > 0
    assert_speech(*decode(b"".join(base64.b64decode(event["audio"]) for event in events[:-1])))


def test_models_and_voices(client: openai.OpenAI, server: Server) -> None:
    ids = [model.id for model in client.models.list()]
    assert {"base", "tiny.en", "whisper-1", "tts-1"} <= set(ids)
    assert client.models.retrieve("tiny.en").id == "tiny.en"
    voices = httpx.get(server.http_url + "/v1/audio/voices").json()
    assert "en_US-joe-medium" in [voice["id"] for voice in voices["voices"]]
    assert voices["openai"]["alloy"] == "en_US-joe-medium"


def test_health_reports_every_model(server: Server) -> None:
    health = httpx.get(server.http_url + "/health")
    assert health.status_code == 200
    body = health.json()
    assert body["status"] == "ok" and body["asr"]["base"]["state"] == "loaded" and "tiny.en" in body["asr"]
    assert "en_US-joe-medium" in body["tts"]
    assert httpx.head(server.http_url + "/health").status_code == 200


# -- errors ------------------------------------------------------------------------


def error_of(err: openai.APIStatusError) -> dict[str, object]:
    body = err.response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    return body["error"]


@pytest.mark.parametrize(
    ("fields", "status", "param"),
    [
        ({"speaker": "bob"}, 404, "speaker"),
        ({"input": " ... "}, 400, "input"),  # nothing to say
        ({"model": "no-such-model"}, 404, "model"),
        ({"speed": 5}, 400, "speed"),
        ({"response_format": "ogg"}, 400, "response_format"),
        ({"input": "x" * 4097}, 400, "input"),
        ({"input": ""}, 400, "input"),
        ({"stream_format": "video"}, 400, "stream_format"),
    ],
)
def test_speech_errors(client: openai.OpenAI, fields: dict[str, object], status: int, param: str) -> None:
    request = {"model": "tts-1", "voice": "alloy", "input": "Hello.", **fields}
    ours = {name: request.pop(name) for name in ("speaker",) if name in request}  # beyond OpenAI's fields
    with pytest.raises(openai.APIStatusError) as caught:
        client.audio.speech.create(**request, extra_body=ours)  # type: ignore[arg-type]
    assert caught.value.status_code == status
    error = error_of(caught.value)
    assert error["param"] == param and error["type"] == "invalid_request_error" and error["message"]


@pytest.mark.parametrize(
    ("file", "fields", "status", "param"),
    [
        (("noise.mp3", b"certainly not audio" * 100), {}, 415, "file"),
        (("silence.wav", b""), {}, 415, "file"),
        (SHORT, {"model": "large-v9"}, 404, "model"),
        (SHORT, {"model": "tiny.en", "language": "de"}, 400, "language"),
        (SHORT, {"response_format": "docx"}, 400, "response_format"),
        (SHORT, {"temperature": 3}, 400, "temperature"),
        (SHORT, {"timestamp_granularities": ["word"]}, 400, "timestamp_granularities[]"),
        (SHORT, {"include": ["logprobs"], "response_format": "text"}, 400, "include[]"),
        (SHORT, {"include": ["logprobs"], "response_format": "verbose_json"}, 400, "include[]"),
        (SHORT, {"chunking_strategy": "manual"}, 400, "chunking_strategy"),
        (SHORT, {"chunking_strategy": {"type": "semantic_vad"}}, 400, "chunking_strategy[type]"),
        (SHORT, {"chunking_strategy": {"type": "server_vad", "threshold": 2}}, 400, "chunking_strategy[threshold]"),
        (SHORT, {"chunking_strategy": {"type": "server_vad", "eagerness": "low"}}, 400, "chunking_strategy"),
    ],
)
def test_transcription_errors(client: openai.OpenAI, file: object, fields: dict, status: int, param: str) -> None:
    upload = file.open("rb") if isinstance(file, Path) else file
    with pytest.raises(openai.APIStatusError) as caught:
        client.audio.transcriptions.create(file=upload, **{"model": "whisper-1", **fields})
    assert caught.value.status_code == status
    assert error_of(caught.value)["param"] == param


def test_requests_that_are_not_what_the_route_takes(server: Server) -> None:
    url = server.http_url + "/v1/audio"
    not_json = httpx.post(url + "/speech", content=b"{oops", headers={"Content-Type": "application/json"})
    assert not_json.status_code == 400 and not_json.json()["error"]["code"] == "bad_json"
    not_form = httpx.post(url + "/transcriptions", json={"file": "x"})
    assert not_form.status_code == 415 and "multipart/form-data" in not_form.json()["error"]["message"]
    no_file = httpx.post(url + "/transcriptions", files={"model": (None, "whisper-1")})
    assert no_file.status_code == 400 and no_file.json()["error"]["param"] == "file"
    assert httpx.get(server.http_url + "/v1/nothing").json()["error"]["code"] == "not_found"


def test_a_client_that_leaves_mid_speech_is_no_error(server: Server) -> None:
    """The synthesis stops and nothing is logged as an error (the shared server's log is checked at the end)."""
    long_text = " ".join(f"This is sentence number {n} of a long reply nobody will hear." for n in range(30))
    body = {"model": "tts-1", "voice": "alloy", "input": long_text, "response_format": "wav", "cache": False}
    url = server.http_url + "/v1/audio/speech"
    for stream_format in ("audio", "sse"):
        with httpx.stream("POST", url, json=body | {"stream_format": stream_format}) as response:
            assert response.status_code == 200
            assert next(response.iter_bytes())  # the first audio, then hang up
    deadline = time.monotonic() + 10
    while httpx.get(server.http_url + "/health").json()["tts"]["en_US-joe-medium"]["pending"]:
        assert time.monotonic() < deadline, "synthesis went on for a client that left"
        time.sleep(0.1)
