// What both pages share: the API key, requests to this server with the server's errors shown, small DOM helpers.
// Every URL is relative to the page, so the pages also work behind a proxy that adds a path prefix.

const KEY_STORE = "wyoming-wis.api-key";

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
