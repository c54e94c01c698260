"""The registrar's SQL: it owns models and model versions."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg


async def get_job(conn: asyncpg.Connection, job_id: uuid.UUID) -> asyncpg.Record | None:
    return await conn.fetchrow("SELECT id, project_id, name, dataset_version_id, base_model, traceparent FROM jobs WHERE id = $1", job_id)


async def version_of_attempt(conn: asyncpg.Connection, job_id: uuid.UUID, attempt: int) -> asyncpg.Record | None:
    return await conn.fetchrow(
        "SELECT v.*, m.name AS model_name FROM model_versions v JOIN models m ON m.id = v.model_id WHERE v.job_id = $1 AND v.attempt = $2",
        job_id,
        attempt,
    )


async def get_or_create_model(conn: asyncpg.Connection, project_id: uuid.UUID, name: str) -> uuid.UUID:
    model_id = await conn.fetchval(
        "INSERT INTO models (id, project_id, name) VALUES ($1, $2, $3)"
        " ON CONFLICT (project_id, name) DO UPDATE SET name = EXCLUDED.name RETURNING id",
        uuid.uuid4(),
        project_id,
        name,
    )
    assert model_id is not None
    return model_id  # type: ignore[no-any-return]


async def insert_version(conn: asyncpg.Connection, *, model_id: uuid.UUID, **fields: Any) -> asyncpg.Record:
    """The next version of the model (versions are serialised per model by a row lock)."""
    await conn.execute("SELECT 1 FROM models WHERE id = $1 FOR UPDATE", model_id)
    version = await conn.fetchval("SELECT COALESCE(max(version), 0) + 1 FROM model_versions WHERE model_id = $1", model_id)
    row = await conn.fetchrow(
        "INSERT INTO model_versions (id, model_id, version, job_id, attempt, artifacts_uri, weights_uri, onnx_uri,"
        " metrics, dataset_version_id, base_model, files) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) RETURNING *",
        uuid.uuid4(),
        model_id,
        version,
        fields["job_id"],
        fields["attempt"],
        fields["artifacts_uri"],
        fields.get("weights_uri"),
        fields.get("onnx_uri"),
        fields.get("metrics") or {},
        fields.get("dataset_version_id"),
        fields.get("base_model"),
        fields.get("files") or {},
    )
    assert row is not None
    return row


async def deployable_attempt(conn: asyncpg.Connection, job_id: uuid.UUID) -> asyncpg.Record | None:
    """The latest attempt that ended with a model (reads the scheduler's tables)."""
    return await conn.fetchrow(
        "SELECT a.attempt, a.output_uri, j.name FROM attempts a JOIN jobs j ON j.id = a.job_id"
        " WHERE a.job_id = $1 AND a.outcome IN ('succeeded', 'stopped') ORDER BY a.attempt DESC LIMIT 1",
        job_id,
    )


async def delete_version(conn: asyncpg.Connection, job_id: uuid.UUID, model_name: str, version: int) -> asyncpg.Record | None:
    """The job pins the project: the same model name in another project is never touched."""
    return await conn.fetchrow(
        "DELETE FROM model_versions v USING models m"
        " WHERE m.id = v.model_id AND v.job_id = $1 AND m.name = $2 AND v.version = $3 RETURNING v.job_id",
        job_id,
        model_name,
        version,
    )
