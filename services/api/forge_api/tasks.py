"""What each task needs and accepts: dataset formats, base-model families, the main metric, and
the hyperparameters as JSON Schema with their defaults (the Training form and the CLI read it)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel

from forge_common.basemodels import FAMILIES
from forge_common.jobspec import HYPERPARAMETERS, MAIN_METRIC, TASK_FORMATS, Task

router = APIRouter(prefix="/v1/tasks", tags=["tasks"])


class TaskInfo(BaseModel):
    name: str
    dataset_formats: list[str]
    base_model_families: list[str]
    main_metric: str
    hyperparameters: dict[str, Any]


def info(task: Task) -> TaskInfo:
    return TaskInfo(
        name=task.value,
        dataset_formats=list(TASK_FORMATS[task]),
        base_model_families=sorted(f.name for f in FAMILIES.values() if task in f.tasks),
        main_metric=MAIN_METRIC[task],
        hyperparameters=HYPERPARAMETERS[task].model_json_schema(),
    )


@router.get("", response_model=list[TaskInfo])
async def list_tasks() -> list[TaskInfo]:
    return [info(t) for t in Task]
