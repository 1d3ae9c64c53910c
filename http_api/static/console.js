// The console (GET /): models and voices, status and metrics, transcribe a file, speak text, clone a voice.
import { $, ApiError, api, apiJson, fillSelect, h, say, sayError, seconds, setupKeyForm } from "./common.js";

const FORMATS = [
  ["mp3", "audio/mpeg"],
  ["opus", 'audio/ogg; codecs="opus"'],
  ["aac", "audio/aac"],
  ["flac", "audio/flac"],
  ["wav", "audio/wav"],
];
const REFRESH_MS = 15000;
const LOADING_RETRY_MS = 2000;
let voices = [];

// -- server status ---------------------------------------------------------------

function engineRows(tbody, engines) {
  const names = Object.keys(engines);
  tbody.replaceChildren(
    ...names.map((name) =>
      h(
        "tr",
        { dataset: { name } },
        h("th", { scope: "row" }, name),
        h("td", { class: `state-${engines[name].state}` }, engines[name].state),
        h("td", { class: "num" }, String(engines[name].pending)),
      ),
    ),
  );
  if (!names.length) tbody.replaceChildren(h("tr", {}, h("td", { colspan: 3 }, "none")));
}

async function loadHealth() {
  const state = $("health-state");
  try {
    const health = await apiJson("health");
    engineRows($("asr-models").tBodies[0], health.asr);
    engineRows($("tts-engines").tBodies[0], health.tts);
    fillSelect(
      $("transcribe-model"),
      Object.keys(health.asr).map((name) => [name]),
    );
    say(state, "Serving.", "ok");
    return true;
  } catch (error) {
    if (error instanceof ApiError && error.status === 503) {
      say(state, "The models are still loading…", "busy");
      setTimeout(refresh, LOADING_RETRY_MS);
    } else {
      sayError(state, error, "Status unavailable");
    }
    return false;
  }
}

/** Prometheus text exposition → [{name, labels, value}] (comments and blank lines skipped). */
export function parsePrometheus(text) {
  const samples = [];
  for (const line of text.split("\n")) {
    const match = /^([A-Za-z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
    if (!match || line.startsWith("#")) continue;
    const labels = {};
    for (const [, name, value] of (match[2] || "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) {
      labels[name] = value.replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c));
    }
    samples.push({ name: match[1], labels, value: Number(match[3]) });
  }
  return samples;
}

function total(samples, name, keep = () => true) {
  return samples.filter((s) => s.name === name && keep(s.labels)).reduce((sum, s) => sum + s.value, 0);
}

function duration(value) {
  if (value < 90) return seconds(value);
  if (value < 5400) return `${(value / 60).toFixed(1)} min`;
  return `${(value / 3600).toFixed(1)} h`;
}

function failed(status) {
  return status !== "ok" && !/^[23]\d\d$/.test(status);
}

async function loadMetrics() {
  const list = $("metrics");
  try {
    const samples = parsePrometheus(await (await api("metrics")).text());
    const hits = total(samples, "wis_tts_cache_phrases_total", (l) => l.result === "hit");
    const looked = total(samples, "wis_tts_cache_phrases_total", (l) => l.result !== "bypass");
    const started = total(samples, "process_start_time_seconds");
    const numbers = [
      ["requests", "Requests answered", String(total(samples, "wis_requests_total"))],
      ["errors", "…of them errors", String(total(samples, "wis_requests_total", (l) => failed(l.status)))],
      ["in-progress", "In progress", String(total(samples, "wis_requests_in_progress", (l) => l.route !== "/metrics"))],
      ["asr-seconds", "Audio transcribed", duration(total(samples, "wis_asr_audio_seconds_total"))],
      ["tts-seconds", "Speech sent", duration(total(samples, "wis_tts_audio_seconds_total"))],
      ["cache-hits", "Speech cache hits", looked ? `${hits} of ${looked} (${Math.round((100 * hits) / looked)} %)` : "0"],
      ["busy", "Refused as busy", String(total(samples, "wis_busy_rejections_total"))],
      ["memory", "Memory", `${Math.round(total(samples, "process_resident_memory_bytes") / 2 ** 20)} MB`],
      ["uptime", "Up for", started ? duration(Date.now() / 1000 - started) : "?"],
    ];
    list.replaceChildren(
      ...numbers.map(([key, label, value]) => h("div", { dataset: { metric: key } }, h("dt", {}, label), h("dd", {}, value))),
    );
    say($("metrics-state"), "");
  } catch (error) {
    sayError($("metrics-state"), error, "Metrics unavailable");
  }
}

// -- voices ----------------------------------------------------------------------

async function loadVoices() {
  const state = $("voices-state");
  try {
    const answer = await apiJson("v1/audio/voices");
    // the hub's voices that are not here: listed, and spoken (fetched first) only where downloads are on
    const where = answer.downloads ? "fetched on first use" : "not installed: downloads are off";
    voices = answer.voices.filter((voice) => voice.installed || answer.downloads);
    $("voices").tBodies[0].replaceChildren(
      ...answer.voices.map((voice) =>
        h(
          "tr",
          { dataset: { voice: voice.id } },
          h("th", { scope: "row" }, voice.name, voice.description ? h("div", { class: "hint" }, voice.description) : null),
          h("td", {}, voice.installed ? voice.engine : `${voice.engine} (${where})`),
          h("td", {}, voice.languages.join(", ")),
          h("td", {}, voice.speakers.length ? voice.speakers.join(", ") : "—"),
        ),
      ),
    );
    const openai = Object.entries(answer.openai || {});
    $("openai-voices").textContent = openai.length
      ? `OpenAI voice names: ${openai.map(([name, voice]) => `${name} → ${voice}`).join(", ")}.`
      : "";
    fillSelect(
      $("speak-voice"),
      voices.map((voice) => [voice.id, voice.name]),
    );
    voiceChosen();
    say(state, voices.length ? "" : "No voices are loaded.", voices.length ? "" : "error");
  } catch (error) {
    sayError(state, error, "Voices unavailable");
  }
}

function voiceChosen() {
  const voice = voices.find((v) => v.id === $("speak-voice").value);
  const speakers = voice ? voice.speakers : [];
  const languages = voice ? voice.languages : [];
  fillSelect($("speak-speaker"), [["", speakers.length ? "default" : "—"], ...speakers.map((s) => [s])]);
  fillSelect($("speak-language"), [["", languages.length > 1 ? "default" : languages[0] || "—"], ...(languages.length > 1 ? languages.map((l) => [l]) : [])]);
  $("speak-speaker").disabled = speakers.length === 0;
  $("speak-language").disabled = languages.length < 2;
}

function fillFormats() {
  const probe = $("speak-audio");
  fillSelect(
    $("speak-format"),
    FORMATS.map(([format, media]) => [format, probe.canPlayType(media) ? format : `${format} (this browser cannot play it)`]),
    "mp3",
  );
}

// -- speak -----------------------------------------------------------------------

let spokenUrl = null;

async function speak(event) {
  event.preventDefault();
  const state = $("speak-state");
  const audio = $("speak-audio");
  const button = $("speak-button");
  const format = $("speak-format").value;
  const request = {
    input: $("speak-text").value,
    voice: $("speak-voice").value || undefined,
    speaker: $("speak-speaker").value || undefined,
    language: $("speak-language").value || undefined,
    response_format: format,
    speed: Number($("speak-speed").value) || undefined,
  };
  button.disabled = true;
  delete audio.dataset.duration;
  say(state, "Speaking…", "busy");
  const began = performance.now();
  try {
    const response = await api("v1/audio/speech", { method: "POST", json: request });
    const firstAudio = performance.now() - began;
    const blob = await response.blob();
    if (spokenUrl) URL.revokeObjectURL(spokenUrl);
    spokenUrl = URL.createObjectURL(blob);
    audio.src = spokenUrl;
    audio.hidden = false;
    const download = $("speak-download");
    download.href = spokenUrl;
    download.download = `speech.${format}`;
    download.hidden = false;
    const cache = response.headers.get("X-Cache");
    say(
      state,
      `${Math.round(blob.size / 1024)} KB of ${format}, first audio after ${Math.round(firstAudio)} ms` +
        (cache ? `, cache ${cache.toLowerCase()}` : "") +
        ".",
      "ok",
    );
    audio.play().catch(() => {
      /* autoplay refused: the controls are there */
    });
  } catch (error) {
    audio.hidden = true;
    sayError(state, error, "Could not speak");
  } finally {
    button.disabled = false;
  }
}

// -- transcribe ------------------------------------------------------------------

function timestamp(value) {
  const minutes = Math.floor(value / 60);
  return `${minutes}:${(value - minutes * 60).toFixed(1).padStart(4, "0")}`;
}

async function transcribe(event) {
  event.preventDefault();
  const state = $("transcribe-state");
  const button = $("transcribe-button");
  const file = $("transcribe-file").files[0];
  if (!file) return say(state, "Choose an audio file first.", "error");
  const form = new FormData();
  form.append("file", file, file.name);
  form.append("response_format", "verbose_json");
  form.append("timestamp_granularities[]", "segment");
  if ($("transcribe-model").value) form.append("model", $("transcribe-model").value);
  if ($("transcribe-language").value.trim()) form.append("language", $("transcribe-language").value.trim());
  button.disabled = true;
  $("transcript").hidden = true;
  say(state, `Transcribing ${file.name}…`, "busy");
  const began = performance.now();
  try {
    const answer = await apiJson("v1/audio/transcriptions", { method: "POST", form });
    const took = (performance.now() - began) / 1000;
    $("transcript-text").textContent = answer.text.trim() || "(nothing heard)";
    $("transcript-meta").textContent = `${seconds(answer.duration)} of audio, language ${answer.language}, transcribed in ${seconds(took, 2)}.`;
    $("segments").tBodies[0].replaceChildren(
      ...answer.segments.map((segment) =>
        h(
          "tr",
          {},
          h("td", { class: "num" }, timestamp(segment.start)),
          h("td", { class: "num" }, timestamp(segment.end)),
          h("td", {}, segment.text.trim()),
        ),
      ),
    );
    $("transcript").hidden = false;
    say(state, "Done.", "ok");
  } catch (error) {
    sayError(state, error, "Could not transcribe");
  } finally {
    button.disabled = false;
    loadMetrics();
  }
}

// -- clone -----------------------------------------------------------------------

async function clone(event) {
  event.preventDefault();
  const state = $("clone-state");
  const button = $("clone-button");
  const name = $("clone-name").value.trim();
  const file = $("clone-file").files[0];
  if (!name || !file) return say(state, "Give the voice a name and choose a recording.", "error");
  const form = new FormData();
  form.append("audio_file", file, file.name);
  button.disabled = true;
  say(state, `Cloning ${name}…`, "busy");
  try {
    const answer = await apiJson(`api/tts?speaker=${encodeURIComponent(name)}`, { method: "POST", form });
    const from = answer.voice && answer.voice.source_seconds ? ` from ${seconds(answer.voice.source_seconds)} of speech` : "";
    say(state, `Added the voice ${name}${from}; pick it under Speak.`, "ok");
    await loadVoices();
    $("speak-voice").value = name;
    voiceChosen();
  } catch (error) {
    sayError(state, error, "Could not clone the voice");
  } finally {
    button.disabled = false;
  }
}

// -- start -----------------------------------------------------------------------

async function refresh() {
  if (await loadHealth()) await loadVoices();
  await loadMetrics();
  document.body.dataset.loaded = "true"; // for tests and scripts: the first round of requests is answered
}

setupKeyForm(refresh);
fillFormats();
$("refresh").addEventListener("click", refresh);
$("speak-voice").addEventListener("change", voiceChosen);
$("speak-form").addEventListener("submit", speak);
$("transcribe-form").addEventListener("submit", transcribe);
$("clone-form").addEventListener("submit", clone);
$("speak-audio").addEventListener("loadedmetadata", (event) => {
  event.target.dataset.duration = String(event.target.duration);
});
setInterval(() => {
  if (document.visibilityState === "visible") refresh();
}, REFRESH_MS);
refresh();
