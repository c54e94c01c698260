"""The transactional outbox: write the event in the same transaction as the state change it
announces, and let a relay publish it. A crash between commit and publish delays the event;
it never loses it, and it never publishes a change that was rolled back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import asyncpg
from nats.js import JetStreamContext

from .bus import encode, headers_for
from .events import Event
from .runtime import wait_event
from .subjects import Subjects

log = logging.getLogger(__name__)

CHANNEL = "forge_outbox"


async def add(conn: asyncpg.Connection, subjects: Subjects, event: Event[Any], *, producer: str) -> None:
    """Queue ``event``; call inside the transaction that makes it true."""
    await conn.execute(
        "INSERT INTO outbox (producer, subject, event_id, body, headers) VALUES ($1, $2, $3, $4, $5)",
        producer,
        subjects.of(event),
        event.id,
        encode(event),
        headers_for(event),
    )
    await conn.execute("SELECT pg_notify($1, $2)", CHANNEL, producer)


class OutboxRelay:
    """Publishes a producer's outbox rows in order, then deletes them. Several replicas may run:
    one at a time drains (a transaction-scoped advisory lock per producer), so the order holds
    across replicas too. A row the server can never accept (over its message size limit) is
    logged and dropped instead of blocking every event behind it."""

    def __init__(self, pool: asyncpg.Pool, js: JetStreamContext, *, producer: str, poll_seconds: float = 1.0) -> None:
        self.pool = pool
        self.js = js
        self.producer = producer
        self.poll_seconds = poll_seconds
        self._wake = asyncio.Event()

    def _on_notify(self, conn: Any, pid: int, channel: str, payload: str) -> None:
        if payload == self.producer:
            self._wake.set()

    async def drain(self) -> int:
        """Publish everything pending; returns how many events went out."""
        sent = 0
        while True:
            async with self.pool.acquire() as conn, conn.transaction():
                if not await conn.fetchval("SELECT pg_try_advisory_xact_lock(hashtext($1))", f"{CHANNEL}:{self.producer}"):
                    return sent  # another replica is draining; it will publish these in order
                rows = await conn.fetch(
                    "SELECT seq, subject, body, headers FROM outbox WHERE producer = $1 ORDER BY seq LIMIT 100",
                    self.producer,
                )
                if not rows:
                    return sent
                for row in rows:
                    body = bytes(row["body"])
                    if self._fits(body, row["headers"]):
                        await self.js.publish(row["subject"], body, headers=row["headers"])
                        sent += 1
                    else:
                        log.error(
                            "outbox (%s): dropped event #%d on %s: %d bytes is over the server's message limit",
                            self.producer,
                            row["seq"],
                            row["subject"],
                            len(body),
                        )
                await conn.execute("DELETE FROM outbox WHERE seq = ANY($1::bigint[])", [r["seq"] for r in rows])

    def _fits(self, body: bytes, headers: dict[str, str] | None) -> bool:
        """Whether the server will take it: it counts headers and body together (the client's own
        check counts the body only, and a message the server refuses costs the connection)."""
        limit = getattr(getattr(self.js, "_nc", None), "max_payload", None)
        if not limit:  # not connected yet: let the client check
            return True
        framing = len("NATS/1.0\r\n\r\n") + sum(len(k) + len(v) + 4 for k, v in (headers or {}).items())
        return len(body) + framing <= int(limit)

    async def run(self) -> None:
        listener = await self.pool.acquire()
        try:
            await listener.add_listener(CHANNEL, self._on_notify)
            while True:
                self._wake.clear()
                try:
                    await self.drain()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # the server may be restarting: keep the rows, try later
                    log.warning("outbox relay (%s): publish failed, will retry: %s", self.producer, exc)
                await wait_event(self._wake, self.poll_seconds)
        finally:
            with contextlib.suppress(Exception):
                await listener.remove_listener(CHANNEL, self._on_notify)
            await self.pool.release(listener)
