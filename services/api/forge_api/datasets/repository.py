"""The api's dataset SQL (it owns datasets and dataset versions)."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg


async def create_dataset(conn: asyncpg.Connection, project_id: uuid.UUID, name: str, description: str) -> asyncpg.Record | None:
    """None when the name is taken."""
    return await conn.fetchrow(
        "INSERT INTO datasets (id, project_id, name, description) VALUES ($1, $2, $3, $4)"
        " ON CONFLICT (project_id, name) DO NOTHING RETURNING *",
        uuid.uuid4(),
        project_id,
        name,
        description,
    )


async def get_dataset(conn: asyncpg.Connection, project_id: uuid.UUID, name: str, *, lock: bool = False) -> asyncpg.Record | None:
    return await conn.fetchrow(
        "SELECT * FROM datasets WHERE project_id = $1 AND name = $2" + (" FOR UPDATE" if lock else ""), project_id, name
    )


async def list_datasets(conn: asyncpg.Connection, project_id: uuid.UUID) -> list[asyncpg.Record]:
    return await conn.fetch(
        "SELECT d.*, (SELECT max(version) FROM dataset_versions v WHERE v.dataset_id = d.id) AS latest_version"
        " FROM datasets d WHERE d.project_id = $1 ORDER BY d.name",
        project_id,
    )


async def list_versions(conn: asyncpg.Connection, dataset_id: uuid.UUID) -> list[asyncpg.Record]:
    return await conn.fetch("SELECT * FROM dataset_versions WHERE dataset_id = $1 ORDER BY version", dataset_id)


async def get_version(conn: asyncpg.Connection, dataset_id: uuid.UUID, version: int) -> asyncpg.Record | None:
    return await conn.fetchrow("SELECT * FROM dataset_versions WHERE dataset_id = $1 AND version = $2", dataset_id, version)


async def version_by_hash(conn: asyncpg.Connection, dataset_id: uuid.UUID, content_hash: str) -> asyncpg.Record | None:
    return await conn.fetchrow("SELECT * FROM dataset_versions WHERE dataset_id = $1 AND content_hash = $2", dataset_id, content_hash)


async def insert_version(conn: asyncpg.Connection, dataset_id: uuid.UUID, **fields: Any) -> asyncpg.Record:
    """The next version number; call with the dataset row locked."""
    version = await conn.fetchval("SELECT COALESCE(max(version), 0) + 1 FROM dataset_versions WHERE dataset_id = $1", dataset_id)
    row = await conn.fetchrow(
        "INSERT INTO dataset_versions (id, dataset_id, version, format, tasks, uri, content_hash, size_bytes, file_count, stats, report)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING *",
        fields["id"],
        dataset_id,
        version,
        fields["format"],
        fields["tasks"],
        fields["uri"],
        fields["content_hash"],
        fields["size_bytes"],
        fields["file_count"],
        fields["stats"],
        fields["report"],
    )
    assert row is not None
    return row


async def models_trained_on(conn: asyncpg.Connection, version_id: uuid.UUID) -> list[asyncpg.Record]:
    return await conn.fetch(
        "SELECT m.name, v.version FROM model_versions v JOIN models m ON m.id = v.model_id WHERE v.dataset_version_id = $1 ORDER BY m.name, v.version",
        version_id,
    )


async def jobs_depending_on(conn: asyncpg.Connection, version_id: uuid.UUID) -> list[asyncpg.Record]:
    """Jobs that still need the files: not started, training, or able to resume. Locks the
    version row first, so a job created meanwhile (its foreign key) waits for this decision."""
    await conn.execute("SELECT 1 FROM dataset_versions WHERE id = $1 FOR UPDATE", version_id)
    return await conn.fetch(
        "SELECT id, name, state FROM jobs WHERE dataset_version_id = $1"
        " AND state IN ('draft', 'queued', 'running', 'stopped', 'failed') ORDER BY created_at",
        version_id,
    )


async def delete_version(conn: asyncpg.Connection, version_id: uuid.UUID) -> None:
    await conn.execute("DELETE FROM dataset_versions WHERE id = $1", version_id)
