from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import asyncpg
from pydantic import BaseModel, Field

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
    accelerator: str
    registration: str
    attempt: int
    stop_requested: bool
    output_uri: str | None
    model: ModelRef | None
    created_at: datetime
    queued_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None

    @classmethod
    def of(cls, row: asyncpg.Record) -> Job:
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
            accelerator=row["accelerator"],
            registration=spec.get("registration", "auto"),
            attempt=row["attempt"],
            stop_requested=row["stop_requested_at"] is not None,
            output_uri=row["output_uri"],
            model=model,
            created_at=row["created_at"],
            queued_at=row["queued_at"],
            started_at=row["started_at"],
            finished_at=row["finished_at"],
        )


class LogLineOut(BaseModel):
    attempt: int
    line_no: int
    ts: datetime
    text: str


class Logs(BaseModel):
    lines: list[LogLineOut]
    next_after: int = Field(description="Pass as ?after= to get the lines that follow")


class Metrics(BaseModel):
    steps: list[dict[str, int | float]] = Field(description="One row per step: step, epoch and each metric")
    epochs: list[dict[str, int | float]] = Field(description="One row per completed epoch: epoch and each metric")
