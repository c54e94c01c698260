"""Rows the tests need in tables other services own (a job and its attempt)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import asyncpg

from forge_common import DEFAULT_PROJECT_ID


async def insert_job(conn: asyncpg.Connection, *, state: str = "running", name: str = "job", attempt: int = 1, **spec: Any) -> uuid.UUID:
    job_id = uuid.uuid4()
    full_spec = {"name": name, "task": "classification", "registration": "auto", "dataset": {"name": "d", "version": 1}, **spec}
    await conn.execute(
        "INSERT INTO jobs (id, project_id, name, task, spec, base_model, state, attempt, queued_at)"
        " VALUES ($1, $2, $3, 'classification', $4, 'timm/test_vit', $5, $6, now())",
        job_id,
        uuid.UUID(DEFAULT_PROJECT_ID),
        name,
        json.loads(json.dumps(full_spec)),
        state,
        attempt,
    )
    return job_id


async def insert_attempt(conn: asyncpg.Connection, job_id: uuid.UUID, *, attempt: int = 1, log_uri: str, finished: bool = False) -> None:
    await conn.execute(
        "INSERT INTO attempts (job_id, attempt, executor, log_uri, output_uri, finished_at) VALUES ($1, $2, 'local', $3, 'file:///tmp/x', CASE WHEN $4 THEN now() END)",
        job_id,
        attempt,
        log_uri,
        finished,
    )
