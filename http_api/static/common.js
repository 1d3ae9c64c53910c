// What the pages share: the API key, requests to this server with the server's errors shown, small DOM helpers, and
// for the talking pages the microphone, the Whisper model and language choices, and the log.
// Every URL is relative to the page, so the pages also work behind a proxy that adds a path prefix.

const KEY_STORE = "wyoming-wis.api-key";
const LOG_LINES = 300;
// Whisper's languages (faster-whisper's list); their names come from the browser.
const LANGUAGES =
  "af am ar as az ba be bg bn bo br bs ca cs cy da de el en es et eu fa fi fo fr gl gu ha haw he hi hr ht hu hy id " +
  "is it ja jw ka kk km kn ko la lb ln lo lt lv mg mi mk ml mn mr ms mt my ne nl nn no oc pa pl ps pt ro ru sa sd si " +
  "sk sl sn so sq sr su sv sw ta te tg th tk tl tr tt uk ur uz vi yi yo zh yue";

export function apiKey() {
  try {
    return localStorage.getItem(KEY_STORE) || "";
  } catch {
    return ""; // storage disabled: the key lives only in the field
  }
}

function storeKey(key) {
  try {
    if (key) localStorage.setItem(KEY_STORE, key);
    else localStorage.removeItem(KEY_STORE);
  } catch {
    /* storage disabled */
  }
}

/** An error answer from the server (OpenAI's envelope), or a request that never got one. */
export class ApiError extends Error {
  constructor(message, status = 0, code = null, param = null) {
    super(message);
    this.status = status;
    this.code = code;
    this.param = param;
  }

  /** "message (HTTP 400, bad-request)" */
  describe() {
    const details = [this.status ? `HTTP ${this.status}` : "", this.code || ""].filter(Boolean).join(", ");
    return details ? `${this.message} (${details})` : this.message;
  }
}

/** Headers for a request to this server: the API key, when the user gave one. */
export function authHeaders(extra = {}) {
  const key = apiKey();
  return key ? { ...extra, Authorization: `Bearer ${key}` } : { ...extra };
}

/**
 * fetch() to this server with the key; resolves to the Response when it is 2xx, otherwise throws an ApiError
 * carrying the server's message. `json` sends a JSON body, `form` a FormData.
 */
export async function api(path, { method = "GET", json, form, signal } = {}) {
  const init = { method, headers: authHeaders(), signal, cache: "no-store" };
  if (json !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(json);
  } else if (form !== undefined) {
    init.body = form;
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new ApiError(`The server did not answer: ${err.message}`);
  }
  if (response.ok) return response;
  throw await errorOf(response);
}

export async function errorOf(response) {
  let message = `${response.status} ${response.statusText}`.trim();
  let code = null;
  let param = null;
  try {
    const body = await response.json();
    if (body && body.error) {
      message = body.error.message || message;
      code = body.error.code || null;
      param = body.error.param || null;
    }
  } catch {
    /* not the envelope: keep the status line */
  }
  const error = new ApiError(message, response.status, code, param);
  if (response.status === 401) document.dispatchEvent(new CustomEvent("wis-unauthorized", { detail: error }));
  return error;
}

export async function apiJson(path, options) {
  return (await api(path, options)).json();
}

/** document.getElementById, loudly. */
export function $(id) {
  const found = document.getElementById(id);
  if (!found) throw new Error(`no element #${id}`);
  return found;
}

/** A new element: h("td", {class: "num"}, "3.2", child, ...). */
export function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "dataset") Object.assign(element.dataset, value);
    else element.setAttribute(name, value === true ? "" : value);
  }
  element.append(...children.flat().filter((child) => child !== null && child !== undefined));
  return element;
}

/** Show a message in a status line: kind "" (plain), "busy", "ok" or "error". */
export function say(target, text, kind = "") {
  target.textContent = text;
  target.dataset.kind = kind;
  target.hidden = !text;
}

export function sayError(target, error, what = "") {
  const text = error instanceof ApiError ? error.describe() : error.message || String(error);
  say(target, what ? `${what}: ${text}` : text, "error");
}

/** Fill a <select> with [value, label] pairs, keeping the current choice when it is still offered. */
export function fillSelect(select, options, preferred) {
  const keep = select.value || preferred;
  select.replaceChildren(...options.map(([value, label]) => h("option", { value }, label ?? value)));
  if (options.some(([value]) => value === keep)) select.value = keep;
  select.disabled = options.length === 0;
}

export function seconds(value, digits = 1) {
  return `${Number(value).toFixed(digits)} s`;
}

/** The header's key form: shows whether a key is stored, saves or forgets it, opens itself on a 401. */
export function setupKeyForm(onChange = () => {}) {
  const details = $("key");
  const form = $("key-form");
  const input = $("key-input");
  const state = $("key-state");
  const show = () => say(state, apiKey() ? "A key is stored in this browser." : "No key stored.", "");
  input.value = apiKey();
  show();
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    storeKey(input.value.trim());
    show();
    onChange();
  });
  $("key-forget").addEventListener("click", () => {
    input.value = "";
    storeKey("");
    show();
    onChange();
  });
  document.addEventListener("wis-unauthorized", (event) => {
    details.open = true;
    say(state, `${event.detail.message}. Enter the server's API key.`, "error");
  });
}

// -- the talking pages ------------------------------------------------------------

/** A line in the page's #log, with the time; the oldest lines go. */
export function log(text) {
  const box = $("log");
  const time = new Date().toLocaleTimeString([], { hour12: false });
  box.append(`${time}  ${text}\n`);
  while (box.childNodes.length > LOG_LINES) box.firstChild.remove();
  box.scrollTop = box.scrollHeight;
}

/** A JSON message from the server, or null (logged) when it is not JSON. */
export function parseMessage(data) {
  try {
    return JSON.parse(data);
  } catch {
    log(`Not JSON: ${String(data).slice(0, 200)}`);
    return null;
  }
}

/** The microphone's track (mono; the browser's echo cancellation, noise suppression and gain control left on). */
export async function microphoneTrack() {
  if (!navigator.mediaDevices) throw insecurePage("the microphone");
  const stream = await navigator.mediaDevices.getUserMedia({ audio: { channelCount: 1 }, video: false });
  return stream.getAudioTracks()[0];
}

/** Why `what` is missing: the browser gives it only to secure pages. */
export function insecurePage(what) {
  return new Error(
    `This browser gives ${what} only to secure pages: open this page over HTTPS ` +
      "(start the server with --ssl-cert and --ssl-key) or on localhost",
  );
}

/** The Whisper models (`/v1/models` less the voices: those `/health` lists as speech to text). */
async function whisperModels() {
  const [models, health] = await Promise.all([apiJson("v1/models"), apiJson("health")]);
  return models.data.map((model) => model.id).filter((id) => id in health.asr);
}

/** Fill #model with the Whisper models and #language with what the chosen one speaks; kept in step. */
export async function fillWhisperChoices() {
  const model = $("model");
  fillSelect(model, (await whisperModels()).map((id) => [id]));
  fillSelect($("language"), languagesFor(model.value));
  model.onchange = () => fillSelect($("language"), languagesFor(model.value));
}

/** [code, name] for each language `model` speaks ("" to detect it, unless the model is English only). */
function languagesFor(model) {
  const names = typeof Intl.DisplayNames === "function" ? new Intl.DisplayNames(["en"], { type: "language" }) : null;
  const name = (code) => {
    try {
      return names ? `${names.of(code)} (${code})` : code;
    } catch {
      return code;
    }
  };
  const codes = model.endsWith(".en") ? ["en"] : LANGUAGES.split(" ");
  const entries = codes.map((code) => [code, name(code)]).sort((a, b) => a[1].localeCompare(b[1]));
  return model.endsWith(".en") ? entries : [["", "detect"], ...entries];
}
