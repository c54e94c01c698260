"""Scheduler figures.

1. Admission at scale: 10,000 queued jobs are admitted, all of them, one slot at a time; each
   admission decision is timed (lock, read the head of the queue, compare-and-set, attempt row,
   outbox row, launch on a no-op executor). The first decisions face the whole queue, the last
   ones almost none; the baseline in the same run is the same decision with only 100 jobs queued —
   a decision's cost must not grow with the queue.
2. Submit → trainer started (the embedded stack, local executor, a trivial trainer script that
   prints the time it started), p50/p99 over sequential jobs, next to the floor: starting the same
   script with a bare ``subprocess`` call.

    .venv/bin/python bench/scheduler.py [--queue 10000] [--decisions N (default: all)] [--jobs 30]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import http.server
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import asyncpg
from _stack import embedded

from forge_cli.client import ForgeClient
from forge_cli.samples import shapes
from forge_common import DEFAULT_PROJECT_ID, db
from forge_common.settings import CommonSettings
from forge_common.storage import open_store
from forge_common.subjects import Subjects
from forge_scheduler.executors.base import Capacity, ExitStatus, Handle, LaunchSpec
from forge_scheduler.service import Scheduler
from forge_scheduler.settings import SchedulerSettings
from forge_sdk import protocol

TRIVIAL = "import time; print('STARTED', time.time(), flush=True)\n"


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


class NoopExecutor:
    """Launches nothing: isolates the admission decision."""

    name = "bench"
    runs_images = False

    def run_ref(self, job_id: str, attempt: int) -> str:
        return f"bench/{job_id}/{attempt}"

    def log_uri(self, run_ref: str) -> str:
        return f"bench://{run_ref}"

    def trainer_env(self, run_ref: str) -> dict[str, str]:
        return {}

    async def launch(self, spec: LaunchSpec) -> Handle:
        return Handle(spec.run_ref)

    async def poll(self, handle: Handle) -> ExitStatus | None:
        return None

    async def pending_reason(self, handle: Handle) -> str | None:
        return None

    async def terminate(self, handle: Handle, grace_seconds: float) -> bool:
        return False

    async def kill(self, handle: Handle) -> bool:
        return False

    async def read_result(self, handle: Handle) -> protocol.Outcome | None:
        return None

    async def last_error(self, handle: Handle) -> str | None:
        return None

    async def cleanup(self, handle: Handle) -> None:
        return None

    async def capacity(self) -> list[Capacity]:
        return [Capacity("cpu", 1)]


async def fill_queue(conn: asyncpg.Connection, n: int) -> None:
    spec = {"name": "q", "task": "classification", "dataset": {"name": "d", "version": 1, "uri": "file:///nowhere"}, "hyperparameters": {}}
    await conn.execute(
        "INSERT INTO jobs (id, project_id, name, task, spec, base_model, state, queued_at, priority)"
        " SELECT gen_random_uuid(), $1, 'q', 'classification', $2::jsonb, 'timm/test_vit', 'queued', now() + i * interval '1 microsecond', i % 3"
        " FROM generate_series(1, $3) AS i",
        uuid.UUID(DEFAULT_PROJECT_ID),
        spec,
        n,
    )


async def admission(database_url: str, queued: int, decisions: int) -> list[float]:
    """Seconds per admission decision with ``queued`` jobs waiting."""
    await db.ensure_database(database_url)
    pool = await db.connect(database_url)
    try:
        async with pool.acquire() as conn:
            await conn.execute("DELETE FROM outbox; DELETE FROM attempts; DELETE FROM jobs")
            await fill_queue(conn, queued)
            await conn.execute("ANALYZE jobs")
        common = CommonSettings(database_url=database_url, home=Path(tempfile.mkdtemp()))
        scheduler = Scheduler(pool, open_store(common), NoopExecutor(), Subjects("bench"), SchedulerSettings(), common)  # type: ignore[arg-type]
        await scheduler.refresh_capacity()
        timings = []
        for _ in range(decisions):
            start = time.perf_counter()
            (job,) = await scheduler.admit()
            timings.append(time.perf_counter() - start)
            async with pool.acquire() as conn:  # the job ends at once: its slot frees
                await conn.execute("UPDATE jobs SET state = 'succeeded' WHERE id = $1", job)
        return timings
    finally:
        await pool.close()


def stats(values: list[float]) -> str:
    ordered = sorted(values)
    p = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000  # noqa: E731
    return f"p50 {p(0.5):7.2f} ms  p99 {p(0.99):7.2f} ms  mean {statistics.fmean(values) * 1000:7.2f} ms"


def start_latency(jobs: int, work: Path) -> tuple[list[float], list[float]]:
    script = work / "trivial.py"
    script.write_text(TRIVIAL)
    handler = functools.partial(QuietHandler, directory=str(work))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    floor = []
    for _ in range(jobs):
        t0 = time.time()
        out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True).stdout
        floor.append(float(out.split()[1]) - t0)
    platform: list[float] = []
    with embedded(
        work / "home",
        FORGE_SCHEDULER_POLL_SECONDS="0.05",
        FORGE_SCHEDULER_DETECT_DEVICES="false",
        FORGE_API_SCRIPT_ALLOWED_HOSTS="127.0.0.1",
    ) as stack:
        client = ForgeClient(stack.api, timeout=120)
        data = shapes(work / "data", per_class=2, size=16)
        archive = shutil.make_archive(str(work / "data"), "gztar", root_dir=data)
        client.post("/v1/datasets", {"name": "bench"})
        client.upload_version("bench", Path(archive))
        url = f"http://127.0.0.1:{server.server_address[1]}/trivial.py"
        for i in range(jobs):
            t0 = time.time()
            job = client.post(
                "/v1/jobs",
                {
                    "name": f"b{i}",
                    "task": "classification",
                    "dataset": {"name": "bench", "version": 1},
                    "base_model": "timm/test_vit",
                    "custom_script_uri": url,
                    "start": True,
                },
            )
            started = None
            for event, _, payload in client.events(job["id"]):
                if event == "logs":
                    for line in payload["data"]["lines"]:
                        if line["text"].startswith("STARTED"):
                            started = float(line["text"].split()[1])
                if started is not None or (event == "status" and payload["data"]["state"] in ("failed", "canceled")):
                    break
            if started is None:
                raise SystemExit(f"job {job['id']} never started its trainer")
            platform.append(started - t0)
        client.close()
    server.shutdown()
    return platform, floor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queue", type=int, default=10000)
    parser.add_argument("--decisions", type=int, default=None, help="how many to admit (default: the whole queue)")
    parser.add_argument("--jobs", type=int, default=30)
    parser.add_argument("--database-url", default="postgresql://postgres@127.0.0.1:5432/forge_bench_scheduler")
    args = parser.parse_args()
    decisions = args.decisions or args.queue
    started = time.perf_counter()
    deep = asyncio.run(admission(args.database_url, args.queue, decisions))
    took = time.perf_counter() - started
    shallow = asyncio.run(admission(args.database_url, 100, 99))
    head, tail = deep[:100], deep[-100:]
    print(f"admitted {len(deep)} of {args.queue} queued jobs in {took:.1f} s")
    print(f"admission decision, all {len(deep)}            : {stats(deep)}")
    print(f"first 100 decisions (~{args.queue} queued)  : {stats(head)}")
    print(f"last 100 decisions (<= {args.queue - len(deep) + 100} queued)  : {stats(tail)}")
    print(f"admission decision, 100 queued (base) : {stats(shallow)}")
    print(f"ratio of medians (first 100 / base)   : {statistics.median(head) / statistics.median(shallow):.2f}")
    work = Path(tempfile.mkdtemp(prefix="forge-sched-bench-"))
    platform, floor = start_latency(args.jobs, work)
    print(f"submit → trainer started, forge      : {stats(platform)}")
    print(f"bare subprocess start (the floor)     : {stats(floor)}")


if __name__ == "__main__":
    main()
