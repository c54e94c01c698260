"""`make up` itself: `forge stack up` starts the embedded stack, Ctrl-C leaves no process behind,
state survives a restart, and training survives one — retried from its last checkpoint by
default, or carried on unbroken with FORGE_STACK_KEEP_TRAINERS."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from forge_cli.client import ForgeClient
from forge_cli.samples import shapes

from ..conftest import free_port

pytestmark = pytest.mark.slow

FORGE = Path(sys.executable).parent / "forge"


def ours(home: Path) -> list[int]:
    """Processes the stack started: they carry its FORGE_HOME (services, NATS, PostgreSQL)."""
    marker = f"FORGE_HOME={home}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if marker in (proc / "environ").read_bytes().split(b"\0"):
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@contextmanager
def stack_up(home: Path, env: dict[str, str], **extra: str) -> Iterator[ForgeClient]:
    log = open(home.parent / "stack.log", "ab")
    proc = subprocess.Popen([str(FORGE), "stack", "up"], env={**env, **extra}, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    client = ForgeClient(f"http://127.0.0.1:{env['FORGE_API_PORT']}", timeout=60)
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if client.http.get("/readyz").status_code == 200:
                    break
            except Exception:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, (home.parent / "stack.log").read_text()[-3000:]
            time.sleep(0.3)
        yield client
    finally:
        client.close()
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        try:
            assert proc.wait(90) == 0, (home.parent / "stack.log").read_text()[-3000:]
        finally:
            if proc.poll() is None:
                proc.kill()
            log.close()


def wait_job(client: ForgeClient, job_id: str, until: Any, timeout: float = 240) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{job_id}")
        if until(job):
            return job  # type: ignore[no-any-return]
        time.sleep(0.3)
    raise TimeoutError(f"job {job_id}: {client.get(f'/v1/jobs/{job_id}')}")


def trainer_pid(home: Path, job_id: str, attempt: int) -> int:
    return int((home / "runs" / job_id / str(attempt) / "pid").read_text().split()[0])


def test_the_embedded_stack_stops_clean_keeps_its_state_and_its_training(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_")}
    env.update(
        FORGE_HOME=str(home),
        FORGE_API_PORT=str(free_port()),
        FORGE_STACK_NATS_PORT=str(free_port()),
        FORGE_SCHEDULER_DETECT_DEVICES="false",
        FORGE_SCHEDULER_POLL_SECONDS="0.2",
    )
    data = shapes(tmp_path / "shapes", per_class=60, size=64, seed=1)
    with stack_up(home, env) as client:
        client.post("/v1/datasets", {"name": "shapes"})
        archive = tmp_path / "shapes.tar.gz"
        subprocess.run(["tar", "-czf", str(archive), "-C", str(data), "."], check=True)
        client.upload_version("shapes", archive)
        body = {
            "name": "outlives-restarts",
            "task": "classification",
            "dataset": {"name": "shapes", "version": 1},
            "base_model": "timm/resnet10t",
            "hyperparameters": {"epochs": 4, "imgsz": 128, "batch": 4},
            "start": True,
        }
        job = client.post("/v1/jobs", body)["id"]
        wait_job(client, job, lambda j: j["epochs_completed"] >= 1)
        first = trainer_pid(home, job, 1)
    # Ctrl-C: services, NATS, PostgreSQL and the trainer are gone
    assert ours(home) == [] and not alive(first)

    with stack_up(home, env, FORGE_STACK_KEEP_TRAINERS="true") as client:
        # the state survived; the interrupted attempt is retried from its last checkpoint
        resumed = wait_job(client, job, lambda j: j["attempt"] == 2 and j["state"] == "running")
        assert resumed["attempts"][0]["retried"] and resumed["attempts"][1]["resume_from"]
        wait_job(client, job, lambda j: j["epochs_completed"] >= 2 or j["state"] != "running")
        second = trainer_pid(home, job, 2)
    assert ours(home) == []  # the servers stopped ...
    assert alive(second) or (home / "runs" / job / "2" / "exit.json").exists()  # ... the trainer did not

    with stack_up(home, env, FORGE_STACK_KEEP_TRAINERS="true") as client:
        done = wait_job(client, job, lambda j: j["state"] not in ("queued", "running"))
        assert (done["state"], done["attempt"], done["epochs_completed"]) == ("succeeded", 2, 4), done
        metrics = client.get(f"/v1/jobs/{job}/metrics")
        assert [e["epoch"] for e in metrics["epochs"]] == [2, 3, 4]  # the resumed attempt carried on from epoch 1
        model = wait_job(client, job, lambda j: j["model"] is not None, timeout=60)["model"]
        assert model == {"name": "outlives-restarts", "version": 1}
    assert ours(home) == []
