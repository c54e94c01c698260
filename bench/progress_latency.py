"""Progress latency: from a trainer printing a progress line to an SSE client receiving it.

Starts the embedded stack (``forge stack up`` in a temporary FORGE_HOME) unless ``--api`` points
at a running one, runs a real classification job that prints ≥1000 step lines, and follows its
live stream: latency = time received − the ``t`` the trainer stamped on the line. As a baseline in
the same run it measures plain NATS publish → subscribe on the same machine (the floor any
NATS-based design pays).

    .venv/bin/python bench/progress_latency.py [--api http://127.0.0.1:8000] [--steps 1200]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from _stack import embedded

from forge_cli.client import ForgeClient
from forge_cli.samples import shapes


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {"n": len(values), "p50": pick(0.50), "p95": pick(0.95), "p99": pick(0.99), "mean": statistics.fmean(values)}


def show(name: str, stats: dict[str, float]) -> None:
    print(
        f"{name:<28} n={int(stats['n']):5d}  p50={stats['p50'] * 1000:7.2f} ms  p95={stats['p95'] * 1000:7.2f} ms  p99={stats['p99'] * 1000:7.2f} ms"
    )


async def nats_baseline(url: str, count: int) -> list[float]:
    import nats

    nc = await nats.connect(url)
    received: list[float] = []
    done = asyncio.Event()

    async def on_msg(msg: object) -> None:
        received.append(time.time() - float(msg.data))  # type: ignore[attr-defined]
        if len(received) == count:
            done.set()

    await nc.subscribe("bench.latency", cb=on_msg)
    for _ in range(count):
        await nc.publish("bench.latency", str(time.time()).encode())
        await asyncio.sleep(0.002)  # the trainer's pace, roughly
    await asyncio.wait_for(done.wait(), 30)
    await nc.close()
    return received


def measure(api: str, steps: int, work: Path) -> list[float]:
    client = ForgeClient(api, timeout=120)
    data = shapes(work / "data", per_class=20, size=16)
    archive = shutil.make_archive(str(work / "data"), "gztar", root_dir=data)
    try:
        client.post("/v1/datasets", {"name": "latency-bench"})
    except Exception:
        pass
    version = client.upload_version("latency-bench", Path(archive))["version"]
    epochs = max(1, -(-steps // 48))  # 48 training images, batch 1
    job = client.post(
        "/v1/jobs",
        {
            "name": "latency-bench",
            "task": "classification",
            "dataset": {"name": "latency-bench", "version": version},
            "base_model": "timm/test_vit",
            "hyperparameters": {"epochs": epochs, "imgsz": 16, "batch": 1, "augment": False},
            "start": True,
        },
    )
    latencies: list[float] = []
    for event, _, payload in client.events(job["id"]):
        now = time.time()
        if event == "metrics" and payload["data"].get("reported_at"):
            latencies.append(now - payload["data"]["reported_at"])
        if event == "status" and payload["data"]["state"] in ("succeeded", "failed", "canceled", "stopped"):
            break
    client.close()
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--api", help="a running Forge API (default: start the embedded stack)")
    parser.add_argument("--nats", help="its NATS, for the baseline (default: the embedded one)")
    parser.add_argument("--steps", type=int, default=1200, help="progress lines to measure (≥1000)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="forge-bench-"))
    try:
        with contextlib.ExitStack() as stack:
            api, nats_url = args.api, args.nats or "nats://127.0.0.1:4222"
            if api is None:
                running = stack.enter_context(embedded(work / "home"))
                api, nats_url = running.api, running.nats
            latencies = measure(api, args.steps, work)
            baseline = asyncio.run(nats_baseline(nats_url, 1000))
        print(f"progress latency, trainer line → SSE client ({os.cpu_count()} CPUs)")
        show("forge (line → SSE)", percentiles(latencies))
        show("baseline (NATS pub → sub)", percentiles(baseline))
        p = percentiles(latencies)
        b = percentiles(baseline)
        print(f"forge adds {1000 * (p['p50'] - b['p50']):.1f} ms at p50 over the NATS floor")
        if len(latencies) < 1000:
            raise SystemExit(f"only {len(latencies)} lines were measured; expected at least 1000")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
