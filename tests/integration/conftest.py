from __future__ import annotations

import asyncio
import contextlib
import io
import tarfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import nats
import pytest

from forge_api.app import create_app
from forge_api.settings import ApiSettings
from forge_common import db
from forge_common.settings import CommonSettings
from forge_common.subjects import Subjects


@pytest.fixture
def s3_settings(s3_server: dict[str, str], common_settings: CommonSettings) -> CommonSettings:
    """The test's settings with object storage on the S3 API (a bucket of its own)."""
    import uuid

    return CommonSettings(
        **{k: getattr(common_settings, k) for k in ("nats_url", "database_url", "bus_prefix", "home")},
        s3_endpoint=s3_server["endpoint"],
        s3_access_key=s3_server["access_key"],
        s3_secret_key=s3_server["secret_key"],
        s3_bucket=f"t{uuid.uuid4().hex[:10]}",
    )


@pytest.fixture
async def pool(common_settings: CommonSettings) -> AsyncIterator[Any]:
    p = await db.connect(common_settings.database_url)
    yield p
    await p.close()


@pytest.fixture
async def js(common_settings: CommonSettings) -> AsyncIterator[Any]:
    from forge_common import bus

    nc = await nats.connect(common_settings.nats_url)
    jsc = nc.jetstream()
    await bus.ensure_streams(jsc, Subjects(common_settings.bus_prefix))
    yield jsc
    await nc.close()


@pytest.fixture
async def api(common_settings: CommonSettings) -> AsyncIterator[httpx.AsyncClient]:
    """The api in-process (its real lifespan: database, NATS, store, outbox relay)."""
    # the tests' script servers listen on loopback, which only a named host may be
    app = create_app(common_settings, ApiSettings(max_archive_files=1000, max_extracted_bytes=50_000_000, script_allowed_hosts="127.0.0.1"))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://forge") as client:
            client.app = app  # type: ignore[attr-defined]
            yield client


def tar_of(folder: Path, *, with_folders: bool = False) -> bytes:
    """The folder as a .tar.gz; ``with_folders`` keeps folder entries (an empty one included)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for p in sorted(folder.rglob("*")):
            if p.is_file() or (with_folders and p.is_dir()):
                tar.add(p, arcname=p.relative_to(folder).as_posix(), recursive=False)
    return buf.getvalue()


async def upload(
    client: httpx.AsyncClient, name: str, data: bytes, filename: str = "data.tar.gz", fmt: str | None = None
) -> httpx.Response:
    with contextlib.suppress(Exception):
        await client.post("/v1/datasets", json={"name": name})
    return await client.post(f"/v1/datasets/{name}/versions", files={"file": (filename, data)}, data={"format": fmt} if fmt else {})


async def collect(js: Any, subject: str, count: int, timeout: float = 10.0) -> list[Any]:
    """The first ``count`` messages on ``subject`` in the stream (from the beginning)."""
    sub = await js.subscribe(subject, ordered_consumer=True)
    out = []
    try:
        async with asyncio.timeout(timeout):
            while len(out) < count:
                out.append(await sub.next_msg(timeout=timeout))
    finally:
        await sub.unsubscribe()
    return out
