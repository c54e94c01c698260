"""What the built-in trainers share: device selection, reproducibility, the out-of-memory hint."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

from forge_sdk import TrainerError

# accelerator profile → torch device type
DEVICE_TYPES = {"cpu": "cpu", "nvidia": "cuda", "amd": "cuda", "intel": "xpu"}


def select_device(accelerator: str) -> torch.device:
    """The torch device for an accelerator profile; a clear error when it is not here."""
    kind = DEVICE_TYPES.get(accelerator)
    if kind is None:
        raise TrainerError("bad_config", f"unknown accelerator {accelerator!r}; known: {', '.join(DEVICE_TYPES)}")
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise TrainerError(
                "device_unavailable",
                f"accelerator {accelerator!r} needs a GPU, but torch sees none",
                "pick the cpu profile or a node with a GPU",
            )
        is_hip = torch.version.hip is not None
        if (accelerator == "amd") != is_hip:
            want = "a ROCm (HIP) build of torch" if accelerator == "amd" else "a CUDA build of torch"
            raise TrainerError(
                "device_unavailable", f"accelerator {accelerator!r} needs {want}", "use the trainer image for this accelerator"
            )
        return torch.device("cuda")
    if kind == "xpu":
        if not (hasattr(torch, "xpu") and torch.xpu.is_available()):
            raise TrainerError("device_unavailable", "accelerator 'intel' needs an Intel GPU visible to torch.xpu", "pick another profile")
        return torch.device("xpu")
    return torch.device("cpu")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def oom_hint(batch: int, device: torch.device) -> str:
    where = "GPU" if device.type in ("cuda", "xpu") else "CPU"
    smaller = max(1, batch // 2)
    return (
        f"batch {batch} ran out of {where} memory; try {smaller}"
        if batch > 1
        else f"the model does not fit in {where} memory even at batch 1; try a smaller image size"
    )
