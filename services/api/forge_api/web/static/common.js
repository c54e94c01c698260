// Shared helpers of the Forge pages: the JSON API, DOM building (text only, never HTML strings),
// formatting, announcements for screen readers, and Server-Sent Event streams.

document.documentElement.classList.add("js");

export class ApiError extends Error {
  constructor(status, body) {
    super(body && body.detail ? body.detail : `HTTP ${status}`);
    this.status = status;
    this.type = body && body.type;
    this.field = body && body.field;
    this.body = body;
  }
}

/** fetch a JSON endpoint; a non-2xx answer throws an ApiError carrying {type, detail, field}. */
export async function api(path, { method = "GET", body } = {}) {
  const init = { method, headers: { Accept: "application/json" } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (err) {
    throw new ApiError(0, { type: "network", detail: `cannot reach the Forge API (${err.message})` });
  }
  const text = await response.text();
  let data = null;
  if (text) {
    try { data = JSON.parse(text); } catch { data = { detail: text }; }
  }
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

/** An element with attributes and children (strings become text nodes). */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key in node && typeof value !== "string") node[key] = value;
    else node.setAttribute(key, value === true ? "" : value);
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
}

/** Replace an element's children. */
export function fill(node, ...children) {
  node.replaceChildren();
  append(node, children);
  return node;
}

export const $ = (id) => document.getElementById(id);

const announcer = () => $("announcer");
let lastAnnouncement = "";
/** Say something to screen-reader users (polite). */
export function announce(text) {
  const node = announcer();
  if (!node || text === lastAnnouncement) return;
  lastAnnouncement = text;
  node.textContent = text;
}

export const STATES = ["draft", "queued", "running", "succeeded", "stopped", "canceled", "failed"];
export const TERMINAL = new Set(["succeeded", "stopped", "canceled", "failed"]);

export function stateBadge(state) {
  return el("span", { class: `state state-${state}`, text: state });
}

export function fmtTime(iso) {
  if (!iso) return "—";
  const d = new Date(iso);
  return d.toLocaleString(undefined, { year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit" });
}

export function timeEl(iso) {
  return iso ? el("time", { datetime: iso, text: fmtTime(iso) }) : "—";
}

export function fmtDuration(seconds) {
  if (seconds === null || seconds === undefined || !isFinite(seconds)) return "—";
  seconds = Math.max(0, Math.round(seconds));
  const h = Math.floor(seconds / 3600);
  const m = Math.floor((seconds % 3600) / 60);
  const s = seconds % 60;
  if (h) return `${h} h ${String(m).padStart(2, "0")} min`;
  if (m) return `${m} min ${String(s).padStart(2, "0")} s`;
  return `${s} s`;
}

/** How long a job ran (or has been running). */
export function jobDuration(job, now = Date.now()) {
  if (!job.started_at) return null;
  const end = job.finished_at ? Date.parse(job.finished_at) : job.state === "running" ? now : null;
  return end === null ? null : (end - Date.parse(job.started_at)) / 1000;
}

export function fmtNumber(value) {
  if (typeof value !== "number") return String(value);
  if (Number.isInteger(value)) return String(value);
  const abs = Math.abs(value);
  if (abs !== 0 && (abs < 1e-3 || abs >= 1e6)) return value.toExponential(3);
  return String(Number(value.toPrecision(4)));
}

export function percent(fraction) {
  return `${Math.round(Math.max(0, Math.min(1, fraction || 0)) * 100)} %`;
}

/**
 * Follow an SSE endpoint. ``handlers`` maps event names to functions of (parsed data, MessageEvent).
 * EventSource reconnects by itself and sends Last-Event-ID, so the stream resumes without a gap;
 * ``status`` (an element) says whether the page is live.
 */
export function follow(url, handlers, status) {
  const source = new EventSource(url);
  const say = (text) => { if (status) status.textContent = text; };
  source.onopen = () => say("Live: updates appear as they happen.");
  source.onerror = () => say(source.readyState === EventSource.CLOSED ? "Live updates stopped; reload the page." : "Connection lost; reconnecting…");
  for (const [name, handler] of Object.entries(handlers)) {
    source.addEventListener(name, (event) => {
      let data = null;
      try { data = JSON.parse(event.data); } catch { data = event.data; }
      handler(data, event);
    });
  }
  window.addEventListener("pagehide", () => source.close());
  return source;
}

/** Call ``fn`` once, ``ms`` after the last of a burst of calls. */
export function debounce(fn, ms) {
  let timer = null;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
}

/** Download links of a registered model version. */
export function downloadLinks(name, version, { onnx = true, weights = true, files = {} } = {}) {
  const base = `/v1/models/${encodeURIComponent(name)}/versions/${version}/download`;
  const links = [];
  if (onnx) links.push(el("a", { href: `${base}?file=onnx`, download: "", text: "ONNX" }));
  if (weights) links.push(el("a", { href: `${base}?file=weights`, download: "", text: "Weights" }));
  // the version's other parts (an adapter folder, a merged model, …): folders arrive as a .tar
  for (const part of Object.keys(files || {}).sort()) {
    links.push(el("a", { href: `${base}?file=${encodeURIComponent(part)}`, download: "", text: part.replace(/_/g, " ") }));
  }
  return el("span", { class: "downloads" }, links);
}
