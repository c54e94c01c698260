"""What the scheduler needs from an executor — the local one (processes on this machine) and the
Kubernetes one (a batch/v1 Job per attempt) implement the same interface.

An attempt is known by its ``run_ref`` (a folder for local runs, ``<namespace>/<job name>`` on
Kubernetes), recorded in the database, so any scheduler replica — or a restarted one — can find
it again. Everything else an executor knows it must be able to rediscover from ``run_ref``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from forge_sdk import protocol


@dataclass(frozen=True)
class LaunchSpec:
    job_id: str
    attempt: int
    run_ref: str
    command: list[str]  # the trainer's command line (inside the trainer image on Kubernetes)
    env: dict[str, str]  # the trainer's environment (object-storage keys only for local processes)
    accelerator: str = "cpu"  # the profile name (forge_common.accelerators.PROFILES)
    devices: int = 1  # accelerators per attempt (ignored for cpu)
    visible_devices: tuple[int, ...] = ()  # local runs: which of the machine's devices are this attempt's
    image: str | None = None  # a custom trainer image (Kubernetes); None: the built-in image
    image_pull_secret: str | None = None  # the Kubernetes Secret to pull a custom image with
    time_limit_seconds: int | None = None  # after this the attempt fails as deadline_exceeded
    stop_grace_seconds: float = 60.0  # how long a stopped trainer may take to save and exit
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Handle:
    run_ref: str
    pid: int | None = None  # local runs: the launcher's pid and its kernel start time
    pid_started: int | None = None


@dataclass(frozen=True)
class ExitStatus:
    returncode: int | None
    signal: int | None = None
    lost: bool = False  # gone without an exit record: killed with its launcher / pod vanished
    error: str | None = None  # the executor could not start the trainer, and why
    reason: str | None = None  # what the executor knows: out_of_memory, image_pull, unschedulable, deadline_exceeded
    never_started: bool = False  # the trainer never ran (no output to read): the executor's account is its log


@dataclass(frozen=True)
class Capacity:
    """How many attempts of a profile this executor can run at once, and why not more."""

    profile: str
    total: int
    detail: str = ""
    per_job: int | None = None  # the most one attempt can ever get (one node's worth); None: the total
    allocatable: int | None = None  # what the profile could ever offer, busy or not; None: the total
    # the most one attempt could get right now, Forge's own running attempts counted (they are
    # spread over nodes: free devices in sum need not be free on one node); None: per_job
    per_job_now: int | None = None


class Executor(Protocol):
    name: str
    runs_images: bool  # it can run a custom trainer image

    def run_ref(self, job_id: str, attempt: int) -> str:
        """Where the attempt lives; deterministic, so it can be recorded before launching."""
        ...

    def log_uri(self, run_ref: str) -> str:
        """What the log-relay follows: ``file://…`` or ``k8s://<namespace>/<pod selector>``."""
        ...

    def trainer_env(self, run_ref: str) -> dict[str, str]:
        """What the executor adds to every trainer's environment (result file, work folder)."""
        ...

    async def launch(self, spec: LaunchSpec) -> Handle: ...

    async def poll(self, handle: Handle) -> ExitStatus | None:
        """None while the attempt is pending or running; its exit once it has ended."""
        ...

    async def pending_reason(self, handle: Handle) -> str | None:
        """Why a launched attempt has not started yet (unschedulable, pulling the image …)."""
        ...

    async def terminate(self, handle: Handle, grace_seconds: float) -> bool:
        """Ask the trainer to stop (SIGTERM); False when there was nothing to stop."""
        ...

    async def kill(self, handle: Handle) -> bool: ...

    async def read_result(self, handle: Handle) -> protocol.Outcome | None:
        """The outcome the trainer reported at exit (SDK trainers), if any."""
        ...

    async def last_error(self, handle: Handle) -> str | None:
        """The most telling line at the end of the trainer's output."""
        ...

    async def cleanup(self, handle: Handle) -> None: ...

    async def capacity(self) -> list[Capacity]:
        """What this executor can offer now (discovered: devices, allocatable node resources)."""
        ...
