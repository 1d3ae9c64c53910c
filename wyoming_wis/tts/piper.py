"""Piper voices through piper-tts (onnxruntime), one engine per loaded voice.

onnxruntime sessions may be shared by threads and piper-tts guards its espeak
phonemizer with its own lock, so one voice serves several requests at once.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import onnxruntime
from piper import PiperVoice
from piper.config import PiperConfig, SynthesisConfig

from ..audio import AudioFormat
from ..catalog import Found
from ..errors import UnknownSpeaker
from ..runtime import Runtime
from ..scheduler import Scheduler
from .params import SpeechParams

_LOGGER = logging.getLogger(__name__)


class PiperEngine:
    def __init__(
        self, found: Found, runtime: Runtime, *, workers: int, queue_size: int, params: SpeechParams | None = None
    ) -> None:
        self.name = found.name
        self.found = found
        self.params = params or SpeechParams()  # this voice's defaults; requests may change them
        _LOGGER.info("Loading Piper voice %s from %s (%s)", found.name, found.path, found.source)
        with open(f"{found.path}.json", encoding="utf-8") as file:
            config = json.load(file)
        self.voice = PiperVoice(config=PiperConfig.from_dict(config), session=_onnx_session(found, runtime))
        self.languages, self.speakers, _ = describe(found.name, config)
        self.format = AudioFormat(rate=self.voice.config.sample_rate, width=2, channels=1)
        stat = found.path.stat()  # a changed voice file must not be mistaken for the old one
        self.identity = f"{found.name}:{found.path}:{stat.st_size}:{stat.st_mtime_ns}"
        self.scheduler = Scheduler(f"piper-{found.name}", workers, queue_size)

    def speaker_id(self, speaker: str | None) -> int | None:
        """Speaker by name (or number) for multi-speaker voices; None is the default."""
        if not speaker:
            return None
        id_map = self.voice.config.speaker_id_map
        if speaker in id_map:
            return id_map[speaker]
        if speaker.isdigit() and int(speaker) < self.voice.config.num_speakers:
            return int(speaker)
        known = ", ".join(self.speakers) if self.speakers else "none, it has one speaker"
        raise UnknownSpeaker(f"Voice {self.name!r} has no speaker {speaker!r} (speakers: {known})")

    async def synthesize(self, text: str, speaker_id: int | None = None, params: SpeechParams | None = None) -> bytes:
        return await self.scheduler.run(self.synthesize_sync, text, speaker_id, params or self.params)

    def synthesize_sync(self, text: str, speaker_id: int | None, params: SpeechParams) -> bytes:
        """16-bit mono PCM at `format.rate`, with `sentence_silence` after it; blocking, for a worker."""
        voice = self.voice.config
        config = SynthesisConfig(
            speaker_id=speaker_id,
            length_scale=voice.length_scale / params.speed,
            noise_scale=voice.noise_scale if params.noise_scale is None else params.noise_scale,
            noise_w_scale=voice.noise_w_scale if params.noise_w is None else params.noise_w,
        )
        pcm = b"".join(chunk.audio_int16_bytes for chunk in self.voice.synthesize(text, config))
        return pcm + bytes(int(params.sentence_silence * self.format.rate) * self.format.bytes_per_frame)

    def warm_up(self) -> None:
        self.synthesize_sync("Ready.", None, self.params)

    def close(self) -> None:
        self.scheduler.close()


def describe(name: str, config: dict[str, Any]) -> tuple[list[str], list[str], str]:
    """Languages, speakers and a description of a voice, from its .onnx.json alone."""
    language = config.get("language", {}).get("code") or config.get("espeak", {}).get("voice", "")
    quality = config.get("audio", {}).get("quality", "")
    description = f"{config.get('dataset', name)} ({language}, {quality or 'piper'})"
    return [language], list(config.get("speaker_id_map", {})), description


def _onnx_session(found: Found, runtime: Runtime) -> onnxruntime.InferenceSession:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = runtime.cpu_threads
    options.inter_op_num_threads = 1
    providers: list[str | tuple[str, dict[str, Any]]] = ["CPUExecutionProvider"]
    if runtime.device == "cuda":
        if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
            providers.insert(0, ("CUDAExecutionProvider", {"device_id": runtime.device_index}))
        else:
            _LOGGER.warning(
                "Piper voice %s runs on the CPU: onnxruntime has no CUDA support here (install onnxruntime-gpu)",
                found.name,
            )
    return onnxruntime.InferenceSession(str(found.path), sess_options=options, providers=providers)
