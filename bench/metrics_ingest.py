"""Metrics ingest: metric points per second that Forge persists and delivers to a live client,
next to MLflow's tracking server (``log_batch`` into sqlite) on the same machine, in the same run.

Forge side: the embedded stack's own log-relay follows an output file (announced with a
``running`` status event, as the scheduler would), the bench appends step lines to it as fast as
it can, and an SSE client on the job's stream counts the metrics events; the points are counted
persisted through the api. MLflow side: ``mlflow server`` with a sqlite backend, and
``MlflowClient.log_batch`` in batches of 1000.

    .venv/bin/python bench/metrics_ingest.py [--steps 20000] [--metrics 5]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx
from _stack import embedded, free_port

from forge_cli.client import ForgeClient
from forge_cli.samples import shapes
from forge_common import bus
from forge_common.events import JobStatusChanged, JobStatusChangedData
from forge_common.settings import CommonSettings
from forge_common.states import JobState
from forge_common.subjects import Subjects
from forge_sdk.protocol import Step, format_line


async def announce(nats_url: str, job_id: uuid.UUID, state: JobState, log: Path) -> None:
    settings = CommonSettings(nats_url=nats_url)
    nc, js = await bus.connect(settings, name="bench")
    event = JobStatusChanged.of(
        JobStatusChangedData(job_id=job_id, name="bench", state=state, attempt=0, log_uri=log.as_uri()), source="/bench"
    )
    await bus.publish(js, Subjects(settings.bus_prefix), event)
    await nc.close()


def forge_side(api: str, nats_url: str, work: Path, steps: int, metrics: int) -> tuple[float, float]:
    client = ForgeClient(api, timeout=120)
    data = shapes(work / "data", per_class=4, size=16)
    archive = shutil.make_archive(str(work / "data"), "gztar", root_dir=data)
    client.post("/v1/datasets", {"name": "bench"})
    client.upload_version("bench", Path(archive))
    job = client.post(
        "/v1/jobs", {"name": "bench", "task": "classification", "dataset": {"name": "bench", "version": 1}, "base_model": "timm/test_vit"}
    )
    job_id = uuid.UUID(job["id"])
    log = work / "output.log"
    log.touch()
    received = 0
    done = threading.Event()

    def listen() -> None:
        nonlocal received
        with ForgeClient(api) as c:
            for event, _, _ in c.events(job["id"]):
                if event == "metrics":
                    received += 1
                    if received == steps:
                        done.set()
                        return

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    time.sleep(1.0)
    asyncio.run(announce(nats_url, job_id, JobState.RUNNING, log))
    names = [f"m{i}" for i in range(metrics)]
    start = time.monotonic()
    with open(log, "a") as fh:
        for step in range(1, steps + 1):
            fh.write(format_line(Step(step=step, epoch=1, metrics={n: step * 0.001 for n in names})) + "\n")
    if not done.wait(600):
        raise SystemExit(f"the live client got {received} of {steps} metrics events")
    delivered = time.monotonic() - start
    while len(client.get(f"/v1/jobs/{job['id']}/metrics")["steps"]) < steps:
        time.sleep(0.5)
    persisted = time.monotonic() - start
    asyncio.run(announce(nats_url, job_id, JobState.SUCCEEDED, log))
    client.close()
    return steps * metrics / delivered, steps * metrics / persisted


def mlflow_side(work: Path, steps: int, metrics: int) -> float:
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    port = free_port()
    mlflow = Path(sys.executable).parent / "mlflow"
    server = subprocess.Popen(
        [
            str(mlflow),
            "server",
            "--backend-store-uri",
            f"sqlite:///{work / 'mlflow.db'}",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(work / "mlflow.log", "wb"),
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"mlflow server did not start; see {work / 'mlflow.log'}")
            time.sleep(0.5)
        client = MlflowClient(tracking_uri=url)
        run = client.create_run(client.create_experiment("bench"))
        points = [Metric(f"m{i}", step * 0.001, int(time.time() * 1000), step) for step in range(1, steps + 1) for i in range(metrics)]
        start = time.monotonic()
        for i in range(0, len(points), 1000):
            client.log_batch(run.info.run_id, metrics=points[i : i + 1000])
        return len(points) / (time.monotonic() - start)
    finally:
        server.terminate()
        server.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--metrics", type=int, default=5, help="metrics per step line")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="forge-ingest-bench-"))
    try:
        with embedded(work / "home") as stack:
            delivered, persisted = forge_side(stack.api, stack.nats, work, args.steps, args.metrics)
        baseline = mlflow_side(work, args.steps, args.metrics)
        total = args.steps * args.metrics
        print(f"metrics ingest, {total} points ({args.steps} step lines × {args.metrics} metrics)")
        print(f"  forge: delivered to an SSE client   {delivered:10.0f} points/s")
        print(f"  forge: persisted (and delivered)    {persisted:10.0f} points/s")
        print(f"  mlflow server, log_batch → sqlite   {baseline:10.0f} points/s")
        print(f"  ratio forge persisted / mlflow      {persisted / baseline:10.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
