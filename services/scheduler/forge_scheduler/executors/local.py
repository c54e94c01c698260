"""The local executor: one process per job on this machine, in its own session, output in a file.

A run folder per attempt holds ``output.log`` (everything the trainer prints), ``result.json``
(the SDK's outcome), ``exit.json`` (written by the launcher) and ``work/`` (scratch). The pid and
its kernel start time are recorded, so a restarted scheduler re-attaches to a run that is still
going, and never mistakes a recycled pid for it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from forge_sdk import protocol

from ..launcher import EXIT_FILE

OUTPUT_FILE = "output.log"
RESULT_FILE = "result.json"
WORK_DIR = "work"
PID_FILE = "pid"  # "<pid> <start time>": lets operators' tools find a run's process group


@dataclass(frozen=True)
class LaunchSpec:
    job_id: str
    attempt: int
    command: list[str]
    env: dict[str, str]
    run_dir: Path


@dataclass(frozen=True)
class Handle:
    pid: int
    pid_started: int


@dataclass(frozen=True)
class ExitStatus:
    returncode: int | None
    signal: int | None = None
    lost: bool = False  # gone without an exit record: its launcher was killed too (a shutdown, a reboot)
    error: str | None = None


def _proc_start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (None when there is no such process)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = text[text.rfind(")") + 2 :].split()
    if fields and fields[0] in ("Z", "X"):  # a zombie has finished
        return None
    return int(fields[19])


_ERROR_RE = re.compile(r"(Error|Exception|error:|Traceback|Killed)")


class LocalExecutor:
    name = "local"

    def __init__(self, run_root: Path) -> None:
        self.run_root = run_root.resolve()
        self.run_root.mkdir(parents=True, exist_ok=True)
        self._children: dict[int, subprocess.Popen[bytes]] = {}

    def run_dir(self, job_id: str, attempt: int) -> Path:
        return self.run_root / str(job_id) / str(attempt)

    def log_uri(self, run_dir: Path) -> str:
        return (run_dir / OUTPUT_FILE).as_uri()

    def prepare(self, job_id: str, attempt: int) -> Path:
        run_dir = self.run_dir(job_id, attempt)
        (run_dir / WORK_DIR).mkdir(parents=True, exist_ok=True)
        (run_dir / OUTPUT_FILE).touch()
        return run_dir

    def trainer_env(self, run_dir: Path) -> dict[str, str]:
        """What the executor adds to every trainer's environment."""
        return {
            "FORGE_RESULT_FILE": str(run_dir / RESULT_FILE),
            "FORGE_WORK_DIR": str(run_dir / WORK_DIR),
        }

    def launch(self, spec: LaunchSpec) -> Handle:
        out = open(spec.run_dir / OUTPUT_FILE, "ab", buffering=0)
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "forge_scheduler.launcher", str(spec.run_dir), "--", *spec.command],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=spec.env,
                cwd=spec.run_dir,
                start_new_session=True,
                close_fds=True,
            )
        finally:
            out.close()
        self._children[proc.pid] = proc
        started = _proc_start_time(proc.pid) or 0
        (spec.run_dir / PID_FILE).write_text(f"{proc.pid} {started}\n")
        return Handle(pid=proc.pid, pid_started=started)

    def _alive(self, handle: Handle) -> bool:
        child = self._children.get(handle.pid)
        if child is not None:
            return child.poll() is None
        started = _proc_start_time(handle.pid)
        return started is not None and (handle.pid_started == 0 or started == handle.pid_started)

    def poll(self, handle: Handle | None, run_dir: Path) -> ExitStatus | None:
        """None while the trainer runs; its exit status once it has ended."""
        record = run_dir / EXIT_FILE
        if record.exists():
            if handle is not None and (child := self._children.pop(handle.pid, None)) is not None:
                child.wait()
            data = json.loads(record.read_text())
            return ExitStatus(returncode=data.get("returncode"), signal=data.get("signal"), error=data.get("error"))
        if handle is None or self._alive(handle):
            return None
        if record.exists():  # written between the two checks
            return self.poll(handle, run_dir)
        self._children.pop(handle.pid, None)
        return ExitStatus(returncode=None, signal=signal.SIGKILL, lost=True)

    def _signal_group(self, handle: Handle, sig: int) -> bool:
        if not self._alive(handle):
            return False
        try:
            os.killpg(handle.pid, sig)
        except ProcessLookupError:
            return False
        return True

    def terminate(self, handle: Handle) -> bool:
        """SIGTERM to the trainer's process group: the trainer finishes its step, saves and exits."""
        return self._signal_group(handle, signal.SIGTERM)

    def kill(self, handle: Handle) -> bool:
        return self._signal_group(handle, signal.SIGKILL)

    def read_result(self, run_dir: Path) -> protocol.Outcome | None:
        path = run_dir / RESULT_FILE
        try:
            record = protocol.parse_record(path.read_text(encoding="utf-8"))
        except (FileNotFoundError, protocol.ProtocolError):
            return None
        return record if isinstance(record, protocol.Outcome) else None

    def last_error(self, run_dir: Path, max_bytes: int = 64 * 1024) -> str | None:
        """The most telling line at the end of the output: the last error-looking one, else the last."""
        path = run_dir / OUTPUT_FILE
        try:
            with open(path, "rb") as fh:
                size = fh.seek(0, os.SEEK_END)
                fh.seek(max(0, size - max_bytes))
                tail = fh.read().decode("utf-8", errors="replace").splitlines()
        except FileNotFoundError:
            return None
        lines = [ln.strip() for ln in tail if ln.strip() and not ln.startswith(protocol.PREFIX)]
        for line in reversed(lines):
            if _ERROR_RE.search(line) and not line.startswith("Traceback"):
                return line[:500]
        return lines[-1][:500] if lines else None

    def cleanup(self, run_dir: Path) -> None:
        shutil.rmtree(run_dir / WORK_DIR, ignore_errors=True)
