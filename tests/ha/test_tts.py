"""Text-to-speech through HA's wyoming TTS entity and the ways HA hands its audio on, with HA's own replies.

Every reply's audio is transcribed back by our STT and must say the reply's words: a reply that comes back silent
(0 bytes) or cut short fails here.

Paths (files in homeassistant/components/):
- the entity, non-streaming: wyoming/tts.py `WyomingTtsProvider.async_get_tts_audio` (one `synthesize`, audio up to
  the first `audio-stop`);
- the media source and the proxy URL a media player fetches: media_source `async_resolve_media` on a
  `media-source://tts/<engine>?message=...` id (tts/media_source.py `generate_media_source_id`), then GET
  `/api/tts_proxy/<file>` (tts/__init__.py `TextToSpeechView`). On HA 2026.2 this runs through the TTS manager's
  result stream and the entity's streaming method (synthesize-start, one chunk, synthesize, synthesize-stop); on
  2024.3 through `SpeechManager.async_get_url_path` and the entity's `async_get_tts_audio`;
- HA 2025.7+'s streaming input (text arriving in pieces, as from an LLM): tts/__init__.py `async_create_stream` and
  `ResultStream.async_set_message_stream`, which reach wyoming/tts.py `async_stream_tts_audio`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from conftest import HassClient, Wis, fetch
from homeassistant.components import media_source, tts
from homeassistant.exceptions import HomeAssistantError
from replies import REPLIES
from support import LONG_ANSWER_PIECES, STREAMING_TTS, decode, within

STALE_VOICE = "en_US-gone-medium"  # a voice HA remembers from an earlier --voice; neither here nor on the hub
HUB_VOICE = "en_US-lessac-medium"  # the Hugging Face Hub has it; this server, with downloads off, may not fetch it


async def entity_audio(wis: Wis, text: str, options: dict[str, str] | None = None, seconds: float = 20) -> bytes:
    """WAV from the entity's non-streaming path."""
    extension, data = await within(
        seconds, f"TTS of {text!r}", wis.tts.async_get_tts_audio(text, wis.tts.default_language, options or {})
    )
    assert data, f"the entity returned no audio for {text!r}"
    assert extension == "wav"
    return data


async def proxy_audio(
    wis: Wis,
    hass_client: HassClient,
    text: str,
    language: str | None = None,
    options: dict[str, str] | None = None,
    seconds: float = 20,
) -> bytes:
    """The audio a media player gets for `media-source://tts/...`: resolved to a /api/tts_proxy URL, then fetched."""
    media_id = tts.generate_media_source_id(
        wis.hass, text, engine=wis.tts_id, language=language, options=options, cache=False
    )

    async def resolve_and_fetch() -> bytes:
        play = await media_source.async_resolve_media(wis.hass, media_id, None)
        assert play.url.startswith("/api/tts_proxy/"), play.url
        return await fetch(hass_client, play.url, f"the audio of {text!r}")

    return await within(seconds, f"TTS of {text!r} through the media source", resolve_and_fetch())


async def streamed_audio(
    wis: Wis, pieces: list[str], language: str | None = None, options: dict[str, str] | None = None
) -> bytes:
    """The audio of text that arrives in pieces, through the TTS manager's streaming path."""
    stream = tts.async_create_stream(wis.hass, wis.tts_id, language=language, options=options)

    async def message() -> AsyncIterator[str]:
        for piece in pieces:
            yield piece
            await asyncio.sleep(0.05)  # an LLM's pace, roughly

    stream.async_set_message_stream(message())

    async def read() -> bytes:
        try:
            return b"".join([chunk async for chunk in stream.async_stream_result()])
        except HomeAssistantError as err:  # HA's ffmpeg found no audio to convert
            raise AssertionError(f"HA made no audio of {''.join(pieces)!r}: {err}") from err

    return await within(30, f"streamed TTS of {pieces!r}", read())


@pytest.mark.parametrize("text", REPLIES)
async def test_entity(wis: Wis, text: str) -> None:
    await wis.assert_says(await entity_audio(wis, text), text)


@pytest.mark.parametrize("text", REPLIES)
async def test_media_source_and_proxy(wis: Wis, hass_client: HassClient, text: str) -> None:
    await wis.assert_says(await proxy_audio(wis, hass_client, text), text)


if STREAMING_TTS:  # HA 2025.7 and later; 2024.3's wyoming TTS takes no streamed text, so it has no such path

    @pytest.mark.parametrize(
        "pieces", [LONG_ANSWER_PIECES, ["Turned on t", "he light"]], ids=["long-answer", "short-reply"]
    )
    async def test_streamed_text(wis: Wis, pieces: list[str]) -> None:
        """HA sends the pieces as `synthesize-chunk`s, then the whole text once more in a `synthesize` (for servers
        without streaming), then `synthesize-stop`: a server that spoke that `synthesize` too would say it all twice."""
        text = "".join(pieces)
        pcm = await wis.assert_says(await streamed_audio(wis, pieces), text)
        once = (await decode(await entity_audio(wis, text.rstrip() + "."))).trimmed()
        assert 0.7 * once.seconds <= pcm.seconds <= 1.4 * once.seconds, (
            f"{pcm.seconds:.2f} s streamed, {once.seconds:.2f} s for the text said once"
        )


@pytest.mark.parametrize("language", ["en", "en-US", "en_US"])
async def test_languages(wis: Wis, hass_client: HassClient, language: str) -> None:
    """HA takes a TTS language only if the engine lists it exactly (tts/__init__.py `SpeechManager.process_options`):
    pipelines and `tts.speak` pass "en" or "en-US" as often as Piper's "en_US"."""
    assert language in wis.tts.supported_languages, (
        f"HA refuses TTS in {language!r}: our voices advertise {wis.tts.supported_languages}"
    )
    text = "Turned on the light."
    await wis.assert_says(await proxy_audio(wis, hass_client, text, language=language), text)
    if STREAMING_TTS:
        await wis.assert_says(await streamed_audio(wis, ["Turned on ", "the light."], language=language), text)


async def test_a_hub_voice_with_downloads_off_fails_at_once_saying_why(wis: Wis) -> None:
    """Not spoken by the default voice, and no wait: Home Assistant 2026.11 raises the server's error, which says
    how to allow downloads; releases before it ignore a Wyoming `error` and end with no audio when the server hangs
    up."""
    text = "Turned on the light."
    call = wis.tts.async_get_tts_audio(text, wis.tts.default_language, {"voice": HUB_VOICE})
    try:
        answer = await within(2, "TTS in a voice of the hub", call)
    except HomeAssistantError as err:
        assert "--allow-download" in str(err.translation_placeholders), err.translation_placeholders
    else:
        assert answer == (None, None), answer[0]


async def test_stale_voice(wis: Wis, hass_client: HassClient) -> None:
    """A voice HA remembered from an earlier --voice, which the server no longer has (nor the hub): it speaks with
    its default
    voice at once, on every path, rather than an error HA would wait on (HA reads until `audio-stop` or the end)."""
    text = "Turned on the light."
    options = {"voice": STALE_VOICE}
    await wis.assert_says(await entity_audio(wis, text, options, seconds=2), text)
    await wis.assert_says(await proxy_audio(wis, hass_client, text, options=options, seconds=2), text)
    if STREAMING_TTS:
        audio = await within(2, "streamed TTS in a stale voice", streamed_audio(wis, [text], options=options))
        await wis.assert_says(audio, text)
