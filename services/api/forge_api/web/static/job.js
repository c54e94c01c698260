// A job's page: everything from GET /v1/jobs/{id}, then live from GET /v1/jobs/{id}/events
// (a ``snapshot`` of the job, then the job's history and live events: status, metrics,
// epoch-completed, logs, artifact-uploaded, model-registered, …).
import { Chart } from "./chart.js";
import {
  $, TERMINAL, announce, api, debounce, downloadLinks, el, fill, fmtDuration, fmtNumber, follow, jobDuration, percent, timeEl,
} from "./common.js";

const jobId = decodeURIComponent(location.pathname.split("/")[2] || "");
const loadedAt = Date.now();
const MAX_LOG_LINES = 20000;

let job = null;
let stepProgress = 0;
let epochsSeen = 0; // from epoch-completed events, which may be ahead of the job's row
const epochs = new Map(); // epoch → {metrics, is_best}
const uploads = [];
const versions = new Map(); // "name/version" → model version (or a pending promise)

const stepChart = new Chart($("step-chart"), { xLabel: "step", visibleByDefault: (name) => /loss/i.test(name) });
const epochChart = new Chart($("epoch-chart"), { xLabel: "epoch" });

const completed = () => Math.max(job.epochs_completed || 0, epochsSeen);
const isLive = (event) => event && event.time && Date.parse(event.time) >= loadedAt - 2000;

// ---- rendering ---------------------------------------------------------------------------------------

function renderHeader() {
  document.title = `${job.name} (${job.state}) · Forge`;
  $("job-name").textContent = job.name;
  $("crumb").textContent = job.name;
  const badge = $("job-state");
  badge.className = `state state-${job.state}`;
  badge.textContent = job.stop_requested && !TERMINAL.has(job.state) ? `${job.state}, stop requested` : job.state;
  document.body.dataset.state = job.state;

  const failure = $("failure");
  failure.hidden = !job.error;
  if (job.error) {
    $("failure-reason").textContent = job.error.reason;
    $("failure-message").textContent = job.error.message;
    $("failure-hint").textContent = job.error.hint ? `Hint: ${job.error.hint}` : "";
    $("failure-hint").hidden = !job.error.hint;
  }

  const queue = $("queue-info");
  if (job.state === "queued") {
    const where = job.queue_position ? `position ${job.queue_position} in the ${job.accelerator} queue` : `in the ${job.accelerator} queue`;
    const eta = job.estimated_start ? ` Estimated start: ${new Date(job.estimated_start).toLocaleString()}.` : "";
    queue.textContent = `Queued: ${where}.${job.waiting_for ? ` Waiting for: ${job.waiting_for}.` : ""}${eta}`;
    queue.hidden = false;
  } else if (job.state === "draft") {
    queue.textContent = "Draft: not queued yet. Start it to queue it, or duplicate it to change its spec.";
    queue.hidden = false;
  } else {
    queue.hidden = true;
  }
}

// An epoch, or (an LLM job with save_steps) a checkpoint interval: what progress counts, what
// picks the best model, and what decides stop versus cancel.
const unitName = () => (job && job.progress_unit && job.progress_unit !== "epoch" ? "checkpoint" : "epoch");

function renderUnit() {
  const unit = unitName();
  $("epoch-label").textContent = unit === "epoch" ? "Epochs" : `Checkpoints (each ${job.progress_unit.replace("checkpoint of ", "")})`;
  $("stop-rule-unit").textContent = unit === "epoch" ? "epoch" : `checkpoint (every ${job.progress_unit.replace("checkpoint of ", "")})`;
  $("epoch-caption").textContent = unit === "epoch" ? "Completed epochs" : "Completed checkpoints";
}

function renderProgress() {
  const total = job.total_epochs;
  const done = completed();
  const epochFraction = total ? Math.min(1, done / total) : job.progress || 0;
  $("epoch-progress").value = epochFraction;
  $("epoch-text").textContent = `${done} of ${total ?? "?"} (${percent(epochFraction)})`;
  const steps = job.state === "succeeded" ? 1 : Math.max(stepProgress, job.progress || 0);
  $("step-progress").value = steps;
  $("step-text").textContent = percent(steps);
  $("epoch-progress").setAttribute("aria-valuetext", `${done} of ${total ?? "unknown"} ${unitName()}s completed`);
  $("step-progress").setAttribute("aria-valuetext", `${percent(steps)} of all steps`);
}

function show(id, visible) {
  $(id).hidden = !visible;
}

function renderActions() {
  const s = job.state;
  show("start-action", s === "draft");
  show("stop-action", s === "queued" || s === "running");
  show("resume-action", s === "stopped" || s === "failed");
  show("deploy-action", (s === "succeeded" || s === "stopped") && !job.model);
  const stop = $("btn-stop");
  stop.disabled = job.stop_requested;
  stop.textContent = job.stop_requested ? "Stop requested…" : "Stop";
  let outcome = $("stop-outcome");
  if (!outcome) {
    outcome = el("p", { id: "stop-outcome", class: "hint" });
    $("stop-action").append(outcome);
    stop.setAttribute("aria-describedby", "stop-rule stop-outcome");
  }
  outcome.textContent = completed() >= 1
    ? `${completed()} ${unitName()}(s) completed: stopping now ends Stopped and keeps the best model.`
    : `No ${unitName()} completed yet: stopping now ends Canceled and keeps nothing.`;
}

function dl(node, entries) {
  fill(node, entries.flatMap(([k, v]) => [el("dt", { text: k }), el("dd", {}, v ?? "—")]));
}

function renderSummary() {
  const limit = job.time_limit_seconds ? fmtDuration(job.time_limit_seconds) : "none";
  dl($("summary"), [
    ["Task", job.task],
    ["Dataset", `${job.dataset.name} v${job.dataset.version}`],
    ["Base model", job.base_model],
    ["Trainer", job.trainer || (job.custom_image ? "custom image" : job.custom_script ? "custom script" : "built-in")],
    ...(job.custom_image ? [["Image", el("code", { text: job.custom_image })]] : []),
    ...(job.custom_script ? [["Script", el("span", {}, el("code", { text: job.custom_script.uri }), ` (sha256 ${job.custom_script.sha256.slice(0, 12)}…)`)]] : []),
    ...(job.main_metric ? [["Main metric", job.main_metric]] : []),
    ["Accelerator", job.accelerator === "cpu" ? "cpu" : `${job.accelerator} × ${job.devices}`],
    ["Priority", job.priority],
    ["Registration", job.registration],
    ["Time limit", limit],
    ["Created", timeEl(job.created_at)],
    ["Queued", timeEl(job.queued_at)],
    ["Started", timeEl(job.started_at)],
    ["Finished", timeEl(job.finished_at)],
    ["Duration", el("span", { id: "duration", text: fmtDuration(jobDuration(job)) })],
    ["Attempts", String(job.attempt || 0)],
    ["Job id", el("code", { text: job.id })],
  ]);
  const best = job.best_metrics || {};
  const bestEntries = Object.entries(best);
  if (bestEntries.length) dl($("best-metrics"), bestEntries.map(([k, v]) => [k, el("span", { class: "num", text: fmtNumber(v) })]));
  else dl($("best-metrics"), [["—", el("span", { class: "muted", text: "none yet" })]]);
  dl($("hyperparameters"), Object.entries(job.hyperparameters || {}).map(([k, v]) => [k, el("code", { text: JSON.stringify(v) })]));
  if (job.attempts && job.attempts.length) {
    fill($("attempts-body"), job.attempts.map((a) => el("tr", {},
      el("td", { class: "num", text: a.attempt }),
      el("td", {}, timeEl(a.started_at)),
      el("td", {}, timeEl(a.finished_at)),
      el("td", { text: a.outcome || (a.pending_reason ? `pending: ${a.pending_reason}` : "running") }),
      el("td", { class: "num", text: a.exit_code ?? "—" }),
      el("td", { text: `${a.executor}${a.retried ? " (retried)" : ""}` }),
    )));
  }
}

async function versionOf(name, version) {
  const key = `${name}/${version}`;
  if (!versions.has(key)) versions.set(key, api(`/v1/models/${encodeURIComponent(name)}/versions/${version}`).catch(() => null));
  return versions.get(key);
}

// Every file the trainer wrote, downloadable before (and without) registration; read when opened.
function outputFiles() {
  const list = el("ul", { id: "output-files", class: "files" });
  const details = el("details", {}, el("summary", { text: "Output files" }), list);
  details.addEventListener("toggle", async () => {
    if (!details.open) return;
    fill(list, el("li", { class: "muted", text: "Reading…" }));
    try {
      const base = `/v1/jobs/${encodeURIComponent(jobId)}/files`;
      const got = await api(base);
      const items = got.files.map((f) => el("li", {},
        el("a", { href: `${base}/${f.path.split("/").map(encodeURIComponent).join("/")}`, download: "", text: f.path }),
        el("span", { class: "muted", text: ` ${fmtBytes(f.size)}` })));
      if (got.truncated) items.push(el("li", { class: "muted", text: "… more files than are listed here" }));
      fill(list, items.length ? items : el("li", { class: "muted", text: "No files yet." }));
    } catch (err) {
      fill(list, el("li", { class: "muted", text: `Cannot list the outputs: ${err.message}` }));
    }
  });
  return details;
}

const filesBox = outputFiles();

function fmtBytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

async function renderArtifacts() {
  const box = $("artifacts");
  const parts = [];
  if (job.model) {
    const { name, version } = job.model;
    const v = await versionOf(name, version);
    if (!job.model || job.model.name !== name) return; // changed meanwhile
    parts.push(el("p", { id: "registered-model" }, "Registered model: ",
      el("a", { href: `/models#model-${encodeURIComponent(name)}`, text: `${name} v${version}` }),
      v ? ` (from the ${v.job_state} job, attempt ${v.attempt})` : ""));
    parts.push(el("p", {}, "Download: ", downloadLinks(name, version, { onnx: !v || !!v.onnx_uri, weights: !v || !!v.weights_uri, files: v ? v.files : {} })));
    if (v && v.artifacts_uri) parts.push(el("p", {}, "Artifacts: ", el("code", { text: v.artifacts_uri })));
  } else if (job.state === "succeeded" || job.state === "stopped") {
    parts.push(el("p", { id: "registered-model" }, job.registration === "manual"
      ? "Not registered: this job's registration is manual. Deploy registers its best model."
      : "Not registered yet: the registrar registers it shortly (or Deploy registers it again after a deletion)."));
  } else if (job.state === "canceled") {
    parts.push(el("p", { class: "muted", text: "Canceled before its first completed epoch: nothing was kept." }));
  }
  if (job.output_uri) {
    parts.push(el("p", {}, "Outputs: ", el("code", { text: job.output_uri })));
    parts.push(filesBox); // the same element each time: re-rendering must not close it
  }
  for (const u of uploads) {
    const where = u.uri === job.output_uri ? "" : u.uri;
    parts.push(el("p", { class: "muted" }, `Attempt ${u.attempt} uploaded its artifacts (${u.outcome})${where ? ": " : "."}`, where ? el("code", { text: where }) : ""));
  }
  if (!parts.length) parts.push(el("p", { class: "muted", text: "No artifacts yet: they are uploaded when the job succeeds or is stopped after an epoch." }));
  fill(box, parts);
  const mlflow = $("mlflow");
  mlflow.hidden = !job.mlflow_url;
  if (job.mlflow_url) fill(mlflow, "Also tracked in MLflow: ", el("a", { href: job.mlflow_url, text: "the MLflow run", rel: "noopener" }));
}

function renderAll() {
  if (!job) return;
  renderHeader();
  renderUnit();
  renderProgress();
  renderActions();
  renderSummary();
  renderArtifacts();
  document.body.dataset.loaded = "true";
}

// ---- epochs table --------------------------------------------------------------------------------------

const renderEpochs = debounce(() => {
  const names = [...new Set([...epochs.values()].flatMap((e) => Object.keys(e.metrics)))];
  fill($("epoch-head"), el("th", { scope: "col", text: "Epoch" }), names.map((n) => el("th", { scope: "col", text: n })), el("th", { scope: "col", text: "Best" }));
  const rows = [...epochs.entries()].sort((a, b) => a[0] - b[0]).map(([epoch, e]) => el("tr", {},
    el("th", { scope: "row", class: "num", text: epoch }),
    names.map((n) => el("td", { class: "num", text: n in e.metrics ? fmtNumber(e.metrics[n]) : "—" })),
    el("td", { text: e.is_best ? "★ best" : "" }),
  ));
  fill($("epoch-body"), rows.length ? rows : el("tr", {}, el("td", { class: "muted", text: "No completed epoch yet." })));
}, 100);

// ---- logs ----------------------------------------------------------------------------------------------

const logBox = $("log-lines");
const lastLine = new Map(); // attempt → last line number shown
let logAttempt = null;
let logCount = 0;
$("raw-logs").href = `/v1/jobs/${encodeURIComponent(jobId)}/logs?limit=10000`;

const scrollLogs = debounce(() => {
  if ($("follow").checked) logBox.scrollTop = logBox.scrollHeight;
}, 30);

function appendLogs(d) {
  const attempt = d.attempt || 1;
  const fresh = (d.lines || []).filter((l) => l.line_no > (lastLine.get(attempt) || 0));
  if (fresh.length) {
    if (logAttempt !== attempt && (logAttempt !== null || attempt > 1)) logBox.append(el("span", { class: "sep", text: `── attempt ${attempt} ──\n` }));
    logAttempt = attempt;
    lastLine.set(attempt, fresh[fresh.length - 1].line_no);
    logBox.append(document.createTextNode(fresh.map((l) => `${l.text}\n`).join("")));
    logCount += fresh.length;
    while (logCount > MAX_LOG_LINES && logBox.firstChild) {
      const first = logBox.firstChild;
      logCount -= (first.textContent.match(/\n/g) || []).length;
      first.remove();
    }
  }
  if (d.eof) logBox.append(el("span", { class: "sep", text: `── end of the output of attempt ${attempt} ──\n` }));
  $("log-count").textContent = `${logCount} line(s)${logCount >= MAX_LOG_LINES ? ", earlier lines trimmed" : ""}`;
  scrollLogs();
}

// ---- live ------------------------------------------------------------------------------------------------

async function loadFull() {
  try {
    job = await api(`/v1/jobs/${encodeURIComponent(jobId)}`);
    renderAll();
  } catch (err) {
    if (err.status === 404 || err.status === 422) {
      $("not-found").textContent = `No job with id ${jobId}.`;
      $("not-found").hidden = false;
      document.title = "Job not found · Forge";
      if (source) source.close();
    } else {
      $("stream-status").textContent = `Cannot read the job: ${err.message}`;
    }
  }
}
const refresh = debounce(loadFull, 300);

// The database keeps a job's curves and output as long as the job exists, while the event
// stream's history expires (FORGE_BUS_MAX_AGE_DAYS): read them first, then follow the stream,
// whose replay fills in the rest (points, epochs and lines are keyed, so nothing doubles).
async function backfill() {
  const base = `/v1/jobs/${encodeURIComponent(jobId)}`;
  const [snapshot, metrics] = await Promise.all([api(base), api(`${base}/metrics`)]);
  const best = snapshot.best_metrics || {};
  for (const row of metrics.steps) {
    for (const [name, value] of Object.entries(row)) if (name !== "step" && name !== "epoch") stepChart.add(name, row.step, value);
  }
  for (const { epoch, ...values } of metrics.epochs) {
    for (const [name, value] of Object.entries(values)) epochChart.add(name, epoch, value);
    const isBest = Object.keys(best).length > 0 && Object.entries(best).every(([k, v]) => values[k] === v);
    if (!epochs.has(epoch)) epochs.set(epoch, { metrics: values, is_best: isBest });
    epochsSeen = Math.max(epochsSeen, epoch);
  }
  renderEpochs();
  const attempts = (snapshot.attempts || []).map((a) => a.attempt).sort((a, b) => a - b);
  for (const attempt of attempts) {
    let after = 0;
    while (logCount < MAX_LOG_LINES) {
      const page = await api(`${base}/logs?attempt=${attempt}&after=${after}&limit=5000`);
      if (!page.lines.length) break;
      appendLogs({ attempt, lines: page.lines });
      after = page.next_after;
    }
  }
}

let source = null;
backfill().catch(() => {}).finally(() => { source = follow(`/v1/jobs/${encodeURIComponent(jobId)}/events`, {
  snapshot: (data) => {
    job = { ...(job || {}), ...data }; // the full job: attempts, queue position, MLflow link
    renderAll();
  },
  status: (event) => {
    const d = event.data || {};
    if (!job) return;
    job.state = d.state;
    if (typeof d.epochs_completed === "number" && d.epochs_completed > (job.epochs_completed || 0)) job.epochs_completed = d.epochs_completed;
    if (d.state === "failed" && d.reason) job.error = { reason: d.reason, message: d.message || "", hint: d.hint || "" };
    if (isLive(event)) {
      announce(`Job ${job.name} is now ${d.state}${d.message ? `: ${d.message}` : ""}.`);
      $("action-status").textContent = "";
    }
    renderHeader();
    renderProgress();
    renderActions();
    refresh();
  },
  metrics: (event) => {
    const d = event.data || {};
    for (const [name, value] of Object.entries(d.metrics || {})) stepChart.add(name, d.step, value);
    if (typeof d.progress === "number") {
      stepProgress = d.progress;
      if (job) renderProgress();
    }
  },
  "epoch-completed": (event) => {
    const d = event.data || {};
    for (const [name, value] of Object.entries(d.metrics || {})) epochChart.add(name, d.epoch, value);
    epochs.set(d.epoch, { metrics: d.metrics || {}, is_best: d.is_best });
    if (d.is_best) for (const [e, v] of epochs) if (e !== d.epoch) v.is_best = false;
    renderEpochs();
    epochsSeen = Math.max(epochsSeen, d.epoch);
    if (job) {
      if (d.total_epochs) job.total_epochs = d.total_epochs;
      renderProgress();
      renderActions();
    }
  },
  logs: (event) => appendLogs(event.data || {}),
  "artifact-uploaded": (event) => {
    const d = event.data || {};
    uploads.push({ attempt: d.attempt, uri: d.uri, outcome: d.outcome });
    if (job) renderArtifacts();
  },
  "model-registered": (event) => {
    const d = event.data || {};
    if (!job) return;
    job.model = { name: d.model_name, version: d.version };
    if (isLive(event)) announce(`Model ${d.model_name} version ${d.version} is registered.`);
    renderActions();
    renderArtifacts();
    refresh();
  },
  "model-deleted": () => refresh(),
  "stop-requested": (event) => {
    if (job) { job.stop_requested = true; renderHeader(); renderActions(); }
    if (isLive(event)) announce("Stop requested.");
    refresh();
  },
  "resume-requested": () => {
    stepProgress = 0;
    refresh();
  },
  "deploy-requested": () => refresh(),
}, $("stream-status")); });

$("btn-resume").addEventListener("click", () => act("resume", "Resume requested: a new attempt is queued."));
$("btn-start").addEventListener("click", () => act("start", "Started: the job is queued."));
$("btn-stop").addEventListener("click", () => act("stop", "Stop requested."));
$("btn-deploy").addEventListener("click", () => act("deploy", "Deploy requested: the model appears here once it is registered."));
$("btn-duplicate").addEventListener("click", async () => {
  const created = await act("duplicate", "Duplicated: opening the new draft…");
  if (created) location.assign(`/jobs/${created.id}`);
});

async function act(action, message) {
  const error = $("action-error");
  error.hidden = true;
  const buttons = document.querySelectorAll(".action button");
  for (const b of buttons) b.disabled = true;
  $("action-status").textContent = "Working…";
  try {
    const result = await api(`/v1/jobs/${encodeURIComponent(jobId)}/${action}`, { method: "POST" });
    $("action-status").textContent = message;
    if (action !== "duplicate") {
      job = { ...job, ...result };
      renderAll();
    }
    return result;
  } catch (err) {
    $("action-status").textContent = "";
    error.textContent = `${action[0].toUpperCase()}${action.slice(1)} failed: ${err.message}`;
    error.hidden = false;
    return null;
  } finally {
    for (const b of buttons) b.disabled = false;
    if (job) renderActions();
  }
}

setInterval(() => {
  if (job && job.state === "running") {
    const node = $("duration");
    if (node) node.textContent = fmtDuration(jobDuration(job));
  }
}, 1000);

loadFull();
