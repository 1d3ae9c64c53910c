// Press to talk (GET /rtc): the microphone goes to the server over WebRTC, text comes back on a data channel.
//
// Signalling: one RTCPeerConnection with the microphone track and a data channel "chat"; the offer (after ICE
// gathering completes, no trickle) goes to POST api/rtc/asr, which answers with the server's SDP.
// Data channel, JSON {type, message?, obj?}: the page sends start {model?, language?, hands_free?} / stop / ping;
// the server sends partial {text}, infer {text, language, audio_duration, infer_time, model}, log, error {code},
// pong, and hands-free turn-end {reason} when it ends a turn (that turn's infer follows; the next turn has begun).
// Each stop, and each turn-end, is answered by one infer or error, in order: `pending` pairs them up.
// Wake words: the page sends wake {names} and wake-stop; the server sends detection {name, timestamp, probability}
// as soon as it hears one, and not-detected at wake-stop if it heard none.
// Between utterances the microphone is detached from the connection (replaceTrack(null)) and attached again on
// the next start, so an open connection costs nothing while nobody talks.
import {
  $,
  api,
  apiJson,
  fillSelect,
  fillWhisperChoices,
  h,
  insecurePage,
  log,
  microphoneTrack,
  parseMessage,
  say,
  sayError,
  setupKeyForm,
} from "./common.js";

const HOLD_MS = 400; // a press longer than this is held (release stops); a shorter one toggles
const DETACH_DELAY_MS = 300; // after stop, let the last audio packets leave before detaching the microphone
const ICE_GATHERING_TIMEOUT_MS = 5000;
const CHANNEL_OPEN_TIMEOUT_MS = 15000;
const PING_INTERVAL_MS = 20000;

const talkButton = $("talk");
const state = $("talk-state");
let microphone = null; // the MediaStreamTrack, kept between utterances
let peer = null; // {pc, channel, sender}
let connecting = null; // the promise of a connection being made
let talking = false; // the user is talking (start sent or about to be)
let handsFree = false; // the talking is hands-free: the server ends each turn, one press starts and stops
let pending = []; // utterances stopped and waiting for their final text, oldest first
let current = null; // the utterance being spoken
let detachTimer = null;
let pingTimer = null;
let pingSent = 0;
let pressedAt = 0;
let pressStarted = false;
let partialsShown = 0;
let wakeListening = false; // wake sent, wake-stop not yet

// -- state -----------------------------------------------------------------------

function setPhase(phase) {
  document.body.dataset.rtc = phase; // idle, connecting, listening, waiting
  const live = phase === "listening" || phase === "connecting";
  talkButton.setAttribute("aria-pressed", String(live));
  $("hands-free").disabled = live;
  talkButton.textContent = buttonLabel(phase);
}

function buttonLabel(phase) {
  if (phase === "connecting") return "Connecting…";
  if (phase === "listening") return handsFree ? "Listening… (press to stop)" : "Listening…";
  return $("hands-free").checked ? "Start hands-free" : "Hold to talk";
}

function showConnection(text, kind) {
  const element = $("connection");
  element.textContent = text;
  element.dataset.state = kind;
  $("disconnect").disabled = !peer && !microphone;
}

// -- connection ------------------------------------------------------------------

async function getMicrophone() {
  if (microphone && microphone.readyState === "live") return microphone;
  if (!navigator.mediaDevices || !window.RTCPeerConnection) throw insecurePage("the microphone and WebRTC");
  microphone = await microphoneTrack();
  microphone.addEventListener("ended", () => {
    log("The microphone was taken away");
    microphone = null;
  });
  log(`Microphone: ${microphone.label || "default"}`);
  return microphone;
}

function iceGatheringComplete(pc) {
  if (pc.iceGatheringState === "complete") return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      if (pc.iceGatheringState !== "complete") return;
      pc.removeEventListener("icegatheringstatechange", done);
      resolve();
    };
    pc.addEventListener("icegatheringstatechange", done);
    setTimeout(resolve, ICE_GATHERING_TIMEOUT_MS); // send the candidates there are
  });
}

function channelOpen(channel) {
  if (channel.readyState === "open") return Promise.resolve();
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("The data channel did not open")), CHANNEL_OPEN_TIMEOUT_MS);
    channel.addEventListener("open", () => {
      clearTimeout(timer);
      resolve();
    });
    channel.addEventListener("close", () => {
      clearTimeout(timer);
      reject(new Error("The data channel closed while opening"));
    });
  });
}

async function openConnection() {
  const track = await getMicrophone();
  const pc = new RTCPeerConnection({ iceServers: [] }); // a LAN needs no STUN
  const sender = pc.addTrack(track, new MediaStream([track]));
  const channel = pc.createDataChannel("chat", { ordered: true });
  const connection = { pc, channel, sender };
  channel.addEventListener("message", (event) => received(event.data));
  channel.addEventListener("close", () => closed(connection, "The data channel closed"));
  pc.addEventListener("connectionstatechange", () => {
    const now = pc.connectionState;
    log(`Connection ${now}`);
    if (peer === connection) showConnection(now, now);
    if (now === "failed" || now === "closed") closed(connection, `The connection ${now}`);
  });
  try {
    showConnection("connecting", "connecting");
    await pc.setLocalDescription(await pc.createOffer());
    await iceGatheringComplete(pc);
    const offer = pc.localDescription;
    log("Sending the offer");
    const answer = await apiJson("api/rtc/asr", { method: "POST", json: { sdp: offer.sdp, type: offer.type } });
    await pc.setRemoteDescription(answer);
    await channelOpen(channel);
  } catch (error) {
    pc.close();
    showConnection("not connected", "failed");
    throw error;
  }
  peer = connection;
  showConnection("connected", "connected");
  log("Connected");
  clearInterval(pingTimer);
  pingTimer = setInterval(ping, PING_INTERVAL_MS);
  return connection;
}

function connect() {
  if (peer && peer.channel.readyState === "open") return Promise.resolve(peer);
  if (!connecting) connecting = openConnection().finally(() => (connecting = null));
  return connecting;
}

function closed(connection, why) {
  if (peer !== connection) return;
  peer = null;
  clearInterval(pingTimer);
  connection.pc.close();
  log(why);
  showConnection("not connected", "closed");
  for (const utterance of pending) fail(utterance, why);
  pending = [];
  if (wakeListening) setWakeListening(false);
  if (talking) {
    talking = false;
    current = null;
    setPhase("idle");
    say(state, `${why}; press again to reconnect.`, "error");
  }
}

function releaseMicrophone() {
  if (microphone) {
    microphone.stop(); // the browser's microphone indicator goes off
    microphone = null;
  }
  $("disconnect").disabled = !peer;
}

function disconnect() {
  if (peer) closed(peer, "Disconnected");
  releaseMicrophone();
  showConnection("not connected", "closed");
}

function send(message) {
  if (!peer || peer.channel.readyState !== "open") return false;
  peer.channel.send(JSON.stringify(message));
  return true;
}

function ping() {
  pingSent = performance.now();
  send({ type: "ping" });
}

// -- talking ---------------------------------------------------------------------

function options() {
  const obj = {};
  if ($("model").value) obj.model = $("model").value;
  if ($("language").value) obj.language = $("language").value;
  return obj;
}

async function startTalking() {
  if (talking) return;
  talking = true;
  handsFree = $("hands-free").checked;
  clearTimeout(detachTimer);
  say(state, "");
  const utterance = newUtterance();
  current = utterance;
  setPhase("connecting");
  try {
    const connection = await connect();
    const track = await getMicrophone();
    if (connection.sender.track !== track) await connection.sender.replaceTrack(track);
  } catch (error) {
    talking = false;
    current = null;
    setPhase("idle");
    sayError(state, error, "Could not connect");
    log(`Error: ${error.message}`);
    if (!peer) releaseMicrophone();
    return;
  }
  if (current !== utterance) return; // the connection closed meanwhile
  show(utterance);
  const obj = handsFree ? { ...options(), hands_free: true } : options();
  send({ type: "start", obj });
  utterance.started = true;
  log(`start ${JSON.stringify(obj)}`);
  setPhase("listening");
  if (utterance.stopWanted) stopTalking();
}

function newUtterance() {
  return { element: null, partials: 0, stopAt: 0, started: false, stopWanted: false, handsFree, endedBy: null };
}

/** The utterance's line in the list, newest first: "…" until text comes. */
function show(utterance) {
  utterance.element = h("li", { dataset: { partials: "0" } }, h("span", { class: "text" }, "…"), h("span", { class: "timing" }));
  $("utterances").prepend(utterance.element);
}

/** Hands-free: the server ended the turn being spoken; its text follows, and the next turn is being listened to. */
function turnEnded(reason) {
  log(`turn ended: ${reason}`);
  if (!talking || !current || !current.started) return; // stopped meanwhile: the stop is answered instead
  current.endedBy = reason;
  pending.push(current);
  current = newUtterance();
  current.started = true;
  show(current);
}

function stopTalking() {
  if (!talking || !current) return;
  const utterance = current;
  if (!utterance.started) {
    utterance.stopWanted = true; // released while connecting: stop as soon as it has started
    return;
  }
  talking = false;
  current = null;
  utterance.stopAt = performance.now();
  send({ type: "stop", obj: options() });
  log("stop");
  pending.push(utterance);
  setPhase("waiting");
  detachSoon();
}

/** Detach the microphone from the connection once the last packets have left, unless talking again by then. */
function detachSoon() {
  clearTimeout(detachTimer);
  detachTimer = setTimeout(() => {
    if (!peer || talking || wakeListening || !peer.sender.track) return;
    peer.sender.replaceTrack(null).then(
      () => log("Microphone detached until the next start"),
      (error) => log(`Detaching the microphone: ${error.message}`),
    );
  }, DETACH_DELAY_MS);
}

function press() {
  if (talking) {
    pressStarted = false;
    stopTalking();
  } else {
    pressStarted = true;
    pressedAt = performance.now();
    startTalking();
  }
}

function release() {
  if (pressStarted && !handsFree && performance.now() - pressedAt >= HOLD_MS) stopTalking();
  pressStarted = false;
}

// -- what the server says --------------------------------------------------------

function received(data) {
  const message = parseMessage(data);
  if (!message) return;
  const obj = message.obj || {};
  switch (message.type) {
    case "partial":
      partial(obj.text || "");
      break;
    case "turn-end":
      turnEnded(obj.reason);
      break;
    case "infer":
      final(obj);
      break;
    case "detection":
      detected(obj);
      break;
    case "not-detected":
      log("No wake word was heard");
      break;
    case "pong":
      if (pingSent) log(`pong after ${Math.round(performance.now() - pingSent)} ms`);
      break;
    case "log":
      log(`server: ${message.message}`);
      break;
    case "error": {
      const text = `${message.message}${obj.code ? ` (${obj.code})` : ""}`;
      log(`server error: ${text}`);
      say(state, text, "error");
      if (wakeListening && !pending.length && !(current && current.started)) {
        setWakeListening(false); // the server refused the wake words (or could not keep up): listening is over
        detachSoon();
      } else if (pending.length) {
        fail(pending.shift(), text); // the oldest utterance waiting for its text will not get it
      } else if (current && current.started) {
        fail(current, text); // the server refused the start (an unknown model, say): this utterance is over
        talking = false;
        current = null;
        detachSoon();
      }
      if (!pending.length && !talking) setPhase("idle");
      break;
    }
    default:
      log(`Unknown message ${JSON.stringify(message).slice(0, 200)}`);
  }
}

// -- wake words ------------------------------------------------------------------

function setWakeListening(on) {
  wakeListening = on;
  const button = $("wake");
  button.setAttribute("aria-pressed", String(on));
  button.textContent = on ? "Stop listening" : "Listen for the wake word";
  $("wake-word").disabled = on;
}

async function toggleWake() {
  if (wakeListening) {
    send({ type: "wake-stop" });
    log("wake-stop");
    setWakeListening(false);
    detachSoon();
    return;
  }
  setWakeListening(true);
  clearTimeout(detachTimer);
  try {
    const connection = await connect();
    const track = await getMicrophone();
    if (connection.sender.track !== track) await connection.sender.replaceTrack(track);
  } catch (error) {
    setWakeListening(false);
    sayError(state, error, "Could not connect");
    log(`Error: ${error.message}`);
    if (!peer) releaseMicrophone();
    return;
  }
  const names = [$("wake-word").value].filter(Boolean);
  send({ type: "wake", obj: { names } });
  log(`wake ${JSON.stringify(names)}`);
}

function detected(obj) {
  const seconds = (obj.timestamp / 1000).toFixed(2);
  log(`detection: ${obj.name} at ${seconds} s (${obj.probability})`);
  const phrase = $("wake-word").selectedOptions[0]?.textContent || obj.name;
  const when = h("span", { class: "timing" }, `at ${seconds} s`);
  $("detections").prepend(h("li", { dataset: { name: obj.name } }, h("span", { class: "text" }, phrase), when));
}

async function loadWakeWords() {
  try {
    const { wake_words: offered } = await apiJson("api/wake");
    const family = { microwakeword: "microWakeWord", openwakeword: "openWakeWord" };
    fillSelect(
      $("wake-word"),
      offered.map((word) => [word.name, `${word.phrase} (${family[word.family] || word.family})`]),
      "okay_nabu",
    );
    $("wake").disabled = !offered.length;
  } catch (error) {
    $("wake").disabled = true;
    log(`Wake words: ${error.message}`);
  }
}

function partial(text) {
  const utterance = current || pending[pending.length - 1];
  log(`partial: ${text}`);
  if (!utterance || !utterance.element || !text.trim()) return;
  utterance.partials += 1; // partial texts shown, counted for the timing line (and for tests)
  partialsShown += 1;
  Object.assign(utterance.element.dataset, { partials: String(utterance.partials), partial: text });
  document.body.dataset.partials = String(partialsShown);
  utterance.element.querySelector(".text").textContent = text;
  $("partial").textContent = text;
}

function final(result) {
  const utterance = pending.shift();
  const text = (result.text || "").trim();
  let latency = null;
  if (utterance) {
    latency = Math.round(utterance.endedBy ? result.infer_time : performance.now() - utterance.stopAt);
  }
  $("partial").textContent = "";
  if (utterance && utterance.element && utterance.handsFree && !text) {
    utterance.element.remove(); // the turn in progress when hands-free was stopped, with nothing said
  } else if (utterance && utterance.element) {
    const element = utterance.element;
    element.querySelector(".text").textContent = text || "(nothing heard)";
    const timing = [
      utterance.endedBy ? `latency ${latency} ms from the last word (${utterance.endedBy})` : `latency ${latency} ms`,
      result.audio_duration !== undefined ? `${(result.audio_duration / 1000).toFixed(1)} s of audio` : null,
      result.infer_time !== undefined && !utterance.endedBy ? `server ${Math.round(result.infer_time)} ms` : null,
      result.model || null,
      result.language || null,
      `${utterance.partials} partial${utterance.partials === 1 ? "" : "s"}`,
    ];
    element.querySelector(".timing").textContent = timing.filter(Boolean).join(" · ");
    Object.assign(element.dataset, { final: text, latency: String(latency), partials: String(utterance.partials) });
    if (utterance.endedBy) element.dataset.endedBy = utterance.endedBy;
  }
  log(`infer: ${text} (${latency} ms)`);
  if (!pending.length && !talking) setPhase("idle");
  if (text && $("speak-back").checked) speakBack(text);
}

function fail(utterance, why) {
  if (!utterance.element) return;
  utterance.element.querySelector(".text").textContent = `Failed: ${why}`;
  utterance.element.dataset.error = why;
}

async function speakBack(text) {
  const audio = $("back-audio");
  try {
    const response = await api("v1/audio/speech", {
      method: "POST",
      json: { input: text, voice: $("back-voice").value || undefined, response_format: "mp3" },
    });
    if (audio.src) URL.revokeObjectURL(audio.src);
    audio.src = URL.createObjectURL(await response.blob());
    await audio.play();
  } catch (error) {
    sayError(state, error, "Could not speak the transcript back");
  }
}

// -- choices ---------------------------------------------------------------------

async function loadChoices() {
  try {
    await fillWhisperChoices();
  } catch (error) {
    sayError(state, error, "Models unavailable");
  }
  try {
    const answer = await apiJson("v1/audio/voices");
    const voices = answer.voices.filter((voice) => voice.installed || answer.downloads);
    fillSelect(
      $("back-voice"),
      voices.map((voice) => [voice.id, voice.name]),
    );
  } catch (error) {
    log(`Voices unavailable: ${error.message}`);
  }
  await loadWakeWords();
  document.body.dataset.loaded = "true";
}

// -- start -----------------------------------------------------------------------

/** Space belongs to the talk button, except where it types or activates something else. */
function spaceIsTaken(target) {
  if (!(target instanceof HTMLElement) || target === talkButton) return false;
  return target.isContentEditable || /^(INPUT|TEXTAREA|SELECT|BUTTON|A|SUMMARY|AUDIO)$/.test(target.tagName);
}

talkButton.addEventListener("pointerdown", (event) => {
  if (event.button !== 0) return;
  talkButton.setPointerCapture(event.pointerId);
  press();
});
talkButton.addEventListener("pointerup", release);
talkButton.addEventListener("pointercancel", release);
talkButton.addEventListener("click", (event) => {
  if (event.detail === 0) {
    press(); // Enter on the focused button: toggles
    pressStarted = false;
  }
});
talkButton.addEventListener("contextmenu", (event) => event.preventDefault()); // a long touch must not open a menu
document.addEventListener("keydown", (event) => {
  if (event.code !== "Space" || spaceIsTaken(event.target)) return;
  event.preventDefault();
  if (!event.repeat) press();
});
document.addEventListener("keyup", (event) => {
  if (event.code !== "Space" || spaceIsTaken(event.target)) return;
  event.preventDefault();
  release();
});
$("hands-free").addEventListener("change", () => {
  if (!talking) talkButton.textContent = buttonLabel(document.body.dataset.rtc);
});
$("disconnect").addEventListener("click", disconnect);
$("wake").addEventListener("click", toggleWake);
window.addEventListener("pagehide", () => disconnect());

setupKeyForm(loadChoices);
setPhase("idle");
showConnection("not connected", "closed");
loadChoices();
