"""The api's job SQL: it writes job specs, the draft → queued move and stop requests."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg

from forge_common.errors import InvalidTransition
from forge_common.states import JobState, sources_of

_SELECT = (
    "SELECT j.*, m.name AS model_name, v.version AS model_version FROM jobs j"
    " LEFT JOIN model_versions v ON v.job_id = j.id LEFT JOIN models m ON m.id = v.model_id"
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
        "INSERT INTO jobs (id, project_id, name, task, spec, dataset_version_id, base_model, accelerator, state, queued_at, traceparent, total_epochs)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, CASE WHEN $9 = 'queued' THEN now() END, $10, $11)",
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
    )


async def queue(conn: asyncpg.Connection, job_id: uuid.UUID) -> None:
    """draft → queued (compare-and-set)."""
    status = await conn.execute(
        "UPDATE jobs SET state = 'queued', queued_at = now(), updated_at = now() WHERE id = $1 AND state = ANY($2::text[])",
        job_id,
        sources_of(JobState.QUEUED),
    )
    if status != "UPDATE 1":
        current = await conn.fetchval("SELECT state FROM jobs WHERE id = $1", job_id)
        raise InvalidTransition(f"only a draft can be started; this job is {current}")


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
