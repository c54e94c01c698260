"""The api's job SQL: it writes job specs, the draft → queued move and stop requests."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg

from forge_common.errors import InvalidTransition
from forge_common.states import JobState, check_transition

# a job and the model version its latest registered attempt produced
_SELECT = (
    "SELECT j.*, mv.model_name, mv.model_version, mv.model_attempt FROM jobs j LEFT JOIN LATERAL ("
    " SELECT m.name AS model_name, v.version AS model_version, v.attempt AS model_attempt"
    " FROM model_versions v JOIN models m ON m.id = v.model_id"
    " WHERE v.job_id = j.id ORDER BY v.attempt DESC LIMIT 1) mv ON true"
)


async def get_job(conn: asyncpg.Connection, project_id: uuid.UUID, job_id: uuid.UUID) -> asyncpg.Record | None:
    return await conn.fetchrow(_SELECT + " WHERE j.id = $1 AND j.project_id = $2", job_id, project_id)


async def list_jobs(conn: asyncpg.Connection, project_id: uuid.UUID, state: str | None, limit: int) -> list[asyncpg.Record]:
    return await conn.fetch(
        _SELECT + " WHERE j.project_id = $1 AND ($2::text IS NULL OR j.state = $2) ORDER BY j.created_at DESC LIMIT $3",
        project_id,
        state,
        limit,
    )


async def insert_job(conn: asyncpg.Connection, **f: Any) -> None:
    await conn.execute(
        "INSERT INTO jobs (id, project_id, name, task, spec, dataset_version_id, base_model, accelerator, state, queued_at, traceparent, total_epochs, priority)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, CASE WHEN $9 = 'queued' THEN now() END, $10, $11, $12)",
        f["id"],
        f["project_id"],
        f["name"],
        f["task"],
        f["spec"],
        f["dataset_version_id"],
        f["base_model"],
        f["accelerator"],
        f["state"],
        f["traceparent"],
        f["total_epochs"],
        f["priority"],
    )


async def queue(conn: asyncpg.Connection, job_id: uuid.UUID) -> None:
    """draft → queued (compare-and-set; every later move is the scheduler's)."""
    check_transition(JobState.DRAFT, JobState.QUEUED)
    status = await conn.execute(
        "UPDATE jobs SET state = 'queued', queued_at = now(), updated_at = now() WHERE id = $1 AND state = 'draft'",
        job_id,
    )
    if status != "UPDATE 1":
        current = await conn.fetchval("SELECT state FROM jobs WHERE id = $1", job_id)
        raise InvalidTransition(f"only a draft can be started; this job is {current}")


async def latest_attempt_with_model(conn: asyncpg.Connection, job_id: uuid.UUID) -> int | None:
    """The newest attempt that ended with a model (succeeded, or stopped after an epoch)."""
    return await conn.fetchval(
        "SELECT max(attempt) FROM attempts WHERE job_id = $1 AND outcome IN ('succeeded', 'stopped')",
        job_id,
    )


async def request_stop(conn: asyncpg.Connection, job_id: uuid.UUID) -> bool:
    """Record the request on a queued or running job; False when it is in neither state."""
    status = await conn.execute(
        "UPDATE jobs SET stop_requested_at = COALESCE(stop_requested_at, now()), updated_at = now()"
        " WHERE id = $1 AND state IN ('queued', 'running')",
        job_id,
    )
    return status == "UPDATE 1"


async def find_dataset_version(
    conn: asyncpg.Connection, project_id: uuid.UUID, name: str, version: int
) -> tuple[asyncpg.Record | None, asyncpg.Record | None, int | None]:
    """(dataset, version row, latest version number)."""
    dataset = await conn.fetchrow("SELECT * FROM datasets WHERE project_id = $1 AND name = $2", project_id, name)
    if dataset is None:
        return None, None, None
    row = await conn.fetchrow("SELECT * FROM dataset_versions WHERE dataset_id = $1 AND version = $2", dataset["id"], version)
    latest = await conn.fetchval("SELECT max(version) FROM dataset_versions WHERE dataset_id = $1", dataset["id"])
    return dataset, row, latest


async def logs(conn: asyncpg.Connection, job_id: uuid.UUID, after: int, limit: int, attempt: int | None) -> list[asyncpg.Record]:
    return await conn.fetch(
        "SELECT attempt, line_no, ts, text FROM log_lines WHERE job_id = $1"
        " AND attempt = COALESCE($4, (SELECT max(attempt) FROM log_lines WHERE job_id = $1))"
        " AND line_no > $2 ORDER BY line_no LIMIT $3",
        job_id,
        after,
        limit,
        attempt,
    )


async def metric_points(conn: asyncpg.Connection, job_id: uuid.UUID, attempt: int) -> list[asyncpg.Record]:
    return await conn.fetch(
        "SELECT scope, idx, epoch, name, value FROM metric_points WHERE job_id = $1 AND attempt = $2 ORDER BY scope, idx, name",
        job_id,
        attempt,
    )


async def set_priority(conn: asyncpg.Connection, job_id: uuid.UUID, name: str, priority: int) -> bool:
    """Re-prioritise a job while it is still queued."""
    status = await conn.execute(
        "UPDATE jobs SET priority = $2, spec = jsonb_set(spec, '{priority}', to_jsonb($3::text)), updated_at = now()"
        " WHERE id = $1 AND state = 'queued'",
        job_id,
        priority,
        name,
    )
    return status == "UPDATE 1"


async def update_spec(
    conn: asyncpg.Connection, job_id: uuid.UUID, state: JobState, spec: dict[str, Any], dataset_version_id: uuid.UUID, priority: int
) -> bool:
    """Edit a draft (or re-prioritise a queued job), if it is still in ``state``."""
    status = await conn.execute(
        "UPDATE jobs SET spec = $3, name = $4, task = $5, base_model = $6, accelerator = $7, dataset_version_id = $8, priority = $9,"
        " total_epochs = $10, updated_at = now() WHERE id = $1 AND state = $2",
        job_id,
        state.value,
        spec,
        spec["name"],
        spec["task"],
        spec["base_model"],
        spec["accelerator"],
        dataset_version_id,
        priority,
        spec["hyperparameters"].get("epochs"),
    )
    return status == "UPDATE 1"


async def attempts(conn: asyncpg.Connection, job_id: uuid.UUID) -> list[asyncpg.Record]:
    return await conn.fetch(
        "SELECT attempt, executor, started_at, finished_at, exit_code, outcome, resume_from, pending_reason, retried FROM attempts"
        " WHERE job_id = $1 ORDER BY attempt",
        job_id,
    )


async def queue_positions(conn: asyncpg.Connection) -> dict[uuid.UUID, int]:
    rows = await conn.fetch(
        "SELECT id, row_number() OVER (PARTITION BY accelerator ORDER BY priority DESC, queued_at, id) AS position"
        " FROM jobs WHERE state = 'queued'"
    )
    return {r["id"]: r["position"] for r in rows}
