from __future__ import annotations

import uuid
from datetime import datetime
from pathlib import PurePosixPath
from typing import Annotated, Any

import asyncpg
from fastapi import APIRouter, Path, Query
from fastapi.responses import RedirectResponse, StreamingResponse
from pydantic import BaseModel, Field

from forge_common import outbox
from forge_common.errors import NotFound
from forge_common.events import ModelVersionDeletionRequested, ModelVersionDeletionRequestedData

from .. import downloads
from ..deps import ConnDep, ServicesDep
from ..projects import ProjectDep
from . import repository as repo

router = APIRouter(prefix="/v1/models", tags=["models"])


class Model(BaseModel):
    name: str
    versions: int
    latest_version: int | None
    created_at: datetime


class ModelVersion(BaseModel):
    name: str
    version: int
    job_id: uuid.UUID
    job_name: str
    job_state: str
    attempt: int
    dataset: dict[str, Any] | None
    base_model: str | None
    weights_uri: str | None
    onnx_uri: str | None
    files: dict[str, str] = Field(
        default_factory=dict, description="Other parts by name (adapter, merged, base_model, …): download with ?file=<name>"
    )
    artifacts_uri: str
    metrics: dict[str, Any]
    created_at: datetime

    @classmethod
    def of(cls, row: asyncpg.Record) -> ModelVersion:
        ds = row["dataset"]
        return cls(
            name=row["model_name"],
            version=row["version"],
            job_id=row["job_id"],
            job_name=row["job_name"],
            job_state=row["job_state"],
            attempt=row["attempt"],
            dataset={"name": ds["name"], "version": ds["version"]} if ds else None,
            base_model=row["base_model"],
            weights_uri=row["weights_uri"],
            onnx_uri=row["onnx_uri"],
            files=row["files"] or {},
            artifacts_uri=row["artifacts_uri"],
            metrics=row["metrics"],
            created_at=row["created_at"],
        )


@router.get("", response_model=list[Model])
async def list_models(conn: ConnDep, project: ProjectDep) -> list[Model]:
    return [Model(**dict(r)) for r in await repo.list_models(conn, project)]


@router.get("/{name}/versions", response_model=list[ModelVersion])
async def list_versions(name: str, conn: ConnDep, project: ProjectDep) -> list[ModelVersion]:
    if not await repo.model_exists(conn, project, name):
        raise NotFound(f"no model named {name!r}")
    return [ModelVersion.of(r) for r in await repo.list_versions(conn, project, name)]


@router.get("/{name}/versions/{version}", response_model=ModelVersion)
async def get_version(name: str, version: Annotated[int, Path(ge=1)], conn: ConnDep, project: ProjectDep) -> ModelVersion:
    row = await repo.get_version(conn, project, name, version)
    if row is None:
        raise NotFound(f"model {name!r} has no version {version}")
    return ModelVersion.of(row)


@router.delete("/{name}/versions/{version}", status_code=202)
async def delete_version(name: str, version: Annotated[int, Path(ge=1)], services: ServicesDep, project: ProjectDep) -> dict[str, str]:
    """Remove a version from the registry (the registrar does it; the job's outputs stay, and the
    job can be deployed again)."""
    async with services.pool.acquire() as conn, conn.transaction():
        row = await repo.get_version(conn, project, name, version)
        if row is None:
            raise NotFound(f"model {name!r} has no version {version}")
        event = ModelVersionDeletionRequested.of(
            ModelVersionDeletionRequestedData(job_id=row["job_id"], model_name=name, version=version), source="/forge/api"
        )
        await outbox.add(conn, services.subjects, event, producer="api")
    return {"status": "deletion requested"}


@router.get("/{name}/versions/{version}/download", response_model=None)
async def download(
    name: str,
    version: Annotated[int, Path(ge=1)],
    services: ServicesDep,
    project: ProjectDep,
    file: Annotated[str, Query(description="onnx, weights, or one of the version's files (adapter, merged, …)")] = "onnx",
) -> RedirectResponse | StreamingResponse:
    """One part of the version: a file is a redirect to a presigned URL (S3) or streamed by the
    api (local store); a folder (an adapter, a merged model) is streamed as a .tar of its files."""
    async with services.pool.acquire() as conn:
        row = await repo.get_version(conn, project, name, version)
    if row is None:
        raise NotFound(f"model {name!r} has no version {version}")
    parts = {"onnx": row["onnx_uri"], "weights": row["weights_uri"], **dict(sorted((row["files"] or {}).items()))}
    uri = parts.get(file)
    key = services.store.key_of(uri) if uri else None
    if key is None:
        have = ", ".join(k for k, v in parts.items() if v) or "nothing"
        raise NotFound(f"model {name!r} version {version} has no {file} in this store (it has: {have})", field="file")
    filename = f"{name}-v{version}-{PurePosixPath(key).name}"
    return await downloads.respond(services.store, key, filename, missing=f"{uri} is missing from object storage")
