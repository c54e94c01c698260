"""The Training pages in a real browser against the whole stack: a job created and started from
the form trains to 100 % with its curves growing live; a slow job stopped after its first epoch
ends Stopped with a deployable model, is deployed, and shows on the models page; a 422 appears
next to the field it names; a draft is duplicated; a failure shows its reason and hint."""

from __future__ import annotations

import asyncio
import concurrent.futures
import re
import shutil
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from forge_cli.samples import shapes
from tests.e2e.conftest import Stack, upload_folder

from .conftest import screenshot

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)", exc_type=ImportError)
expect = sync_api.expect

pytestmark = pytest.mark.slow

FAST = {"epochs": "3", "imgsz": "32", "batch": "8", "lr": "0.003"}
# resnet10t at 128 px: an epoch takes seconds here, room to stop after the first one
SLOW = {"epochs": "30", "imgsz": "128", "batch": "4"}
TRAINING = 240_000  # ms: the longest a real training may take here

OpenPage = Callable[[str], Any]


@pytest.fixture(scope="module", autouse=True)
def datasets(web: Stack, sample_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    upload_folder(web, "shapes", sample_dataset)
    upload_folder(web, "slow-shapes", shapes(tmp_path_factory.mktemp("slow") / "d", per_class=60, size=64, seed=1))


def fill_form(page: Any, name: str, *, dataset: str, base_model: str, hyperparameters: dict[str, str], registration: str = "auto") -> None:
    expect(page.locator("#job-form")).to_have_attribute("data-ready", "true")
    page.get_by_label("Name", exact=True).fill(name)
    page.get_by_label("Task", exact=True).select_option("classification")
    page.get_by_label("Dataset", exact=True).select_option(dataset)
    page.get_by_label("Dataset version").select_option("1")
    page.locator(f'#f-base-model option[value="{base_model}"]').wait_for(state="attached")
    page.get_by_label("Base model").select_option(base_model)
    for key, value in hyperparameters.items():
        page.locator(f"#hp-{key}").fill(value)
    page.locator(f'input[name="registration"][value="{registration}"]').check()


def unlabelled_controls(page: Any) -> list[str]:
    return page.evaluate(
        """() => [...document.querySelectorAll('input, select, textarea, button')]
            .filter((e) => e.offsetParent !== null)
            .filter((e) => e.tagName === 'BUTTON' ? !e.textContent.trim() : !(e.labels.length || e.getAttribute('aria-label')))
            .map((e) => e.id || e.name || e.outerHTML.slice(0, 60))"""
    )


def watch_points(page: Any, chart: str) -> None:
    """Record every point count the chart shows, to see it grow as events arrive."""
    page.evaluate(
        """(id) => {
            const node = document.getElementById(id);
            window.__seen = window.__seen || {};
            const seen = (window.__seen[id] = new Set([node.dataset.points]));
            new MutationObserver(() => seen.add(node.dataset.points)).observe(node, { attributes: true, attributeFilter: ['data-points'] });
        }""",
        chart,
    )


def seen_points(page: Any, chart: str) -> list[int]:
    return sorted(int(x) for x in page.evaluate("(id) => [...window.__seen[id]]", chart))


async def forget_events(stack: Stack, job_id: str) -> None:
    """What FORGE_BUS_MAX_AGE_DAYS does to an old job: its events leave the stream."""
    import nats

    prefix = stack.env["FORGE_BUS_PREFIX"]
    nc = await nats.connect(stack.env["FORGE_NATS_URL"])
    try:
        await nc.jetstream().purge_stream(f"{prefix.upper()}_JOBS", subject=f"{prefix}.job.{job_id}.>")
    finally:
        await nc.close()


def job_id_of(page: Any, leaving: str | None = None) -> str:
    """The id of the job page the browser lands on (a page other than ``leaving``'s)."""
    page.wait_for_url(lambda url: re.search(r"/jobs/[0-9a-f-]{36}$", url) is not None and (leaving is None or leaving not in url))
    return page.url.rsplit("/", 1)[-1]


def test_a_422_shows_next_to_its_field_and_a_draft_starts_later_or_is_duplicated(web: Stack, open_page: OpenPage) -> None:
    page = open_page("/jobs/new")
    fill_form(page, "bad-epochs", dataset="shapes", base_model="timm/test_vit", hyperparameters={"epochs": "0", "imgsz": "32"})

    # the form is generated from the task's schema: LLM extras appear for llm-sft, with defaults
    page.get_by_label("Task", exact=True).select_option("llm-sft")
    expect(page.locator("#hp-lora_r")).to_have_value("16")
    expect(page.locator("#hp-method")).to_have_value("lora")
    expect(page.get_by_label("Dataset", exact=True)).to_have_value("")  # no llm-sft dataset here
    assert unlabelled_controls(page) == []
    page.get_by_label("Task", exact=True).select_option("classification")
    expect(page.locator("#hp-lora_r")).to_have_count(0)
    page.get_by_label("Dataset", exact=True).select_option("shapes")
    page.locator('#f-base-model option[value="timm/test_vit"]').wait_for(state="attached")
    page.get_by_label("Base model").select_option("timm/test_vit")
    page.locator("#hp-epochs").fill("0")
    page.locator("#hp-imgsz").fill("32")
    assert unlabelled_controls(page) == []

    page.get_by_role("button", name="Save as draft").click()
    epochs = page.locator("#hp-epochs")
    expect(epochs).to_have_attribute("aria-invalid", "true")
    error = page.locator("#hp-epochs ~ .field-error")
    expect(error).to_contain_text("hyperparameters.epochs")
    expect(error).to_contain_text("greater than or equal to 1")
    assert (error.get_attribute("id") or "") in (epochs.get_attribute("aria-describedby") or "")
    expect(epochs).to_be_focused()
    expect(page.locator("#form-error")).to_be_visible()
    screenshot(page, "new-job-422")

    # the next error replaces the last one, next to its own field
    epochs.fill("2")
    page.get_by_label("Name", exact=True).fill("not a valid name!")
    page.get_by_role("button", name="Save as draft").click()
    expect(page.locator("#f-name")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#f-name ~ .field-error")).to_contain_text("name")
    expect(epochs).not_to_have_attribute("aria-invalid", "true")
    assert not [j for j in web.client.get("/v1/jobs") if j["name"] in ("bad-epochs", "not a valid name!")]

    # a valid draft, then its page: Start queues it; Duplicate opens a new draft
    page.get_by_label("Name", exact=True).fill("draft-vit")
    page.get_by_role("button", name="Save as draft").click()
    draft = job_id_of(page)
    expect(page.locator("#job-state")).to_have_text("draft")
    expect(page.get_by_role("button", name="Start")).to_be_visible()
    expect(page.get_by_role("button", name="Stop")).to_be_hidden()
    expect(page.locator("#queue-info")).to_contain_text("Draft")
    page.get_by_role("button", name="Duplicate").click()
    copy = job_id_of(page, leaving=draft)
    assert copy != draft
    expect(page.locator("#job-state")).to_have_text("draft")
    expect(page.locator("#job-name")).to_have_text("draft-vit")
    assert web.job(copy)["hyperparameters"]["epochs"] == 2
    screenshot(page, "draft-duplicated")


def test_a_job_started_from_the_form_reaches_100_percent_with_growing_curves(web: Stack, open_page: OpenPage) -> None:
    page = open_page("/jobs/new")
    fill_form(page, "browser-vit", dataset="shapes", base_model="timm/test_vit", hyperparameters=FAST)
    screenshot(page, "new-job-form")
    page.get_by_role("button", name="Start", exact=True).click()
    job_id = job_id_of(page)
    watch_points(page, "step-chart")
    watch_points(page, "epoch-chart")
    expect(page.locator("#job-name")).to_have_text("browser-vit")

    expect(page.locator("#step-text")).to_have_text("100 %", timeout=TRAINING)
    expect(page.locator("#job-state")).to_have_text("succeeded", timeout=TRAINING)
    expect(page.locator("#epoch-text")).to_contain_text("3 of 3")
    assert page.locator("#epoch-progress").evaluate("(e) => e.value") == 1
    assert page.locator("#step-progress").evaluate("(e) => e.value") == 1

    # the curves gained their points one event after another, not all at once
    steps = seen_points(page, "step-chart")
    assert steps[-1] >= 18, steps  # 48 training images, batch 8, 3 epochs: 18 steps (a loss each)
    assert len([n for n in steps if 0 < n < steps[-1]]) >= 2, f"the step curve did not grow live: {steps}"
    expect(page.locator("#epoch-chart")).to_have_attribute("data-points", re.compile(r"^([6-9]|\d\d+)$"))  # ≥ 2 metrics × 3 epochs
    expect(page.locator("#epoch-body tr")).to_have_count(3)

    # drag to zoom, reset, wheel zoom, keyboard reset
    plot = page.locator("#step-chart svg")
    box = plot.bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.3, box["y"] + box["height"] / 2)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.7, box["y"] + box["height"] / 2, steps=5)
    page.mouse.up()
    reset = page.locator("#step-chart").get_by_role("button", name="Reset zoom")
    expect(reset).to_be_enabled()
    expect(page.locator("#step-chart")).to_contain_text("Zoomed: step")
    screenshot(page, "job-zoomed")
    reset.click()
    expect(reset).to_be_disabled()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.wheel(0, -200)
    expect(reset).to_be_enabled()
    page.locator("#step-chart .chart-plot").focus()
    page.keyboard.press("0")
    expect(reset).to_be_disabled()

    # summary, registered model with downloads, logs that show the whole output
    expect(page.locator("#registered-model")).to_contain_text("browser-vit v1", timeout=60_000)
    onnx = page.locator("#artifacts a", has_text="ONNX")
    assert onnx.get_attribute("href") == "/v1/models/browser-vit/versions/1/download?file=onnx"
    assert page.request.get(onnx.get_attribute("href")).status == 200
    page.get_by_text("Output files").click()  # everything the trainer wrote, each a download
    output_onnx = page.locator("#output-files a", has_text=re.compile(r"model\.onnx$"))
    expect(output_onnx).to_be_visible()
    assert page.request.get(output_onnx.get_attribute("href")).status == 200
    expect(page.locator("#best-metrics")).to_contain_text("top1")
    expect(page.locator("#summary")).to_contain_text("timm/test_vit")
    expect(page.locator("#log-lines")).to_contain_text("epoch 3/3", timeout=30_000)
    expect(page.locator("#log-lines")).to_contain_text("end of the output of attempt 1", timeout=30_000)
    expect(page.get_by_role("button", name="Stop")).to_be_hidden()
    expect(page.get_by_role("button", name="Deploy")).to_be_hidden()
    assert unlabelled_controls(page) == []
    screenshot(page, "job-succeeded")

    # the list: progress and state, filtered by state
    jobs = open_page("/jobs?state=succeeded")
    row = jobs.locator(f'tr[data-job-id="{job_id}"]')
    expect(row).to_contain_text("succeeded")
    expect(row).to_contain_text("100 %")
    jobs.get_by_label("Show jobs in state").select_option("failed")
    expect(row).to_have_count(0)
    expect(jobs.locator("#jobs-body")).to_contain_text("No failed jobs.")
    assert "state=failed" in jobs.url
    jobs.get_by_label("Show jobs in state").select_option("")
    expect(row).to_be_visible()
    screenshot(jobs, "jobs-list")

    # long after: the event stream's retention has dropped the job's history; the page reads the database
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # Playwright's loop runs in this thread
        pool.submit(asyncio.run, forget_events(web, job_id)).result()
    later = open_page(f"/jobs/{job_id}")
    expect(later.locator("#job-state")).to_have_text("succeeded")
    expect(later.locator("#epoch-body tr")).to_have_count(3)
    expect(later.locator("#epoch-body")).to_contain_text("★ best")
    expect(later.locator("#step-chart")).not_to_have_attribute("data-points", "0")
    expect(later.locator("#log-lines")).to_contain_text("epoch 3/3")


def test_stop_after_the_first_epoch_ends_stopped_and_deploy_shows_the_model_everywhere(web: Stack, open_page: OpenPage) -> None:
    page = open_page("/jobs/new")
    fill_form(page, "browser-stop", dataset="slow-shapes", base_model="timm/resnet10t", hyperparameters=SLOW, registration="manual")
    page.get_by_role("button", name="Start", exact=True).click()
    job_id = job_id_of(page)
    jobs = open_page("/jobs")  # follows state changes live, without a reload
    expect(jobs.locator(f'tr[data-job-id="{job_id}"]')).to_be_visible()

    stop = page.get_by_role("button", name="Stop", exact=True)
    expect(page.locator("#stop-rule")).to_contain_text("after at least one completed epoch", ignore_case=True)
    expect(page.locator("#stop-outcome")).to_contain_text("ends Stopped", timeout=TRAINING)  # epoch 1 completed
    expect(page.locator("#epoch-chart")).not_to_have_attribute("data-points", "0")
    stop.click()
    expect(page.locator("#job-state")).to_have_text(re.compile("stop requested|stopped"))
    expect(page.locator("#job-state")).to_have_text("stopped", timeout=120_000)
    expect(jobs.locator(f'tr[data-job-id="{job_id}"]')).to_have_attribute("data-state", "stopped", timeout=30_000)
    expect(page.locator("#announcer")).to_contain_text("stopped")

    # manual registration: not registered until deployed
    deploy = page.get_by_role("button", name="Deploy")
    expect(deploy).to_be_visible()
    expect(page.get_by_role("button", name="Resume")).to_be_visible()
    expect(page.locator("#registered-model")).to_contain_text("registration is manual")
    screenshot(page, "job-stopped")
    deploy.click()
    expect(page.locator("#registered-model")).to_contain_text("browser-stop v1", timeout=60_000)
    expect(deploy).to_be_hidden()
    expect(page.locator("#artifacts a", has_text="ONNX")).to_be_visible()
    screenshot(page, "job-deployed")

    models = open_page("/models")
    section = models.locator("#model-browser-stop")
    expect(section).to_contain_text("v1")
    expect(section).to_contain_text("slow-shapes v1")
    expect(section).to_contain_text("timm/resnet10t")
    expect(section).to_contain_text("top1")
    expect(section.locator(f'a[href="/jobs/{job_id}"]')).to_have_text("browser-stop")
    expect(section).to_contain_text("stopped")
    weights = section.locator("a", has_text="Weights")
    assert models.request.get(weights.get_attribute("href")).status == 200
    screenshot(models, "models")


def test_a_failed_job_shows_its_reason_and_hint_and_offers_resume(
    web: Stack, open_page: OpenPage, sample_dataset: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "fragile"
    shutil.copytree(sample_dataset, copy)
    version = upload_folder(web, "fragile", copy)
    victim = sorted(Path(urllib.parse.urlparse(version["uri"]).path).rglob("*.png"))[0]
    victim.write_bytes(b"storage bit rot")  # damaged behind the platform's back: the trainer fails
    job = web.submit("reads-bad-data", dataset="fragile", epochs=1, imgsz=32, batch=8)
    page = open_page(f"/jobs/{job['id']}")
    expect(page.locator("#job-state")).to_have_text("failed", timeout=TRAINING)
    failure = page.get_by_role("region", name="Why it failed")
    expect(failure).to_be_visible()
    expect(failure.locator("#failure-reason")).to_have_text("dataset_error")
    expect(failure).to_contain_text(victim.name)
    hint = web.job(job["id"])["error"]["hint"]
    if hint:
        expect(failure).to_contain_text(hint)
    expect(page.get_by_role("button", name="Resume")).to_be_visible()
    expect(page.get_by_role("button", name="Deploy")).to_be_hidden()
    screenshot(page, "job-failed")


def test_the_form_offers_a_registered_trainer_with_its_own_hyperparameters(web: Stack, open_page: OpenPage, tmp_path: Path) -> None:
    from tests.conftest import serving

    (tmp_path / "mine.py").write_text("import forge_sdk\nwith forge_sdk.init() as run:\n    run.log('hello')\n")
    with serving(tmp_path) as url:
        profile = {
            "name": "widths",
            "version": "1.2",
            "description": "Trains a network of a chosen width",
            "tasks": ["classification"],
            "accelerators": {"cpu": {"grade": "compatible"}, "nvidia": {"grade": "build-only"}},
            "script_uri": f"{url}/mine.py",
            "hyperparameters": {
                "type": "object",
                "properties": {"width": {"type": "integer", "minimum": 1, "default": 16, "description": "Channels"}},
            },
            "metrics": ["acc"],
            "main_metric": "acc",
        }
        web.client.post("/v1/trainers", profile)
        page = open_page("/jobs/new")
        fill_form(page, "by-my-trainer", dataset="shapes", base_model="timm/test_vit", hyperparameters={})
        trainer = page.get_by_label("Trainer")
        expect(trainer.locator('option[value="widths"]')).to_have_text("widths 1.2 · cpu compatible")
        trainer.select_option("widths")
        expect(page.locator("#hp-width")).to_have_value("16")  # its schema, not the task's
        expect(page.locator("#hp-imgsz")).to_have_count(0)
        expect(page.locator("#f-trainer-hint")).to_contain_text("Main metric: acc.")
        assert unlabelled_controls(page) == []
        page.locator("#hp-width").fill("0")
        page.get_by_role("button", name="Save as draft").click()
        expect(page.locator("#hp-width ~ .field-error")).to_contain_text("hyperparameters.width")  # checked against its schema
        page.locator("#hp-width").fill("32")
        page.get_by_role("button", name="Save as draft").click()
        job = web.job(job_id_of(page))
        assert job["trainer"] == "widths" and job["hyperparameters"] == {"width": 32}
        page.goto(f"{web.url}/jobs/new")
        fill_form(page, "built-in-again", dataset="shapes", base_model="timm/test_vit", hyperparameters={})
        page.get_by_label("Trainer").select_option("")
        expect(page.locator("#hp-imgsz")).to_be_visible()
