"""The `info` this server advertises in answer to `describe`."""

from __future__ import annotations

from typing import Any

from wyoming.info import (
    AsrModel,
    AsrProgram,
    Attribution,
    Info,
    TtsProgram,
    TtsVoice,
    TtsVoiceSpeaker,
    WakeModel,
    WakeProgram,
)

from .. import PROJECT_URL, __version__
from .. import served as engines
from ..core import Core
from ..languages import spellings
from ..served import ASR, WAKE, XTTS, Entry

PROGRAM_NAME = "wyoming-wis"  # the name of both programs; select-program accepts it
WHISPER = Attribution(name="OpenAI", url="https://github.com/openai/whisper")
PIPER = Attribution(name="Rhasspy", url="https://github.com/OHF-Voice/piper1-gpl")
COQUI = Attribution(name="Coqui", url="https://github.com/idiap/coqui-ai-TTS")
US = Attribution(name="wyoming-wis", url=PROJECT_URL)
MICRO_WAKE_WORD = Attribution(name="Kevin Ahrendt", url="https://github.com/kahrendt/microWakeWord")
OPEN_WAKE_WORD = Attribution(name="David Scripka", url="https://github.com/dscripka/openWakeWord")
ATTRIBUTIONS = {
    engines.WHISPER: WHISPER,
    engines.PIPER: PIPER,
    engines.XTTS: COQUI,
    engines.MICRO_WAKE: MICRO_WAKE_WORD,
    engines.OPEN_WAKE: OPEN_WAKE_WORD,
}


def build_info(core: Core, external_vad: bool = False, processed_audio: bool = False) -> Info:
    """Everything on this machine, marked installed; with --allow-download every voice the hub has as well,
    marked installed too, as wyoming-piper does (Home Assistant's picker offers only those): it is fetched on its
    first use, and its description says so.

    Unless `external_vad` (--external-vad), the server ends each turn itself, and says so: Home Assistant
    2026.10+ then streams audio until the transcript comes, without its own VAD and its 15 s cap.

    Unless `processed_audio` (--processed-audio), the server prefers audio without auto gain and noise
    suppression: with both preferences false, Home Assistant has a Voice PE send its raw microphone channel.
    `--noise-suppression` does not change them: the server then cleans the raw audio itself, and a satellite's
    own suppression in front of it would only take more of the speech away.

    Wake words are one program (Home Assistant reads only the first) with every model offered, both families.

    Whisper models are the loaded ones; voices are every voice the registry knows,
    loaded on first use, each language in every spelling Home Assistant may ask for
    (en_US, en-US, en), since it checks a language against this list as written.
    """
    served = core.served()
    models = [AsrModel(**_artifact(model), languages=list(model.languages)) for model in served.of_kind(ASR)]
    voices = [
        TtsVoice(
            **_artifact(voice),
            languages=list(dict.fromkeys(tag for code in voice.languages for tag in spellings(code))),
            speakers=[TtsVoiceSpeaker(name=speaker) for speaker in voice.speakers] or None,
        )
        for voice in (*served.voices, *(served.available_voices if served.downloads else ()))
    ]
    wake = [
        WakeModel(**_artifact(model), languages=list(model.languages), phrase=model.phrase)
        for model in served.of_kind(WAKE)
    ]
    return Info(
        wake=[WakeProgram(**_program("Wake words (microWakeWord and openWakeWord)"), models=wake)] if wake else [],
        asr=[
            AsrProgram(
                **_program("Whisper speech-to-text (faster-whisper)"),
                models=models,
                supports_transcript_streaming=served.partial_results,
                requires_external_vad=external_vad,
                prefers_auto_gain_enabled=processed_audio,
                prefers_noise_reduction_enabled=processed_audio,
            )
        ],
        tts=[
            TtsProgram(
                **_program("Piper and XTTS text-to-speech" if served.uses(XTTS) else "Piper text-to-speech"),
                voices=voices,
                supports_synthesize_streaming=True,
            )
        ],
    )


def _artifact(entry: Entry) -> dict[str, Any]:
    """What Wyoming says of every model and voice (its `Artifact` fields): all of ours are installed or, for a
    voice, fetched on first use."""
    return {
        "name": entry.name,
        "attribution": ATTRIBUTIONS[entry.engine],
        "installed": True,
        "description": entry.description,
        "version": entry.version,
    }


def _program(description: str) -> dict[str, Any]:
    """The `Artifact` fields of each of our programs: one name, ours, at this version."""
    return {
        "name": PROGRAM_NAME,
        "attribution": US,
        "installed": True,
        "description": description,
        "version": __version__,
    }
