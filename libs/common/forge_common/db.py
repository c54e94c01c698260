"""PostgreSQL through asyncpg: the pool, and versioned SQL migrations applied under an advisory lock.

Migrations are the numbered ``.sql`` files in ``forge_common/migrations``; every service applies
them at start-up (the first one to take the lock does the work, the others find nothing to do).
Each table has one owning service that writes it — see the comments in the migration files.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from importlib import resources
from typing import Any
from urllib.parse import urlparse, urlunparse

import asyncpg

log = logging.getLogger(__name__)

MIGRATION_LOCK = 7_240_551_001  # pg_advisory_lock key shared by every Forge service
_MIGRATION_RE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


async def init_connection(conn: asyncpg.Connection) -> None:
    for typename in ("json", "jsonb"):
        await conn.set_type_codec(typename, encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


def _admin_url(url: str) -> tuple[str, str]:
    parsed = urlparse(url)
    name = parsed.path.lstrip("/") or "postgres"
    return urlunparse(parsed._replace(path="/postgres")), name


async def ensure_database(url: str) -> None:
    """Create the database named in ``url`` when the server does not have it yet."""
    admin, name = _admin_url(url)
    if name == "postgres":
        return
    try:
        conn = await asyncpg.connect(url)
    except asyncpg.InvalidCatalogNameError:
        pass
    else:
        await conn.close()
        return
    conn = await asyncpg.connect(admin)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
        log.info("created database %s", name)
    except (asyncpg.DuplicateDatabaseError, asyncpg.UniqueViolationError):
        pass  # another service created it at the same moment
    finally:
        await conn.close()


async def create_pool(url: str, *, size: int = 5) -> asyncpg.Pool:
    await ensure_database(url)
    pool = await asyncpg.create_pool(url, min_size=1, max_size=size, init=init_connection)
    assert pool is not None
    return pool


def migration_files() -> list[tuple[int, str, str]]:
    """(version, name, sql) in order."""
    out = []
    for entry in resources.files("forge_common.migrations").iterdir():
        m = _MIGRATION_RE.match(entry.name)
        if m:
            out.append((int(m.group(1)), m.group(2), entry.read_text(encoding="utf-8")))
    return sorted(out)


async def migrate(pool: asyncpg.Pool) -> list[int]:
    """Apply pending migrations; returns the versions applied by this call."""
    applied: list[int] = []
    async with pool.acquire() as conn:
        await conn.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK)
        try:
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            done = {r["version"] for r in await conn.fetch("SELECT version FROM schema_migrations")}
            for version, name, sql in migration_files():
                if version in done:
                    continue
                async with conn.transaction():
                    await conn.execute(sql)
                    await conn.execute("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", version, name)
                log.info("applied migration %04d_%s", version, name)
                applied.append(version)
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK)
    return applied


async def connect(url: str, *, size: int = 5) -> asyncpg.Pool:
    """A pool on a migrated database: what every service's lifespan opens first."""
    pool = await create_pool(url, size=size)
    await migrate(pool)
    return pool


async def slots_in_use(conn: asyncpg.Connection, accelerator: str) -> int:
    """Slots a profile's running jobs hold: one per CPU job; for a GPU profile, their devices. The
    scheduler admits by it; the api explains waits by it."""
    return int(
        await conn.fetchval(
            "SELECT COALESCE(sum(CASE WHEN $1 = 'cpu' THEN 1 ELSE COALESCE((spec->>'devices')::int, 1) END), 0)"
            " FROM jobs WHERE state = 'running' AND accelerator = $1",
            accelerator,
        )
    )


async def close(pool: asyncpg.Pool, *, seconds: float = 10.0) -> None:
    """Close the pool, waiting at most ``seconds`` for connections still in use (a request or task
    that never gave one back must not keep a service from stopping); then terminate the rest."""
    try:
        await asyncio.wait_for(pool.close(), seconds)
    except TimeoutError:
        log.warning("database pool: connections still in use after %.0f s; terminating them", seconds)
        pool.terminate()


def record(row: asyncpg.Record | None) -> dict[str, Any] | None:
    return dict(row) if row is not None else None
