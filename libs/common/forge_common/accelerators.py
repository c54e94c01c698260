"""Accelerator profiles: what a job asks for, what an executor can offer, and how honest we are
about each route on each.

Grades (per profile and route): ``certified`` — verified end to end on real devices; ``compatible``
— the code path exists and is exercised where possible (a CUDA build of torch on CPU, the device
selection and error paths), but no run on that hardware is on record; ``build-only`` — images
build and the configuration is accepted, nothing more.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from .jobspec import Task

Grade = Literal["certified", "compatible", "build-only"]


@dataclass(frozen=True)
class Profile:
    name: str
    vendor: str
    resource: str | None  # the Kubernetes extended resource; None for CPU
    image_suffix: str  # appended to the trainer image name ("" for the CPU image)
    torch_backend: str  # what torch calls the device
    grades: dict[str, Grade]  # route ("cv", "llm") → grade
    visibility_env: str | None = None  # the variable that limits a process to some devices ("0,2")


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile("cpu", "any", None, "", "cpu", {"cv": "certified", "llm": "certified"}),
        Profile("nvidia", "NVIDIA", "nvidia.com/gpu", "-cu", "cuda", {"cv": "compatible", "llm": "compatible"}, "CUDA_VISIBLE_DEVICES"),
        Profile("amd", "AMD", "amd.com/gpu", "-rocm", "cuda (HIP)", {"cv": "build-only", "llm": "build-only"}, "HIP_VISIBLE_DEVICES"),
        Profile("intel", "Intel", "gpu.intel.com/xe", "-xpu", "xpu", {"cv": "build-only", "llm": "build-only"}, "ZE_AFFINITY_MASK"),
    )
}


def route_of(task: Task) -> str:
    return "llm" if task in (Task.LLM_SFT, Task.VLM_SFT) else "cv"


def slots_needed(profile: str, spec: dict[str, Any]) -> int:
    """Slots a job takes: one on the CPU profile; on a GPU profile, the devices it asks for (the
    same rule ``db.slots_in_use`` sums over running jobs)."""
    return 1 if profile == "cpu" else int(spec.get("devices", 1))
