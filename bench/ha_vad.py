"""Where Home Assistant's own voice activity detection ends a voice command (run with Home Assistant's python).

bench/endpoint.py runs this in the venv of the Home Assistant suite (tests/ha/env.sh 2026.2.3), so that the
"HA default path" systems send `audio-stop` exactly where Home Assistant would, decided by its own code rather
than by our copy of it. As assist_pipeline/pipeline.py does for a speech-to-text stream on its defaults
(`AudioSettings()`: VAD on, no gain, no noise suppression): each 10 ms chunk (BYTES_PER_CHUNK) goes through a
new `MicroVadSpeexEnhancer` for its speech probability, then through `VoiceCommandSegmenter(silence_seconds=
AudioSettings().silence_seconds)`; the chunk at which `process` returns False is not sent, and the stream ends.

    python bench/ha_vad.py --tail SECONDS FILE.wav...

Each FILE is 16 kHz 16-bit mono WAV; `--tail` seconds of silence are appended (the silence a microphone hears
after the command). Prints one JSON object a line, in order: {"file", "stop_chunk": index of that chunk or null,
"timed_out": the segmenter's 15 s cap ended it}, then a last line {"home_assistant": version}.
"""

from __future__ import annotations

import argparse
import json
import wave

from homeassistant.components.assist_pipeline.audio_enhancer import MicroVadSpeexEnhancer
from homeassistant.components.assist_pipeline.const import BYTES_PER_CHUNK, MS_PER_CHUNK, SAMPLE_RATE, SAMPLE_WIDTH
from homeassistant.components.assist_pipeline.pipeline import AudioSettings
from homeassistant.components.assist_pipeline.vad import VoiceCommandSegmenter
from homeassistant.const import __version__


def stop_chunk(audio: bytes) -> tuple[int | None, bool]:
    """The index of the chunk at which Home Assistant ends the command (None: never), and whether it timed out."""
    settings = AudioSettings()
    enhancer = MicroVadSpeexEnhancer(settings.auto_gain_dbfs, settings.noise_suppression_level, settings.is_vad_enabled)
    segmenter = VoiceCommandSegmenter(silence_seconds=settings.silence_seconds)
    for index in range(len(audio) // BYTES_PER_CHUNK):
        chunk = enhancer.enhance_chunk(
            audio[index * BYTES_PER_CHUNK : (index + 1) * BYTES_PER_CHUNK], index * MS_PER_CHUNK
        )
        seconds = (len(chunk.audio) // SAMPLE_WIDTH) / SAMPLE_RATE
        if not segmenter.process(seconds, chunk.speech_probability):
            return index, segmenter.timed_out
    return None, False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tail", type=float, required=True, help="Seconds of silence after each file's audio")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    tail = bytes(int(args.tail * SAMPLE_RATE) * SAMPLE_WIDTH)
    for path in args.files:
        with wave.open(path, "rb") as wav:
            if (wav.getframerate(), wav.getsampwidth(), wav.getnchannels()) != (SAMPLE_RATE, SAMPLE_WIDTH, 1):
                raise SystemExit(f"{path}: not {SAMPLE_RATE} Hz, {SAMPLE_WIDTH * 8}-bit mono")
            audio = wav.readframes(wav.getnframes())
        index, timed_out = stop_chunk(audio + tail)
        print(json.dumps({"file": path, "stop_chunk": index, "timed_out": timed_out}), flush=True)
    print(json.dumps({"home_assistant": __version__}))


if __name__ == "__main__":
    main()
