"""Register a job's outputs as a model version: precisely from ``<artifact>.metrics.json``, or by
scanning the output prefix for the best file (.onnx first, then .pt/.pth/.safetensors)."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

import asyncpg

from forge_common import outbox, telemetry
from forge_common.events import ArtifactUploaded, ModelRegistered, ModelRegisteredData, ModelVersionDeleted, ModelVersionDeletedData
from forge_common.storage import ObjectInfo
from forge_common.subjects import Subjects
from forge_sdk.storage import Location, S3Config, StorageError, clean_key, location_from_uri

from . import repository as repo

log = logging.getLogger(__name__)

SOURCE = "/forge/registrar"
PRODUCER = "registrar"
WEIGHT_SUFFIXES = (".onnx", ".pt", ".pth", ".safetensors")


@dataclass(frozen=True)
class Artifacts:
    weights_uri: str | None
    onnx_uri: str | None
    metrics: dict[str, Any] = field(default_factory=dict)
    how: str = "scan"
    files: dict[str, str] = field(default_factory=dict)  # the descriptor's other *_uri entries: name → file or folder

    @property
    def empty(self) -> bool:
        return self.weights_uri is None and self.onnx_uri is None


def _preference(key: str) -> tuple[int, int, int, str]:
    path = PurePosixPath(key)
    name = path.name.lower()
    in_checkpoints = int("checkpoints" in path.parts[:-1])
    best = 0 if "best" in name else (2 if "last" in name else 1)
    return (best, in_checkpoints, len(path.parts), key)


def pick(objects: list[ObjectInfo]) -> tuple[str | None, str | None]:
    """(weights key, onnx key) from a listing: per suffix the best-named, shallowest file."""
    by_suffix: dict[str, list[str]] = {s: [] for s in WEIGHT_SUFFIXES}
    for obj in objects:
        suffix = PurePosixPath(obj.key).suffix.lower()
        if suffix in by_suffix and obj.size > 0:
            by_suffix[suffix].append(obj.key)
    onnx = min(by_suffix[".onnx"], key=_preference) if by_suffix[".onnx"] else None
    weights = None
    for suffix in WEIGHT_SUFFIXES[1:]:
        if by_suffix[suffix]:
            weights = min(by_suffix[suffix], key=_preference)
            break
    return weights, onnx


# What a version's metrics may weigh: they travel in ModelRegistered (the bus refuses big messages)
# and are shown in every listing.
MAX_METRICS_BYTES = 32 * 1024


def _inside(location: Location, uri: Any) -> str | None:
    """A descriptor's file URI, only when it lies under the job's own output: a trainer must not
    register (and so expose for download) another job's or project's files."""
    if not isinstance(uri, str) or not uri:
        return None
    root = location.uri.rstrip("/") + "/"
    try:
        inside = uri.startswith(root) and clean_key(uri[len(root) :]) != ""
    except StorageError:
        inside = False
    if not inside:
        log.warning("%s: the descriptor names %s, outside this job's output; ignored", location.uri, uri)
        return None
    return uri


MAX_FILES = 20
_FILE_NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")


def other_files(location: Location, desc: dict[str, Any]) -> dict[str, str]:
    """The descriptor's other ``<name>_uri`` entries (``adapter_uri``, ``merged_uri``, …) that lie
    under the job's output: the version keeps them, so they can be downloaded with it."""
    out: dict[str, str] = {}
    for key, value in desc.items():
        name = key.removesuffix("_uri")
        if key == name or name in ("weights", "onnx") or not _FILE_NAME.match(name) or len(out) >= MAX_FILES:
            continue
        if (uri := _inside(location, value)) is not None:
            out[name] = uri.rstrip("/")
    return out


def bounded_metrics(metrics: dict[str, Any]) -> dict[str, Any]:
    """The metrics as given when small; else only the top-level numbers (what listings compare)."""
    if len(json.dumps(metrics, default=str)) <= MAX_METRICS_BYTES:
        return metrics
    numbers = {k: v for k, v in metrics.items() if isinstance(v, int | float) and not isinstance(v, bool) and len(k) <= 200}
    kept = dict(list(numbers.items())[: MAX_METRICS_BYTES // 256])
    log.warning(
        "metrics of %d bytes are over %d; kept %d top-level numbers", len(json.dumps(metrics, default=str)), MAX_METRICS_BYTES, len(kept)
    )
    return kept


def find_artifacts(location: Location, artifact_id: str) -> Artifacts:
    """Blocking: read the descriptor or scan the location."""
    objects = location.list()
    names = {o.key for o in objects}
    descriptor_name = f"{artifact_id}.metrics.json"
    metrics: dict[str, Any] = {}
    if "metrics.json" in names:
        try:
            loaded = json.loads(location.get_bytes("metrics.json"))
            metrics = loaded if isinstance(loaded, dict) else {}
        except (ValueError, OSError):
            log.warning("%s: metrics.json is not valid JSON; ignored", location.uri)
    if descriptor_name in names:
        try:
            desc = json.loads(location.get_bytes(descriptor_name))
        except ValueError:
            log.warning("%s: %s is not valid JSON; scanning instead", location.uri, descriptor_name)
        else:
            desc = desc if isinstance(desc, dict) else {}
            weights_uri, onnx_uri = _inside(location, desc.get("weights_uri")), _inside(location, desc.get("onnx_uri"))
            if weights_uri or onnx_uri:
                got = desc.get("metrics")
                return Artifacts(
                    weights_uri=weights_uri,
                    onnx_uri=onnx_uri,
                    metrics=bounded_metrics(got if isinstance(got, dict) else metrics),
                    how="descriptor",
                    files=other_files(location, desc),
                )
            log.warning("%s: %s names no weights_uri/onnx_uri; scanning instead", location.uri, descriptor_name)
    weights, onnx = pick(objects)
    return Artifacts(
        weights_uri=location.uri_of(weights) if weights else None,
        onnx_uri=location.uri_of(onnx) if onnx else None,
        metrics=bounded_metrics(metrics),
    )


class Registrar:
    def __init__(self, pool: asyncpg.Pool, subjects: Subjects, s3: S3Config | None) -> None:
        self.pool = pool
        self.subjects = subjects
        self.s3 = s3

    async def on_artifact_uploaded(self, event: ArtifactUploaded) -> asyncpg.Record | None:
        d = event.data
        if d.registration == "manual":
            log.info("job %s: registration is manual; waiting for a deploy", d.job_id)
            return None
        return await self.register(d.job_id, d.attempt, d.uri, d.artifact_id)

    async def on_deploy_requested(self, job_id: Any) -> asyncpg.Record | None:
        """Manual registration: the job's latest attempt that ended with a model."""
        async with self.pool.acquire() as conn:
            attempt = await repo.deployable_attempt(conn, job_id)
        if attempt is None:
            log.warning("job %s: deploy requested but it has no succeeded or stopped attempt", job_id)
            return None
        return await self.register(job_id, attempt["attempt"], attempt["output_uri"], attempt["name"])

    async def delete_version(self, job_id: Any, model_name: str, version: int) -> bool:
        async with self.pool.acquire() as conn, conn.transaction():
            row = await repo.delete_version(conn, job_id, model_name, version)
            if row is None:
                return False
            event = ModelVersionDeleted.of(
                ModelVersionDeletedData(job_id=row["job_id"], model_name=model_name, version=version), source=SOURCE
            )
            await outbox.add(conn, self.subjects, event, producer=PRODUCER)
        log.info("deleted %s version %d", model_name, version)
        return True

    async def register(self, job_id: Any, attempt: int, uri: str, artifact_id: str) -> asyncpg.Record | None:
        async with self.pool.acquire() as conn:
            existing = await repo.version_of_attempt(conn, job_id, attempt)
            if existing is not None:
                return existing
        location = location_from_uri(uri, self.s3)
        artifacts = await asyncio.to_thread(find_artifacts, location, artifact_id)
        if artifacts.empty:
            log.warning("job %s: no model file under %s; nothing to register", job_id, uri)
            return None
        async with self.pool.acquire() as conn, conn.transaction():
            job = await repo.get_job(conn, job_id)
            if job is None:
                log.warning("job %s: unknown job; nothing to register", job_id)
                return None
            existing = await repo.version_of_attempt(conn, job_id, attempt)
            if existing is not None:
                return existing
            with telemetry.span("registrar.register", traceparent=job["traceparent"], job_id=job_id):
                model_id = await repo.get_or_create_model(conn, job["project_id"], job["name"])
                row = await repo.insert_version(
                    conn,
                    model_id=model_id,
                    job_id=job_id,
                    attempt=attempt,
                    artifacts_uri=uri,
                    weights_uri=artifacts.weights_uri,
                    onnx_uri=artifacts.onnx_uri,
                    metrics=artifacts.metrics,
                    files=artifacts.files,
                    dataset_version_id=job["dataset_version_id"],
                    base_model=job["base_model"],
                )
                event = ModelRegistered.of(
                    ModelRegisteredData(
                        job_id=job_id,
                        model_id=model_id,
                        model_name=job["name"],
                        version=row["version"],
                        weights_uri=artifacts.weights_uri,
                        onnx_uri=artifacts.onnx_uri,
                        metrics=artifacts.metrics,
                        files=artifacts.files,
                    ),
                    source=SOURCE,
                    traceparent=telemetry.current_traceparent() or job["traceparent"],
                )
                await outbox.add(conn, self.subjects, event, producer=PRODUCER)
        log.info("job %s: registered %s version %d (%s)", job_id, job["name"], row["version"], artifacts.how)
        return row
