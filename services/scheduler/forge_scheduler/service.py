"""The scheduler's logic: admit queued jobs into free slots by priority, run them on an executor,
honour stop and time limits, retry what the infrastructure broke, resume on request, and turn a
trainer's exit into the job's final state (with its artifacts announced to the registrar)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import uuid
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg

from forge_common import db, outbox, telemetry
from forge_common.accelerators import PROFILES, slots_needed
from forge_common.errors import InvalidTransition
from forge_common.events import (
    ArtifactUploaded,
    ArtifactUploadedData,
    EpochCompleted,
    JobStatusChanged,
    JobStatusChangedData,
    LogLine,
    LogLines,
    LogLinesData,
)
from forge_common.jobspec import TRAINERS, Task
from forge_common.runtime import wait_event
from forge_common.settings import CommonSettings
from forge_common.states import DEPLOYABLE, RESUMABLE, JobState
from forge_common.storage import ObjectStore
from forge_common.subjects import Subjects
from forge_sdk import protocol
from forge_sdk.env import TrainerEnv

from . import repository as repo
from .executors.base import Capacity, Executor, ExitStatus, Handle, LaunchSpec
from .settings import SchedulerSettings

log = logging.getLogger(__name__)

SOURCE = "/forge/scheduler"
PRODUCER = "scheduler"
# Failures of the platform, not of the training: worth another attempt (from the last checkpoint).
RETRYABLE = frozenset({"interrupted", "node_lost", "launch_failed"})


# What a trainer process inherits from the scheduler's environment (local executor).
PROCESS_ENV = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LANG",
        "LC_ALL",
        "TZ",
        "TMPDIR",
        "PYTHONPATH",
        "VIRTUAL_ENV",
        "LD_LIBRARY_PATH",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "SSL_CERT_FILE",
        "REQUESTS_CA_BUNDLE",
    }
)
# Accelerator runtimes, and the model libraries' caches and offline switches.
DEVICE_ENV_PREFIXES = ("CUDA_", "NVIDIA_", "ROCR_", "HIP_", "HSA_", "ZE_", "ONEAPI_", "SYCL_", "HF_", "TRANSFORMERS_", "TORCH_", "PYTORCH_")


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


HINTS = {
    "out_of_memory": "use a smaller batch or image size",
    "bad_config": "fix the job's configuration and submit it again",
    "dataset_error": "check the dataset version's validation report",
    "device_unavailable": "pick an accelerator this installation offers",
    "image_pull": "check the trainer image name and the registry credentials (image-pull Secret)",
    "unschedulable": "no node can take this job's resources now; pick another profile or ask for fewer devices",
    "deadline_exceeded": "raise the job's time_limit_seconds, or train for fewer epochs",
    "interrupted": "its checkpoints are kept: resume it",
    "launch_failed": "the executor could not start the trainer; check the scheduler's log and the cluster, then resume it",
}


def plain(uri: str | None) -> str | None:
    """Local locations reach trainers as plain folder paths (friendlier to scripts without the SDK)."""
    if uri and uri.startswith("file://"):
        from urllib.parse import unquote, urlparse

        return unquote(urlparse(uri).path)
    return uri


def hint_for(reason: str | None) -> str:
    return HINTS.get(reason or "", "see the job's logs for the traceback")


def decide_outcome(
    *,
    stop_requested: bool,
    exit_status: ExitStatus,
    result: protocol.Outcome | None,
    epochs_completed: int,
    last_error: str | None = None,
) -> Decision:
    """Stop after ≥1 completed epoch → stopped; before → canceled; a clean exit → succeeded;
    anything else → failed with a reason and a hint. The trainer's own outcome wins when present,
    except over what the executor knows for certain (a deadline, an OOM kill)."""
    epochs = max(epochs_completed, result.epochs_completed if result else 0)
    if exit_status.reason == "node_lost" and not stop_requested:
        # an eviction or preemption sends SIGTERM too: the trainer's "stopped" is not the user's
        return Decision(JobState.FAILED, epochs, "node_lost", exit_status.error or "the trainer's node went away", hint_for("interrupted"))
    if exit_status.reason == "deadline_exceeded" and not stop_requested:
        return Decision(JobState.FAILED, epochs, "deadline_exceeded", "the job ran past its time limit", hint_for("deadline_exceeded"))
    if result is not None:
        if result.state == "failed":
            return Decision(
                JobState.FAILED, epochs, result.reason or "trainer_crash", result.message, result.hint or hint_for(result.reason)
            )
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
        reason = exit_status.reason or "trainer_crash"
        return Decision(
            JobState.FAILED,
            epochs,
            reason,
            exit_status.error,
            hint_for(reason) if exit_status.reason else "check the trainer command and image",
        )
    if exit_status.reason in ("image_pull", "unschedulable", "node_lost", "launch_failed"):
        return Decision(
            JobState.FAILED, epochs, exit_status.reason, last_error or exit_status.reason.replace("_", " "), hint_for(exit_status.reason)
        )
    if exit_status.lost:
        return Decision(
            JobState.FAILED,
            epochs,
            "interrupted",
            "the trainer and its launcher were killed (the platform or the machine went down)",
            hint_for("interrupted"),
        )
    if exit_status.reason == "out_of_memory" or code in (137, -signal.SIGKILL) or exit_status.signal == signal.SIGKILL:
        return Decision(
            JobState.FAILED,
            epochs,
            "out_of_memory",
            "the trainer was killed (SIGKILL / OOMKilled), most likely for using more memory than it may",
            hint_for("out_of_memory"),
        )
    if code is not None and code < 0:
        what = f"the trainer was killed by {signal.Signals(-code).name}"
    else:
        what = f"the trainer exited with code {code}"
    message = f"{what}: {last_error}" if last_error else what
    return Decision(JobState.FAILED, epochs, "trainer_crash", message, hint_for("trainer_crash"))


# ---- the scheduler -------------------------------------------------------------------------------


class Scheduler:
    def __init__(
        self,
        pool: asyncpg.Pool,
        store: ObjectStore,
        executor: Executor,
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
        self.capacity: dict[str, Capacity] = {}
        self._admit_lock = asyncio.Lock()

    # -- capacity ------------------------------------------------------------------------------

    async def refresh_capacity(self) -> dict[str, Capacity]:
        """Ask the executor what it can offer and publish it for the api (GET /v1/accelerators)."""
        found = await self.executor.capacity()
        self.capacity = {c.profile: c for c in found if c.profile in PROFILES}
        async with self.pool.acquire() as conn:
            await repo.save_capacity(conn, self.executor.name, list(self.capacity.values()), runs_images=self.executor.runs_images)
        return self.capacity

    def slots(self, profile: str) -> int:
        cap = self.capacity.get(profile)
        return cap.total if cap else 0

    def per_job(self, profile: str) -> int:
        """The most devices one attempt can get now: one node's worth (what the executor saw at
        its last capacity refresh)."""
        cap = self.capacity.get(profile)
        if cap is None:
            return 0
        most = cap.total if cap.per_job is None else cap.per_job
        return most if cap.per_job_now is None else min(most, cap.per_job_now)

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
        """Start as many queued jobs as there are free slots, highest priority first, then first
        come first served. Each decision reads the head of an index: its cost does not grow with
        the queue. Returns the jobs started."""
        if not self.capacity:
            await self.refresh_capacity()
        async with self._admit_lock:
            started: list[asyncpg.Record] = []
            async with self.pool.acquire() as conn, conn.transaction():
                await repo.lock_admission(conn)
                for profile in self.capacity:
                    free = self.slots(profile) - await db.slots_in_use(conn, profile)
                    while free > 0:
                        job = await repo.head_of_queue(conn, profile)
                        if job is None:
                            break
                        need = slots_needed(profile, job["spec"])
                        if need > free or need > self.per_job(profile):
                            break  # the head waits for enough devices (on one node): no one overtakes it
                        devices = await self._pick_devices(conn, job, need)
                        if devices is None:
                            break  # the free indices disagree with the count (a run from before indices were recorded)
                        started.append(await self._start(conn, job, devices))
                        free -= need
            for job in started:
                try:
                    await self._launch(job)
                except Exception as exc:  # one job's launch never strands the others
                    log.exception("job %s: launching failed", job["id"])
                    await self.finalize(
                        job["id"],
                        job["attempt"],
                        ExitStatus(returncode=127, error=f"cannot start the trainer: {exc}", reason="launch_failed", never_started=True),
                        Handle(""),
                    )
            return [job["id"] for job in started]

    async def _start(self, conn: asyncpg.Connection, job: asyncpg.Record, devices: list[int]) -> asyncpg.Record:
        attempt = job["attempt"] + 1
        run_ref = self.executor.run_ref(str(job["id"]), attempt)
        output_uri = self.store.uri(f"jobs/{job['id']}/{attempt}")
        time_limit = job["spec"].get("time_limit_seconds")
        with telemetry.span("scheduler.admit", traceparent=job["traceparent"], job_id=job["id"]):
            row = await repo.transition(
                conn,
                job["id"],
                JobState.RUNNING,
                from_states=[JobState.QUEUED],
                attempt=attempt,
                started_at=datetime.now(UTC),
                finished_at=None,
                output_uri=output_uri,
                epochs_completed=0,
                progress=0.0,
                error=None,
            )
            log_uri = self.executor.log_uri(run_ref)
            await repo.insert_attempt(
                conn,
                job_id=job["id"],
                attempt=attempt,
                executor=self.executor.name,
                run_ref=run_ref,
                log_uri=log_uri,
                output_uri=output_uri,
                resume_from=job["resume_from"],
                accelerator=job["accelerator"],
                deadline_at=datetime.now(UTC) + timedelta(seconds=time_limit) if time_limit else None,
                devices=",".join(map(str, devices)) if devices else None,
            )
            await self._status(conn, row, JobState.QUEUED, executor=self.executor.name, log_uri=log_uri, output_uri=output_uri)
        return row

    async def _pick_devices(self, conn: asyncpg.Connection, job: asyncpg.Record, need: int) -> list[int] | None:
        """Which of this machine's GPUs a local attempt gets: the lowest free ones, or None when
        fewer are free than it needs (it must never run unconfined, seeing every GPU). On
        Kubernetes the device plugin picks: nothing to record."""
        profile = job["accelerator"]
        if self.executor.name != "local" or profile == "cpu":
            return []
        held = await repo.devices_in_use(conn, self.executor.name, profile)
        if held is None:
            return None
        free = [i for i in range(self.slots(profile)) if i not in held]
        return free[:need] if len(free) >= need else None

    def command_for(self, job: asyncpg.Record) -> list[str]:
        """The trainer to run for a job: the built-in trainer of its task, the SDK's runner for a
        custom script, or (empty) the custom image's own command."""
        spec = job["spec"]
        if spec.get("custom_image"):
            return []
        python = self.settings.trainer_python if self.executor.name == "local" else "python"
        if spec.get("custom_script"):
            return [python, "-m", "forge_sdk.script"]
        return [python, "-m", TRAINERS[Task(job["task"])]]

    def _trainer_env(self, job: asyncpg.Record, run_ref: str, input_uri: str | None, resume_from: str | None) -> dict[str, str]:
        spec = job["spec"]
        config = {**spec, "job_id": str(job["id"]), "attempt": job["attempt"]}
        env = TrainerEnv(
            output_dir=plain(job["output_uri"]),
            config=config,
            input_uri=plain(input_uri),
            artifact_id=job["name"],
            s3=self.store.s3,
            resume_from=plain(resume_from),
            job_id=str(job["id"]),
            attempt=job["attempt"],
            traceparent=job["traceparent"],
        )
        trainer = {**env.to_environ(), **self.executor.trainer_env(run_ref)}
        if self.executor.name != "local":
            # object-storage keys reach pods from a Kubernetes Secret, never inline
            trainer.pop("S3_ACCESS_KEY", None)
            trainer.pop("S3_SECRET_KEY", None)
        if script := spec.get("custom_script"):
            trainer.update(FORGE_SCRIPT_URI=script["stored_uri"], FORGE_SCRIPT_SHA256=script["sha256"])
        if self.executor.name != "local":
            return trainer
        # The trainer gets what its job needs and what a process needs to run — an allowlist, so
        # none of the services' settings or credentials (database, cloud, tokens) leak into it.
        base = {k: v for k, v in os.environ.items() if k in PROCESS_ENV or k.startswith(DEVICE_ENV_PREFIXES)}
        return {**base, "PYTHONUNBUFFERED": "1", **trainer}

    async def _launch(self, job: asyncpg.Record) -> None:
        async with self.pool.acquire() as conn:
            input_uri = await conn.fetchval("SELECT uri FROM dataset_versions WHERE id = $1", job["dataset_version_id"])
            attempt = await repo.get_attempt(conn, job["id"], job["attempt"])
        assert attempt is not None
        spec = LaunchSpec(
            job_id=str(job["id"]),
            attempt=job["attempt"],
            run_ref=attempt["run_ref"],
            command=self.command_for(job),
            env=self._trainer_env(job, attempt["run_ref"], input_uri or job["spec"]["dataset"].get("uri"), attempt["resume_from"]),
            accelerator=job["accelerator"],
            devices=int(job["spec"].get("devices", 1)),
            visible_devices=tuple(int(i) for i in (attempt["devices"] or "").split(",") if i),
            image=job["spec"].get("custom_image"),
            image_pull_secret=job["spec"].get("image_pull_secret"),
            time_limit_seconds=job["spec"].get("time_limit_seconds"),
            stop_grace_seconds=self.settings.stop_grace_seconds,
            labels={"forge.job-id": str(job["id"]), "forge.attempt": str(job["attempt"])},
        )
        try:
            handle = await self.executor.launch(spec)
        except Exception as exc:
            log.error("job %s: cannot start the trainer: %s", job["id"], exc)
            await self.finalize(
                job["id"],
                job["attempt"],
                ExitStatus(returncode=127, error=f"cannot start the trainer: {exc}", never_started=True),
                Handle(attempt["run_ref"]),
            )
            return
        self.handles[(job["id"], job["attempt"])] = handle
        async with self.pool.acquire() as conn:
            attempt = await repo.set_handle(conn, job["id"], job["attempt"], handle.pid, handle.pid_started)
        log.info("job %s attempt %d: trainer started (%s)", job["id"], job["attempt"], handle.run_ref)
        if attempt["stop_requested_at"] is not None:  # Stop arrived while we were launching
            await self.executor.terminate(handle, self.settings.stop_grace_seconds)

    # -- stop and resume ---------------------------------------------------------------------

    async def request_stop(self, job_id: uuid.UUID) -> None:
        """Queued → canceled at once; running → SIGTERM now, SIGKILL after the grace period."""
        async with self.pool.acquire() as conn, conn.transaction():
            job = await repo.get_job(conn, job_id)
            if job is None or job["state"] not in (JobState.QUEUED, JobState.RUNNING):
                return
            if job["state"] == JobState.QUEUED:
                try:
                    row = await repo.transition(
                        conn, job_id, JobState.CANCELED, from_states=[JobState.QUEUED], finished_at=datetime.now(UTC)
                    )
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
        if attempt is not None and (attempt["pid"] is not None or self.executor.name != "local"):
            handle = self._handle(attempt)
            sent = await self.executor.terminate(handle, self.settings.stop_grace_seconds)
            log.info("job %s: stop requested, SIGTERM %s", job_id, "sent" if sent else "not needed (already exited)")

    async def resume(self, job_id: uuid.UUID) -> bool:
        """A stopped or failed job gets a new attempt from its last checkpoint."""
        resume_from = await self._last_checkpoint(job_id)
        async with self.pool.acquire() as conn, conn.transaction():
            job = await repo.get_job(conn, job_id)
            if job is None or job["state"] not in RESUMABLE:
                return False
            previous = JobState(job["state"])
            row = await repo.transition(
                conn,
                job_id,
                JobState.QUEUED,
                from_states=list(RESUMABLE),
                queued_at=datetime.now(UTC),
                resume_from=resume_from,
                error=None,
                stop_requested_at=None,  # the earlier Stop was honoured; the new attempt runs until stopped again
            )
            await self._status(
                conn, row, previous, message=f"resuming from {resume_from}" if resume_from else "no checkpoint: starting over"
            )
        await self.admit()
        return True

    async def _last_checkpoint(self, job_id: uuid.UUID) -> str | None:
        """The output of the latest attempt that left checkpoints."""
        async with self.pool.acquire() as conn:
            outputs = await repo.attempt_outputs(conn, job_id)
        for uri in outputs:
            key = self.store.key_of(uri)
            if key is not None and await self.store.list(f"{key}/checkpoints"):
                return uri
        return None

    # -- progress ----------------------------------------------------------------------------

    async def record_epoch(self, event: EpochCompleted) -> None:
        d = event.data
        async with self.pool.acquire() as conn:
            await repo.record_epoch(
                conn, d.job_id, d.attempt, epoch=d.epoch, total_epochs=d.total_epochs, metrics=d.metrics, is_best=d.is_best
            )

    # -- exits -------------------------------------------------------------------------------

    def _handle(self, attempt: asyncpg.Record) -> Handle:
        key = (attempt["job_id"], attempt["attempt"])
        if key not in self.handles:
            self.handles[key] = Handle(attempt["run_ref"], attempt["pid"], attempt["pid_started"])
        return self.handles[key]

    async def check_running(self) -> int:
        """One monitor pass: finish attempts whose trainer ended, enforce stop deadlines and time
        limits, record why pending attempts wait."""
        finished = 0
        async with self.pool.acquire() as conn:
            attempts = await repo.open_attempts(conn, self.executor.name)
        now = datetime.now(UTC)
        for a in attempts:
            try:
                finished += await self._check_attempt(a, now)
            except Exception:
                log.exception("job %s attempt %d: checking it failed; trying again on the next pass", a["job_id"], a["attempt"])
        if finished:
            await self.admit()
        return finished

    async def _check_attempt(self, a: asyncpg.Record, now: datetime) -> int:
        """Finish the attempt if its trainer ended (1), else enforce its deadlines (0)."""
        if a["pid"] is None and self.executor.name == "local" and (a["job_id"], a["attempt"]) not in self.handles:
            if not await self._launched_elsewhere(a):
                return 0  # being launched right now
        handle = self._handle(a)
        status = await self.executor.poll(handle)
        if status is None:
            if a["kill_after"] is not None and now >= a["kill_after"]:
                log.warning("job %s: stop deadline passed, killing the trainer", a["job_id"])
                await self.executor.kill(handle)
            elif a["deadline_at"] is not None and now >= a["deadline_at"]:
                log.warning("job %s: time limit reached, killing the trainer", a["job_id"])
                await self.executor.kill(handle)
            else:
                reason = await self.executor.pending_reason(handle)
                if reason != a["pending_reason"]:
                    async with self.pool.acquire() as conn:
                        await repo.set_pending_reason(conn, a["job_id"], a["attempt"], reason)
            return 0  # a killed trainer's exit is read on the next pass
        return 1 if await self.finalize(a["job_id"], a["attempt"], status, handle) is not None else 0

    async def _executor_notes(
        self, conn: asyncpg.Connection, job: asyncpg.Record, attempt: asyncpg.Record, status: ExitStatus, decision: Decision
    ) -> None:
        """A trainer that never started has no output: its log is the executor's account — what it
        waited for and why it gave up — stored and streamed like output (and its end, so followers
        stop waiting)."""
        notes = [f"[forge] the trainer never started: {status.error or decision.message}"]
        if attempt["pending_reason"]:
            notes.insert(0, f"[forge] it was waiting: {attempt['pending_reason']}")
        if decision.hint:
            notes.append(f"[forge] hint: {decision.hint}")
        now = datetime.now(UTC)
        lines = [LogLine(line_no=i, ts=now, text=text) for i, text in enumerate(notes, start=1)]
        if await repo.add_executor_notes(conn, job["id"], attempt["attempt"], lines):
            event = LogLines.of(
                LogLinesData(job_id=job["id"], attempt=attempt["attempt"], lines=lines, eof=True),
                source=SOURCE,
                traceparent=job["traceparent"],
            )
            await outbox.add(conn, self.subjects, event, producer=PRODUCER)

    async def _launched_elsewhere(self, attempt: asyncpg.Record) -> bool:
        """An attempt without a pid is either being launched right now or its launch was lost."""
        return (Path(attempt["run_ref"]) / "exit.json").exists() or (datetime.now(UTC) - attempt["started_at"]).total_seconds() > 60

    async def finalize(self, job_id: uuid.UUID, attempt_no: int, status: ExitStatus, handle: Handle) -> JobState | None:
        result = await self.executor.read_result(handle)
        last_error = await self.executor.last_error(handle)
        checkpoint = await self._last_checkpoint(job_id)  # where a retry would resume from
        retry = False
        async with self.pool.acquire() as conn, conn.transaction():
            # the attempt row is locked: of several replicas watching it, one finishes it
            attempt = await repo.get_attempt(conn, job_id, attempt_no, lock=True)
            job = await repo.get_job(conn, job_id)
            if job is None or attempt is None or attempt["finished_at"] is not None or job["attempt"] != attempt_no:
                return None
            if attempt["deadline_at"] is not None and datetime.now(UTC) >= attempt["deadline_at"] and status.returncode != 0:
                status = replace(status, reason="deadline_exceeded")
            decision = decide_outcome(
                stop_requested=attempt["stop_requested_at"] is not None,
                exit_status=status,
                result=result,
                epochs_completed=job["epochs_completed"],
                last_error=last_error,
            )
            retries_used = await repo.count_retries(conn, job_id)
            retry = decision.reason in RETRYABLE and retries_used < self.settings.max_retries
            await repo.finish_attempt(conn, job_id, attempt_no, exit_code=status.returncode, outcome=decision.state.value, retried=retry)
            if status.never_started:
                await self._executor_notes(conn, job, attempt, status, decision)
            with telemetry.span("scheduler.finish", traceparent=job["traceparent"], job_id=job_id, state=decision.state.value):
                if retry:
                    row = await repo.transition(
                        conn, job_id, JobState.QUEUED, from_states=[JobState.RUNNING], queued_at=datetime.now(UTC), resume_from=checkpoint
                    )
                    whence = "from the last checkpoint" if checkpoint else "from the start (no checkpoint yet)"
                    await self._status(
                        conn,
                        row,
                        JobState.RUNNING,
                        reason=decision.reason,
                        message=f"{decision.message}; retrying {whence} ({retries_used + 1}/{self.settings.max_retries})",
                        log_uri=attempt["log_uri"],
                    )
                else:
                    await self._end(conn, job, attempt, decision, result)
        self.handles.pop((job_id, attempt_no), None)
        if not retry and decision.state is JobState.CANCELED:
            prefix = self.store.key_of(attempt["output_uri"])
            if prefix is not None:
                removed = await self.store.delete_prefix(prefix)
                log.info("job %s canceled: removed %d output object(s)", job_id, removed)
        if not self.settings.keep_work_dir:
            await self.executor.cleanup(handle)
        log.info(
            "job %s attempt %d: %s%s%s",
            job_id,
            attempt_no,
            decision.state.value,
            f" ({decision.reason})" if decision.reason else "",
            ", retrying" if retry else "",
        )
        return JobState.QUEUED if retry else decision.state

    async def _end(
        self, conn: asyncpg.Connection, job: asyncpg.Record, attempt: asyncpg.Record, decision: Decision, result: protocol.Outcome | None
    ) -> None:
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
            row = await repo.transition(conn, job["id"], decision.state, from_states=[JobState.RUNNING], **columns)
        except InvalidTransition:
            return  # another replica finished it
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
                    job_id=job["id"],
                    attempt=attempt["attempt"],
                    artifact_id=job["name"],
                    uri=attempt["output_uri"],
                    outcome=decision.state,
                    registration=job["spec"].get("registration", "auto"),
                ),
                source=SOURCE,
                traceparent=telemetry.current_traceparent() or job["traceparent"],
            )
            await outbox.add(conn, self.subjects, event, producer=PRODUCER)

    async def run_monitor(self, stop: asyncio.Event) -> None:
        last_capacity = 0.0
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            try:
                if loop.time() - last_capacity > self.settings.capacity_refresh_seconds:
                    await self.refresh_capacity()
                    last_capacity = loop.time()
                await self.check_running()
            except Exception:
                log.exception("monitor pass failed")
            await wait_event(stop, self.settings.poll_seconds)
