// Hands-free transcription (GET /realtime) over OpenAI's Realtime API: the microphone streams to the WebSocket
// /v1/realtime?intent=transcription, and each turn's text comes back while it is spoken.
//
// The page sends session.update (a transcription session: 24 kHz PCM, the Whisper model and language, server_vad
// or semantic_vad), then input_audio_buffer.append events of 20 ms of base64 PCM each, made by an AudioWorklet
// (realtime-worklet.js). The server ends each turn at a pause and sends speech_started, transcription deltas while
// the speaker talks, speech_stopped, committed, then completed (or failed): each turn is a line keyed by its
// item_id, its deltas greyed until the completed transcript replaces them. A browser's WebSocket cannot send an
// Authorization header, so the key goes as the subprotocol openai-insecure-api-key.KEY beside "realtime", as
// OpenAI's browser clients send it. Stop ends the microphone, commits a turn still being spoken, waits for the
// transcripts due and closes.
import { $, ApiError, api, apiKey, fillWhisperChoices, h, log, microphoneTrack, parseMessage, say, sayError,
  setupKeyForm } from "./common.js";

const RATE = 24000; // the PCM rate OpenAI's Realtime API takes
const STOP_WAIT_MS = 15000; // after Stop, how long the transcripts still due are waited for
const KEY_SUBPROTOCOL = "openai-insecure-api-key.";
const COMPLETED = "conversation.item.input_audio_transcription.completed";

const button = $("listen");
const state = $("listen-state");
let socket = null;
let audio = null; // {context, node, track}: the microphone's way to the socket
const turns = new Map(); // item_id -> the turn not completed yet: {element, text, deltas, committed, endedAt}
let stopTimer = null;
let sentMs = 0;

// -- state -----------------------------------------------------------------------

function setPhase(phase) {
  document.body.dataset.realtime = phase; // idle, connecting, listening, stopping
  const live = phase === "listening" || phase === "connecting";
  button.setAttribute("aria-pressed", String(live));
  button.disabled = phase === "stopping";
  for (const id of ["model", "language", "turn-detection"]) $(id).disabled = phase !== "idle" || !$(id).options.length;
  const labels = { connecting: "Connecting…", listening: "Listening… (press to stop)", stopping: "Stopping…" };
  button.textContent = labels[phase] || "Start";
}

function phase() {
  return document.body.dataset.realtime;
}

function showConnection(text, kind) {
  const element = $("connection");
  element.textContent = text;
  element.dataset.state = kind;
}

// -- the WebSocket ---------------------------------------------------------------

function socketUrl() {
  const url = new URL("v1/realtime?intent=transcription", location.href);
  url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  return url.href;
}

/** The socket, once open; a refused one rejects with the server's reason where a request can learn it. */
function openSocket() {
  const key = apiKey();
  let opened;
  try {
    opened = new WebSocket(socketUrl(), key ? ["realtime", KEY_SUBPROTOCOL + key] : ["realtime"]);
  } catch (error) {
    if (error.name !== "SyntaxError" || !key) throw error;
    throw new Error("The API key has characters a WebSocket cannot send (letters, digits and !#$%&'*+-.^_`|~ only)");
  }
  return new Promise((resolve, reject) => {
    const refused = async () => reject(await whyRefused());
    opened.addEventListener("close", refused);
    opened.addEventListener("open", () => {
      opened.removeEventListener("close", refused);
      resolve(opened);
    });
  });
}

/** A browser is told nothing of why a WebSocket was refused: ask the server the same question over HTTP (a 401 opens
 * the key form). */
async function whyRefused() {
  try {
    await api("v1/models");
  } catch (error) {
    if (error instanceof ApiError) return error;
  }
  return new Error("The server refused the WebSocket");
}

function send(event) {
  if (!socket || socket.readyState !== WebSocket.OPEN) return false;
  socket.send(JSON.stringify(event));
  return true;
}

function session() {
  const [type, eagerness] = $("turn-detection").value.split(":");
  const transcription = { model: $("model").value };
  if ($("language").value) transcription.language = $("language").value;
  return {
    type: "transcription",
    audio: {
      input: {
        format: { type: "audio/pcm", rate: RATE },
        transcription,
        turn_detection: eagerness ? { type, eagerness } : { type },
      },
    },
  };
}

// -- the microphone --------------------------------------------------------------

/** The microphone into an AudioWorklet that posts 20 ms of 24 kHz PCM at a time to `append`. */
async function startAudio(track, append) {
  // A context at 24 kHz has the browser resample; one that cannot take another rate's microphone (older Firefox)
  // is replaced by one at the default rate, and the worklet resamples.
  for (const options of [{ sampleRate: RATE }, {}]) {
    const context = new AudioContext(options);
    let source;
    try {
      source = context.createMediaStreamSource(new MediaStream([track]));
    } catch (error) {
      await context.close();
      if (options.sampleRate) continue;
      throw error;
    }
    await context.audioWorklet.addModule("static/realtime-worklet.js");
    const node = new AudioWorkletNode(context, "pcm24k", { channelCount: 1, channelCountMode: "explicit" });
    node.port.onmessage = (event) => append(event.data);
    source.connect(node).connect(context.destination); // pulled by the destination; the worklet outputs silence
    await context.resume();
    log(`Microphone: ${track.label || "default"} at ${context.sampleRate} Hz`);
    return { context, node, track };
  }
  throw new Error("No audio context takes the microphone");
}

function stopAudio() {
  if (!audio) return;
  audio.node.port.onmessage = null; // a chunk posted before the context closed is not sent
  audio.track.stop(); // the browser's microphone indicator goes off
  audio.context.close();
  audio = null;
}

function append(buffer) {
  const bytes = new Uint8Array(buffer);
  let binary = "";
  for (let offset = 0; offset < bytes.length; offset += 0x8000) {
    binary += String.fromCharCode(...bytes.subarray(offset, offset + 0x8000));
  }
  if (send({ type: "input_audio_buffer.append", audio: btoa(binary) })) {
    sentMs += (bytes.length / 2 / RATE) * 1000;
    document.body.dataset.sentMs = String(Math.round(sentMs));
  }
}

// -- start and stop --------------------------------------------------------------

async function start() {
  setPhase("connecting");
  say(state, "");
  showConnection("connecting", "connecting");
  let track = null;
  try {
    track = await microphoneTrack();
    const opened = await openSocket();
    if (phase() !== "connecting") {
      opened.close(1000); // stopped meanwhile
      track.stop();
      return;
    }
    socket = opened;
    socket.addEventListener("message", (event) => received(event.data));
    socket.addEventListener("close", (event) => closed(event));
    log(`Connected to ${socketUrl()}`);
    showConnection("connected", "connected");
    send({ type: "session.update", session: session() });
    sentMs = 0;
    audio = await startAudio(track, append);
    if (socket !== opened) stopAudio(); // stopped meanwhile
  } catch (error) {
    if (track) track.stop();
    sayError(state, error, "Could not start");
    log(`Error: ${error.message}`);
    finish();
  }
}

/** Stop listening: a turn being spoken is committed, and the transcripts due are waited for before closing. */
function stop() {
  stopAudio();
  if (phase() === "connecting" || !socket) {
    finish();
    return;
  }
  if ([...turns.values()].some((turn) => !turn.committed)) {
    send({ type: "input_audio_buffer.commit" });
    log("input_audio_buffer.commit");
  }
  if (!turns.size) {
    finish();
    return;
  }
  setPhase("stopping");
  stopTimer = setTimeout(finish, STOP_WAIT_MS);
}

/** Close the socket and show the page idle; turns still without text say so. */
function finish() {
  clearTimeout(stopTimer);
  stopAudio();
  if (socket) {
    const closing = socket;
    socket = null;
    closing.close(1000);
    log("Disconnected");
  }
  for (const [id, turn] of turns) {
    turn.element.dataset.error = "stopped";
    turn.element.querySelector(".timing").textContent = "stopped before its text came";
    turns.delete(id);
  }
  showConnection("not connected", "closed");
  setPhase("idle");
}

/** The server closed the socket (or the network did). */
function closed(event) {
  if (!socket || event.target !== socket) return; // closed by finish()
  socket = null;
  const why = `The connection closed (${event.code}${event.reason ? `: ${event.reason}` : ""})`;
  log(why);
  if (phase() !== "stopping") say(state, `${why}; press Start to listen again.`, "error");
  finish();
}

// -- what the server says --------------------------------------------------------

function received(data) {
  const event = parseMessage(data);
  if (!event) return;
  switch (event.type) {
    case "session.created":
      log(`${event.type} ${event.session.id}`);
      break;
    case "session.updated": {
      const input = event.session.audio.input;
      log(`${event.type}: ${input.transcription.model}, ${JSON.stringify(input.turn_detection)}`);
      if (phase() === "connecting") setPhase("listening");
      break;
    }
    case "input_audio_buffer.speech_started":
      log(`${event.type} at ${event.audio_start_ms} ms`);
      turn(event.item_id);
      break;
    case "input_audio_buffer.speech_stopped":
      log(`${event.type} at ${event.audio_end_ms} ms`);
      turn(event.item_id).endedAt = performance.now();
      break;
    case "input_audio_buffer.committed": {
      log(`${event.type} ${event.item_id}`);
      const committed = turn(event.item_id);
      committed.committed = true;
      committed.endedAt ||= performance.now();
      break;
    }
    case "conversation.item.input_audio_transcription.delta":
      delta(turn(event.item_id), event.delta);
      break;
    case COMPLETED:
      completed(event);
      break;
    case "conversation.item.input_audio_transcription.failed":
      log(`${event.type}: ${event.error.message}`);
      failed(event.item_id, event.error.message);
      break;
    case "error": {
      const text = `${event.error.message}${event.error.code ? ` (${event.error.code})` : ""}`;
      log(`error: ${text}`);
      say(state, text, "error");
      if (phase() === "connecting") finish(); // the session was refused (an unknown model, say): nothing to hear
      else if (phase() === "stopping") finish(); // the last commit was refused: no more text will come
      break;
    }
    default:
      log(event.type);
  }
}

/** The turn `id`, shown as a line (newest first) the first time it is named. */
function turn(id) {
  let found = turns.get(id);
  if (!found) {
    const element = h(
      "li",
      { class: "live", dataset: { item: id, deltas: "0" } },
      h("span", { class: "text" }, "…"),
      h("span", { class: "timing" }),
    );
    $("utterances").prepend(element);
    found = { element, text: "", deltas: 0, committed: false, endedAt: 0 };
    turns.set(id, found);
  }
  return found;
}

function delta(shown, text) {
  shown.text += text;
  shown.deltas += 1;
  Object.assign(shown.element.dataset, { partial: shown.text, deltas: String(shown.deltas) });
  shown.element.querySelector(".text").textContent = shown.text || "…";
}

function completed(event) {
  const shown = turn(event.item_id);
  turns.delete(event.item_id);
  const text = (event.transcript || "").trim();
  log(`${COMPLETED}: ${text}`);
  const element = shown.element;
  if (!text) {
    element.remove(); // a turn with nothing said (a noise, or the pause a Stop committed)
  } else {
    const latency = shown.endedAt ? Math.round(performance.now() - shown.endedAt) : null;
    element.classList.remove("live");
    element.querySelector(".text").textContent = text;
    const seconds = event.usage && event.usage.type === "duration" ? event.usage.seconds : null;
    const timing = [
      latency !== null ? `latency ${latency} ms from the end of the turn` : null,
      seconds !== null ? `${seconds.toFixed(1)} s of audio` : null,
      `${shown.deltas} delta${shown.deltas === 1 ? "" : "s"}`,
    ];
    element.querySelector(".timing").textContent = timing.filter(Boolean).join(" · ");
    element.dataset.final = text;
    if (latency !== null) element.dataset.latency = String(latency);
  }
  if (phase() === "stopping" && !turns.size) finish();
}

function failed(id, why) {
  const shown = turn(id);
  turns.delete(id);
  shown.element.classList.remove("live");
  shown.element.querySelector(".text").textContent = `Failed: ${why}`;
  shown.element.dataset.error = why;
  if (phase() === "stopping" && !turns.size) finish();
}

// -- start -----------------------------------------------------------------------

async function loadChoices() {
  try {
    await fillWhisperChoices();
  } catch (error) {
    sayError(state, error, "Models unavailable");
  }
  document.body.dataset.loaded = "true";
}

button.addEventListener("click", () => (phase() === "idle" ? start() : stop()));
window.addEventListener("pagehide", () => finish());

setupKeyForm(loadChoices);
setPhase("idle");
showConnection("not connected", "closed");
loadChoices();
