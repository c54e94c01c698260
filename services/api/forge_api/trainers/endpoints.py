"""Trainer capability profiles: register one, list them next to the built-ins."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import asyncpg
from fastapi import APIRouter
from pydantic import BaseModel

from forge_common.errors import Conflict, NotFound
from forge_common.jobspec import Task
from forge_common.trainers import TrainerProfile, builtin_profiles

from ..deps import ConnDep
from ..projects import ProjectDep

router = APIRouter(prefix="/v1/trainers", tags=["trainers"])


class TrainerOut(BaseModel):
    name: str
    version: str
    description: str
    tasks: list[str]
    accelerators: dict[str, dict[str, Any]]
    script_uri: str | None
    hyperparameters: dict[str, Any]
    metrics: list[str]
    main_metric: str
    higher_is_better: bool
    builtin: bool = False
    created_at: datetime | None = None


async def get_profile(conn: asyncpg.Connection, project_id: uuid.UUID, name: str) -> dict[str, Any] | None:
    """A registered profile (built-ins are not looked up by name: a job without ``trainer`` uses them)."""
    row = await conn.fetchrow("SELECT profile FROM trainer_profiles WHERE project_id = $1 AND name = $2", project_id, name)
    return dict(row["profile"]) if row else None


@router.post("", status_code=201, response_model=TrainerOut)
async def register(body: TrainerProfile, conn: ConnDep, project: ProjectDep) -> TrainerOut:
    """Announce a trainer: its tasks, accelerators (image and grade), hyperparameters (JSON Schema
    with defaults) and metrics. Jobs name it in ``trainer``; the built-ins' names are taken."""
    if any(p["name"] == body.name for p in builtin_profiles()):
        raise Conflict(f"{body.name!r} is the name of a built-in trainer; pick another", field="name")
    profile = body.model_dump(mode="json")
    row = await conn.fetchrow(
        "INSERT INTO trainer_profiles (id, project_id, name, profile) VALUES ($1, $2, $3, $4)"
        " ON CONFLICT (project_id, name) DO NOTHING RETURNING created_at",
        uuid.uuid4(),
        project,
        body.name,
        profile,
    )
    if row is None:
        raise Conflict(f"a trainer named {body.name!r} is registered already", field="name")
    return TrainerOut(**profile, created_at=row["created_at"])


@router.get("", response_model=list[TrainerOut])
async def list_trainers(conn: ConnDep, project: ProjectDep, task: Task | None = None, accelerator: str | None = None) -> list[TrainerOut]:
    """Built-in and registered trainers, optionally only those serving ``task`` on ``accelerator``."""
    rows = await conn.fetch("SELECT profile, created_at FROM trainer_profiles WHERE project_id = $1 ORDER BY name", project)
    profiles = [TrainerOut(**p) for p in builtin_profiles()] + [TrainerOut(**r["profile"], created_at=r["created_at"]) for r in rows]
    return [p for p in profiles if (task is None or task.value in p.tasks) and (accelerator is None or accelerator in p.accelerators)]


@router.get("/{name}", response_model=TrainerOut)
async def get_trainer(name: str, conn: ConnDep, project: ProjectDep) -> TrainerOut:
    for p in builtin_profiles():
        if p["name"] == name:
            return TrainerOut(**p)
    profile = await get_profile(conn, project, name)
    if profile is None:
        raise NotFound(f"no trainer named {name!r}")
    return TrainerOut(**profile)
