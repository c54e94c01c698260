// The new-job form: tasks, compatible dataset versions and base models, the built-in or a registered
// trainer, hyperparameters generated from the task's (or that trainer's) JSON Schema, allocatable
// accelerators; POST /v1/jobs with start false or true.
// A 422 {type, detail, field} is shown next to the field it names.
import { $, api, el, fill, fmtNumber } from "./common.js";

const form = $("job-form");
const taskSelect = $("f-task");
const datasetSelect = $("f-dataset");
const versionSelect = $("f-version");
const baseModelSelect = $("f-base-model");
const trainerSelect = $("f-trainer");
const acceleratorSelect = $("f-accelerator");
const devicesInput = $("f-devices");
const hpFields = $("hp-fields");
const formError = $("form-error");
const submitStatus = $("submit-status");

const TASK_LABELS = {
  classification: "Classification",
  detection: "Detection",
  segmentation: "Segmentation",
  "llm-sft": "LLM supervised fine-tuning",
  "vlm-sft": "VLM supervised fine-tuning",
};

let tasks = [];
let datasets = []; // [{name, versions: [...]}]
let accelerators = [];
let schema = null; // the chosen task's hyperparameters JSON Schema
const edited = new Map(); // hyperparameters the user changed, kept across task switches
const baseModels = new Map(); // task → entries
const trainers = new Map(); // task → profiles (built-in and registered) that serve it

const enc = encodeURIComponent;
const routeOf = (task) => (task === "llm-sft" || task === "vlm-sft" ? "llm" : "cv");
const currentTask = () => tasks.find((t) => t.name === taskSelect.value);

function setHint(id, text) {
  const node = $(id);
  if (node) node.textContent = text;
}

// ---- options -------------------------------------------------------------------------------------

function compatibleVersions(dataset, task) {
  return dataset.versions.filter((v) => (v.tasks || []).includes(task)).sort((a, b) => b.version - a.version);
}

function fillDatasets() {
  const task = taskSelect.value;
  const previous = datasetSelect.value;
  const options = datasets.map((d) => {
    const usable = compatibleVersions(d, task).length > 0;
    return el("option", { value: d.name, disabled: !usable, text: usable ? d.name : `${d.name} (no ${task} version)` });
  });
  if (!datasets.length) options.push(el("option", { value: "", text: "no datasets yet: upload one with forge datasets upload" }));
  fill(datasetSelect, options);
  const usable = datasets.filter((d) => compatibleVersions(d, task).length);
  const keep = usable.find((d) => d.name === previous) || usable[0];
  datasetSelect.value = keep ? keep.name : "";
  if (datasets.length && !usable.length) {
    datasetSelect.prepend(el("option", { value: "", text: `no dataset has a ${task} version` }));
    datasetSelect.value = "";
  }
  fillVersions();
}

function fillVersions() {
  const dataset = datasets.find((d) => d.name === datasetSelect.value);
  const versions = dataset ? compatibleVersions(dataset, taskSelect.value) : [];
  fill(versionSelect, versions.map((v) =>
    el("option", { value: v.version, text: `v${v.version} · ${v.format} · ${v.file_count} files` })));
  if (!versions.length) versionSelect.append(el("option", { value: "", text: "no compatible version" }));
}

async function fillBaseModels() {
  const task = taskSelect.value;
  if (!baseModels.has(task)) {
    try {
      baseModels.set(task, await api(`/v1/base-models?task=${enc(task)}`));
    } catch (err) {
      baseModels.set(task, []);
      setHint("f-base-model-hint", `Cannot list base models: ${err.message}`);
    }
  }
  if (taskSelect.value !== task) return; // the user moved on meanwhile
  const entries = baseModels.get(task);
  const previous = baseModelSelect.value;
  fill(baseModelSelect, entries.map((m) => el("option", { value: m.name, text: `${m.name} (${m.family})` })));
  if (!entries.length) baseModelSelect.append(el("option", { value: "", text: `no base model serves ${task}` }));
  if (entries.some((m) => m.name === previous)) baseModelSelect.value = previous;
  describeBaseModel();
}

function describeBaseModel() {
  const entry = (baseModels.get(taskSelect.value) || []).find((m) => m.name === baseModelSelect.value);
  setHint("f-base-model-hint", entry
    ? [sentence(entry.description), entry.license && sentence(`License: ${entry.license}`)].filter(Boolean).join(" ") || "Compatible with the chosen task."
    : "Only base models that can serve the chosen task.");
}

// ---- trainers: the built-in one, or a registered profile for this task and accelerator ------------

async function fillTrainers() {
  const task = taskSelect.value;
  if (!trainers.has(task)) {
    try {
      trainers.set(task, await api(`/v1/trainers?task=${enc(task)}`));
    } catch (err) {
      trainers.set(task, []);
      setHint("f-trainer-hint", `Cannot list trainers: ${err.message}`);
    }
  }
  if (taskSelect.value !== task) return;
  const accelerator = acceleratorSelect.value;
  const previous = trainerSelect.value;
  const registered = trainers.get(task).filter((t) => !t.builtin);
  const builtin = trainers.get(task).find((t) => t.builtin);
  fill(trainerSelect,
    el("option", { value: "", text: `built-in${builtin ? ` (${builtin.name})` : ""}` }),
    registered.map((t) => {
      const here = Object.prototype.hasOwnProperty.call(t.accelerators || {}, accelerator);
      const grade = here ? t.accelerators[accelerator].grade : null;
      const label = here ? `${t.name} ${t.version} · ${accelerator} ${grade}` : `${t.name} ${t.version} (not for ${accelerator})`;
      return el("option", { value: t.name, text: label, disabled: !here });
    }));
  const keep = registered.find((t) => t.name === previous && Object.prototype.hasOwnProperty.call(t.accelerators || {}, accelerator));
  trainerSelect.value = keep ? keep.name : "";
  onTrainerChange();
}

const chosenTrainer = () => (trainers.get(taskSelect.value) || []).find((t) => !t.builtin && t.name === trainerSelect.value) || null;

function onTrainerChange() {
  const t = chosenTrainer();
  setHint("f-trainer-hint", t
    ? [sentence(t.description), `Main metric: ${t.main_metric}.`, "Its own hyperparameters are below."].filter(Boolean).join(" ")
    : "The built-in trainer of the task, or a registered one that serves the task on the chosen accelerator.");
  buildHyperparameters();
}

function fillAccelerators() {
  const route = routeOf(taskSelect.value);
  const previous = acceleratorSelect.value || "cpu";
  fill(acceleratorSelect, accelerators.map((a) => {
    const grades = Object.entries(a.grades || {}).map(([r, g]) => `${r}: ${g}`).join(", ");
    const label = `${a.name} (${a.vendor}) · ${a.count} available · ${route} route ${a.grades?.[route] || "not graded"}`;
    return el("option", { value: a.name, text: label, title: grades });
  }));
  if (!accelerators.length) acceleratorSelect.append(el("option", { value: "cpu", text: "cpu" }));
  acceleratorSelect.value = accelerators.some((a) => a.name === previous) ? previous : acceleratorSelect.options[0].value;
  describeAccelerator();
}

function describeAccelerator() {
  const a = accelerators.find((x) => x.name === acceleratorSelect.value);
  const grades = a ? Object.entries(a.grades || {}).map(([r, g]) => `${r} ${g}`).join(", ") : "";
  setHint("f-accelerator-hint", a ? `${a.detail || a.name}. ${a.count} available. Verified: ${grades}.` : "Only the profiles that can be allocated here.");
  const cpu = acceleratorSelect.value === "cpu";
  devicesInput.disabled = cpu;
  setHint("f-devices-hint", cpu ? "Accelerators per attempt (not used on cpu)." : `Accelerators per attempt (at most ${a ? a.count : "?"} here).`);
}

// ---- hyperparameters from JSON Schema --------------------------------------------------------------

/** The non-null branch of an ``anyOf`` (pydantic's ``X | None``), and whether null is allowed. */
function variant(prop) {
  if (!prop.anyOf) return [prop, false];
  const branch = prop.anyOf.find((s) => s.type !== "null") || {};
  return [{ ...branch, ...Object.fromEntries(Object.entries(prop).filter(([k]) => k !== "anyOf")) }, prop.anyOf.some((s) => s.type === "null")];
}

function range(s) {
  const lo = s.minimum !== undefined ? `≥ ${s.minimum}` : s.exclusiveMinimum !== undefined ? `> ${s.exclusiveMinimum}` : "";
  const hi = s.maximum !== undefined ? `≤ ${s.maximum}` : s.exclusiveMaximum !== undefined ? `< ${s.exclusiveMaximum}` : "";
  return [lo, hi].filter(Boolean).join(" and ");
}

/** A description as a sentence (the schema's have no final stop). */
const sentence = (text) => (text && !/[.!?]$/.test(text.trim()) ? `${text.trim()}.` : text);

function showDefault(value) {
  if (value === null || value === undefined) return "none";
  if (Array.isArray(value)) return value.join(", ") || "none";
  return typeof value === "number" ? fmtNumber(value) : String(value);
}

function hpField(key, prop) {
  const [s, nullable] = variant(prop);
  const id = `hp-${key}`;
  const hintId = `${id}-hint`;
  const hint = [sentence(prop.description), range(s) && `Allowed: ${range(s)}.`, `Default: ${showDefault(prop.default)}.`].filter(Boolean).join(" ");
  const common = { id, name: key, "data-field": `hyperparameters.${key}`, "aria-describedby": hintId, "data-key": key };
  const label = el("label", { for: id }, el("code", { text: key }));
  const hintNode = el("p", { class: "hint", id: hintId, text: hint });
  let control;
  if (s.enum) {
    control = el("select", common,
      nullable ? el("option", { value: "", text: "(none)" }) : null,
      s.enum.map((v) => el("option", { value: String(v), text: String(v) })));
    control.value = prop.default === null || prop.default === undefined ? "" : String(prop.default);
  } else if (s.type === "boolean") {
    control = el("input", { ...common, type: "checkbox", checked: !!prop.default });
    return el("div", { class: "field checkbox" }, control, label, hintNode);
  } else if (s.type === "integer" || s.type === "number") {
    control = el("input", {
      ...common, type: "number", inputmode: s.type === "integer" ? "numeric" : "decimal",
      step: s.type === "integer" ? "1" : "any", min: s.minimum, max: s.maximum,
      placeholder: nullable ? "none" : undefined,
    });
    control.value = prop.default === null || prop.default === undefined ? "" : String(prop.default);
  } else if (s.type === "array") {
    control = el("input", { ...common, type: "text", placeholder: "comma-separated; empty: default", spellcheck: "false" });
    control.value = Array.isArray(prop.default) ? prop.default.join(", ") : "";
  } else if (s.type === "string" && /template/.test(key)) {
    control = el("textarea", { ...common, rows: 3, spellcheck: "false", placeholder: nullable ? "none" : undefined });
    control.value = prop.default ?? "";
  } else {
    control = el("input", { ...common, type: "text", spellcheck: "false", placeholder: nullable ? "none" : undefined });
    control.value = s.type === "string" ? prop.default ?? "" : prop.default === undefined || prop.default === null ? "" : JSON.stringify(prop.default);
  }
  return el("div", { class: "field" }, label, control, hintNode);
}

function restoreEdited(control) {
  const key = control.dataset.key;
  if (!edited.has(key)) return;
  const value = edited.get(key);
  if (control.type === "checkbox") control.checked = value;
  else control.value = value;
}

function buildHyperparameters() {
  const task = currentTask();
  const trainer = trainerSelect.value ? chosenTrainer() : null;
  schema = trainer ? trainer.hyperparameters : task ? task.hyperparameters : null;
  const props = (schema && schema.properties) || {};
  fill(hpFields, Object.entries(props).map(([key, prop]) => hpField(key, prop)));
  for (const control of hpFields.querySelectorAll("[data-key]")) restoreEdited(control);
}

hpFields.addEventListener("change", (event) => {
  const control = event.target.closest("[data-key]");
  if (control) edited.set(control.dataset.key, control.type === "checkbox" ? control.checked : control.value);
});

/** The hyperparameters that differ from their defaults; throws a field error for unreadable input. */
function readHyperparameters() {
  const out = {};
  for (const control of hpFields.querySelectorAll("[data-key]")) {
    const key = control.dataset.key;
    const prop = schema.properties[key];
    const [s] = variant(prop);
    let value;
    if (control.type === "checkbox") value = control.checked;
    else if (control.type === "number") {
      if (control.validity.badInput) throw fieldError(`hyperparameters.${key}`, `hyperparameters.${key}: enter a number`);
      if (control.value === "") continue;
      value = Number(control.value);
    } else if (s.type === "array") {
      if (!control.value.trim()) continue;
      value = control.value.split(",").map((x) => x.trim()).filter(Boolean);
    } else if (s.enum || s.type === "string") {
      if (control.value === "") continue;
      value = control.value;
    } else {
      if (!control.value.trim()) continue;
      try { value = JSON.parse(control.value); } catch { throw fieldError(`hyperparameters.${key}`, `hyperparameters.${key}: not valid JSON`); }
    }
    if (JSON.stringify(value) !== JSON.stringify(prop.default)) out[key] = value;
  }
  return out;
}

// ---- errors next to their fields ---------------------------------------------------------------------

function fieldError(field, detail) {
  const err = new Error(detail);
  err.field = field;
  err.status = 422;
  return err;
}

function clearErrors() {
  formError.hidden = true;
  formError.textContent = "";
  for (const node of form.querySelectorAll(".field-error")) node.remove();
  for (const node of form.querySelectorAll("[aria-invalid]")) {
    node.removeAttribute("aria-invalid");
    const ids = (node.getAttribute("aria-describedby") || "").split(" ").filter((id) => !id.startsWith("err-"));
    if (ids.length) node.setAttribute("aria-describedby", ids.join(" "));
    else node.removeAttribute("aria-describedby");
  }
}

function controlFor(field) {
  const candidates = [...form.querySelectorAll("[data-field]")];
  const parts = field.split(".");
  while (parts.length) {
    const name = parts.join(".");
    const found = candidates.find((node) => node.dataset.field.split(" ").includes(name));
    if (found) return found;
    parts.pop();
  }
  return null;
}

function showError(err) {
  const target = err.field ? controlFor(err.field) : null;
  formError.hidden = false;
  if (target) {
    const container = target.closest(".field, fieldset.radios") || target.parentElement;
    const errorId = `err-${(target.id || target.dataset.field.split(" ")[0]).replace(/[^A-Za-z0-9_-]/g, "-")}`;
    container.append(el("p", { class: "field-error", id: errorId, text: err.message }));
    const focusable = target.matches("fieldset") ? target.querySelector("input") : target;
    for (const node of target.matches("fieldset") ? target.querySelectorAll("input") : [target]) {
      node.setAttribute("aria-invalid", "true");
      node.setAttribute("aria-describedby", [errorId, node.getAttribute("aria-describedby")].filter(Boolean).join(" "));
    }
    formError.textContent = `The job was not created: fix the field marked below (${err.field}).`;
    focusable.focus();
  } else {
    formError.textContent = `The job was not created: ${err.message}`;
    formError.focus?.();
  }
}

// ---- submit ---------------------------------------------------------------------------------------

function radio(name) {
  const checked = form.querySelector(`input[name="${name}"]:checked`);
  return checked ? checked.value : undefined;
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const start = event.submitter ? event.submitter.value === "true" : false;
  clearErrors();
  const buttons = form.querySelectorAll("button[type=submit]");
  let body;
  try {
    const timeLimit = $("f-time-limit");
    if (timeLimit.validity.badInput) throw fieldError("time_limit_seconds", "time_limit_seconds: enter a whole number of seconds");
    if (devicesInput.validity.badInput) throw fieldError("devices", "devices: enter a whole number");
    body = {
      name: $("f-name").value.trim(),
      task: taskSelect.value,
      dataset: { name: datasetSelect.value, version: versionSelect.value === "" ? null : Number(versionSelect.value) },
      base_model: baseModelSelect.value,
      trainer: trainerSelect.value || null,
      hyperparameters: readHyperparameters(),
      accelerator: acceleratorSelect.value,
      priority: radio("priority"),
      registration: radio("registration"),
      start,
    };
    if (!devicesInput.disabled && devicesInput.value !== "") body.devices = Number(devicesInput.value);
    if (timeLimit.value !== "") body.time_limit_seconds = Number(timeLimit.value);
  } catch (err) {
    showError(err);
    return;
  }
  for (const b of buttons) b.disabled = true;
  submitStatus.textContent = start ? "Creating and starting the job…" : "Saving the draft…";
  try {
    const job = await api("/v1/jobs", { method: "POST", body });
    submitStatus.textContent = start ? "Job queued; opening its page…" : "Draft saved; opening its page…";
    location.assign(`/jobs/${job.id}`);
  } catch (err) {
    submitStatus.textContent = "";
    showError(err);
  } finally {
    for (const b of buttons) b.disabled = false;
  }
});

// ---- start ----------------------------------------------------------------------------------------

async function onTaskChange() {
  const task = currentTask();
  setHint("f-task-hint", task ? `Main metric: ${task.main_metric}. Dataset formats: ${task.dataset_formats.join(", ")}.` : "");
  fillDatasets();
  fillAccelerators();
  buildHyperparameters();
  await Promise.all([fillBaseModels(), fillTrainers()]);
}

async function init() {
  formError.tabIndex = -1;
  try {
    const [t, d, a] = await Promise.all([api("/v1/tasks"), api("/v1/datasets"), api("/v1/accelerators")]);
    tasks = t;
    accelerators = a;
    const versions = await Promise.all(d.map((x) => api(`/v1/datasets/${enc(x.name)}/versions`).catch(() => [])));
    datasets = d.map((x, i) => ({ ...x, versions: versions[i] }));
  } catch (err) {
    showError(err);
    return;
  }
  fill(taskSelect, tasks.map((t) => el("option", { value: t.name, text: TASK_LABELS[t.name] || t.name })));
  const wanted = new URLSearchParams(location.search).get("task");
  // start with the task the first usable dataset serves, unless the address names one
  const firstUsable = tasks.find((t) => datasets.some((d) => compatibleVersions(d, t.name).length));
  taskSelect.value = tasks.some((t) => t.name === wanted) ? wanted : firstUsable ? firstUsable.name : tasks[0]?.name;
  taskSelect.addEventListener("change", onTaskChange);
  datasetSelect.addEventListener("change", fillVersions);
  baseModelSelect.addEventListener("change", describeBaseModel);
  acceleratorSelect.addEventListener("change", () => { describeAccelerator(); fillTrainers(); });
  trainerSelect.addEventListener("change", onTrainerChange);
  await onTaskChange();
  form.setAttribute("data-ready", "true"); // not form.dataset: the form has a control named "dataset"
}

init();
