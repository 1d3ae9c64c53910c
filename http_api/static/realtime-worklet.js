// The AudioWorklet of /realtime: the microphone as 16-bit PCM at 24 kHz (OpenAI's Realtime rate), posted to the
// page 20 ms at a time (an ArrayBuffer of little-endian Int16 samples, as every browser's platform orders them).
// The page's AudioContext runs at 24 kHz where the browser allows it, and the browser resamples the microphone;
// where it runs at another rate, the samples are resampled here, linearly (no low-pass: speech has little above
// 12 kHz, and Whisper hears only up to 8).
const RATE = 24000;
// 20 ms, as the openai SDK's microphone example sends: the server hears a pause end up to 80 ms sooner than in 100 ms
const CHUNK = RATE / 50;

class Pcm24k extends AudioWorkletProcessor {
  constructor() {
    super();
    this.step = sampleRate / RATE; // input samples per output sample (sampleRate: the context's, a global here)
    this.position = 0; // of the next output sample, in input samples from this block's first (-1: the last one's)
    this.last = 0; // the last block's last sample
    this.chunk = new Int16Array(CHUNK);
    this.filled = 0;
  }

  process(inputs) {
    const samples = inputs[0] && inputs[0][0];
    if (samples && samples.length) this.resample(samples);
    return true;
  }

  resample(samples) {
    if (this.step === 1) {
      for (const sample of samples) this.put(sample);
      return;
    }
    const at = (index) => (index < 0 ? this.last : samples[index]);
    let position = this.position;
    while (position <= samples.length - 1) {
      const index = Math.floor(position);
      const fraction = position - index;
      this.put(fraction ? at(index) + (at(index + 1) - at(index)) * fraction : at(index));
      position += this.step;
    }
    this.position = position - samples.length;
    this.last = samples[samples.length - 1];
  }

  put(sample) {
    const clipped = Math.max(-1, Math.min(1, sample));
    this.chunk[this.filled++] = clipped < 0 ? clipped * 0x8000 : clipped * 0x7fff;
    if (this.filled === CHUNK) {
      this.port.postMessage(this.chunk.buffer, [this.chunk.buffer]);
      this.chunk = new Int16Array(CHUNK);
      this.filled = 0;
    }
  }
}

registerProcessor("pcm24k", Pcm24k);
