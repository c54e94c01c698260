"""The same checks against every kind of server this suite can use: the servers on this machine
(or the tests' private ones), and containers from testcontainers when a Docker engine runs
(there is none on the development machines and in CI here: those cases skip, saying why)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from forge_common import bus, db, outbox
from forge_common.events import JobSubmitted, JobSubmittedData, decode
from forge_common.settings import CommonSettings
from forge_common.storage import open_store
from forge_common.subjects import Subjects

from .conftest import collect


@pytest.fixture(params=["machine", "testcontainers"])
def servers(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[dict[str, str | None]]:
    if request.param == "machine":
        s3: dict[str, str] = request.getfixturevalue("s3_server")
        yield {
            "nats": request.getfixturevalue("nats_url"),
            "database": request.getfixturevalue("fresh_database_url"),
            "s3_endpoint": s3["endpoint"],
            "s3_access_key": s3["access_key"],
            "s3_secret_key": s3["secret_key"],
        }
        return
    from docker.errors import DockerException
    from testcontainers.community.minio import MinioContainer
    from testcontainers.community.nats import NatsContainer
    from testcontainers.community.postgres import PostgresContainer

    try:
        pg = PostgresContainer("postgres:16", driver=None)
        nats = NatsContainer("nats:2.10", jetstream=True)
        minio = MinioContainer("minio/minio:latest")
    except DockerException as exc:
        pytest.skip(f"no Docker engine for testcontainers ({str(exc)[:80]}…); the same checks ran against this machine's servers")
    with pg, nats, minio:
        conf = minio.get_config()
        yield {
            "nats": nats.nats_uri(),
            "database": pg.get_connection_url(),
            "s3_endpoint": conf["endpoint"],
            "s3_access_key": conf["access_key"],
            "s3_secret_key": conf["secret_key"],
        }


async def test_a_state_change_and_its_event_travel_through_every_server(servers: dict[str, Any], tmp_path: Any) -> None:
    settings = CommonSettings(
        nats_url=servers["nats"],
        database_url=servers["database"],
        bus_prefix=f"t{uuid.uuid4().hex[:8]}",
        home=tmp_path,
        s3_endpoint=servers["s3_endpoint"],
        s3_access_key=servers["s3_access_key"],
        s3_secret_key=servers["s3_secret_key"],
        s3_bucket=f"parity{uuid.uuid4().hex[:8]}",
    )
    subjects = Subjects(settings.bus_prefix)
    pool = await db.connect(settings.database_url)
    nc, js = await bus.connect(settings, name="parity")
    try:
        assert await db.migrate(pool) == []  # connect() applied everything already
        await bus.ensure_streams(js, subjects)
        event = JobSubmitted.of(JobSubmittedData(job_id=uuid.uuid4(), name="p", task="classification"), source="/test")
        async with pool.acquire() as conn, conn.transaction():
            await outbox.add(conn, subjects, event, producer="parity")
        assert await outbox.OutboxRelay(pool, js, producer="parity").drain() == 1
        (msg,) = await collect(js, subjects.of(event), 1)
        assert decode(msg.data) == event
        store = open_store(settings)
        await store.put_bytes("parity/x", b"ok")
        assert await store.get_bytes("parity/x") == b"ok"
    finally:
        await nc.close()
        await pool.close()


async def test_migrations_are_applied_once_under_concurrency(fresh_database_url: str) -> None:
    import asyncio

    await db.ensure_database(fresh_database_url)
    pools = [await db.create_pool(fresh_database_url) for _ in range(4)]
    try:
        applied = await asyncio.gather(*(db.migrate(p) for p in pools))
        assert sorted(len(a) for a in applied) == [0, 0, 0, len(db.migration_files())]
        async with pools[0].acquire() as conn:
            assert await conn.fetchval("SELECT name FROM projects") == "default"
    finally:
        for p in pools:
            await p.close()
