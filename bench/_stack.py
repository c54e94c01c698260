"""Start the embedded stack (``forge stack up``) in a temporary FORGE_HOME for a benchmark."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Stack:
    api: str
    nats: str
    home: Path

    def service_pid(self, module: str) -> int:
        """The pid of one service process (e.g. forge_api), to read its memory figures."""
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    cmd = (entry / "cmdline").read_bytes().split(b"\0")
                    env = (entry / "environ").read_bytes()
                except OSError:
                    continue
                if module.encode() in cmd and f"FORGE_HOME={self.home}".encode() in env:
                    return int(entry.name)
        raise LookupError(f"no {module} process for {self.home}")


@contextlib.contextmanager
def embedded(home: Path, **env: str) -> Iterator[Stack]:
    home.mkdir(parents=True, exist_ok=True)
    api_port, nats_port = free_port(), free_port()
    environ = {
        **{k: v for k, v in os.environ.items() if not k.startswith("FORGE_")},
        "FORGE_HOME": str(home),
        "FORGE_API_PORT": str(api_port),
        "FORGE_STACK_NATS_PORT": str(nats_port),
        **env,
    }
    forge = Path(sys.executable).parent / "forge"
    with open(home / "stack.log", "wb") as log:
        proc = subprocess.Popen([str(forge), "stack", "up"], env=environ, stdout=subprocess.DEVNULL, stderr=log)
    url = f"http://127.0.0.1:{api_port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit(f"the stack did not start; see {home / 'stack.log'}")
            time.sleep(0.25)
        yield Stack(api=url, nats=f"nats://127.0.0.1:{nats_port}", home=home)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
