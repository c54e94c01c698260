"""What a user asks for: the job spec, its tasks and hyperparameters with the defaults users expect.

The api validates a spec here (a 422 that names the field) and stores the *resolved* spec —
defaults filled in — which is exactly what the trainer receives as ``CONFIG_JSON``, so the job
page shows what ran.
"""

from __future__ import annotations

import re
from enum import StrEnum
from functools import cache
from importlib import resources
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import InvalidInput


class Task(StrEnum):
    CLASSIFICATION = "classification"
    DETECTION = "detection"
    SEGMENTATION = "segmentation"
    LLM_SFT = "llm-sft"
    VLM_SFT = "vlm-sft"


class ClassificationHyperparameters(BaseModel):
    """Image classification with a timm architecture."""

    model_config = ConfigDict(extra="forbid")

    epochs: int = Field(100, ge=1, le=10_000, description="Passes over the training split")
    imgsz: int = Field(640, ge=16, le=4096, description="Square input size in pixels")
    batch: int = Field(16, ge=1, le=4096, description="Images per step")
    train_val_ratio: float = Field(0.8, gt=0.0, lt=1.0, description="Share of items used for training (the rest is the val split)")
    lr: float = Field(0.001, gt=0.0, le=10.0, description="Peak learning rate")
    optimizer: Literal["adamw", "adam", "sgd"] = Field("adamw", description="Optimizer")
    weight_decay: float = Field(0.05, ge=0.0, le=1.0, description="Weight decay")
    warmup_epochs: float = Field(0.0, ge=0.0, le=100.0, description="Linear learning-rate warm-up, in epochs")
    seed: int = Field(0, ge=0, description="Seed for the split, initialisation and data order")
    workers: int = Field(0, ge=0, le=64, description="Data-loading worker processes")
    augment: bool = Field(True, description="Random horizontal flips of training images")
    patience: int | None = Field(None, ge=1, description="Stop early after this many epochs without a better top-1")
    amp: bool = Field(True, description="Mixed precision where the device supports it (CUDA)")


HYPERPARAMETERS: dict[Task, type[BaseModel]] = {
    Task.CLASSIFICATION: ClassificationHyperparameters,
}

# Tasks with a built-in trainer, and the trainer module the scheduler runs for each.
TRAINERS: dict[Task, str] = {
    Task.CLASSIFICATION: "forge_trainers.classification",
}

# Which dataset formats each task can train on.
TASK_FORMATS: dict[Task, tuple[str, ...]] = {
    Task.CLASSIFICATION: ("imagenet-folder",),
}


class DatasetRef(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=100)
    version: int = Field(ge=1)


NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"


class JobSpec(BaseModel):
    """The part of a job a user chooses. Fixed once the job exists (a rerun is comparable)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME_PATTERN, description="Also the name of the model it registers")
    task: Task
    dataset: DatasetRef
    base_model: str = Field(min_length=1, max_length=300, description="e.g. timm/test_vit")
    hyperparameters: dict[str, Any] = Field(default_factory=dict)
    accelerator: str = Field("cpu", description="Accelerator profile")
    registration: Literal["auto", "manual"] = Field("auto", description="Register the model when artifacts are uploaded, or on deploy")


@cache
def timm_architectures() -> frozenset[str]:
    text = resources.files("forge_common.data").joinpath("timm_architectures.txt").read_text(encoding="utf-8")
    return frozenset(line.strip() for line in text.splitlines() if line.strip())


_TIMM_RE = re.compile(r"^timm/([a-z0-9_.]+)$")


def check_base_model(task: Task, base_model: str) -> None:
    if task is Task.CLASSIFICATION:
        m = _TIMM_RE.match(base_model)
        if not m:
            raise InvalidInput(
                f"base_model {base_model!r} is not a timm architecture: use timm/<architecture>, e.g. timm/resnet18",
                field="base_model",
            )
        if m.group(1) not in timm_architectures():
            raise InvalidInput(f"base_model {base_model!r}: timm has no architecture {m.group(1)!r}", field="base_model")


def resolve_hyperparameters(task: Task, given: dict[str, Any]) -> dict[str, Any]:
    """Validate and fill in defaults; the error names the first bad field."""
    model = HYPERPARAMETERS.get(task)
    if model is None:
        available = ", ".join(t.value for t in TRAINERS)
        raise InvalidInput(f"task {task.value!r} has no trainer in this installation yet; available: {available}", field="task")
    try:
        return model.model_validate(given).model_dump()
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise InvalidInput(f"hyperparameters.{loc}: {err['msg']}", field=f"hyperparameters.{loc}") from None


# Accelerator profiles this installation offers (the scheduling work widens this to what the
# executors report as allocatable).
ACCELERATORS: frozenset[str] = frozenset({"cpu"})
