"""The local executor: one process per attempt on this machine, in its own session, output in a file.

A run folder per attempt (its ``run_ref``) holds ``output.log`` (everything the trainer prints),
``result.json`` (the SDK's outcome), ``exit.json`` (written by the launcher), ``pid`` and ``work/``
(scratch). The pid and its kernel start time are recorded, so a restarted scheduler re-attaches to
a run that is still going and never mistakes a recycled pid for it.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from forge_common.accelerators import PROFILES
from forge_sdk import protocol

from ..launcher import EXIT_FILE
from .base import Capacity, ExitStatus, Handle, LaunchSpec

OUTPUT_FILE = "output.log"
RESULT_FILE = "result.json"
WORK_DIR = "work"
PID_FILE = "pid"  # "<pid> <start time>": lets operators' tools find a run's process group

# Counts devices with the trainers' own torch (the scheduler itself has none).
_PROBE = """
import json
try:
    import torch
    hip = getattr(torch.version, "hip", None) is not None
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    xpu = torch.xpu.device_count() if hasattr(torch, "xpu") and torch.xpu.is_available() else 0
    print(json.dumps({"nvidia": 0 if hip else n, "amd": n if hip else 0, "intel": xpu}))
except Exception as exc:
    print(json.dumps({"error": str(exc)}))
"""


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


def probe_devices(python: str, timeout: float = 120.0) -> tuple[dict[str, int], str]:
    """GPUs torch can see from the trainers' interpreter: ({profile: count}, a note)."""
    try:
        out = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=timeout, check=False).stdout
        found = json.loads(out.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as exc:
        return {}, f"device probe failed: {exc}"
    if "error" in found:
        return {}, f"device probe failed: {found['error']}"
    return {k: int(v) for k, v in found.items()}, ""


def visibility(profile: str, indices: tuple[int, ...], parent: Mapping[str, str]) -> dict[str, str]:
    """The variable that limits a trainer to its devices. Indices count the devices this process
    sees: when the scheduler itself was limited (``CUDA_VISIBLE_DEVICES=4,5``), they map onto
    that list, so a trainer given index 1 sees device 5."""
    var = PROFILES[profile].visibility_env if profile in PROFILES else None
    if var is None or not indices:
        return {}
    mine = [d.strip() for d in parent[var].split(",")] if parent.get(var) else None
    ids = [mine[i] if mine is not None and i < len(mine) else str(i) for i in indices]
    return {var: ",".join(ids)}


CONTAINER_FILE = "container"  # the container's name, for an attempt that runs a custom image


def container_name(spec: LaunchSpec) -> str:
    return f"forge-{spec.job_id}-{spec.attempt}"


class LocalExecutor:
    name = "local"

    def __init__(
        self,
        run_root: Path,
        *,
        cpu_slots: int = 1,
        devices: dict[str, int] | None = None,
        device_note: str = "",
        container_runtime: str | None = None,
    ) -> None:
        self.container_runtime = container_runtime
        self.runs_images = container_runtime is not None
        self.run_root = run_root.resolve()
        self.run_root.mkdir(parents=True, exist_ok=True)
        self.cpu_slots = cpu_slots
        self.devices = devices or {}
        self.device_note = device_note
        self._children: dict[int, subprocess.Popen[bytes]] = {}

    # -- where things are ----------------------------------------------------------------------------

    def run_ref(self, job_id: str, attempt: int) -> str:
        return str(self.run_root / str(job_id) / str(attempt))

    def log_uri(self, run_ref: str) -> str:
        return (Path(run_ref) / OUTPUT_FILE).as_uri()

    def trainer_env(self, run_ref: str) -> dict[str, str]:
        return {"FORGE_RESULT_FILE": str(Path(run_ref) / RESULT_FILE), "FORGE_WORK_DIR": str(Path(run_ref) / WORK_DIR)}

    # -- what it can offer -----------------------------------------------------------------------------

    async def capacity(self) -> list[Capacity]:
        out = [Capacity("cpu", self.cpu_slots, f"{self.cpu_slots} CPU slot(s) on this machine")]
        for profile in ("nvidia", "amd", "intel"):
            n = self.devices.get(profile, 0)
            out.append(Capacity(profile, n, f"{n} device(s) visible to torch" if n else (self.device_note or "no device visible to torch")))
        return out

    # -- running -----------------------------------------------------------------------------------------

    async def launch(self, spec: LaunchSpec) -> Handle:
        if spec.image and self.container_runtime is None:
            raise ValueError(
                "a custom image needs a container runtime: set FORGE_SCHEDULER_CONTAINER_RUNTIME (docker or podman) "
                "or run this job on the Kubernetes executor"
            )
        return await asyncio.to_thread(self._launch, spec)

    def container_command(self, spec: LaunchSpec, env: dict[str, str]) -> list[str]:
        """The runtime's command line for a custom image: the image's own entrypoint (or the given
        command) with the trainer's environment passed by name (values stay off the command line),
        the run folder and the attempt's local inputs and outputs mounted at the same paths, and
        the host's network (object storage on 127.0.0.1 stays reachable). NVIDIA devices are
        handed over with ``--gpus`` (host ids); inside, they are numbered from 0 again, so the
        visibility variable is not passed on."""
        assert self.container_runtime is not None and spec.image is not None
        run_dir = Path(spec.run_ref)
        mounts = [f"{run_dir}:{run_dir}"]
        for key, read_only in (("OUTPUT_DIR", False), ("INPUT_URI", True), ("RESUME_FROM", True)):
            value = env.get(key, "")
            path = Path(value.removeprefix("file://")) if value.startswith(("/", "file://")) else None
            if path is None:
                continue
            if not read_only:
                path.mkdir(parents=True, exist_ok=True)
            if path.exists():
                mounts.append(f"{path}:{path}" + (":ro" if read_only else ""))
        gpus = env.get("CUDA_VISIBLE_DEVICES") if spec.accelerator == "nvidia" and spec.visible_devices else None
        names = sorted(k for k in env if not (gpus and k == "CUDA_VISIBLE_DEVICES"))
        command = [self.container_runtime, "run", "--rm", "--name", container_name(spec), "--network", "host", "--workdir", str(run_dir)]
        command += [arg for key in names for arg in ("--env", key)]
        command += [arg for mount in mounts for arg in ("--volume", mount)]
        if gpus:
            command += ["--gpus", f"device={gpus}"]
        return [*command, spec.image, *spec.command]

    def _launch(self, spec: LaunchSpec) -> Handle:
        run_dir = Path(spec.run_ref)
        env = {**spec.env, **visibility(spec.accelerator, spec.visible_devices, os.environ)}
        command = self.container_command(spec, env) if spec.image else spec.command
        if spec.image:
            (run_dir / CONTAINER_FILE).parent.mkdir(parents=True, exist_ok=True)
            (run_dir / CONTAINER_FILE).write_text(container_name(spec) + "\n")
        (run_dir / WORK_DIR).mkdir(parents=True, exist_ok=True)
        out = open(run_dir / OUTPUT_FILE, "ab", buffering=0)
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "forge_scheduler.launcher", str(run_dir), "--", *command],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=run_dir,
                start_new_session=True,
                close_fds=True,
            )
        finally:
            out.close()
        self._children[proc.pid] = proc
        started = _proc_start_time(proc.pid) or 0
        (run_dir / PID_FILE).write_text(f"{proc.pid} {started}\n")
        return Handle(run_ref=spec.run_ref, pid=proc.pid, pid_started=started)

    def _alive(self, handle: Handle) -> bool:
        if handle.pid is None:
            return False
        child = self._children.get(handle.pid)
        if child is not None:
            return child.poll() is None
        started = _proc_start_time(handle.pid)
        return started is not None and (not handle.pid_started or started == handle.pid_started)

    async def poll(self, handle: Handle) -> ExitStatus | None:
        return await asyncio.to_thread(self._poll, handle)

    def _poll(self, handle: Handle) -> ExitStatus | None:
        record = Path(handle.run_ref) / EXIT_FILE
        if record.exists():
            if handle.pid is not None and (child := self._children.pop(handle.pid, None)) is not None:
                child.wait()
            data = json.loads(record.read_text())
            sig = data.get("signal")
            return ExitStatus(
                returncode=data.get("returncode"),
                signal=sig,
                error=data.get("error"),
                reason="out_of_memory" if sig == signal.SIGKILL else None,
            )
        if self._alive(handle):
            return None
        if record.exists():  # written between the two checks
            return self._poll(handle)
        if handle.pid is not None:
            self._children.pop(handle.pid, None)
        return ExitStatus(returncode=None, signal=signal.SIGKILL, lost=True)

    async def pending_reason(self, handle: Handle) -> str | None:
        return None  # a local process starts at once

    def _signal_group(self, handle: Handle, sig: int) -> bool:
        if handle.pid is None or not self._alive(handle):
            return False
        try:
            os.killpg(handle.pid, sig)
        except ProcessLookupError:
            return False
        return True

    async def terminate(self, handle: Handle, grace_seconds: float) -> bool:
        """SIGTERM to the trainer's process group; the scheduler sends SIGKILL after the grace."""
        return self._signal_group(handle, signal.SIGTERM)

    async def kill(self, handle: Handle) -> bool:
        killed = self._signal_group(handle, signal.SIGKILL)
        marker = Path(handle.run_ref) / CONTAINER_FILE
        if self.container_runtime and marker.exists():  # the runtime's CLI is gone; its container is not
            name = marker.read_text().strip()
            await asyncio.to_thread(subprocess.run, [self.container_runtime, "kill", name], capture_output=True, timeout=30, check=False)
        return killed

    async def read_result(self, handle: Handle) -> protocol.Outcome | None:
        path = Path(handle.run_ref) / RESULT_FILE
        try:
            record = protocol.parse_record(await asyncio.to_thread(path.read_text, encoding="utf-8"))
        except (FileNotFoundError, protocol.ProtocolError):
            return None
        return record if isinstance(record, protocol.Outcome) else None

    async def last_error(self, handle: Handle) -> str | None:
        return await asyncio.to_thread(last_error_line, Path(handle.run_ref) / OUTPUT_FILE)

    async def cleanup(self, handle: Handle) -> None:
        await asyncio.to_thread(shutil.rmtree, Path(handle.run_ref) / WORK_DIR, True)


def last_error_line(path: Path, max_bytes: int = 64 * 1024) -> str | None:
    """The most telling line at the end of an output: the last error-looking one, else the last."""
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - max_bytes))
            tail = fh.read().decode("utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return None
    return pick_error_line(tail)


def pick_error_line(tail: list[str]) -> str | None:
    lines = [ln.strip() for ln in tail if ln.strip() and not ln.startswith(protocol.PREFIX)]
    for line in reversed(lines):
        if _ERROR_RE.search(line) and not line.startswith("Traceback"):
            return line[:500]
    return lines[-1][:500] if lines else None
