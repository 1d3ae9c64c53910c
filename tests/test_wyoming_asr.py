"""Speech-to-text over Wyoming: real server, bundled Whisper models, the `wyoming` client."""

from __future__ import annotations

import pytest
from helpers import corpus, load_audio, pink_noise, read_until, transcribe, wer
from wyoming.asr import Transcribe
from wyoming.audio import AudioStart, AudioStop
from wyoming.info import SelectProgram


async def test_corpus_word_error_rate_with_base(server) -> None:
    """Every LJ Speech recording through Wyoming; Whisper base stays under 10 % WER."""
    references, hypotheses = [], []
    async with server.client() as client:
        for path, reference in corpus():
            pcm = load_audio(path, rate=22050)  # the recordings' own rate; the server resamples
            event = await transcribe(client, pcm)
            assert event.type == "transcript", event
            assert event.data["language"] == "en"
            references.append(reference)
            hypotheses.append(event.data["text"])
    score = wer(references, hypotheses)
    print(f"WER base over {len(references)} recordings: {score:.3f}")
    assert len(references) == 8
    assert score < 0.10, list(zip(references, hypotheses, strict=True))


@pytest.mark.parametrize(
    ("rate", "width", "channels"),
    [(44100, 2, 2), (48000, 4, 1), (8000, 1, 1), (16000, 2, 6)],
    ids=["44k1-s16-stereo", "48k-s32-mono", "8k-u8-mono", "16k-s16-6ch"],
)
async def test_any_pcm_format_is_converted(server, rate: int, width: int, channels: int) -> None:
    path, reference = corpus()[4]
    pcm = load_audio(path, rate=rate, width=width, channels=channels)
    async with server.client() as client:
        event = await transcribe(client, pcm)
    assert event.type == "transcript", event
    # 8-bit telephone-rate audio is rougher; it must still be clearly the same sentence.
    assert wer([reference], [event.data["text"]]) < (0.35 if width == 1 else 0.1), event.data


async def test_empty_audio_gives_empty_transcript(server) -> None:
    async with server.client() as client:
        await client.write_event(Transcribe(language="en").event())
        await client.write_event(AudioStart(16000, 2, 1).event())
        await client.write_event(AudioStop().event())
        event = (await read_until(client, "transcript"))[-1]
        assert event.type == "transcript"
        assert event.data["text"] == ""
        assert event.data["language"] == "en"

        # audio-stop alone, as Home Assistant may send it, is answered the same way
        await client.write_event(AudioStop().event())
        event = (await read_until(client, "transcript"))[-1]
        assert event.type == "transcript" and event.data["text"] == ""


async def test_a_stream_with_no_speech_heard_is_decoded_before_its_empty_transcript(server) -> None:
    """A fan's noise, closed with audio-stop: the speech detector hears nothing in it, Whisper still decodes it
    (far from the microphone the detector can miss speech), and the empty text is Whisper's own verdict."""
    pcm = pink_noise(5, -46, seed=7)  # a quiet room's level
    calls = {"engine": "whisper", "model": "base"}
    before = server.metric("wis_inference_seconds_count", **calls) or 0
    async with server.client() as client:
        event = await transcribe(client, pcm, language="en")
    assert event.type == "transcript" and event.data["text"] == ""
    assert (server.metric("wis_inference_seconds_count", **calls) or 0) > before


async def test_language_forced_and_detected(server) -> None:
    path, reference = corpus()[1]
    pcm = load_audio(path)
    async with server.client() as client:
        detected = await transcribe(client, pcm)
        forced = await transcribe(client, pcm, language="de")
        region = await transcribe(client, pcm, language="en-US")
        auto = await transcribe(client, pcm, language="auto")
        spelled = {tag: await transcribe(client, pcm, language=tag) for tag in ("EN_us", "zh-Hans", "pt-BR")}
    assert {tag: heard.data["language"] for tag, heard in spelled.items()} == {"EN_us": "en", "zh-Hans": "zh",
                                                                              "pt-BR": "pt"}  # fmt: skip
    assert detected.data["language"] == "en"
    assert forced.data["language"] == "de"  # the forced language is reported as given
    assert region.data["language"] == "en"
    assert auto.data["language"] == "en"
    assert wer([reference], [region.data["text"]]) < 0.1


async def test_model_chosen_by_name_and_by_select_program(server) -> None:
    """tiny.en is English-only, so German is refused only when tiny.en is really in use."""
    path, reference = corpus()[1]
    pcm = load_audio(path)
    async with server.client() as client:
        by_name = await transcribe(client, pcm, name="tiny.en")
        assert by_name.type == "transcript"
        assert wer([reference], [by_name.data["text"]]) < 0.2

        refused = await transcribe(client, pcm, name="tiny.en", language="de")
        assert refused.type == "error" and refused.data["code"] == "unsupported-language"
        assert "tiny.en" in refused.data["text"]

    async with server.client() as client:  # an error ends its connection
        default = await transcribe(client, pcm, language="de")  # base speaks German
        assert default.type == "transcript"

        await client.write_event(SelectProgram(name="tiny.en").event())
        selected = await transcribe(client, pcm, language="de")
        assert selected.type == "error" and selected.data["code"] == "unsupported-language"
