"""The pool: seed it, add checked entries, and resolve what a job names."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import asyncpg

from forge_common.basemodels import FAMILIES, SEEDS, BaseModelIn, virtual_timm
from forge_common.errors import Conflict, InvalidInput, NotFound
from forge_common.jobspec import Task
from forge_sdk.storage import S3Config, location_from_uri

from . import checks
from . import repository as repo


def as_row(entry: BaseModelIn) -> dict[str, Any]:
    return {
        "name": entry.name,
        "family": entry.family,
        "tasks": [t.value for t in entry.tasks or []],
        "source": entry.source.model_dump(mode="json", exclude_none=True),
        "license": entry.license,
        "description": entry.description,
    }


async def seed(conn: asyncpg.Connection, project_id: uuid.UUID) -> None:
    for entry in SEEDS:
        await repo.upsert_seed(conn, project_id, as_row(entry))


async def add(conn: asyncpg.Connection, project_id: uuid.UUID, entry: BaseModelIn, s3: S3Config | None) -> tuple[asyncpg.Record, list[str]]:
    if await repo.get(conn, project_id, entry.name) is not None:
        raise Conflict(f"a base model named {entry.name!r} already exists", field="name")
    row = as_row(entry)
    warnings: list[str] = []
    if entry.source.kind in ("local", "s3"):
        assert entry.source.uri is not None
        if entry.source.kind == "local" and not await asyncio.to_thread(Path(entry.source.uri).is_dir):
            raise InvalidInput(f"{entry.source.uri} is not a folder the platform can read", field="source.uri")
        if entry.source.kind == "s3" and s3 is None:
            raise InvalidInput("this installation has no S3 endpoint configured, so it cannot read s3:// sources", field="source.uri")
        location = location_from_uri(entry.source.uri, s3)
        checked = await asyncio.to_thread(checks.check, location, FAMILIES[entry.family])
        row.update(size_bytes=checked.size_bytes, files=checked.files, digest=checked.digest)
        warnings = checked.warnings
    elif entry.source.kind == "hub":
        warnings = ["hub sources are downloaded by the trainer at run time: the trainer needs internet access"]
    created = await repo.insert(conn, project_id, row)
    if created is None:
        raise Conflict(f"a base model named {entry.name!r} already exists", field="name")
    return created, warnings


async def resolve(conn: asyncpg.Connection, project_id: uuid.UUID, name: str, task: Task) -> dict[str, Any]:
    """The entry a job names, as the job's spec records it; 422 when it cannot serve the task."""
    row = await repo.get(conn, project_id, name)
    if row is not None:
        entry = {k: row[k] for k in ("name", "family", "tasks", "source", "digest")}
    elif (timm := virtual_timm(name)) is not None:
        entry = {**as_row(timm), "digest": None}
        entry = {k: entry[k] for k in ("name", "family", "tasks", "source", "digest")}
    else:
        options = [r["name"] for r in await repo.list_for(conn, project_id, task.value)][:8]
        raise InvalidInput(
            f"no base model named {name!r}; for {task.value} there are: {', '.join(options) or 'none yet'} (GET /v1/base-models?task={task.value})",
            field="base_model",
        )
    if task.value not in entry["tasks"]:
        families = sorted(f.name for f in FAMILIES.values() if task in f.tasks)
        raise InvalidInput(
            f"base model {name!r} (family {entry['family']}) serves {', '.join(entry['tasks'])}; "
            f"task {task.value} needs a base model of family {' or '.join(families)}",
            field="base_model",
        )
    return entry


async def get(conn: asyncpg.Connection, project_id: uuid.UUID, name: str) -> asyncpg.Record:
    row = await repo.get(conn, project_id, name)
    if row is None:
        raise NotFound(f"no base model named {name!r}", field="name")
    return row


async def delete(conn: asyncpg.Connection, project_id: uuid.UUID, name: str) -> None:
    row = await get(conn, project_id, name)
    if row["builtin"]:
        raise Conflict(f"{name!r} ships with Forge and cannot be removed")
    await repo.delete(conn, project_id, name)
