"""The lifespan every event-driven service shares: it owns the clients (database pool, NATS,
FastStream broker, object store), runs the outbox relay and the health endpoint, and closes all
of it in reverse order. A service registers its handlers between ``open()`` and ``start()``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import asyncpg
from faststream.nats import NatsBroker
from nats.aio.client import Client
from nats.js import JetStreamContext

from . import bus, db, health, telemetry
from .outbox import OutboxRelay
from .settings import CommonSettings
from .storage import ObjectStore, open_store
from .subjects import Subjects

log = logging.getLogger(__name__)


class ServiceHost:
    def __init__(self, name: str, common: CommonSettings, *, health_port: int = 0, outbox_producer: str | None = None) -> None:
        self.name = name
        self.common = common
        self.health_port = health_port
        self.outbox_producer = outbox_producer
        self.subjects = Subjects(common.bus_prefix)
        self._tasks: list[asyncio.Task[Any]] = []
        self._health: asyncio.Server | None = None
        self._closers: list[Callable[[], Awaitable[None]]] = []
        self.pool: asyncpg.Pool
        self.nc: Client
        self.js: JetStreamContext
        self.store: ObjectStore
        self.broker: NatsBroker

    async def open(self) -> ServiceHost:
        telemetry.setup(self.name, self.common)
        self.pool = await db.connect(self.common.database_url, size=self.common.db_pool_size)
        self.nc, self.js = await bus.connect(self.common, name=f"forge-{self.name}")
        await bus.ensure_streams(self.js, self.subjects, max_age_days=self.common.bus_max_age_days)
        self.store = await asyncio.to_thread(open_store, self.common)
        self.broker = bus.make_broker(self.common, self.subjects, name=f"forge-{self.name}")
        return self

    def at_close(self, closer: Callable[[], Awaitable[None]]) -> None:
        """Run ``closer`` first when the service stops (before its clients close)."""
        self._closers.append(closer)

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> None:
        task = asyncio.create_task(coro, name=f"{self.name}:{name}")
        task.add_done_callback(self._task_done)
        self._tasks.append(task)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("%s: background task %s died", self.name, task.get_name(), exc_info=task.exception())

    async def ready(self) -> bool:
        if not self.nc.is_connected:
            return False
        async with self.pool.acquire() as conn:
            return bool(await conn.fetchval("SELECT true"))

    async def start(self) -> None:
        await self.broker.start()
        if self.outbox_producer:
            self.spawn(OutboxRelay(self.pool, self.js, producer=self.outbox_producer).run(), "outbox")
        if self.health_port:
            self._health = await health.serve("0.0.0.0", self.health_port, self.ready)
        log.info("%s: started (bus prefix %s)", self.name, self.subjects.prefix)

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.broker.stop()
        for closer in reversed(self._closers):
            try:
                await closer()
            except Exception:
                log.exception("%s: closing failed", self.name)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._health is not None:
            self._health.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.nc.drain(), 10)
        await db.close(self.pool)
        telemetry.shutdown()
        log.info("%s: stopped", self.name)


async def serve(host: ServiceHost, setup: Callable[[ServiceHost], Awaitable[None]], stop: asyncio.Event) -> None:
    """open → setup (register handlers, spawn loops) → start → wait for ``stop`` → close."""
    await host.open()
    try:
        await setup(host)
        await host.start()
        await stop.wait()
    finally:
        await host.close()
