from __future__ import annotations

from datetime import datetime
from typing import Any

import asyncpg
from fastapi import APIRouter, Response
from pydantic import BaseModel, Field

from forge_common.basemodels import BaseModelIn
from forge_common.jobspec import Task

from ..deps import ConnDep, ServicesDep
from ..projects import ProjectDep
from . import repository as repo
from . import service

router = APIRouter(prefix="/v1/base-models", tags=["base models"])


class BaseModelOut(BaseModel):
    name: str
    family: str
    tasks: list[str]
    source: dict[str, Any]
    license: str
    description: str
    size_bytes: int | None
    digest: str | None
    files: list[dict[str, Any]] = Field(
        default_factory=list, description="What the checkpoint held when registered: path, size (and ETag in S3)"
    )
    builtin: bool
    created_at: datetime
    warnings: list[str] = []

    @classmethod
    def of(cls, row: asyncpg.Record, warnings: list[str] | None = None) -> BaseModelOut:
        fields = {k: row[k] for k in cls.model_fields if k not in ("warnings", "files")}
        return cls(**fields, files=row["files"] or [], warnings=warnings or [])


@router.get("", response_model=list[BaseModelOut])
async def list_base_models(conn: ConnDep, project: ProjectDep, task: Task | None = None) -> list[BaseModelOut]:
    """The pool, optionally only the entries that can serve ``task``."""
    return [BaseModelOut.of(r) for r in await repo.list_for(conn, project, task.value if task else None)]


@router.post("", status_code=201, response_model=BaseModelOut)
async def add_base_model(body: BaseModelIn, services: ServicesDep, conn: ConnDep, project: ProjectDep) -> BaseModelOut:
    """Add an entry. A local or S3 checkpoint is checked first (files, config, weights headers) and
    its digest recorded; a broken one is refused with what is wrong."""
    row, warnings = await service.add(conn, project, body, services.store.s3)
    return BaseModelOut.of(row, warnings)


@router.get("/{name:path}", response_model=BaseModelOut)
async def get_base_model(name: str, conn: ConnDep, project: ProjectDep) -> BaseModelOut:
    return BaseModelOut.of(await service.get(conn, project, name))


@router.delete("/{name:path}", status_code=204)
async def delete_base_model(name: str, conn: ConnDep, project: ProjectDep) -> Response:
    """Jobs that used it keep their recorded spec."""
    await service.delete(conn, project, name)
    return Response(status_code=204)
