"""What the built-in trainers share: device selection, reproducibility, ONNX export and checks."""

from __future__ import annotations

import random
import warnings
from pathlib import Path
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


def export_onnx(model: torch.nn.Module, example: torch.Tensor, path: Path, *, input_name: str, output_name: str) -> None:
    """Export with a dynamic batch axis (legacy exporter: fast and exact for these models)."""
    model.eval()
    with warnings.catch_warnings():
        # tracing warns about Python-side shape checks that are constant for these models
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        _export(model, example, path, input_name=input_name, output_name=output_name)


def _export(model: torch.nn.Module, example: torch.Tensor, path: Path, *, input_name: str, output_name: str) -> None:
    torch.onnx.export(
        model,
        (example,),
        str(path),
        dynamo=False,
        opset_version=17,
        input_names=[input_name],
        output_names=[output_name],
        dynamic_axes={input_name: {0: "batch"}, output_name: {0: "batch"}},
    )


def verify_onnx(model: torch.nn.Module, path: Path, batch: torch.Tensor, *, tolerance: float = 1e-3) -> float:
    """``onnx.checker`` plus onnxruntime against torch on a batch of another size; returns the max
    absolute difference, raising when it exceeds ``tolerance``."""
    import onnx
    import onnxruntime as ort

    onnx.checker.check_model(onnx.load(str(path)))
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    (ours,) = session.run(None, {name: batch.cpu().numpy()})
    with torch.no_grad():
        reference = model.eval()(batch).float().cpu().numpy()
    diff = float(np.abs(ours - reference).max())
    if not diff <= tolerance:
        raise TrainerError("trainer_crash", f"the ONNX export does not match torch (max difference {diff:.2e})")
    return diff
