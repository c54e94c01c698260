from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

import asyncpg
from pydantic import BaseModel, ConfigDict, Field

from forge_common.jobspec import JobSpec
from forge_common.states import JobState


class JobCreate(JobSpec):
    start: bool = Field(False, description="Queue the job at once instead of keeping it as a draft")


class JobError(BaseModel):
    reason: str
    message: str
    hint: str = ""


class ModelRef(BaseModel):
    name: str
    version: int


class DatasetRefOut(BaseModel):
    name: str
    version: int


class Attempt(BaseModel):
    attempt: int
    executor: str
    started_at: datetime
    finished_at: datetime | None
    exit_code: int | None
    outcome: str | None
    resume_from: str | None
    pending_reason: str | None
    retried: bool


def progress_unit(spec: dict[str, Any]) -> str:
    sft = spec.get("task") in ("llm-sft", "vlm-sft") and not spec.get("trainer")
    steps = (spec.get("hyperparameters") or {}).get("save_steps")
    return f"checkpoint of {steps} steps" if sft and steps else "epoch"


class Job(BaseModel):
    id: uuid.UUID
    name: str
    task: str
    state: JobState
    progress: float = Field(description="0–1, by completed epochs")
    epochs_completed: int
    total_epochs: int | None
    best_metrics: dict[str, float] | None
    error: JobError | None
    dataset: DatasetRefOut
    base_model: str
    hyperparameters: dict[str, Any]
    trainer: str | None = Field(None, description="The registered trainer it runs (None: the task's built-in trainer)")
    custom_image: str | None = None
    custom_script: dict[str, Any] | None = Field(None, description="The script it runs: uri, and the sha256 and size of the bytes fetched")
    main_metric: str | None = Field(None, description="The metric that picks the best epoch")
    progress_unit: str = Field(
        "epoch",
        description="What counts as a completed unit (progress, best model, stop versus cancel): an epoch, or for an"
        " LLM/VLM job with save_steps a checkpoint every save_steps optimizer steps",
    )
    accelerator: str
    devices: int
    priority: str
    time_limit_seconds: int | None
    registration: str
    attempt: int
    attempts: list[Attempt] = Field(default_factory=list, description="Every time the job's trainer was started (GET /v1/jobs/{id})")
    queue_position: int | None = Field(None, description="1-based place in its accelerator's queue, while queued")
    waiting_for: str | None = Field(None, description="Why it has not started yet")
    estimated_start: datetime | None = Field(None, description="While queued: when it may start (None when unknown)")
    mlflow_url: str | None = Field(None, description="The MLflow run mirroring this job, when the mirror is on")
    stop_requested: bool
    output_uri: str | None
    model: ModelRef | None
    created_at: datetime
    queued_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None

    @classmethod
    def of(cls, row: asyncpg.Record, **extra: Any) -> Job:
        spec = row["spec"]
        model = ModelRef(name=row["model_name"], version=row["model_version"]) if row.get("model_version") else None
        return cls(
            id=row["id"],
            name=row["name"],
            task=row["task"],
            state=JobState(row["state"]),
            progress=row["progress"],
            epochs_completed=row["epochs_completed"],
            total_epochs=row["total_epochs"] or spec.get("hyperparameters", {}).get("epochs"),
            best_metrics=row["best_metrics"],
            error=JobError(**row["error"]) if row["error"] else None,
            dataset=DatasetRefOut(name=spec["dataset"]["name"], version=spec["dataset"]["version"]),
            base_model=row["base_model"],
            hyperparameters=spec.get("hyperparameters", {}),
            trainer=spec.get("trainer"),
            custom_image=spec.get("custom_image"),
            custom_script={k: v for k, v in spec["custom_script"].items() if k in ("uri", "sha256", "size")}
            if spec.get("custom_script")
            else None,
            main_metric=spec.get("main_metric"),
            progress_unit=progress_unit(spec),
            accelerator=row["accelerator"],
            devices=spec.get("devices", 1),
            priority=spec.get("priority", "normal"),
            time_limit_seconds=spec.get("time_limit_seconds"),
            registration=spec.get("registration", "auto"),
            attempt=row["attempt"],
            stop_requested=row["stop_requested_at"] is not None,
            output_uri=row["output_uri"],
            model=model,
            created_at=row["created_at"],
            queued_at=row["queued_at"],
            started_at=row["started_at"],
            finished_at=row["finished_at"],
            **extra,
        )


class JobUpdate(BaseModel):
    """Fields a draft may change (a queued job: only priority)."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    dataset: dict[str, Any] | None = None
    base_model: str | None = None
    hyperparameters: dict[str, Any] | None = None
    accelerator: str | None = None
    devices: int | None = None
    priority: Literal["low", "normal", "high"] | None = None
    time_limit_seconds: int | None = None
    registration: Literal["auto", "manual"] | None = None


class Duplicate(BaseModel):
    name: str | None = Field(None, description="Name of the new draft (default: the same name)")


class LogLineOut(BaseModel):
    attempt: int
    line_no: int
    ts: datetime
    text: str


class Logs(BaseModel):
    lines: list[LogLineOut]
    next_after: int = Field(description="Pass as ?after= to get the lines that follow")


class JobFile(BaseModel):
    path: str = Field(description="Relative to the attempt's outputs; GET /v1/jobs/{id}/files/{path} downloads it")
    size: int


class JobFiles(BaseModel):
    uri: str = Field(description="Where the attempt's outputs are")
    files: list[JobFile]
    truncated: bool = Field(description="More files exist than are listed")


class Metrics(BaseModel):
    steps: list[dict[str, int | float]] = Field(description="One row per step: step, epoch and each metric")
    epochs: list[dict[str, int | float]] = Field(description="One row per completed epoch: epoch and each metric")
