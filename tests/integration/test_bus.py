"""The bus against a real JetStream server: streams, the outbox, deduplication, dead letters."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import pytest
from faststream.nats import NatsBroker

from forge_common import bus, outbox
from forge_common.errors import PermanentFailure
from forge_common.events import JobSubmitted, JobSubmittedData, decode
from forge_common.settings import CommonSettings
from forge_common.subjects import Subjects

from .conftest import collect


def submitted(job_id: uuid.UUID | None = None) -> JobSubmitted:
    return JobSubmitted.of(JobSubmittedData(job_id=job_id or uuid.uuid4(), name="j", task="classification"), source="/test")


async def test_streams_are_declared_idempotently(js: Any, common_settings: CommonSettings) -> None:
    subjects = Subjects(common_settings.bus_prefix)
    await bus.ensure_streams(js, subjects, max_age_days=1)
    await bus.ensure_streams(js, subjects, max_age_days=2)  # an update, not an error
    info = await js.stream_info(subjects.jobs_stream)
    assert info.config.subjects == [f"{subjects.prefix}.job.>"] and info.config.max_age == 2 * 24 * 3600
    assert info.config.duplicate_window == 120


async def test_the_same_event_published_twice_is_stored_once(js: Any, common_settings: CommonSettings) -> None:
    subjects = Subjects(common_settings.bus_prefix)
    event = submitted()
    first = await bus.publish(js, subjects, event)
    second = await bus.publish(js, subjects, event)
    assert first == second
    info = await js.stream_info(subjects.jobs_stream)
    assert info.state.messages == 1


async def test_the_outbox_publishes_committed_events_and_only_those(pool: asyncpg.Pool, js: Any, common_settings: CommonSettings) -> None:
    subjects = Subjects(common_settings.bus_prefix)
    kept, dropped = submitted(), submitted()
    async with pool.acquire() as conn:
        async with conn.transaction():
            await outbox.add(conn, subjects, kept, producer="test")
        with pytest.raises(RuntimeError):
            async with conn.transaction():
                await outbox.add(conn, subjects, dropped, producer="test")
                raise RuntimeError("rolled back")
    relay = outbox.OutboxRelay(pool, js, producer="test")
    assert await relay.drain() == 1
    assert await relay.drain() == 0
    (msg,) = await collect(js, f"{subjects.prefix}.job.>", 1)
    assert decode(msg.data).id == kept.id
    assert msg.headers["Nats-Msg-Id"] == str(kept.id)
    async with pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM outbox") == 0


async def test_the_relay_wakes_on_notify(pool: asyncpg.Pool, js: Any, common_settings: CommonSettings) -> None:
    subjects = Subjects(common_settings.bus_prefix)
    relay = outbox.OutboxRelay(pool, js, producer="test", poll_seconds=60)
    task = asyncio.create_task(relay.run())
    try:
        await asyncio.sleep(0.2)
        event = submitted()
        async with pool.acquire() as conn, conn.transaction():
            await outbox.add(conn, subjects, event, producer="test")
        (msg,) = await collect(js, subjects.of(event), 1, timeout=5)  # well before the 60 s poll
        assert decode(msg.data).id == event.id
    finally:
        task.cancel()


async def test_the_outbox_keeps_rows_while_the_bus_is_down(pool: asyncpg.Pool, js: Any, common_settings: CommonSettings) -> None:
    subjects = Subjects(common_settings.bus_prefix)

    class Broken:
        async def publish(self, *args: Any, **kwargs: Any) -> None:
            raise ConnectionError("nats is restarting")

    async with pool.acquire() as conn, conn.transaction():
        await outbox.add(conn, subjects, submitted(), producer="test")
    with pytest.raises(ConnectionError):
        await outbox.OutboxRelay(pool, Broken(), producer="test").drain()  # type: ignore[arg-type]
    assert await outbox.OutboxRelay(pool, js, producer="test").drain() == 1


async def test_an_event_the_server_can_never_take_does_not_block_the_others(
    pool: asyncpg.Pool, js: Any, common_settings: CommonSettings
) -> None:
    subjects = Subjects(common_settings.bus_prefix)
    before, huge, almost, after = submitted(), submitted(), submitted(), submitted()
    limit = js._nc.max_payload
    async with pool.acquire() as conn, conn.transaction():
        await outbox.add(conn, subjects, before, producer="test")
        await outbox.add(conn, subjects, huge, producer="test")
        await conn.execute("UPDATE outbox SET body = $1 WHERE event_id = $2", b"x" * (8 * 1024 * 1024), huge.id)
        await outbox.add(conn, subjects, almost, producer="test")  # under the limit alone, over it with its headers
        await conn.execute("UPDATE outbox SET body = $1 WHERE event_id = $2", b"x" * (limit - 10), almost.id)
        await outbox.add(conn, subjects, after, producer="test")
    assert await outbox.OutboxRelay(pool, js, producer="test").drain() == 2
    got = [decode(m.data).id for m in await collect(js, f"{subjects.prefix}.job.>", 2)]
    assert got == [before.id, after.id]
    async with pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM outbox") == 0


async def test_relay_replicas_publish_in_commit_order(pool: asyncpg.Pool, js: Any, common_settings: CommonSettings) -> None:
    subjects = Subjects(common_settings.bus_prefix)
    job = uuid.uuid4()
    events = [submitted(job) for _ in range(300)]
    async with pool.acquire() as conn, conn.transaction():
        for event in events:
            await outbox.add(conn, subjects, event, producer="test")
    replicas = [outbox.OutboxRelay(pool, js, producer="test") for _ in range(3)]
    async with asyncio.timeout(60):
        while True:  # every replica tries at once, again and again, until all is out
            if sum(await asyncio.gather(*(r.drain() for r in replicas))) == 0:
                async with pool.acquire() as conn:
                    if await conn.fetchval("SELECT count(*) FROM outbox") == 0:
                        break
    got = [decode(m.data).id for m in await collect(js, subjects.all_of_job(job), len(events))]
    assert got == [e.id for e in events]


async def run_consumer(common_settings: CommonSettings, handler: Any) -> NatsBroker:
    subjects = Subjects(common_settings.bus_prefix)
    broker = bus.make_broker(common_settings, subjects, name="test")
    broker.subscriber(**bus.durable(subjects, "test", JobSubmitted.KIND))(handler)
    await broker.start()
    return broker


async def test_a_handler_that_returns_acks_and_sees_each_event_once(js: Any, common_settings: CommonSettings) -> None:
    seen: list[uuid.UUID] = []
    done = asyncio.Event()

    async def on_submitted(event: JobSubmitted) -> None:
        seen.append(event.job_id)
        if len(seen) == 2:
            done.set()

    broker = await run_consumer(common_settings, on_submitted)
    try:
        subjects = Subjects(common_settings.bus_prefix)
        a, b = submitted(), submitted()
        for e in (a, b, a):
            await bus.publish(js, subjects, e)
        await asyncio.wait_for(done.wait(), 10)
        await asyncio.sleep(0.5)
        assert seen == [a.job_id, b.job_id]
        info = await js.consumer_info(subjects.jobs_stream, subjects.durable("test", "submitted"))
        assert info.num_ack_pending == 0
    finally:
        await broker.stop()


async def test_a_transient_failure_is_redelivered(js: Any, common_settings: CommonSettings) -> None:
    attempts: list[int] = []
    done = asyncio.Event()

    async def flaky(event: JobSubmitted) -> None:
        attempts.append(1)
        if len(attempts) < 2:
            raise ConnectionError("database restarting")
        done.set()

    broker = await run_consumer(common_settings, flaky)
    try:
        await bus.publish(js, Subjects(common_settings.bus_prefix), submitted())
        await asyncio.wait_for(done.wait(), 15)
        assert len(attempts) == 2
    finally:
        await broker.stop()


async def test_poison_messages_go_to_the_dead_letter_subject(js: Any, common_settings: CommonSettings) -> None:
    subjects = Subjects(common_settings.bus_prefix)
    calls: list[int] = []

    async def refuses(event: JobSubmitted) -> None:
        calls.append(1)
        raise PermanentFailure("this job cannot be handled")

    broker = await run_consumer(common_settings, refuses)
    try:
        await bus.publish(js, subjects, submitted())
        await js.publish(
            f"{subjects.prefix}.job.{uuid.uuid4()}.submitted",
            b'{"type": "forge.job.submitted", "data": {}}',
            headers={"Nats-Msg-Id": "bad-1"},
        )
        await js.publish(f"{subjects.prefix}.job.{uuid.uuid4()}.submitted", b"not json at all", headers={"Nats-Msg-Id": "bad-2"})
        dead = await collect(js, subjects.dlq(subjects.durable("test", "submitted")), 3, timeout=15)
        errors = sorted(m.headers["Forge-Error"].split(":")[0] for m in dead)
        assert errors == ["PermanentFailure", "ValidationError", "ValidationError"]
        assert b"not json at all" in {m.data for m in dead}
        assert len(calls) == 1  # never retried
        await asyncio.sleep(1.5)
        info = await js.consumer_info(subjects.jobs_stream, subjects.durable("test", "submitted"))
        assert info.num_ack_pending == 0 and info.num_redelivered == 0
    finally:
        await broker.stop()
