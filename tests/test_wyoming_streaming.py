"""Streaming speech-to-text over Wyoming: partial transcripts while audio arrives, work done
before the end, name biasing, and a model unloaded when idle."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from helpers import ROOT, corpus, load_audio, normalise, start_server, stream, transcribe, wer
from wyoming.info import Describe

BIAS = ROOT / "tests" / "corpus" / "bias"
# Names as Home Assistant sends them: the user's areas and devices, most unrelated to the recording.
NAMES = ["Kitchen", "Living room", "Niamh's office", "Garage", "Quorvex heater", "Master bedroom", "Back porch"]


async def test_transcript_streaming_is_advertised(server) -> None:
    async with server.client() as client:
        await client.write_event(Describe().event())
        info = await asyncio.wait_for(client.read_event(), 5)
    assert info.data["asr"][0]["supports_transcript_streaming"] is True


async def test_partial_transcripts_arrive_while_audio_streams(server) -> None:
    """Chunks arrive before audio-stop, join into the final text, and the final text is right."""
    path, reference = corpus()[0]  # 9.7 s
    async with server.client() as client:
        heard = await stream(client, load_audio(path), trailing_silence=5.0, language="en")
    types = [event.type for event in heard.events]
    assert types[0] == "transcript-start" and types[-2:] == ["transcript", "transcript-stop"], types
    assert set(types) == {"transcript-start", "transcript-chunk", "transcript", "transcript-stop"}, types
    final = heard.transcript.data["text"]
    assert wer([reference], [final]) < 0.1, final
    assert normalise(heard.texts()) == normalise(final)  # the chunks are the final text, in pieces

    early = heard.texts(heard.before_stop)
    assert len(early.split()) >= 5, heard.before_stop  # text while the speaker was still talking...
    # ...and by the end of the pause, all of it: the transcript was ready before audio-stop.
    assert normalise(early) == normalise(final), (early, final)


async def test_client_that_ignores_chunks_gets_the_transcript(server) -> None:
    """Home Assistant reads only `transcript`; the streaming events around it do not get in the way."""
    path, reference = corpus()[3]
    async with server.client() as client:
        heard = await stream(client, load_audio(path), trailing_silence=1.0)
        again = await transcribe(client, load_audio(path))  # same connection, after transcript-stop
    assert wer([reference], [heard.transcript.data["text"]]) < 0.1
    assert again.type == "transcript" and wer([reference], [again.data["text"]]) < 0.1


async def test_names_bias_recognition(server) -> None:
    """Unusual device and area names come out right only when the request names them."""
    for recording in ("quorvex", "niamh"):
        pcm = load_audio(BIAS / f"{recording}.wav")
        reference = (BIAS / f"{recording}.txt").read_text().strip()
        async with server.client() as client:
            plain = (await stream(client, pcm, trailing_silence=0.5, language="en")).transcript
            biased = (await stream(client, pcm, trailing_silence=0.5, language="en", transcript_names=NAMES)).transcript
            terms = await transcribe(client, pcm, language="en")  # nothing carried over between requests
        assert normalise(plain.data["text"]) != normalise(reference), plain.data
        assert normalise(biased.data["text"]) == normalise(reference), biased.data
        assert normalise(terms.data["text"]) == normalise(plain.data["text"])


async def test_server_hotwords_bias_every_request(data_dir: Path, tmp_path: Path) -> None:
    """`--hotwords` does for every request what transcript_names does for one."""
    server = start_server(
        ["--data-dir", str(data_dir), "--hotwords", "Quorvex heater", "--initial-prompt", "Home commands."],
        tmp_path,
    )
    try:
        async with server.client() as client:
            heard = await transcribe(client, load_audio(BIAS / "quorvex.wav"), language="en")
        assert normalise(heard.data["text"]) == normalise((BIAS / "quorvex.txt").read_text())
    finally:
        assert server.stop() == 0, server.log


async def test_idle_model_is_unloaded_and_reloaded(data_dir: Path, tmp_path: Path) -> None:
    """`--unload-after` frees Whisper's memory (the process shrinks) and the next request still works."""
    server = start_server(["--data-dir", str(data_dir), "--unload-after", "2", "--debug"], tmp_path)
    path, reference = corpus()[1]
    try:
        async with server.client() as client:
            assert (await transcribe(client, load_audio(path))).type == "transcript"
        loaded = server.rss_mb()
        assert server.metric("wis_model_loaded", kind="asr", model="base") == 1
        deadline = time.monotonic() + 30
        while "Unloaded Whisper base" not in server.log:
            assert time.monotonic() < deadline, server.log
            await asyncio.sleep(0.2)
        unloaded = server.rss_mb()
        print(f"RSS loaded {loaded:.0f} MB, unloaded {unloaded:.0f} MB")
        assert loaded - unloaded > 50, (loaded, unloaded)  # base in int8 is about 75 MB of weights
        assert server.metric("wis_model_loaded", kind="asr", model="base") == 0

        async with server.client() as client:
            heard = await transcribe(client, load_audio(path))
        assert wer([reference], [heard.data["text"]]) == 0
        assert "Reloaded Whisper base" in server.log
        assert server.metric("wis_model_loaded", kind="asr", model="base") == 1
    finally:
        assert server.stop() == 0, server.log
