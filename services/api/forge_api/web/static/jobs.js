// The jobs list: GET /v1/jobs[?state=], refreshed on every state change from /v1/events?kinds=status.
import { $, announce, api, debounce, el, fill, fmtDuration, follow, jobDuration, percent, stateBadge, timeEl } from "./common.js";

const body = $("jobs-body");
const filter = $("state-filter");
const loadedAt = Date.now();
let jobs = [];

filter.value = new URLSearchParams(location.search).get("state") || "";
filter.addEventListener("change", () => {
  const url = new URL(location.href);
  if (filter.value) url.searchParams.set("state", filter.value);
  else url.searchParams.delete("state");
  history.replaceState(null, "", url);
  load();
});
$("filter-form").addEventListener("submit", (event) => { event.preventDefault(); load(); });

function row(job) {
  const progress = job.total_epochs ? `${job.epochs_completed} of ${job.total_epochs} epochs` : `${job.epochs_completed} epochs`;
  return el("tr", { "data-job-id": job.id, "data-state": job.state },
    el("th", { scope: "row" }, el("a", { href: `/jobs/${job.id}`, text: job.name })),
    el("td", { text: job.task }),
    el("td", {}, stateBadge(job.state)),
    el("td", {},
      el("progress", { max: 1, value: job.progress, "aria-label": `${job.name}: ${percent(job.progress)}, ${progress}` }),
      " ", el("span", { class: "num", text: percent(job.progress) })),
    el("td", { class: "num", text: job.queue_position ?? "—" }),
    el("td", {}, timeEl(job.created_at)),
    el("td", { class: "num duration", text: fmtDuration(jobDuration(job)) }),
  );
}

async function load() {
  const query = filter.value ? `?state=${encodeURIComponent(filter.value)}` : "";
  try {
    jobs = await api(`/v1/jobs${query}`);
  } catch (err) {
    fill(body, el("tr", {}, el("td", { colspan: 7, class: "alert error", role: "alert", text: `Cannot list jobs: ${err.message}` })));
    return;
  }
  if (!jobs.length) {
    const text = filter.value ? `No ${filter.value} jobs.` : "No jobs yet. ";
    fill(body, el("tr", {}, el("td", { colspan: 7, class: "muted" }, text, filter.value ? "" : el("a", { href: "/jobs/new", text: "Create the first one." }))));
  } else {
    fill(body, jobs.map(row));
  }
  document.body.dataset.loaded = "true";
}

const refresh = debounce(load, 250);

// Durations of running jobs tick; their progress (by completed epochs) is re-read now and then,
// since the all-jobs stream only carries state changes.
setInterval(() => {
  for (const tr of body.querySelectorAll('tr[data-state="running"]')) {
    const job = jobs.find((j) => j.id === tr.dataset.jobId);
    if (job) tr.querySelector(".duration").textContent = fmtDuration(jobDuration(job));
  }
}, 1000);
setInterval(() => {
  if (document.visibilityState === "visible" && jobs.some((j) => j.state === "running")) load();
}, 10000);

load();
follow("/v1/events?kinds=status&since=now", {
  status: (event) => {
    const data = event && event.data;
    // the stream replays history first: announce only what happened after the page loaded
    if (data && Date.parse(event.time) >= loadedAt - 2000) announce(`Job ${data.name} is now ${data.state}.`);
    refresh();
  },
}, $("live-status"));
