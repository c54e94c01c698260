"""The scheduler's logic: admit queued jobs into free slots, run them, honour stop, and turn a
trainer's exit into the job's final state (with its artifacts announced to the registrar)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg

from forge_common import outbox, telemetry
from forge_common.errors import InvalidTransition
from forge_common.events import (
    ArtifactUploaded,
    ArtifactUploadedData,
    EpochCompleted,
    JobStatusChanged,
    JobStatusChangedData,
)
from forge_common.jobspec import TRAINERS, Task
from forge_common.settings import CommonSettings
from forge_common.states import DEPLOYABLE, JobState
from forge_common.storage import ObjectStore
from forge_common.subjects import Subjects
from forge_sdk import protocol
from forge_sdk.env import TrainerEnv

from . import repository as repo
from .executors.local import ExitStatus, Handle, LaunchSpec, LocalExecutor
from .settings import SchedulerSettings

log = logging.getLogger(__name__)

SOURCE = "/forge/scheduler"
PRODUCER = "scheduler"


# ---- the pure part: how a trainer's exit becomes the job's final state -----------------------


@dataclass(frozen=True)
class Decision:
    state: JobState
    epochs_completed: int
    reason: str | None = None
    message: str | None = None
    hint: str | None = None

    @property
    def error(self) -> dict[str, str] | None:
        if self.state is not JobState.FAILED:
            return None
        return {"reason": self.reason or "trainer_crash", "message": self.message or "", "hint": self.hint or ""}


def decide_outcome(
    *,
    stop_requested: bool,
    exit_status: ExitStatus,
    result: protocol.Outcome | None,
    epochs_completed: int,
    last_error: str | None = None,
) -> Decision:
    """Stop after ≥1 completed epoch → stopped; before → canceled; a clean exit → succeeded;
    anything else → failed with a reason and a hint. The trainer's own outcome wins when present."""
    epochs = max(epochs_completed, result.epochs_completed if result else 0)
    if result is not None:
        if result.state == "failed":
            hint = result.hint or _default_hint(result.reason)
            return Decision(JobState.FAILED, epochs, result.reason or "trainer_crash", result.message, hint)
        if result.state in ("stopped", "canceled"):
            return Decision(JobState.STOPPED if epochs >= 1 else JobState.CANCELED, epochs, message=result.message)
        return Decision(JobState.SUCCEEDED, epochs)
    code = exit_status.returncode
    if stop_requested:
        # the trainer did not say how it ended (no SDK, or killed at the deadline)
        return Decision(JobState.STOPPED if epochs >= 1 else JobState.CANCELED, epochs)
    if code == 0:
        return Decision(JobState.SUCCEEDED, epochs)
    if exit_status.error:
        return Decision(JobState.FAILED, epochs, "trainer_crash", exit_status.error, "check the trainer command and image")
    if exit_status.lost:
        return Decision(
            JobState.FAILED,
            epochs,
            "interrupted",
            "the trainer and its launcher were killed (the platform or the machine went down)",
            "its checkpoints are kept: resume it or submit it again",
        )
    if code in (137, -signal.SIGKILL) or exit_status.signal == signal.SIGKILL:
        return Decision(
            JobState.FAILED,
            epochs,
            "out_of_memory",
            "the trainer was killed (SIGKILL), most likely by the out-of-memory killer",
            _default_hint("out_of_memory"),
        )
    if code is not None and code < 0:
        what = f"the trainer was killed by {signal.Signals(-code).name}"
    else:
        what = f"the trainer exited with code {code}"
    message = f"{what}: {last_error}" if last_error else what
    return Decision(JobState.FAILED, epochs, "trainer_crash", message, _default_hint("trainer_crash"))


def _default_hint(reason: str | None) -> str:
    return {
        "out_of_memory": "use a smaller batch or image size",
        "bad_config": "fix the job's configuration and submit it again",
        "dataset_error": "check the dataset version's validation report",
        "device_unavailable": "pick an accelerator this installation offers",
    }.get(reason or "", "see the job's logs for the traceback")


# ---- the scheduler -------------------------------------------------------------------------------


class Scheduler:
    def __init__(
        self,
        pool: asyncpg.Pool,
        store: ObjectStore,
        executor: LocalExecutor,
        subjects: Subjects,
        settings: SchedulerSettings,
        common: CommonSettings,
    ) -> None:
        self.pool = pool
        self.store = store
        self.executor = executor
        self.subjects = subjects
        self.settings = settings
        self.common = common
        self.handles: dict[tuple[uuid.UUID, int], Handle] = {}
        self._admit_lock = asyncio.Lock()

    def slots(self, accelerator: str) -> int:
        return self.settings.cpu_slots if accelerator == "cpu" else 0

    async def _status(self, conn: asyncpg.Connection, job: asyncpg.Record, previous: JobState | None, **extra: Any) -> None:
        data = JobStatusChangedData(
            job_id=job["id"],
            name=job["name"],
            state=JobState(job["state"]),
            previous_state=previous,
            attempt=job["attempt"],
            epochs_completed=job["epochs_completed"],
            progress=job["progress"],
            **extra,
        )
        event = JobStatusChanged.of(data, source=SOURCE, traceparent=telemetry.current_traceparent() or job["traceparent"])
        await outbox.add(conn, self.subjects, event, producer=PRODUCER)

    # -- admission ---------------------------------------------------------------------------

    async def admit(self) -> list[uuid.UUID]:
        """Start as many queued jobs as there are free slots; returns the jobs started."""
        async with self._admit_lock:
            started: list[tuple[asyncpg.Record, Path]] = []
            async with self.pool.acquire() as conn, conn.transaction():
                await repo.lock_admission(conn)
                for accelerator in await repo.queued_accelerators(conn):
                    free = self.slots(accelerator) - await repo.count_running(conn, accelerator)
                    if free <= 0:
                        continue
                    for job in await repo.next_queued(conn, accelerator, free):
                        started.append(await self._start(conn, job))
            for job, run_dir in started:
                await self._launch(job, run_dir)
            return [job["id"] for job, _ in started]

    async def _start(self, conn: asyncpg.Connection, job: asyncpg.Record) -> tuple[asyncpg.Record, Path]:
        attempt = job["attempt"] + 1
        run_dir = self.executor.prepare(str(job["id"]), attempt)
        output_uri = self.store.uri(f"jobs/{job['id']}/{attempt}")
        with telemetry.span("scheduler.admit", traceparent=job["traceparent"], job_id=job["id"]):
            row = await repo.transition(
                conn,
                job["id"],
                JobState.RUNNING,
                attempt=attempt,
                started_at=datetime.now(UTC),
                output_uri=output_uri,
                epochs_completed=0,
                progress=0.0,
            )
            log_uri = self.executor.log_uri(run_dir)
            await repo.insert_attempt(
                conn,
                job_id=job["id"],
                attempt=attempt,
                executor=self.executor.name,
                run_dir=str(run_dir),
                log_uri=log_uri,
                output_uri=output_uri,
            )
            await self._status(conn, row, JobState.QUEUED, executor=self.executor.name, log_uri=log_uri, output_uri=output_uri)
        return row, run_dir

    def command_for(self, job: asyncpg.Record) -> list[str]:
        """The trainer to run for a job: the built-in trainer of its task."""
        return [self.settings.trainer_python, "-m", TRAINERS[Task(job["task"])]]

    def _trainer_env(self, job: asyncpg.Record, run_dir: Path, input_uri: str | None) -> dict[str, str]:
        spec = job["spec"]
        config = {**spec, "job_id": str(job["id"]), "attempt": job["attempt"]}
        env = TrainerEnv(
            output_dir=job["output_uri"],
            config=config,
            input_uri=input_uri,
            artifact_id=job["name"],
            s3=self.store.s3,
            job_id=str(job["id"]),
            attempt=job["attempt"],
            traceparent=job["traceparent"],
        )
        # The trainer gets what its job needs and none of the services' settings or secrets.
        base = {k: v for k, v in os.environ.items() if not k.startswith(("FORGE_", "S3_"))}
        return {**base, "PYTHONUNBUFFERED": "1", **env.to_environ(), **self.executor.trainer_env(run_dir)}

    async def _launch(self, job: asyncpg.Record, run_dir: Path) -> None:
        async with self.pool.acquire() as conn:
            input_uri = await conn.fetchval("SELECT uri FROM dataset_versions WHERE id = $1", job["dataset_version_id"])
        spec = LaunchSpec(
            job_id=str(job["id"]),
            attempt=job["attempt"],
            command=self.command_for(job),
            env=self._trainer_env(job, run_dir, input_uri),
            run_dir=run_dir,
        )
        try:
            handle = await asyncio.to_thread(self.executor.launch, spec)
        except OSError as exc:
            log.error("job %s: cannot start the trainer: %s", job["id"], exc)
            await self.finalize(job["id"], job["attempt"], ExitStatus(returncode=127, error=f"cannot start the trainer: {exc}"), run_dir)
            return
        self.handles[(job["id"], job["attempt"])] = handle
        async with self.pool.acquire() as conn:
            attempt = await repo.set_handle(conn, job["id"], job["attempt"], handle.pid, handle.pid_started)
        log.info("job %s attempt %d: trainer started (pid %d)", job["id"], job["attempt"], handle.pid)
        if attempt["stop_requested_at"] is not None:  # Stop arrived while we were launching
            self.executor.terminate(handle)

    # -- stop --------------------------------------------------------------------------------

    async def request_stop(self, job_id: uuid.UUID) -> None:
        """Queued → canceled at once; running → SIGTERM now, SIGKILL after the grace period."""
        async with self.pool.acquire() as conn, conn.transaction():
            job = await repo.get_job(conn, job_id)
            if job is None or job["state"] not in (JobState.QUEUED, JobState.RUNNING):
                return
            if job["state"] == JobState.QUEUED:
                try:
                    row = await repo.transition(conn, job_id, JobState.CANCELED, finished_at=datetime.now(UTC))
                except InvalidTransition:
                    job = await repo.get_job(conn, job_id)  # admitted meanwhile: stop it as running
                else:
                    await self._status(conn, row, JobState.QUEUED, message="canceled while queued")
                    return
            assert job is not None
            if job["state"] != JobState.RUNNING:
                return
            kill_after = datetime.now(UTC) + timedelta(seconds=self.settings.stop_grace_seconds)
            attempt = await repo.mark_stop(conn, job_id, job["attempt"], kill_after)
        if attempt is not None and attempt["pid"] is not None:
            handle = self.handles.get((job_id, attempt["attempt"])) or Handle(attempt["pid"], attempt["pid_started"] or 0)
            sent = self.executor.terminate(handle)
            log.info("job %s: stop requested, SIGTERM %s", job_id, "sent" if sent else "not needed (already exited)")

    # -- progress ----------------------------------------------------------------------------

    async def record_epoch(self, event: EpochCompleted) -> None:
        d = event.data
        async with self.pool.acquire() as conn:
            await repo.record_epoch(
                conn, d.job_id, d.attempt, epoch=d.epoch, total_epochs=d.total_epochs, metrics=d.metrics, is_best=d.is_best
            )

    # -- exits -------------------------------------------------------------------------------

    async def check_running(self) -> int:
        """One monitor pass: finish attempts whose trainer ended, kill those past their deadline."""
        finished = 0
        async with self.pool.acquire() as conn:
            attempts = await repo.open_attempts(conn, self.executor.name)
        now = datetime.now(UTC)
        for a in attempts:
            key = (a["job_id"], a["attempt"])
            run_dir = Path(a["run_dir"])
            handle = self.handles.get(key)
            if handle is None and a["pid"] is not None:
                handle = self.handles[key] = Handle(a["pid"], a["pid_started"] or 0)
            if handle is None and not (run_dir / "exit.json").exists():
                continue  # being launched right now
            status = self.executor.poll(handle, run_dir)
            if status is None:
                if a["kill_after"] is not None and now >= a["kill_after"] and handle is not None:
                    log.warning("job %s: stop deadline passed, killing the trainer", a["job_id"])
                    self.executor.kill(handle)
                continue
            await self.finalize(a["job_id"], a["attempt"], status, run_dir)
            finished += 1
        if finished:
            await self.admit()
        return finished

    async def finalize(self, job_id: uuid.UUID, attempt_no: int, status: ExitStatus, run_dir: Path) -> JobState | None:
        result = self.executor.read_result(run_dir)
        async with self.pool.acquire() as conn, conn.transaction():
            job = await repo.get_job(conn, job_id)
            attempt = await repo.get_attempt(conn, job_id, attempt_no)
            if job is None or attempt is None or attempt["finished_at"] is not None:
                return None
            decision = decide_outcome(
                stop_requested=attempt["stop_requested_at"] is not None,
                exit_status=status,
                result=result,
                epochs_completed=job["epochs_completed"],
                last_error=self.executor.last_error(run_dir),
            )
            await repo.finish_attempt(conn, job_id, attempt_no, exit_code=status.returncode, outcome=decision.state.value)
            with telemetry.span("scheduler.finish", traceparent=job["traceparent"], job_id=job_id, state=decision.state.value):
                columns: dict[str, Any] = {
                    "finished_at": datetime.now(UTC),
                    "epochs_completed": decision.epochs_completed,
                    "error": decision.error,
                }
                if decision.state is JobState.SUCCEEDED:
                    columns["progress"] = 1.0
                if result is not None and result.best_metrics:
                    columns["best_metrics"] = result.best_metrics
                try:
                    row = await repo.transition(conn, job_id, decision.state, **columns)
                except InvalidTransition:
                    return None  # another replica finished it
                await self._status(
                    conn,
                    row,
                    JobState.RUNNING,
                    reason=decision.reason,
                    message=decision.message,
                    hint=decision.hint,
                    executor=attempt["executor"],
                    log_uri=attempt["log_uri"],
                    output_uri=attempt["output_uri"],
                )
                if decision.state in DEPLOYABLE:
                    event = ArtifactUploaded.of(
                        ArtifactUploadedData(
                            job_id=job_id,
                            attempt=attempt_no,
                            artifact_id=job["name"],
                            uri=attempt["output_uri"],
                            outcome=decision.state,
                            registration=job["spec"].get("registration", "auto"),
                        ),
                        source=SOURCE,
                        traceparent=telemetry.current_traceparent() or job["traceparent"],
                    )
                    await outbox.add(conn, self.subjects, event, producer=PRODUCER)
        self.handles.pop((job_id, attempt_no), None)
        if decision.state is JobState.CANCELED:
            prefix = self.store.key_of(attempt["output_uri"])
            if prefix is not None:
                removed = await self.store.delete_prefix(prefix)
                log.info("job %s canceled: removed %d output object(s)", job_id, removed)
        if not self.settings.keep_work_dir:
            self.executor.cleanup(run_dir)
        log.info("job %s attempt %d: %s%s", job_id, attempt_no, decision.state.value, f" ({decision.reason})" if decision.reason else "")
        return decision.state

    async def run_monitor(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.check_running()
            except Exception:
                log.exception("monitor pass failed")
            try:
                await asyncio.wait_for(stop.wait(), self.settings.poll_seconds)
            except TimeoutError:
                pass
