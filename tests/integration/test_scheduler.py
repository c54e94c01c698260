"""The scheduler against a real database and bus, with small SDK trainers instead of real ones."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from forge_common.events import ArtifactUploaded, EpochCompleted, EpochCompletedData, decode
from forge_common.outbox import OutboxRelay
from forge_common.settings import CommonSettings
from forge_common.storage import open_store
from forge_common.subjects import Subjects
from forge_scheduler.executors.base import Capacity, LaunchSpec
from forge_scheduler.executors.local import LocalExecutor
from forge_scheduler.service import Scheduler
from forge_scheduler.settings import SchedulerSettings

from .conftest import collect
from .helpers import insert_job

TRAINER = """
import os, sys, time, forge_sdk
epochs = EPOCHS
step_seconds = STEP_SECONDS
with forge_sdk.init() as run:
    run.start(epochs, steps_per_epoch=5)
    step = 0
    for epoch in range(1, epochs + 1):
        for _ in range(5):
            step += 1
            time.sleep(step_seconds)
            run.report(step, epoch=epoch, loss=1 / step)
            if run.should_stop():
                break
        if run.should_stop():
            break
        best = run.output.put_bytes("model.pt", b"weights")
        with run.checkpoint("last.pt") as path:
            path.write_bytes(b"state")
        run.epoch_completed(epoch, {"acc": epoch / epochs}, is_best=True)
"""

STUBBORN = """
import signal, time
signal.signal(signal.SIGTERM, lambda *a: print("ignoring SIGTERM", flush=True))
print("started", flush=True)
time.sleep(120)
"""


def trainer(epochs: int = 2, step_seconds: float = 0.01) -> str:
    """The SDK trainer with its pacing baked in (the scheduler passes no stray environment on)."""
    return TRAINER.replace("EPOCHS", str(epochs)).replace("STEP_SECONDS", str(step_seconds))


class ScriptScheduler(Scheduler):
    script = trainer()

    def command_for(self, job: asyncpg.Record) -> list[str]:
        return [sys.executable, "-c", self.script]


@pytest.fixture
def make_scheduler(pool: asyncpg.Pool, common_settings: CommonSettings, tmp_path: Path) -> Any:
    def make(script: str | None = None, devices: dict[str, int] | None = None, **settings: Any) -> ScriptScheduler:
        s = ScriptScheduler(
            pool,
            open_store(common_settings),
            LocalExecutor(tmp_path / "runs", cpu_slots=settings.get("cpu_slots", 1), devices=devices),
            Subjects(common_settings.bus_prefix),
            SchedulerSettings(**{"poll_seconds": 0.05, **settings}),
            common_settings,
        )
        s.script = script or trainer()
        return s

    return make


async def queued_job(pool: asyncpg.Pool, name: str = "job") -> uuid.UUID:
    async with pool.acquire() as conn:
        return await insert_job(conn, state="queued", name=name, attempt=0)


async def state_of(pool: asyncpg.Pool, job_id: uuid.UUID) -> asyncpg.Record:
    async with pool.acquire() as conn:
        row = await conn.fetchrow("SELECT * FROM jobs WHERE id = $1", job_id)
        assert row is not None
        return row


async def run_until(scheduler: Scheduler, pool: asyncpg.Pool, job_id: uuid.UUID, states: set[str], timeout: float = 30) -> asyncpg.Record:
    async with asyncio.timeout(timeout):
        while True:
            await scheduler.check_running()
            row = await state_of(pool, job_id)
            if row["state"] in states:
                return row
            await asyncio.sleep(0.05)


async def test_one_slot_runs_one_job_and_the_next_waits(
    make_scheduler: Any, pool: asyncpg.Pool, js: Any, common_settings: CommonSettings
) -> None:
    scheduler = make_scheduler()
    first, second = await queued_job(pool, "first"), await queued_job(pool, "second")
    assert await scheduler.admit() == [first]
    assert (await state_of(pool, first))["state"] == "running"
    assert (await state_of(pool, second))["state"] == "queued"
    assert await scheduler.admit() == []  # still no free slot
    done = await run_until(scheduler, pool, first, {"succeeded"})
    assert done["progress"] == 1.0 and done["epochs_completed"] == 2
    assert (await state_of(pool, second))["state"] == "running"  # admitted as the slot freed
    await run_until(scheduler, pool, second, {"succeeded"})
    subjects = Subjects(common_settings.bus_prefix)
    await OutboxRelay(pool, js, producer="scheduler").drain()
    (uploaded,) = [decode(m.data) for m in await collect(js, subjects.job(first, "artifact-uploaded"), 1)]
    assert isinstance(uploaded, ArtifactUploaded) and uploaded.data.outcome == "succeeded"
    assert uploaded.data.uri.endswith(f"/jobs/{first}/1")


async def test_two_replicas_never_start_a_job_twice(make_scheduler: Any, pool: asyncpg.Pool) -> None:
    a, b = make_scheduler(cpu_slots=2), make_scheduler(cpu_slots=2)
    jobs = [await queued_job(pool, f"j{i}") for i in range(5)]
    started_a, started_b = await asyncio.gather(a.admit(), b.admit())
    assert len(started_a) + len(started_b) == 2 and not set(started_a) & set(started_b)
    async with pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM attempts") == 2
        assert await conn.fetchval("SELECT count(*) FROM jobs WHERE state = 'running'") == 2
    for job in jobs:
        await run_until(a, pool, job, {"succeeded"}, timeout=60)
    async with pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM attempts") == 5


async def test_stop_while_queued_cancels_at_once(make_scheduler: Any, pool: asyncpg.Pool) -> None:
    scheduler = make_scheduler(cpu_slots=0)
    job = await queued_job(pool)
    await scheduler.request_stop(job)
    row = await state_of(pool, job)
    assert row["state"] == "canceled" and row["attempt"] == 0


async def test_stop_after_an_epoch_keeps_the_run_stopped(make_scheduler: Any, pool: asyncpg.Pool) -> None:
    scheduler = make_scheduler(script=trainer(epochs=50, step_seconds=0.05))
    job = await queued_job(pool)
    await scheduler.admit()
    async with pool.acquire() as conn:
        attempt = await conn.fetchrow("SELECT * FROM attempts WHERE job_id = $1", job)
    log = Path(attempt["run_ref"]) / "output.log"
    async with asyncio.timeout(30):
        while '"kind":"epoch"' not in log.read_text():
            await asyncio.sleep(0.05)
    await scheduler.record_epoch(
        EpochCompleted.of(EpochCompletedData(job_id=job, epoch=1, total_epochs=50, metrics={"acc": 0.02}, is_best=True), source="test")
    )
    await scheduler.request_stop(job)
    row = await run_until(scheduler, pool, job, {"stopped", "canceled", "failed"})
    assert row["state"] == "stopped" and row["epochs_completed"] >= 1


async def test_a_trainer_that_ignores_stop_is_killed_at_the_deadline(make_scheduler: Any, pool: asyncpg.Pool) -> None:
    scheduler = make_scheduler(script=STUBBORN, stop_grace_seconds=0.5)
    job = await queued_job(pool)
    await scheduler.admit()
    async with pool.acquire() as conn:
        attempt = await conn.fetchrow("SELECT * FROM attempts WHERE job_id = $1", job)
    log = Path(attempt["run_ref"]) / "output.log"
    async with asyncio.timeout(20):
        while "started" not in log.read_text():
            await asyncio.sleep(0.05)
    await scheduler.request_stop(job)
    row = await run_until(scheduler, pool, job, {"canceled", "stopped", "failed"}, timeout=20)
    assert row["state"] == "canceled"  # no epoch completed: nothing is kept
    assert "ignoring SIGTERM" in log.read_text()


async def test_a_crash_fails_with_the_exit_code_and_last_error(make_scheduler: Any, pool: asyncpg.Pool) -> None:
    scheduler = make_scheduler(script="import sys; print('loading'); print('KeyError: missing column', file=sys.stderr); sys.exit(3)")
    job = await queued_job(pool)
    await scheduler.admit()
    row = await run_until(scheduler, pool, job, {"failed"})
    assert row["error"] == {
        "reason": "trainer_crash",
        "message": "the trainer exited with code 3: KeyError: missing column",
        "hint": "see the job's logs for the traceback",
    }


async def test_a_restarted_scheduler_reattaches_to_a_running_trainer(make_scheduler: Any, pool: asyncpg.Pool) -> None:
    first = make_scheduler(script=trainer(step_seconds=0.05))
    job = await queued_job(pool)
    await first.admit()
    second = make_scheduler(script=trainer(step_seconds=0.05))  # a new process knows only what the database says
    row = await run_until(second, pool, job, {"succeeded", "failed"})
    assert row["state"] == "succeeded"


async def test_higher_priority_first_then_first_come_first_served(make_scheduler: Any, pool: asyncpg.Pool) -> None:
    scheduler = make_scheduler(cpu_slots=0)
    order = []
    async with pool.acquire() as conn:
        for name, priority in [("low", 0), ("normal-1", 1), ("high", 2), ("normal-2", 1)]:
            job = await insert_job(conn, state="queued", name=name, attempt=0)
            await conn.execute("UPDATE jobs SET priority = $2 WHERE id = $1", job, priority)
            order.append(job)
    scheduler.executor.cpu_slots = 1
    await scheduler.refresh_capacity()
    await scheduler.admit()
    for job in order:
        await run_until(scheduler, pool, job, {"succeeded"}, timeout=60)
    async with pool.acquire() as conn:
        started = [r["id"] for r in await conn.fetch("SELECT id FROM jobs ORDER BY started_at")]
    names = {j: n for j, n in zip(order, ["low", "normal-1", "high", "normal-2"], strict=True)}
    assert [names[j] for j in started] == ["high", "normal-1", "normal-2", "low"]


async def test_the_executors_capacity_is_published(make_scheduler: Any, pool: asyncpg.Pool) -> None:
    scheduler = make_scheduler(cpu_slots=3)
    await scheduler.refresh_capacity()
    async with pool.acquire() as conn:
        rows = {r["profile"]: r["total"] for r in await conn.fetch("SELECT * FROM accelerator_capacity")}
    assert rows == {"cpu": 3, "nvidia": 0, "amd": 0, "intel": 0}


async def test_a_time_limit_fails_the_attempt_as_deadline_exceeded(make_scheduler: Any, pool: asyncpg.Pool) -> None:
    scheduler = make_scheduler(script=STUBBORN)
    job = await queued_job(pool)
    async with pool.acquire() as conn:
        await conn.execute("UPDATE jobs SET spec = spec || '{\"time_limit_seconds\": 1}'::jsonb WHERE id = $1", job)
    await scheduler.admit()
    row = await run_until(scheduler, pool, job, {"failed", "succeeded"}, timeout=30)
    assert row["error"]["reason"] == "deadline_exceeded" and "time limit" in row["error"]["message"]


async def test_an_interrupted_attempt_is_retried_from_its_checkpoint_once(make_scheduler: Any, pool: asyncpg.Pool) -> None:
    import os
    import signal as sig

    scheduler = make_scheduler(script=trainer(epochs=40, step_seconds=0.05), max_retries=1)
    job = await queued_job(pool)
    for attempt in (1, 2):
        async with asyncio.timeout(30):
            while True:
                await scheduler.admit()
                async with pool.acquire() as conn:
                    a = await conn.fetchrow("SELECT * FROM attempts WHERE job_id = $1 AND attempt = $2", job, attempt)
                if a is not None and a["pid"] is not None:
                    break
                await asyncio.sleep(0.05)
        log = Path(a["run_ref"]) / "output.log"
        async with asyncio.timeout(30):
            while '"kind":"epoch"' not in log.read_text():
                await asyncio.sleep(0.05)
        os.killpg(a["pid"], sig.SIGKILL)  # the machine "goes down": trainer and launcher die
        if attempt == 1:  # retried: queued again, and admitted at once into the freed slot
            row = await run_until(scheduler, pool, job, {"running", "failed"}, timeout=30)
            async with asyncio.timeout(30):
                while (row := await state_of(pool, job))["attempt"] != 2:
                    await scheduler.check_running()
            assert row["state"] in ("queued", "running") and row["resume_from"] == a["output_uri"]
        else:
            row = await run_until(scheduler, pool, job, {"failed"}, timeout=30)
    assert row["error"]["reason"] == "interrupted"
    async with pool.acquire() as conn:
        attempts = await conn.fetch("SELECT attempt, retried, resume_from FROM attempts WHERE job_id = $1 ORDER BY attempt", job)
    assert [(r["attempt"], r["retried"]) for r in attempts] == [(1, True), (2, False)]
    assert attempts[1]["resume_from"] is not None


async def test_a_stopped_job_resumes_as_a_new_attempt_from_its_last_checkpoint(
    make_scheduler: Any, pool: asyncpg.Pool, common_settings: CommonSettings
) -> None:
    scheduler = make_scheduler()
    job = await queued_job(pool)
    await scheduler.admit()
    first = await run_until(scheduler, pool, job, {"succeeded"})
    # pretend it was stopped after leaving a checkpoint
    store = open_store(common_settings)
    key = store.key_of(first["output_uri"])
    await store.put_bytes(f"{key}/checkpoints/last.pt", b"state")
    async with pool.acquire() as conn:
        await conn.execute("UPDATE jobs SET state = 'stopped', stop_requested_at = now() WHERE id = $1", job)
    assert await scheduler.resume(job)
    assert (await state_of(pool, job))["stop_requested_at"] is None  # the old Stop does not stop the new attempt
    second = await run_until(scheduler, pool, job, {"succeeded"})
    assert second["attempt"] == 2 and second["resume_from"] == first["output_uri"]
    assert not await scheduler.resume(job)  # a succeeded job has nothing to resume


async def test_an_attempt_interrupted_before_any_checkpoint_is_retried_from_the_start(make_scheduler: Any, pool: asyncpg.Pool) -> None:
    import os
    import signal as sig

    scheduler = make_scheduler(script=STUBBORN, max_retries=1)
    job = await queued_job(pool)
    await scheduler.admit()
    async with pool.acquire() as conn:
        a = await conn.fetchrow("SELECT * FROM attempts WHERE job_id = $1 AND attempt = 1", job)
    async with asyncio.timeout(20):
        while "started" not in (Path(a["run_ref"]) / "output.log").read_text():
            await asyncio.sleep(0.05)
    os.killpg(a["pid"], sig.SIGKILL)
    async with asyncio.timeout(30):
        while (row := await state_of(pool, job))["attempt"] != 2:
            await scheduler.check_running()
    assert row["resume_from"] is None  # nothing to resume from: a fresh start, not a failing resume
    async with pool.acquire() as conn:
        assert await conn.fetchval("SELECT resume_from FROM attempts WHERE job_id = $1 AND attempt = 2", job) is None
    async with pool.acquire() as conn:
        a2 = await conn.fetchrow("SELECT * FROM attempts WHERE job_id = $1 AND attempt = 2", job)
    await scheduler.executor.kill(scheduler._handle(a2))


ENV_PROBE = """
import json, os, pathlib
pathlib.Path(os.environ["FORGE_RESULT_FILE"]).with_name("env.json").write_text(json.dumps(sorted(os.environ)))
"""


async def test_a_local_trainer_inherits_no_service_settings_or_secrets(
    make_scheduler: Any, pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in ("DATABASE_URL", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "FORGE_API_TOKEN"):
        monkeypatch.setenv(key, "secret")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    scheduler = make_scheduler(script=ENV_PROBE)
    job = await queued_job(pool)
    await scheduler.admit()
    await run_until(scheduler, pool, job, {"succeeded", "failed"})
    async with pool.acquire() as conn:
        attempt = await conn.fetchrow("SELECT * FROM attempts WHERE job_id = $1", job)
    seen = set(json.loads((Path(attempt["run_ref"]) / "env.json").read_text()))
    assert not seen & {"DATABASE_URL", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "FORGE_API_TOKEN"}
    assert {"PATH", "HF_HUB_OFFLINE", "FORGE_JOB_ID"} <= seen


DEVICE_PROBE = """
import json, os, pathlib, time
pathlib.Path(os.environ["FORGE_RESULT_FILE"]).with_name("devices.txt").write_text(os.environ.get("CUDA_VISIBLE_DEVICES", "all"))
time.sleep(3 if json.loads(os.environ["CONFIG_JSON"])["name"] == "b" else 0.2)
"""


async def test_local_gpu_jobs_each_get_their_own_devices(make_scheduler: Any, pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6")  # the scheduler itself was given three GPUs
    scheduler = make_scheduler(script=DEVICE_PROBE, devices={"nvidia": 3})
    async with pool.acquire() as conn:
        a, b, c = [await insert_job(conn, state="queued", name=n, attempt=0, devices=d) for n, d in (("a", 2), ("b", 1), ("c", 1))]
        await conn.execute("UPDATE jobs SET accelerator = 'nvidia'")

    async def seen(job: uuid.UUID) -> tuple[str, str]:
        async with pool.acquire() as conn:
            attempt = await conn.fetchrow("SELECT * FROM attempts WHERE job_id = $1 ORDER BY attempt DESC LIMIT 1", job)
        path = Path(attempt["run_ref"]) / "devices.txt"
        async with asyncio.timeout(10):
            while not path.exists():
                await asyncio.sleep(0.05)
        return attempt["devices"], path.read_text()

    assert await scheduler.admit() == [a, b]
    assert await seen(a) == ("0,1", "4,5") and await seen(b) == ("2", "6")
    await run_until(scheduler, pool, a, {"succeeded", "failed"})
    assert (await state_of(pool, c))["state"] != "queued"  # a's two devices freed: c starts on the first
    assert await seen(c) == ("0", "4")
    await run_until(scheduler, pool, b, {"succeeded", "failed"})
    await run_until(scheduler, pool, c, {"succeeded", "failed"})


async def test_a_job_wider_than_any_node_waits_at_the_head_of_its_queue(make_scheduler: Any, pool: asyncpg.Pool) -> None:
    scheduler = make_scheduler(devices={"nvidia": 4})
    scheduler.capacity = {"nvidia": Capacity("nvidia", 4, "4 free on 4 nodes", per_job=1)}
    async with pool.acquire() as conn:
        wide = await insert_job(conn, state="queued", name="wide", attempt=0, devices=2)
        narrow = await insert_job(conn, state="queued", name="narrow", attempt=0, devices=1)
        await conn.execute("UPDATE jobs SET accelerator = 'nvidia'")
    assert await scheduler.admit() == []  # 4 free, but no node has 2: the pod would never schedule
    scheduler.capacity = {"nvidia": Capacity("nvidia", 4, "a node can hold 4", per_job=4, per_job_now=1)}
    assert await scheduler.admit() == []  # it could run, but no node has 2 free right now
    scheduler.capacity = {"nvidia": Capacity("nvidia", 4, "2 free on one node", per_job=2)}
    assert await scheduler.admit() == [wide, narrow]
    for job in (wide, narrow):
        await run_until(scheduler, pool, job, {"succeeded"})


async def test_a_gpu_job_never_starts_unconfined(make_scheduler: Any, pool: asyncpg.Pool) -> None:
    scheduler = make_scheduler(script=DEVICE_PROBE, devices={"nvidia": 2})
    async with pool.acquire() as conn:
        old = await insert_job(conn, state="running", name="from-before", attempt=1)
        await conn.execute(  # a run started before device indices were recorded: which GPU it holds is unknown
            "INSERT INTO attempts (job_id, attempt, executor, accelerator, log_uri, output_uri) VALUES ($1, 1, 'local', 'nvidia', 'file:///x', 'file:///y')",
            old,
        )
        new = await insert_job(conn, state="queued", name="new", attempt=0)
        await conn.execute("UPDATE jobs SET accelerator = 'nvidia'")
    assert await scheduler.admit() == []  # one GPU is free by count, but not knowably which
    async with pool.acquire() as conn:
        await conn.execute("UPDATE attempts SET finished_at = now() WHERE job_id = $1", old)
        await conn.execute("UPDATE jobs SET state = 'failed' WHERE id = $1", old)
    assert await scheduler.admit() == [new]
    await run_until(scheduler, pool, new, {"succeeded", "failed"})


OOM_KILLED = """
import os, signal, forge_sdk
with forge_sdk.init() as run:
    run.start(3, steps_per_epoch=5)
    run.report(1, epoch=1, loss=1.0)
    os.kill(os.getpid(), signal.SIGKILL)  # what the kernel's OOM killer does
"""

OOM_REPORTED = """
import forge_sdk
with forge_sdk.init() as run:
    run.start(3, steps_per_epoch=5)
    raise MemoryError("cannot allocate")
"""


@pytest.mark.parametrize("script", [OOM_KILLED, OOM_REPORTED], ids=["killed", "reported"])
async def test_out_of_memory_is_never_retried(make_scheduler: Any, pool: asyncpg.Pool, script: str) -> None:
    scheduler = make_scheduler(script=script, max_retries=3)  # retries are there, yet unused
    job = await queued_job(pool)
    await scheduler.admit()
    row = await run_until(scheduler, pool, job, {"failed", "succeeded"})
    assert row["state"] == "failed" and row["error"]["reason"] == "out_of_memory", row["error"]
    for _ in range(5):
        await scheduler.check_running()
        await scheduler.admit()
    async with pool.acquire() as conn:
        attempts = await conn.fetch("SELECT attempt, retried FROM attempts WHERE job_id = $1", job)
    assert [(a["attempt"], a["retried"]) for a in attempts] == [(1, False)]
    assert (await state_of(pool, job))["state"] == "failed"


FAKE_RUNTIME = """#!{python}
# A stand-in for docker/podman (no container engine here): records its arguments, then runs the
# "image" — a script named after it next to this file — with only the environment passed by name.
import json, os, pathlib, sys
here = pathlib.Path(__file__).parent
args = sys.argv[1:]
with (here / "calls.jsonl").open("a") as fh:
    fh.write(json.dumps(args) + "\\n")
if args[0] != "run":
    sys.exit(0)
i, names, mounts, workdir = 1, [], [], None
while args[i].startswith("--"):
    if args[i] == "--rm":
        i += 1
        continue
    flag, value = args[i], args[i + 1]
    i += 2
    if flag == "--env":
        names.append(value)
    elif flag == "--volume":
        mounts.append(value.split(":")[0])
    elif flag == "--workdir":
        workdir = value
image, command = args[i], args[i + 1 :]
assert all(pathlib.Path(m).exists() for m in mounts), mounts
env = {{k: os.environ[k] for k in names if k in os.environ}}
os.chdir(workdir)
entry = here / (image.replace("/", "_").replace(":", "_") + ".py")
os.execve(sys.executable, [sys.executable, str(entry), *command], env)
"""


async def test_a_custom_image_runs_locally_through_a_configured_container_runtime(
    pool: asyncpg.Pool, common_settings: CommonSettings, tmp_path: Path
) -> None:
    bin_dir = tmp_path / "runtime"
    bin_dir.mkdir()
    runtime = bin_dir / "docker"
    runtime.write_text(FAKE_RUNTIME.format(python=sys.executable))
    runtime.chmod(0o755)
    (bin_dir / "example_trainer_1.py").write_text(trainer())  # the image's entrypoint: an SDK trainer
    executor = LocalExecutor(tmp_path / "runs", container_runtime=str(runtime))
    settings = SchedulerSettings(poll_seconds=0.05)
    scheduler = Scheduler(pool, open_store(common_settings), executor, Subjects(common_settings.bus_prefix), settings, common_settings)
    await scheduler.refresh_capacity()
    async with pool.acquire() as conn:
        assert await conn.fetchval("SELECT bool_and(runs_images) FROM accelerator_capacity WHERE executor = 'local'")
        job = await insert_job(conn, state="queued", name="in-a-container", attempt=0, custom_image="example/trainer:1")
    await scheduler.admit()
    done = await run_until(scheduler, pool, job, {"succeeded", "failed"})
    assert done["state"] == "succeeded" and done["epochs_completed"] == 2, done["error"]
    (call,) = [json.loads(line) for line in (bin_dir / "calls.jsonl").read_text().splitlines()]
    assert call[:2] == ["run", "--rm"] and call[-1] == "example/trainer:1"  # the image's own entrypoint
    names = [call[i + 1] for i, arg in enumerate(call) if arg == "--env"]
    assert {"OUTPUT_DIR", "CONFIG_JSON", "FORGE_RESULT_FILE"} <= set(names)
    assert not [arg for arg in call if "hyperparameters" in arg]  # values never on the command line
    async with pool.acquire() as conn:
        attempt = await conn.fetchrow("SELECT * FROM attempts WHERE job_id = $1", job)
    assert f"{attempt['run_ref']}:{attempt['run_ref']}" in call


async def test_without_a_runtime_the_local_executor_refuses_images(tmp_path: Path) -> None:
    executor = LocalExecutor(tmp_path / "runs")
    spec = LaunchSpec(job_id="j", attempt=1, run_ref=str(tmp_path / "runs" / "j" / "1"), command=[], env={}, image="example/trainer:1")
    with pytest.raises(ValueError, match="FORGE_SCHEDULER_CONTAINER_RUNTIME"):
        await executor.launch(spec)


def test_a_containers_gpus_are_handed_over_by_host_id_and_renumbered_inside(tmp_path: Path) -> None:
    from forge_scheduler.executors.local import visibility

    executor = LocalExecutor(tmp_path / "runs", container_runtime="docker")
    spec = LaunchSpec(
        job_id="j",
        attempt=1,
        run_ref=str(tmp_path / "runs" / "j" / "1"),
        command=[],
        env={},
        accelerator="nvidia",
        visible_devices=(1,),
        image="img",
    )
    env = {"OUTPUT_DIR": str(tmp_path / "out"), **visibility("nvidia", (1,), {"CUDA_VISIBLE_DEVICES": "4,5"})}
    command = executor.container_command(spec, env)
    assert command[command.index("--gpus") + 1] == "device=5"  # the scheduler's index 1 is the host's GPU 5
    assert "CUDA_VISIBLE_DEVICES" not in command and "OUTPUT_DIR" in command  # inside, the one GPU is 0
    assert f"{tmp_path / 'out'}:{tmp_path / 'out'}" in command and command[-1] == "img"
