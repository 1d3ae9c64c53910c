"""The voice registry: every voice on disk, custom voices from a manifest, OpenAI names, reload, safe names."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from helpers import read_until, start_server, synthesize
from wyoming.info import Describe
from wyoming.tts import Synthesize, SynthesizeVoice

from wyoming_wis.catalog import Catalog
from wyoming_wis.errors import BadRequest, UnknownVoice
from wyoming_wis.tts import SpeechParams
from wyoming_wis.tts.voices import MAX_UNKNOWN_NAMES, OPENAI_VOICES, VoiceRegistry

JOE = "en_US-joe-medium"


def data_dir_with_second_voice(folder: Path) -> Path:
    """A data dir holding a second Piper voice (joe's model under another name, in British English)."""
    joe = Catalog([folder]).voice(JOE)
    (folder / "voices").mkdir(parents=True)
    (folder / "voices" / "en_GB-other-medium.onnx").symlink_to(joe.path)
    config = json.loads(Path(f"{joe.path}.json").read_text())
    config["language"]["code"] = "en_GB"
    (folder / "voices" / "en_GB-other-medium.onnx.json").write_text(json.dumps(config))
    return folder


def write_manifest(folder: Path, document: object) -> None:
    path = folder / "voices" / "voices.json"
    path.write_text(json.dumps(document) if not isinstance(document, str) else document)


def registry(folder: Path) -> VoiceRegistry:
    catalog = Catalog([folder])
    return VoiceRegistry(catalog, [catalog.voice(JOE)], JOE)


def test_every_voice_on_disk_is_listed_and_openai_names_map_to_the_default(tmp_path: Path) -> None:
    voices = registry(data_dir_with_second_voice(tmp_path))
    assert [voice.name for voice in voices.voices] == [JOE, "en_GB-other-medium"]
    assert voices.get().name == JOE
    assert all(voices.get(name).name == JOE for name in OPENAI_VOICES)
    assert voices.get("Nova").name == JOE  # OpenAI names in any case
    assert voices.get(language="en-GB").name == "en_GB-other-medium"
    assert voices.get(language="en").name == JOE  # the default, when it speaks the language
    assert voices.get(language="EN_gb").name == "en_GB-other-medium"
    with pytest.raises(UnknownVoice, match="No voice for language 'fr'"):
        voices.get(language="fr")


def test_a_name_that_leads_nowhere_gets_a_voice_of_its_language(tmp_path: Path, caplog) -> None:
    voices = registry(data_dir_with_second_voice(tmp_path))
    assert voices.get("en_GB-alan-medium").name == "en_GB-other-medium"  # British, as the name says
    assert voices.get("en_AU-karen-medium").name == JOE  # English: the default speaks it
    assert voices.get("de_DE-thorsten-high").name == JOE  # no German voice: the default
    assert voices.get("en_GB-alan-medium").name == "en_GB-other-medium"
    warned = [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]
    assert len(warned) == 3 and "'en_GB-alan-medium'" in warned[0], warned  # once per name
    for number in range(1000):  # a client inventing names cannot grow what is remembered
        voices.get(f"made-up-{number}")
    assert len(voices._unknown) == MAX_UNKNOWN_NAMES


def test_manifest_voices_and_mappings_reload_without_restart(tmp_path: Path) -> None:
    folder = data_dir_with_second_voice(tmp_path)
    write_manifest(
        folder,
        {
            "voices": {
                "butler": {"model": "en_GB-other-medium", "speed": 0.8, "sentence_silence": 0.3},
                "broken": {"model": "no-such-voice"},
                "too-fast": {"model": JOE, "speed": 9},
            },
            "openai": {"alloy": "butler", "echo": "nobody"},
        },
    )
    voices = registry(folder)
    butler = voices.get("butler")
    assert butler.model.name == "en_GB-other-medium" and butler.languages == ["en_GB"]
    assert butler.params(SpeechParams()) == SpeechParams(speed=0.8, sentence_silence=0.3)
    assert voices.get("alloy") == butler and voices.get("echo").name == JOE  # a mapping to nothing is ignored
    names = [voice.name for voice in voices.voices]
    assert "broken" not in names and "too-fast" not in names  # bad entries are skipped, the rest still work

    write_manifest(folder, {"voices": {"quick": {"model": JOE, "speed": 1.5}}})
    voices.refresh(force=True)
    assert voices.get("quick").params(SpeechParams()).speed == 1.5
    assert voices.find("butler") is None and voices.get("butler").name == JOE  # gone: the default speaks

    write_manifest(folder, "{not json")
    voices.refresh(force=True)
    assert [voice.name for voice in voices.voices] == [JOE, "en_GB-other-medium"]


@pytest.mark.parametrize("name", ["../voices/x", "a/b", ".hidden", "/etc/passwd", "x" * 200, "a b"])
def test_voice_names_cannot_be_paths(tmp_path: Path, name: str) -> None:
    with pytest.raises(BadRequest):
        registry(tmp_path).get(name)


async def test_wyoming_lists_and_speaks_custom_voices_and_sees_new_ones(data_dir: Path, tmp_path: Path) -> None:
    folder = data_dir_with_second_voice(tmp_path / "data")
    write_manifest(folder, {"voices": {"slow": {"model": JOE, "speed": 0.5, "noise_scale": 0, "noise_w": 0}}})
    server = start_server(["--data-dir", str(folder), "--data-dir", str(data_dir)], tmp_path)
    try:
        async with server.client() as client:
            await client.write_event(Describe().event())
            info = await asyncio.wait_for(client.read_event(), 5)
            listed = {voice["name"] for voice in info.data["tts"][0]["voices"]}
            assert {JOE, "en_GB-other-medium", "slow"} <= listed

            slow = await synthesize(client, "The lights are on.", SynthesizeVoice(name="slow"))
            normal = await synthesize(client, "The lights are on.", SynthesizeVoice(name=JOE))
            assert slow.pcm.seconds > 1.5 * normal.pcm.seconds
            other = await synthesize(client, "The lights are on.", SynthesizeVoice(name="en_GB-other-medium"))
            assert other.pcm.seconds > 0.5  # loaded on first use

            write_manifest(folder, {"voices": {"fresh": {"model": JOE}}})
            await asyncio.sleep(2.1)  # the registry looks again at most every 2 s
            await client.write_event(Describe().event())
            info = await asyncio.wait_for(client.read_event(), 5)
            listed = {voice["name"] for voice in info.data["tts"][0]["voices"]}
            assert "fresh" in listed and "slow" not in listed

            await client.write_event(Synthesize(text="Hi.", voice=SynthesizeVoice(name="../../etc/passwd")).event())
            error = (await read_until(client, "audio-stop"))[-1]
            assert error.type == "error" and error.data["code"] == "bad-request", error
    finally:
        assert server.stop() == 0, server.log
