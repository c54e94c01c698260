"""Read-only access to the registrar's tables."""

from __future__ import annotations

import uuid

import asyncpg


async def list_models(conn: asyncpg.Connection, project_id: uuid.UUID) -> list[asyncpg.Record]:
    return await conn.fetch(
        "SELECT m.name, m.created_at, count(v.*) AS versions, max(v.version) AS latest_version FROM models m"
        " LEFT JOIN model_versions v ON v.model_id = m.id WHERE m.project_id = $1 GROUP BY m.id ORDER BY m.name",
        project_id,
    )


_VERSIONS = (
    "SELECT v.*, m.name AS model_name, j.name AS job_name, j.state AS job_state, j.spec->'dataset' AS dataset"
    " FROM model_versions v JOIN models m ON m.id = v.model_id JOIN jobs j ON j.id = v.job_id"
    " WHERE m.project_id = $1 AND m.name = $2"
)


async def list_versions(conn: asyncpg.Connection, project_id: uuid.UUID, name: str) -> list[asyncpg.Record]:
    return await conn.fetch(_VERSIONS + " ORDER BY v.version", project_id, name)


async def get_version(conn: asyncpg.Connection, project_id: uuid.UUID, name: str, version: int) -> asyncpg.Record | None:
    return await conn.fetchrow(_VERSIONS + " AND v.version = $3", project_id, name, version)


async def model_exists(conn: asyncpg.Connection, project_id: uuid.UUID, name: str) -> bool:
    return bool(await conn.fetchval("SELECT true FROM models WHERE project_id = $1 AND name = $2", project_id, name))
