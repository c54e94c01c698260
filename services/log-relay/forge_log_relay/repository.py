"""The log-relay's SQL: it owns log lines, metric points and the read cursors."""

from __future__ import annotations

import uuid
from datetime import datetime

import asyncpg


async def get_cursor(conn: asyncpg.Connection, job_id: uuid.UUID, attempt: int) -> asyncpg.Record | None:
    return await conn.fetchrow("SELECT * FROM log_cursors WHERE job_id = $1 AND attempt = $2", job_id, attempt)


async def save_batch(
    conn: asyncpg.Connection,
    job_id: uuid.UUID,
    attempt: int,
    *,
    lines: list[tuple[int, datetime, str]],
    points: list[tuple[str, int, int, str, float, datetime]],
    byte_offset: int,
    line_no: int,
    done: bool,
) -> None:
    """Lines, points and the cursor in one transaction: re-reading after a crash repeats nothing."""
    async with conn.transaction():
        if lines:
            await conn.executemany(
                "INSERT INTO log_lines (job_id, attempt, line_no, ts, text) VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
                [(job_id, attempt, n, ts, text) for n, ts, text in lines],
            )
        if points:
            await conn.executemany(
                "INSERT INTO metric_points (job_id, attempt, scope, idx, epoch, name, value, ts)"
                " VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING",
                [(job_id, attempt, *p) for p in points],
            )
        await conn.execute(
            "INSERT INTO log_cursors (job_id, attempt, byte_offset, line_no, done, updated_at)"
            " VALUES ($1, $2, $3, $4, $5, now())"
            " ON CONFLICT (job_id, attempt) DO UPDATE SET byte_offset = $3, line_no = $4, done = $5, updated_at = now()",
            job_id,
            attempt,
            byte_offset,
            line_no,
            done,
        )


async def unfinished_attempts(conn: asyncpg.Connection) -> list[asyncpg.Record]:
    """Attempts whose output has not been read to the end (what to follow after a restart)."""
    return await conn.fetch(
        "SELECT a.job_id, a.attempt, a.log_uri, a.finished_at FROM attempts a"
        " LEFT JOIN log_cursors c ON c.job_id = a.job_id AND c.attempt = a.attempt"
        " WHERE a.log_uri IS NOT NULL AND c.done IS NOT TRUE ORDER BY a.started_at"
    )
