from __future__ import annotations

from datetime import datetime
from typing import Any

import asyncpg
from pydantic import BaseModel, Field

from forge_common.jobspec import NAME_PATTERN


class DatasetCreate(BaseModel):
    name: str = Field(pattern=NAME_PATTERN, description="Unique in the project")
    description: str = Field("", max_length=2000)


class ImportIn(BaseModel):
    uri: str = Field(description="s3://bucket/prefix (or a folder path the api can read)")
    format: str | None = Field(None, description="Declare the format instead of detecting it")
    tokenizer: str | None = Field(None, description="A base model whose tokenizer counts token lengths (LLM/VLM data)")


class Dataset(BaseModel):
    name: str
    description: str
    latest_version: int | None = None
    created_at: datetime

    @classmethod
    def of(cls, row: asyncpg.Record) -> Dataset:
        return cls(name=row["name"], description=row["description"], latest_version=row.get("latest_version"), created_at=row["created_at"])


class DatasetVersion(BaseModel):
    dataset: str
    version: int
    format: str
    tasks: list[str]
    uri: str
    content_hash: str
    size_bytes: int
    file_count: int
    stats: dict[str, Any]
    report: dict[str, Any]
    created_at: datetime
    created: bool = Field(True, description="False when identical content already existed as this version")

    @classmethod
    def of(cls, dataset: str, row: asyncpg.Record, *, created: bool = True) -> DatasetVersion:
        return cls(
            dataset=dataset,
            version=row["version"],
            format=row["format"],
            tasks=list(row["tasks"]),
            uri=row["uri"],
            content_hash=row["content_hash"],
            size_bytes=row["size_bytes"],
            file_count=row["file_count"],
            stats=row["stats"],
            report=row["report"],
            created_at=row["created_at"],
            created=created,
        )
