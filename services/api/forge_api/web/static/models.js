// The model registry: GET /v1/models and each model's versions, with metrics, lineage (source job,
// dataset version, base model) and downloads; refreshed when a version is registered or deleted.
import { $, announce, api, debounce, downloadLinks, el, fill, fmtNumber, follow, stateBadge, timeEl } from "./common.js";

const box = $("models");
const loadedAt = Date.now();
const enc = encodeURIComponent;

function metricsList(metrics) {
  const main = metrics.main_metric;
  const entries = Object.entries(metrics || {}).filter(([k, v]) => k !== "main_metric" && (typeof v === "number" || typeof v === "string"));
  entries.sort(([a], [b]) => (a === main ? -1 : b === main ? 1 : 0));
  if (!entries.length) return el("span", { class: "muted", text: "—" });
  return el("ul", { class: "metrics-list" }, entries.map(([k, v]) =>
    el("li", { class: k === main ? "main" : undefined }, `${k} `, el("span", { class: "num", text: fmtNumber(v) }), k === main ? " (main)" : "")));
}

function versionRow(v) {
  return el("tr", { "data-version": v.version },
    el("th", { scope: "row", class: "num", text: `v${v.version}` }),
    el("td", { class: "nowrap" }, timeEl(v.created_at)),
    el("td", { class: "metrics" }, metricsList(v.metrics || {})),
    el("td", {}, el("a", { href: `/jobs/${v.job_id}`, text: v.job_name }), " ", stateBadge(v.job_state),
      v.attempt > 1 ? ` attempt ${v.attempt}` : ""),
    el("td", { text: v.dataset ? `${v.dataset.name} v${v.dataset.version}` : "—" }),
    el("td", { text: v.base_model || "—" }),
    el("td", {}, v.onnx_uri || v.weights_uri ? downloadLinks(v.name, v.version, { onnx: !!v.onnx_uri, weights: !!v.weights_uri, files: v.files }) : "—"),
  );
}

function modelSection(model, versions) {
  const id = `model-${model.name}`;
  return el("section", { class: "model card", id, "aria-labelledby": `${id}-title` },
    el("h2", { id: `${id}-title`, text: model.name }),
    el("p", { class: "muted", text: `${model.versions} version(s); latest v${model.latest_version ?? "—"}.` }),
    el("div", { class: "table-scroll" },
      el("table", { class: "compact" },
        el("caption", { text: `Versions of ${model.name}, with lineage` }),
        el("thead", {}, el("tr", {}, ["Version", "Registered", "Metrics", "Source job", "Dataset", "Base model", "Download"].map((h) => el("th", { scope: "col", text: h })))),
        el("tbody", {}, versions.map((v) => versionRow(v))),
      )),
  );
}

async function load() {
  let models;
  try {
    models = await api("/v1/models");
  } catch (err) {
    fill(box, el("p", { class: "alert error", role: "alert", text: `Cannot list models: ${err.message}` }));
    return;
  }
  const all = await Promise.all(models.map((m) => api(`/v1/models/${enc(m.name)}/versions`).catch(() => [])));
  if (!models.length) {
    fill(box, el("p", { class: "muted" }, "No registered model yet. A job registers one when it succeeds or is stopped after an epoch; ",
      el("a", { href: "/jobs/new", text: "start a job" }), "."));
  } else {
    fill(box, models.map((m, i) => modelSection(m, all[i])));
  }
  document.body.dataset.loaded = "true";
  if (location.hash) document.getElementById(decodeURIComponent(location.hash.slice(1)))?.scrollIntoView();
}

const refresh = debounce(load, 300);
load();
follow("/v1/events?kinds=model-registered,model-deleted&since=now", {
  "model-registered": (event) => {
    const d = event && event.data;
    if (d && Date.parse(event.time) >= loadedAt - 2000) announce(`Model ${d.model_name} version ${d.version} registered.`);
    refresh();
  },
  "model-deleted": () => refresh(),
}, $("live-status"));
