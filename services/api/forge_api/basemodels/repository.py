"""The api's base-model SQL (it owns the pool)."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg


async def upsert_seed(conn: asyncpg.Connection, project_id: uuid.UUID, entry: dict[str, Any]) -> None:
    """Insert or refresh a shipped entry; a user's entry of the same name is left alone."""
    await conn.execute(
        "INSERT INTO base_models (id, project_id, name, family, tasks, source, license, description, builtin)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, true)"
        " ON CONFLICT (project_id, name) DO UPDATE SET family = EXCLUDED.family, tasks = EXCLUDED.tasks,"
        " source = EXCLUDED.source, license = EXCLUDED.license, description = EXCLUDED.description"
        " WHERE base_models.builtin",
        uuid.uuid4(),
        project_id,
        entry["name"],
        entry["family"],
        entry["tasks"],
        entry["source"],
        entry["license"],
        entry["description"],
    )


async def insert(conn: asyncpg.Connection, project_id: uuid.UUID, entry: dict[str, Any]) -> asyncpg.Record | None:
    """None when the name is taken."""
    return await conn.fetchrow(
        "INSERT INTO base_models (id, project_id, name, family, tasks, source, license, description, size_bytes, files, digest)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT (project_id, name) DO NOTHING RETURNING *",
        uuid.uuid4(),
        project_id,
        entry["name"],
        entry["family"],
        entry["tasks"],
        entry["source"],
        entry["license"],
        entry["description"],
        entry.get("size_bytes"),
        entry.get("files"),
        entry.get("digest"),
    )


async def get(conn: asyncpg.Connection, project_id: uuid.UUID, name: str) -> asyncpg.Record | None:
    return await conn.fetchrow("SELECT * FROM base_models WHERE project_id = $1 AND name = $2", project_id, name)


async def list_for(conn: asyncpg.Connection, project_id: uuid.UUID, task: str | None) -> list[asyncpg.Record]:
    return await conn.fetch(
        "SELECT * FROM base_models WHERE project_id = $1 AND ($2::text IS NULL OR $2 = ANY(tasks)) ORDER BY builtin DESC, name",
        project_id,
        task,
    )


async def delete(conn: asyncpg.Connection, project_id: uuid.UUID, name: str) -> bool:
    status = await conn.execute("DELETE FROM base_models WHERE project_id = $1 AND name = $2 AND NOT builtin", project_id, name)
    return status == "DELETE 1"
