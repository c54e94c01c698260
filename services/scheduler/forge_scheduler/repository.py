"""The scheduler's SQL. It owns job state after queued, attempts, and the run columns of jobs."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import asyncpg

from forge_common.errors import InvalidTransition
from forge_common.events import LogLine
from forge_common.states import JobState, check_transition

ADMISSION_LOCK = 7_240_551_002

_JOB_COLUMNS = frozenset(
    {
        "queued_at",
        "resume_from",
        "started_at",
        "finished_at",
        "attempt",
        "total_epochs",
        "epochs_completed",
        "progress",
        "best_metrics",
        "error",
        "output_uri",
        "stop_requested_at",
    }
)


async def get_job(conn: asyncpg.Connection, job_id: uuid.UUID) -> asyncpg.Record | None:
    return await conn.fetchrow("SELECT * FROM jobs WHERE id = $1", job_id)


async def transition(
    conn: asyncpg.Connection, job_id: uuid.UUID, target: JobState, *, from_states: list[JobState], **columns: Any
) -> asyncpg.Record:
    """Compare-and-set the job from one of ``from_states`` into ``target`` (each move must be in
    the state table); raises ``InvalidTransition`` when the job is elsewhere (or another replica
    moved it first)."""
    unknown = set(columns) - _JOB_COLUMNS
    if unknown:
        raise ValueError(f"not a scheduler-owned column: {sorted(unknown)}")
    for state in from_states:
        check_transition(state, target)
    sets = ["state = $2", "updated_at = now()"]
    args: list[Any] = [job_id, target.value, [s.value for s in from_states]]
    for name, value in columns.items():
        args.append(value)
        sets.append(f"{name} = ${len(args)}")
    row = await conn.fetchrow(
        f"UPDATE jobs SET {', '.join(sets)} WHERE id = $1 AND state = ANY($3::text[]) RETURNING *",
        *args,
    )
    if row is None:
        current = await conn.fetchval("SELECT state FROM jobs WHERE id = $1", job_id)
        raise InvalidTransition(f"job {job_id} is {current or 'missing'}; it cannot become {target.value}")
    return row


async def lock_admission(conn: asyncpg.Connection) -> None:
    """Serialise admission decisions across scheduler replicas (held until the transaction ends)."""
    await conn.execute("SELECT pg_advisory_xact_lock($1)", ADMISSION_LOCK)


async def head_of_queue(conn: asyncpg.Connection, accelerator: str) -> asyncpg.Record | None:
    """The next job to admit: priority first, then first come first served (one index read)."""
    return await conn.fetchrow(
        "SELECT * FROM jobs WHERE state = 'queued' AND accelerator = $1"
        " ORDER BY priority DESC, queued_at, id LIMIT 1 FOR UPDATE SKIP LOCKED",
        accelerator,
    )


async def insert_attempt(
    conn: asyncpg.Connection,
    *,
    job_id: uuid.UUID,
    attempt: int,
    executor: str,
    run_ref: str,
    log_uri: str,
    output_uri: str,
    resume_from: str | None = None,
    accelerator: str = "cpu",
    deadline_at: datetime | None = None,
    devices: str | None = None,
) -> None:
    await conn.execute(
        "INSERT INTO attempts (job_id, attempt, executor, run_ref, log_uri, output_uri, resume_from, accelerator, deadline_at, devices)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        job_id,
        attempt,
        executor,
        run_ref,
        log_uri,
        output_uri,
        resume_from,
        accelerator,
        deadline_at,
        devices,
    )


async def devices_in_use(conn: asyncpg.Connection, executor: str, accelerator: str) -> set[int] | None:
    """The device indices the executor's unfinished attempts of a profile hold; None when one of
    them has none recorded (it started before indices were), so which it holds is unknown."""
    rows = await conn.fetch(
        "SELECT devices FROM attempts WHERE finished_at IS NULL AND executor = $1 AND accelerator = $2", executor, accelerator
    )
    if any(r["devices"] is None for r in rows):
        return None
    return {int(i) for r in rows for i in r["devices"].split(",") if i}


async def set_handle(conn: asyncpg.Connection, job_id: uuid.UUID, attempt: int, pid: int | None, pid_started: int | None) -> asyncpg.Record:
    row = await conn.fetchrow(
        "UPDATE attempts SET pid = $3, pid_started = $4 WHERE job_id = $1 AND attempt = $2 RETURNING *",
        job_id,
        attempt,
        pid,
        pid_started,
    )
    assert row is not None
    return row


async def open_attempts(conn: asyncpg.Connection, executor: str) -> list[asyncpg.Record]:
    """Attempts that have not been finished yet (their trainer runs, or ended unnoticed)."""
    return await conn.fetch(
        "SELECT * FROM attempts WHERE finished_at IS NULL AND executor = $1 ORDER BY started_at",
        executor,
    )


async def get_attempt(conn: asyncpg.Connection, job_id: uuid.UUID, attempt: int, *, lock: bool = False) -> asyncpg.Record | None:
    return await conn.fetchrow(
        "SELECT * FROM attempts WHERE job_id = $1 AND attempt = $2" + (" FOR UPDATE" if lock else ""), job_id, attempt
    )


async def mark_stop(conn: asyncpg.Connection, job_id: uuid.UUID, attempt: int, kill_after: datetime) -> asyncpg.Record | None:
    """Record the stop on the attempt once (a repeated Stop does not extend the deadline)."""
    return await conn.fetchrow(
        "UPDATE attempts SET stop_requested_at = COALESCE(stop_requested_at, now()),"
        " kill_after = COALESCE(kill_after, $3) WHERE job_id = $1 AND attempt = $2 AND finished_at IS NULL RETURNING *",
        job_id,
        attempt,
        kill_after,
    )


async def finish_attempt(
    conn: asyncpg.Connection, job_id: uuid.UUID, attempt: int, *, exit_code: int | None, outcome: str, retried: bool = False
) -> bool:
    status = await conn.execute(
        "UPDATE attempts SET finished_at = now(), exit_code = $3, outcome = $4, retried = $5, pending_reason = NULL"
        " WHERE job_id = $1 AND attempt = $2 AND finished_at IS NULL",
        job_id,
        attempt,
        exit_code,
        outcome,
        retried,
    )
    return status.endswith(" 1")


async def count_retries(conn: asyncpg.Connection, job_id: uuid.UUID) -> int:
    return int(await conn.fetchval("SELECT count(*) FROM attempts WHERE job_id = $1 AND retried", job_id))


async def attempt_outputs(conn: asyncpg.Connection, job_id: uuid.UUID) -> list[str]:
    """Every attempt's output location, newest first."""
    return [r["output_uri"] for r in await conn.fetch("SELECT output_uri FROM attempts WHERE job_id = $1 ORDER BY attempt DESC", job_id)]


async def set_pending_reason(conn: asyncpg.Connection, job_id: uuid.UUID, attempt: int, reason: str | None) -> None:
    await conn.execute("UPDATE attempts SET pending_reason = $3 WHERE job_id = $1 AND attempt = $2", job_id, attempt, reason)


async def save_capacity(conn: asyncpg.Connection, executor: str, capacity: list[Any], *, runs_images: bool = False) -> None:
    """What the executor can offer, for the api to show (one row per profile)."""
    async with conn.transaction():
        await conn.execute("DELETE FROM accelerator_capacity WHERE executor = $1", executor)
        await conn.executemany(
            "INSERT INTO accelerator_capacity (executor, profile, total, detail, per_job, allocatable, runs_images)"
            " VALUES ($1, $2, $3, $4, $5, $6, $7)",
            [(executor, c.profile, c.total, c.detail, c.per_job, c.allocatable, runs_images) for c in capacity],
        )


async def record_epoch(
    conn: asyncpg.Connection,
    job_id: uuid.UUID,
    attempt: int,
    *,
    epoch: int,
    total_epochs: int | None,
    metrics: dict[str, float],
    is_best: bool,
) -> asyncpg.Record | None:
    """Fold an epoch into the job's progress (idempotent, order-independent)."""
    return await conn.fetchrow(
        """
        UPDATE jobs SET
            epochs_completed = GREATEST(epochs_completed, $3),
            total_epochs = COALESCE($4, total_epochs),
            progress = LEAST(1.0, GREATEST(progress, $3::double precision / GREATEST(COALESCE($4, total_epochs, $3), 1))),
            best_metrics = CASE WHEN $5 AND $3 >= epochs_completed THEN $6::jsonb ELSE best_metrics END,
            updated_at = now()
        WHERE id = $1 AND attempt = $2 AND state = 'running'
        RETURNING *
        """,
        job_id,
        attempt,
        epoch,
        total_epochs,
        is_best,
        metrics,
    )


async def add_executor_notes(conn: asyncpg.Connection, job_id: uuid.UUID, attempt: int, lines: list[LogLine]) -> bool:
    """An attempt's log, written by the scheduler when its trainer never ran (so log-relay has
    nothing to write for it). False when the attempt has output after all: that stays its log."""
    if await conn.fetchval("SELECT EXISTS (SELECT 1 FROM log_lines WHERE job_id = $1 AND attempt = $2)", job_id, attempt):
        return False
    await conn.executemany(
        "INSERT INTO log_lines (job_id, attempt, line_no, ts, text) VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
        [(job_id, attempt, line.line_no, line.ts, line.text) for line in lines],
    )
    return True
