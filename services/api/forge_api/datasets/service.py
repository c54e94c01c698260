"""Adding a dataset version: receive the archive to disk, check it, unpack it, validate the
format, hash its content, and store it — or store nothing and say exactly why."""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

import asyncpg
from fastapi import UploadFile

from forge_common.errors import Conflict, InvalidInput, NotFound, PayloadTooLarge
from forge_sdk import datasets as formats
from forge_sdk.storage import StorageError, location_from_uri

from ..deps import Services
from . import archive
from . import repository as repo


@dataclass(frozen=True)
class Prepared:
    root: Path
    report: formats.Report
    manifest: list[tuple[str, int, str]]
    content_hash: str
    size_bytes: int


def manifest_of(root: Path) -> list[tuple[str, int, str]]:
    """(path, size, sha256) of every file, sorted by path: the canonical description of the content."""
    out = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest = hashlib.sha256()
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                digest.update(chunk)
        out.append((path.relative_to(root).as_posix(), path.stat().st_size, digest.hexdigest()))
    return out


def content_hash(manifest: list[tuple[str, int, str]]) -> str:
    canonical = "".join(f"{p}\t{s}\t{d}\n" for p, s, d in manifest)
    return hashlib.sha256(canonical.encode()).hexdigest()


def unpack(upload: archive.Source, work: Path, limits: archive.Limits) -> Path:
    """Blocking: check and unpack an archive into ``work/unpacked``."""
    unpacked = work / "unpacked"
    archive.extract(upload, unpacked, limits)
    if not any(unpacked.iterdir()):
        raise InvalidInput("the archive holds no files", field="file")
    return unpacked


def prepare(unpacked: Path, declared_format: str | None, tokenizer: formats.Tokenizer | None = None) -> Prepared:
    """Blocking: validate and hash an unpacked dataset. Raises ``InvalidInput`` with the whole report."""
    root = formats.data_root(unpacked)
    report = formats.validate(root, declared_format, tokenizer=tokenizer)
    if not report.ok:
        first = report.errors[0]
        more = f" (and {len(report.errors) - 1} more problem(s))" if len(report.errors) > 1 else ""
        raise InvalidInput(
            f"{first.file}: {first.message}{more}",
            field="file",
            extra={"report": report.to_dict()},
        )
    manifest = manifest_of(root)
    return Prepared(root, report, manifest, content_hash(manifest), sum(s for _, s, _ in manifest))


async def create_dataset(conn: asyncpg.Connection, project_id: uuid.UUID, name: str, description: str) -> asyncpg.Record:
    row = await repo.create_dataset(conn, project_id, name, description)
    if row is None:
        raise Conflict(f"a dataset named {name!r} already exists", field="name")
    return row


async def get_dataset(conn: asyncpg.Connection, project_id: uuid.UUID, name: str) -> asyncpg.Record:
    row = await repo.get_dataset(conn, project_id, name)
    if row is None:
        raise NotFound(f"no dataset named {name!r}", field="name")
    return row


async def add_version(
    services: Services,
    project_id: uuid.UUID,
    name: str,
    upload: UploadFile,
    declared_format: str | None = None,
    tokenizer: formats.Tokenizer | None = None,
) -> tuple[asyncpg.Record, bool]:
    """The new version (created=True), or the existing one with identical content (created=False).

    The multipart parser has already spooled the upload to disk in chunks (bounded memory); the
    archive is read from there, unpacked once, validated, hashed and stored."""
    if upload.size is not None and upload.size > services.settings.max_upload_bytes:
        raise PayloadTooLarge(f"the archive is larger than the {services.settings.max_upload_bytes}-byte limit", field="file")
    if upload.size == 0:
        raise InvalidInput("the uploaded file is empty", field="file")
    limits = archive.Limits(max_files=services.settings.max_archive_files, max_bytes=services.settings.max_extracted_bytes)
    return await _ingest(services, project_id, name, lambda work: unpack(upload.file, work, limits), declared_format, tokenizer)


async def import_version(
    services: Services,
    project_id: uuid.UUID,
    name: str,
    uri: str,
    declared_format: str | None = None,
    tokenizer: formats.Tokenizer | None = None,
) -> tuple[asyncpg.Record, bool]:
    """The same as an upload, from an object-storage prefix (or a folder under one of the
    configured import roots: the api's own files are not for users to read)."""
    _check_import_source(uri, services.settings.import_roots)

    def fetch(work: Path) -> Path:
        try:
            location = location_from_uri(uri, services.store.s3)
            objects = location.list()
        except StorageError as exc:
            raise InvalidInput(f"cannot read {uri}: {exc}", field="uri") from None
        if not objects:
            raise InvalidInput(f"{uri} holds no files", field="uri")
        if len(objects) > services.settings.max_archive_files:
            raise InvalidInput(f"{uri} has more than {services.settings.max_archive_files} files", field="uri")
        if sum(o.size for o in objects) > services.settings.max_extracted_bytes:
            raise InvalidInput(f"{uri} holds more than {services.settings.max_extracted_bytes} bytes", field="uri")
        return location.download_to(work / "unpacked")

    return await _ingest(services, project_id, name, fetch, declared_format, tokenizer)


def _check_import_source(uri: str, import_roots: str) -> None:
    if uri.startswith("s3://"):
        return
    if "://" in uri and not uri.startswith("file://"):
        raise InvalidInput(f"cannot import {uri}: use s3://bucket/prefix", field="uri")
    path = Path(unquote(urlparse(uri).path) if uri.startswith("file://") else uri)
    roots = [Path(r.strip()).resolve() for r in import_roots.split(",") if r.strip()]
    if not roots:
        raise InvalidInput(
            f"cannot import {uri}: this installation imports only from s3:// (an operator can allow local folders with FORGE_API_IMPORT_ROOTS)",
            field="uri",
        )
    if not path.is_absolute():
        raise InvalidInput(f"cannot import {uri}: a local folder must be an absolute path", field="uri")
    resolved = path.resolve()
    if not any(resolved.is_relative_to(root) for root in roots):
        raise InvalidInput(f"cannot import {uri}: local imports must be under {', '.join(map(str, roots))}", field="uri")


async def _ingest(
    services: Services,
    project_id: uuid.UUID,
    name: str,
    materialise: Callable[[Path], Path],
    declared_format: str | None,
    tokenizer: formats.Tokenizer | None,
) -> tuple[asyncpg.Record, bool]:
    async with services.pool.acquire() as conn:
        dataset = await get_dataset(conn, project_id, name)
    scratch_root = services.settings.upload_dir or services.common.home / "tmp"
    scratch_root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="upload-", dir=scratch_root))
    try:
        unpacked = await asyncio.to_thread(materialise, work)
        prepared = await asyncio.to_thread(prepare, unpacked, declared_format, tokenizer)
        async with services.pool.acquire() as conn:
            existing = await repo.version_by_hash(conn, dataset["id"], prepared.content_hash)
        if existing is not None:
            return existing, False
        prefix = f"datasets/{dataset['id']}/{prepared.content_hash}"
        files = services.store.location(f"{prefix}/files")
        try:
            await asyncio.to_thread(files.upload_tree, prepared.root)
            manifest = [{"path": p, "size": s, "sha256": d} for p, s, d in prepared.manifest]
            await services.store.put_bytes(f"{prefix}/manifest.json", json.dumps(manifest).encode())
        except Exception:
            await services.store.delete_prefix(prefix)
            raise
        async with services.pool.acquire() as conn, conn.transaction():
            await repo.get_dataset(conn, project_id, name, lock=True)
            existing = await repo.version_by_hash(conn, dataset["id"], prepared.content_hash)
            if existing is not None:  # the same content arrived twice at once
                return existing, False
            row = await repo.insert_version(
                conn,
                dataset["id"],
                id=uuid.uuid4(),
                format=prepared.report.format,
                tasks=prepared.report.tasks,
                uri=files.uri,
                content_hash=prepared.content_hash,
                size_bytes=prepared.size_bytes,
                file_count=len(prepared.manifest),
                stats=prepared.report.stats,
                report=prepared.report.to_dict(),
            )
        return row, True
    finally:
        await asyncio.to_thread(shutil.rmtree, work, True)


async def delete_version(services: Services, project_id: uuid.UUID, name: str, version: int) -> None:
    """Only while no model was trained on it (a model's lineage must stay readable) and no job
    still needs it (a draft, a queued or running job, or one that can be resumed)."""
    async with services.pool.acquire() as conn, conn.transaction():
        dataset = await get_dataset(conn, project_id, name)
        row = await repo.get_version(conn, dataset["id"], version)
        if row is None:
            raise NotFound(f"dataset {name!r} has no version {version}", field="version")
        models = await repo.models_trained_on(conn, row["id"])
        if models:
            listed = ", ".join(f"{m['name']} v{m['version']}" for m in models[:10])
            raise Conflict(f"{name} v{version} is the training data of {listed}: delete those model versions first")
        jobs = await repo.jobs_depending_on(conn, row["id"])
        if jobs:
            listed = ", ".join(f"{j['name']} ({j['state']}, {j['id']})" for j in jobs[:10])
            raise Conflict(f"{name} v{version} is still needed by {len(jobs)} job(s): {listed}; delete or finish them first")
        await repo.delete_version(conn, row["id"])
    prefix = services.store.key_of(row["uri"])
    if prefix is not None:
        await services.store.delete_prefix(prefix.removesuffix("/files"))
