"""The whole platform as processes: the four services on a real NATS and PostgreSQL, with real
trainings on generated data."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from forge_cli.client import ApiError, ForgeClient

from ..conftest import _with_database, free_port

SERVICES = ("forge_api", "forge_scheduler", "forge_log_relay", "forge_registrar")
TERMINAL = {"succeeded", "stopped", "canceled", "failed"}


@dataclass
class Stack:
    url: str
    home: Path
    env: dict[str, str]
    client: ForgeClient
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self, module: str) -> None:
        log = open(self.home / "logs" / f"{module}.log", "ab")
        self.procs[module] = subprocess.Popen([sys.executable, "-m", module], env=self.env, stdout=log, stderr=subprocess.STDOUT)

    def stop(self, module: str, sig: int = signal.SIGTERM) -> None:
        proc = self.procs.pop(module)
        proc.send_signal(sig)
        proc.wait(30)

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode}: {self.log(name)[-3000:]}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise TimeoutError("the stack did not become ready")

    def log(self, module: str) -> str:
        return (self.home / "logs" / f"{module}.log").read_text(errors="replace")

    def submit(
        self, name: str, base_model: str = "timm/test_vit", dataset: str = "shapes", start: bool = True, **hyperparameters: Any
    ) -> dict[str, Any]:
        body = {
            "name": name,
            "task": "classification",
            "dataset": {"name": dataset, "version": 1},
            "base_model": base_model,
            "hyperparameters": hyperparameters,
            "start": start,
        }
        return self.client.post("/v1/jobs", body)  # type: ignore[no-any-return]

    def job(self, job_id: str) -> dict[str, Any]:
        return self.client.get(f"/v1/jobs/{job_id}")  # type: ignore[no-any-return]

    def wait_state(self, job_id: str, states: set[str], timeout: float = 240) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job = self.job(job_id)
            if job["state"] in states:
                return job
            time.sleep(0.2)
        raise TimeoutError(f"job {job_id} is still {self.job(job_id)['state']}, expected one of {states}\n" + self.diagnostics())

    def wait_event(self, job_id: str, kind: str, predicate: Any = lambda data: True, timeout: float = 240) -> dict[str, Any]:
        """The first event of ``kind`` about the job (history included) that satisfies ``predicate``."""
        deadline = time.monotonic() + timeout
        for event, _, data in self.client.events(job_id):
            if event == kind and predicate(data):
                return data  # type: ignore[no-any-return]
            if time.monotonic() > deadline:
                break
        raise TimeoutError(f"no {kind} event for job {job_id}")

    def wait_model(self, job_id: str, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job = self.job(job_id)
            if job.get("model"):
                return job
            time.sleep(0.2)
        raise TimeoutError(f"job {job_id} registered no model\n" + self.diagnostics())

    def diagnostics(self) -> str:
        return "\n".join(f"--- {m} ---\n{self.log(m)[-2500:]}" for m in SERVICES)


def _database(admin_url: str) -> tuple[str, str]:
    name = f"forge_e2e_{uuid.uuid4().hex[:10]}"
    return name, _with_database(admin_url, name)


@contextlib.contextmanager
def running_stack(nats_url: str, postgres_admin_url: str, home: Path, **extra_env: str) -> Iterator[Stack]:
    """The four services as processes on their own database and subject prefix."""
    (home / "logs").mkdir(parents=True, exist_ok=True)
    db_name, db_url = _database(postgres_admin_url)
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("FORGE_")},
        "FORGE_HOME": str(home),
        "FORGE_NATS_URL": nats_url,
        "FORGE_DATABASE_URL": db_url,
        "FORGE_BUS_PREFIX": f"e{uuid.uuid4().hex[:10]}",
        "FORGE_API_PORT": str(port),
        "FORGE_TELEMETRY_EXPORTER": "file",
        "FORGE_TELEMETRY_FILE": str(home / "traces.jsonl"),
        "FORGE_SCHEDULER_POLL_SECONDS": "0.2",
        "FORGE_SCHEDULER_DETECT_DEVICES": "false",
        "FORGE_API_SCRIPT_ALLOWED_HOSTS": "127.0.0.1",  # the tests serve scripts on loopback
        "PYTHONUNBUFFERED": "1",
        **extra_env,
    }
    url = f"http://127.0.0.1:{port}"
    s = Stack(url=url, home=home, env=env, client=ForgeClient(url, timeout=120))
    for module in SERVICES:
        s.start(module)
    try:
        s.wait_ready()
        yield s
    finally:
        for module in list(s.procs):
            s.procs[module].send_signal(signal.SIGTERM)
        for proc in s.procs.values():
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
        for pid_file in (home / "runs").glob("*/*/pid"):  # no trainer outlives the test
            try:
                os.killpg(int(pid_file.read_text().split()[0]), signal.SIGKILL)
            except (ProcessLookupError, ValueError, PermissionError):
                pass
        s.client.close()

        async def drop() -> None:
            conn = await asyncpg.connect(postgres_admin_url)
            try:
                await conn.execute(f'DROP DATABASE IF EXISTS "{db_name}" WITH (FORCE)')
            finally:
                await conn.close()

        asyncio.run(drop())


@pytest.fixture(scope="module")
def stack(nats_url: str, postgres_admin_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(nats_url, postgres_admin_url, tmp_path_factory.mktemp("forge-home")) as s:
        yield s


def upload_folder(stack: Stack, name: str, folder: Path) -> dict[str, Any]:
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        archive = shutil.make_archive(str(Path(tmp) / name), "gztar", root_dir=folder)
        try:
            stack.client.post("/v1/datasets", {"name": name})
        except ApiError as exc:
            if exc.status != 409:
                raise
        return stack.client.upload_version(name, Path(archive))  # type: ignore[no-any-return]


def forge(stack: Stack, *args: str) -> tuple[int, str]:
    """The forge command against the stack, as a user types it: (exit code, what it printed). A
    last argument ``--`` means: no ``--api`` (commands that do not talk to the api)."""
    from typer.testing import CliRunner

    from forge_cli.main import app

    argv = list(args[:-1]) if args and args[-1] == "--" else [*args, "--api", stack.url]
    result = CliRunner().invoke(app, argv, catch_exceptions=False)
    return result.exit_code, result.output
