"""What a user asks for: the job spec, its tasks and hyperparameters with the defaults users expect.

The api validates a spec here (a 422 that names the field) and stores the *resolved* spec —
defaults filled in — which is exactly what the trainer receives as ``CONFIG_JSON``, so the job
page shows what ran.
"""

from __future__ import annotations

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


class _CommonCV(BaseModel):
    """What every computer-vision trainer accepts."""

    model_config = ConfigDict(extra="forbid")

    epochs: int = Field(100, ge=1, le=10_000, description="Passes over the training split")
    imgsz: int = Field(640, ge=16, le=4096, description="Square input size in pixels")
    batch: int = Field(16, ge=1, le=4096, description="Images per step")
    train_val_ratio: float = Field(0.8, gt=0.0, lt=1.0, description="Share of items used for training (the rest is the val split)")
    optimizer: Literal["adamw", "adam", "sgd"] = Field("adamw", description="Optimizer")
    warmup_epochs: float = Field(0.0, ge=0.0, le=100.0, description="Linear learning-rate warm-up, in epochs")
    seed: int = Field(0, ge=0, description="Seed for the split, initialisation and data order")
    workers: int = Field(0, ge=0, le=64, description="Data-loading worker processes")
    augment: bool = Field(True, description="Random horizontal flips of training images")
    patience: int | None = Field(None, ge=1, description="Stop early after this many epochs without a better main metric")
    amp: bool = Field(True, description="Mixed precision where the device supports it (CUDA)")
    freeze_backbone_epochs: int = Field(0, ge=0, description="Fine-tuning: keep the backbone frozen for this many epochs")


class ClassificationHyperparameters(_CommonCV):
    """Image classification with a timm architecture. Main metric: top1."""

    lr: float = Field(0.001, gt=0.0, le=10.0, description="Peak learning rate")
    weight_decay: float = Field(0.05, ge=0.0, le=1.0, description="Weight decay")


class DetectionHyperparameters(_CommonCV):
    """Object detection with RT-DETR. Main metric: map (mAP50-95)."""

    lr: float = Field(0.0001, gt=0.0, le=10.0, description="Peak learning rate")
    weight_decay: float = Field(0.0001, ge=0.0, le=1.0, description="Weight decay")


class SegmentationHyperparameters(_CommonCV):
    """Semantic segmentation with SegFormer. Main metric: miou."""

    lr: float = Field(0.00006, gt=0.0, le=10.0, description="Peak learning rate")
    weight_decay: float = Field(0.01, ge=0.0, le=1.0, description="Weight decay")


class SFTHyperparameters(BaseModel):
    """Supervised fine-tuning of language and vision-language models. Main metric: eval_loss."""

    model_config = ConfigDict(extra="forbid")

    method: Literal["full", "lora", "qlora"] = Field(
        "lora", description="Train every weight, a LoRA adapter, or a LoRA adapter on a 4-bit base"
    )
    epochs: int = Field(3, ge=1, le=100, description="Passes over the training split")
    batch: int = Field(4, ge=1, le=1024, description="Conversations per device step")
    gradient_accumulation: int = Field(1, ge=1, le=1024, description="Steps accumulated per optimizer update")
    lr: float = Field(0.0002, gt=0.0, le=1.0, description="Peak learning rate")
    lr_scheduler: Literal["cosine", "linear", "constant"] = Field("cosine", description="Learning-rate schedule after warm-up")
    warmup_ratio: float = Field(0.03, ge=0.0, le=0.5, description="Share of the steps spent warming up")
    weight_decay: float = Field(0.0, ge=0.0, le=1.0, description="Weight decay")
    max_grad_norm: float = Field(1.0, gt=0.0, description="Gradient clipping")
    max_seq_length: int = Field(2048, ge=16, le=131072, description="Longer conversations are truncated (and counted in the logs)")
    packing: bool = Field(False, description="Pack several conversations into one sequence")
    lora_r: int = Field(16, ge=1, le=1024, description="LoRA rank")
    lora_alpha: int = Field(32, ge=1, le=4096, description="LoRA alpha")
    lora_dropout: float = Field(0.05, ge=0.0, lt=1.0, description="LoRA dropout")
    target_modules: list[str] | None = Field(None, description="Modules to adapt (default: the family's language-model projections)")
    qlora_quant_type: Literal["nf4", "fp4"] = Field("nf4", description="4-bit quantisation for qlora")
    gradient_checkpointing: bool = Field(False, description="Trade compute for memory")
    mixed_precision: Literal["auto", "no", "bf16", "fp16"] = Field("auto", description="auto: bf16 where the device supports it")
    eval_steps: int | None = Field(None, ge=1, description="Evaluate every N steps (default: every epoch)")
    save_steps: int | None = Field(
        None,
        ge=1,
        description="Checkpoint every N steps (default: every epoch); each checkpoint is then the unit that counts as"
        " completed — for progress, the best model, and stop (after one) versus cancel (before)",
    )
    merge: bool = Field(False, description="Also produce the base model with the adapter merged in")
    chat_template: str | None = Field(None, description="A Jinja chat template, when the base model has none")
    train_val_ratio: float = Field(0.8, gt=0.0, lt=1.0, description="Share of conversations used for training")
    seed: int = Field(0, ge=0, description="Seed for the split, initialisation and data order")


HYPERPARAMETERS: dict[Task, type[BaseModel]] = {
    Task.CLASSIFICATION: ClassificationHyperparameters,
    Task.DETECTION: DetectionHyperparameters,
    Task.SEGMENTATION: SegmentationHyperparameters,
    Task.LLM_SFT: SFTHyperparameters,
    Task.VLM_SFT: SFTHyperparameters,
}

# The built-in trainer module the scheduler runs for each task.
TRAINERS: dict[Task, str] = {
    Task.CLASSIFICATION: "forge_trainers.classification",
    Task.DETECTION: "forge_trainers.detection",
    Task.SEGMENTATION: "forge_trainers.segmentation",
    Task.LLM_SFT: "forge_trainers.sft",
    Task.VLM_SFT: "forge_trainers.sft",
}

# Which dataset formats each task can train on (a version must also list the task: COCO without
# masks cannot serve segmentation).
TASK_FORMATS: dict[Task, tuple[str, ...]] = {
    Task.CLASSIFICATION: ("imagenet-folder",),
    Task.DETECTION: ("coco", "yolo"),
    Task.SEGMENTATION: ("coco", "yolo"),
    Task.LLM_SFT: ("llm-sft",),
    Task.VLM_SFT: ("vlm-sft",),
}

# The metric each task's trainer ranks epochs by.
MAIN_METRIC: dict[Task, str] = {
    Task.CLASSIFICATION: "top1",
    Task.DETECTION: "map",
    Task.SEGMENTATION: "miou",
    Task.LLM_SFT: "eval_loss",
    Task.VLM_SFT: "eval_loss",
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
    accelerator: str = Field("cpu", description="Accelerator profile: cpu, nvidia, amd or intel (GET /v1/accelerators)")
    devices: int = Field(1, ge=1, le=64, description="Accelerators per attempt (ignored for cpu)")
    priority: Literal["low", "normal", "high"] = Field("normal", description="Queue priority; first come first served within one")
    time_limit_seconds: int | None = Field(None, ge=1, description="Fail the attempt as deadline_exceeded after this long")
    registration: Literal["auto", "manual"] = Field("auto", description="Register the model when artifacts are uploaded, or on deploy")
    trainer: str | None = Field(
        None, description="A registered trainer profile (GET /v1/trainers); default: the built-in trainer of the task"
    )
    custom_image: str | None = Field(None, max_length=500, description="Run this image as the trainer (Kubernetes executor; CV tasks)")
    image_pull_secret: str | None = Field(None, max_length=253, description="The Kubernetes Secret to pull custom_image with")
    custom_script_uri: str | None = Field(
        None, max_length=2000, description="An s3:// or http(s):// Python file run as the trainer (CV tasks)"
    )
    custom_script_sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$", description="Pin the script's content")


@cache
def timm_architectures() -> frozenset[str]:
    text = resources.files("forge_common.data").joinpath("timm_architectures.txt").read_text(encoding="utf-8")
    return frozenset(line.strip() for line in text.splitlines() if line.strip())


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


PRIORITIES: dict[str, int] = {"low": 0, "normal": 1, "high": 2}
