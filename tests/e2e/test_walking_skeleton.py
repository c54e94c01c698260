"""One real training job through api → scheduler → trainer → log-relay → registrar, and every way
it can end: succeeded, stopped after an epoch, canceled before one or while queued, failed."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.parse
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from forge_cli.samples import shapes

from .conftest import Stack, forge, upload_folder

pytestmark = pytest.mark.slow

FAST = {"epochs": 3, "imgsz": 32, "batch": 8, "lr": 0.003}
# resnet10t at 128 px: about 0.1 s a step here, so an epoch takes seconds — room to stop it
SLOW = {"base_model": "timm/resnet10t", "dataset": "slow-shapes", "imgsz": 128, "batch": 4}


@pytest.fixture(scope="module", autouse=True)
def datasets(stack: Stack, sample_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    upload_folder(stack, "shapes", sample_dataset)
    upload_folder(stack, "slow-shapes", shapes(tmp_path_factory.mktemp("slow") / "d", per_class=60, size=64, seed=1))


def slow_job(stack: Stack, name: str, epochs: int = 30, **extra: Any) -> dict[str, Any]:
    params = dict(SLOW)
    return stack.submit(name, base_model=params.pop("base_model"), dataset=params.pop("dataset"), epochs=epochs, **params, **extra)


def output_objects(stack: Stack, job: dict[str, Any]) -> list[Path]:
    prefix = stack.home / "objects" / "jobs" / job["id"]
    return [p for p in prefix.rglob("*") if p.is_file()] if prefix.exists() else []


def stream_kinds(stack: Stack, job_id: str) -> list[tuple[str, Any]]:
    """Every event of a finished job, from its stream (read until the output's end-of-file mark)."""
    seen: list[tuple[str, Any]] = []
    registered = False
    eof = False
    for event, _, data in stack.client.events(job_id):
        if event == "ping":
            continue
        seen.append((event, data))
        registered = registered or event == "model-registered"
        eof = eof or (event == "logs" and data["data"].get("eof"))
        if eof and registered:
            break
    return seen


def test_a_job_trains_to_success_and_registers_a_model_that_runs(stack: Stack) -> None:
    job = stack.submit("shapes-vit", **FAST)
    assert job["state"] == "queued"
    done = stack.wait_state(job["id"], {"succeeded", "failed", "canceled", "stopped"})
    assert done["state"] == "succeeded", done
    assert done["progress"] == 1.0 and done["epochs_completed"] == 3
    assert done["started_at"] and done["finished_at"] and done["error"] is None
    done = stack.wait_model(job["id"])
    assert done["model"] == {"name": "shapes-vit", "version": 1}

    # metrics persisted: every step and epoch; the model learned beyond chance on the held-out split
    metrics = stack.client.get(f"/v1/jobs/{job['id']}/metrics")
    assert [e["epoch"] for e in metrics["epochs"]] == [1, 2, 3]
    assert len(metrics["steps"]) == 3 * 6  # 48 training images, batch 8
    assert metrics["epochs"][-1]["train_loss"] < metrics["epochs"][0]["train_loss"]
    assert done["best_metrics"]["top1"] > 0.5  # three classes: chance is 1/3

    # the held-out split is recorded with the job: evaluation never saw a training image
    split = stack.client.get(f"/v1/jobs/{job['id']}/split")
    val, train = {p for p, _ in split["val"]}, {p for p, _ in split["train"]}
    assert len(val) == 12 and len(train) == 48 and not val & train and split["explicit"] is False

    # logs persisted, progress lines not among them
    logs = stack.client.get(f"/v1/jobs/{job['id']}/logs")["lines"]
    texts = [line["text"] for line in logs]
    assert any(t.startswith("epoch 3/3:") for t in texts) and not any(t.startswith("@@forge") for t in texts)

    # one epoch-completed per epoch on the bus, then the registration
    events = stream_kinds(stack, job["id"])
    kinds = [k for k, _ in events]
    assert kinds.count("epoch-completed") == 3
    assert [d["data"]["state"] for k, d in events if k == "status"] == ["queued", "running", "succeeded"]
    assert kinds.index("artifact-uploaded") < kinds.index("model-registered")

    # the registered ONNX runs in onnxruntime, at any batch size
    version = stack.client.get("/v1/models/shapes-vit/versions/1")
    assert version["onnx_uri"].endswith("/model.onnx") and version["weights_uri"].endswith("/model.pt")
    assert version["dataset"] == {"name": "shapes", "version": 1} and version["base_model"] == "timm/test_vit"
    assert version["metrics"]["main_metric"] == "top1"
    response = stack.client.http.get("/v1/models/shapes-vit/versions/1/download", params={"file": "onnx"})
    assert response.status_code == 200
    session = ort.InferenceSession(response.content, providers=["CPUExecutionProvider"])
    (logits,) = session.run(None, {"images": np.zeros((5, 3, 32, 32), dtype=np.float32)})
    assert logits.shape == (5, 3)

    # one trace spans submit → schedule → register
    spans = [json.loads(line) for line in (stack.home / "traces.jsonl").read_text().splitlines()]
    ours = [s for s in spans if s["attributes"].get("job_id") == job["id"]]
    assert {s["service"] for s in ours} >= {"api", "scheduler", "registrar"}
    assert len({s["trace_id"] for s in ours}) == 1


def test_stop_after_the_first_epoch_ends_stopped_with_the_best_model_registered(stack: Stack) -> None:
    job = slow_job(stack, "stop-after-epoch")
    stack.wait_event(job["id"], "epoch-completed", lambda d: d["data"]["epoch"] == 1)
    stopping = stack.client.post(f"/v1/jobs/{job['id']}/stop")
    assert stopping["stop_requested"] is True
    done = stack.wait_state(job["id"], {"succeeded", "stopped", "canceled", "failed"})
    assert done["state"] == "stopped", done
    assert 1 <= done["epochs_completed"] < 30 and done["best_metrics"]["top1"] > 0
    done = stack.wait_model(job["id"])
    version = stack.client.get(f"/v1/models/{done['model']['name']}/versions/{done['model']['version']}")
    assert version["job_state"] == "stopped" and version["onnx_uri"]
    assert Path(urllib.parse.urlparse(version["onnx_uri"]).path).exists()
    code, out = forge(stack, "jobs", "watch", job["id"])
    assert code == 4 and "stop-after-epoch stopped after" in out, out  # the exit code says how it ended


def test_stop_before_the_first_epoch_cancels_and_keeps_nothing(stack: Stack) -> None:
    job = slow_job(stack, "stop-before-epoch")
    stack.wait_event(job["id"], "metrics")  # the trainer is inside its first epoch
    stack.client.post(f"/v1/jobs/{job['id']}/stop")
    done = stack.wait_state(job["id"], {"succeeded", "stopped", "canceled", "failed"})
    assert done["state"] == "canceled", done
    assert done["epochs_completed"] == 0
    assert output_objects(stack, job) == []  # not even a checkpoint
    time.sleep(1)
    assert stack.job(job["id"])["model"] is None
    assert "stop requested (SIGTERM)" in "\n".join(line["text"] for line in stack.client.get(f"/v1/jobs/{job['id']}/logs")["lines"])


def test_a_second_job_waits_while_the_first_runs_and_a_queued_job_can_be_canceled(stack: Stack) -> None:
    first = slow_job(stack, "occupies-the-slot")
    stack.wait_state(first["id"], {"running"})
    second = stack.submit("waits-its-turn", epochs=1, imgsz=32, batch=8)
    third = stack.submit("canceled-while-queued", epochs=1, imgsz=32, batch=8)
    time.sleep(1.0)
    assert stack.job(second["id"])["state"] == "queued"
    assert stack.job(third["id"])["state"] == "queued"
    stack.client.post(f"/v1/jobs/{third['id']}/stop")
    canceled = stack.wait_state(third["id"], {"canceled"}, timeout=30)
    assert canceled["started_at"] is None and canceled["attempt"] == 0
    assert stack.job(first["id"])["state"] == "running"  # the running job was not disturbed
    stack.client.post(f"/v1/jobs/{first['id']}/stop")
    stack.wait_state(first["id"], {"stopped", "canceled"})
    done = stack.wait_state(second["id"], {"succeeded", "failed"})
    assert done["state"] == "succeeded"
    assert done["started_at"] >= stack.job(first["id"])["finished_at"][:19]


def test_a_trainer_killed_by_a_signal_fails_with_its_reason(stack: Stack) -> None:
    job = slow_job(stack, "crashes")
    stack.wait_event(job["id"], "metrics")
    launcher = int((stack.home / "runs" / job["id"] / "1" / "pid").read_text().split()[0])
    trainer = int(Path(f"/proc/{launcher}/task/{launcher}/children").read_text().split()[0])
    os.kill(trainer, signal.SIGSEGV)
    done = stack.wait_state(job["id"], {"succeeded", "stopped", "canceled", "failed"})
    assert done["state"] == "failed"
    assert done["error"]["reason"] == "trainer_crash"
    assert done["error"]["message"].startswith("the trainer was killed by SIGSEGV")
    assert done["error"]["hint"]
    code, out = forge(stack, "jobs", "watch", job["id"])
    assert code == 1 and "trainer_crash: the trainer was killed by SIGSEGV" in out and "hint:" in out, out


def test_a_broken_dataset_fails_the_job_naming_the_file(stack: Stack, sample_dataset: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "fragile"
    shutil.copytree(sample_dataset, copy)
    version = upload_folder(stack, "fragile", copy)
    stored = Path(urllib.parse.urlparse(version["uri"]).path)
    victim = sorted(stored.rglob("*.png"))[0]
    victim.write_bytes(b"storage bit rot")  # damaged after validation, behind the platform's back
    job = stack.submit("reads-bad-data", dataset="fragile", **FAST)
    done = stack.wait_state(job["id"], {"succeeded", "stopped", "canceled", "failed"})
    assert done["state"] == "failed"
    assert done["error"]["reason"] == "dataset_error"
    assert victim.name in done["error"]["message"]


def test_killing_the_scheduler_and_the_log_relay_mid_run_loses_nothing(stack: Stack) -> None:
    job = slow_job(stack, "survives-restarts", epochs=3)
    stack.wait_event(job["id"], "epoch-completed", lambda d: d["data"]["epoch"] == 1)
    stack.stop("forge_scheduler", signal.SIGKILL)
    stack.stop("forge_log_relay", signal.SIGKILL)
    time.sleep(1.0)  # the trainer keeps going with nobody watching
    stack.start("forge_scheduler")
    stack.start("forge_log_relay")
    done = stack.wait_state(job["id"], {"succeeded", "stopped", "canceled", "failed"})
    assert done["state"] == "succeeded", done
    assert done["epochs_completed"] == 3 and done["attempt"] == 1
    metrics = stack.client.get(f"/v1/jobs/{job['id']}/metrics")
    assert [e["epoch"] for e in metrics["epochs"]] == [1, 2, 3]
    steps = [s["step"] for s in metrics["steps"]]
    assert steps == list(range(1, 3 * 36 + 1))  # 144 training images, batch 4: every step once
    stack.wait_model(job["id"])


def test_a_plain_nats_subscriber_follows_a_job_from_submitted_to_model_registered(stack: Stack) -> None:
    """Another system, with nothing of Forge but the catalogue: its own durable consumer on the
    jobs stream, filtered to the kinds it cares about."""
    import asyncio

    import nats
    from nats.js.api import ConsumerConfig

    prefix = stack.env["FORGE_BUS_PREFIX"]
    seen: list[tuple[str, str]] = []

    async def follow(job_id_holder: list[str]) -> None:
        nc = await nats.connect(stack.env["FORGE_NATS_URL"])
        js = nc.jetstream()
        stream = f"{prefix.upper()}_JOBS"
        kinds = ["submitted", "status", "model-registered"]
        await js.add_consumer(stream, ConsumerConfig(durable_name="other-system", filter_subjects=[f"{prefix}.job.*.{k}" for k in kinds]))
        sub = await js.pull_subscribe_bind("other-system", stream)
        job = stack.submit("followed-by-others", **FAST)
        job_id_holder.append(job["id"])
        async with asyncio.timeout(240):
            while not seen or seen[-1][0] != "forge.job.model-registered":
                try:
                    msgs = await sub.fetch(10, timeout=5)
                except nats.errors.TimeoutError:
                    continue
                for msg in msgs:
                    doc = json.loads(msg.data)
                    assert doc["specversion"] == "1.0" and msg.headers["Nats-Msg-Id"] == doc["id"]
                    if doc["subject"] == job["id"]:
                        seen.append((doc["type"], doc["data"].get("state", "")))
                    await msg.ack()
        await nc.close()

    holder: list[str] = []
    asyncio.run(follow(holder))
    types = [t for t, _ in seen]
    assert types[:2] == ["forge.job.status-changed", "forge.job.submitted"] and types[-1] == "forge.job.model-registered"
    assert [s for t, s in seen if t == "forge.job.status-changed"] == ["queued", "running", "succeeded"]


def test_a_manual_job_ends_deployable_and_deploy_registers_it(stack: Stack) -> None:
    body = {
        "name": "manual-one",
        "task": "classification",
        "dataset": {"name": "shapes", "version": 1},
        "base_model": "timm/test_vit",
        "hyperparameters": {**FAST, "epochs": 1},
        "registration": "manual",
        "start": True,
    }
    job = stack.client.post("/v1/jobs", body)
    done = stack.wait_state(job["id"], {"succeeded", "failed"})
    assert done["state"] == "succeeded"
    time.sleep(1.0)
    assert stack.job(job["id"])["model"] is None  # manual: nothing registered yet
    code, out = forge(stack, "jobs", "deploy", job["id"])  # the CLI waits for the registration
    assert code == 0 and "model: manual-one v1" in out, out
    deployed = stack.wait_model(job["id"])
    assert deployed["model"]["name"] == "manual-one"
    again = stack.client.http.post(f"/v1/jobs/{job['id']}/deploy")
    assert again.status_code == 200 and again.json()["model"] == deployed["model"]
