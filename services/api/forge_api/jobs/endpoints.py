from __future__ import annotations

import json
import uuid
from collections import defaultdict
from pathlib import PurePosixPath
from typing import Annotated

import asyncpg
from fastapi import APIRouter, Header, Query
from fastapi.responses import JSONResponse, RedirectResponse, StreamingResponse
from sse_starlette.sse import EventSourceResponse

from forge_common.errors import InvalidInput, NotFound
from forge_common.settings import CommonSettings
from forge_common.states import JobState
from forge_common.storage import StorageError
from forge_sdk.storage import clean_key

from .. import downloads, streams
from ..deps import ConnDep, ServicesDep
from ..projects import ProjectDep
from . import queue, service
from . import repository as repo
from .schemas import Attempt, Duplicate, Job, JobCreate, JobFile, JobFiles, JobUpdate, LogLineOut, Logs, Metrics

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])


@router.post("", status_code=201, response_model=Job)
async def create_job(body: JobCreate, services: ServicesDep, project: ProjectDep) -> Job:
    """Create a job as a draft, or queue it at once with ``start: true``."""
    script = await service.prefetch_script(services, project, body)  # before a connection is taken
    async with services.pool.acquire() as conn:
        return Job.of(await service.create_job(conn, services, project, body, script=script))


@router.get("", response_model=list[Job])
async def list_jobs(
    conn: ConnDep,
    project: ProjectDep,
    state: JobState | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[Job]:
    rows = await repo.list_jobs(conn, project, state.value if state else None, limit)
    positions = await repo.queue_positions(conn) if any(r["state"] == "queued" for r in rows) else {}
    return [Job.of(r, queue_position=positions.get(r["id"])) for r in rows]


async def full(conn: asyncpg.Connection, row: asyncpg.Record, common: CommonSettings | None = None) -> Job:
    """A job with its attempts, its place in the queue, what it waits for, and its MLflow run."""
    position = await queue.position(conn, row)
    return Job.of(
        row,
        attempts=[Attempt(**dict(a)) for a in await repo.attempts(conn, row["id"])],
        queue_position=position,
        waiting_for=await queue.waiting_for(conn, row, position),
        estimated_start=await queue.estimated_start(conn, row),
        mlflow_url=await mlflow_link(conn, row["id"], common) if common else None,
    )


async def mlflow_link(conn: asyncpg.Connection, job_id: uuid.UUID, common: CommonSettings) -> str | None:
    ui = common.mlflow_ui_url or (common.mlflow_tracking_uri if (common.mlflow_tracking_uri or "").startswith("http") else None)
    if not ui:
        return None
    run = await conn.fetchrow("SELECT run_id, experiment_id FROM mlflow_runs WHERE job_id = $1", job_id)
    return f"{ui.rstrip('/')}/#/experiments/{run['experiment_id']}/runs/{run['run_id']}" if run else None


@router.get("/{job_id}", response_model=Job)
async def get_job(job_id: uuid.UUID, services: ServicesDep, conn: ConnDep, project: ProjectDep) -> Job:
    return await full(conn, await service.get_job(conn, project, job_id), services.common)


@router.patch("/{job_id}", response_model=Job)
async def update_job(job_id: uuid.UUID, body: JobUpdate, services: ServicesDep, project: ProjectDep) -> Job:
    """Edit a draft, or re-prioritise a queued job."""
    changes = body.model_dump(exclude_unset=True)
    script = await service.prefetch_for_update(services, project, job_id, changes)  # before a connection is taken
    async with services.pool.acquire() as conn:
        return await full(conn, await service.update_job(conn, services, project, job_id, changes, script))


@router.post("/{job_id}/duplicate", status_code=201, response_model=Job)
async def duplicate_job(job_id: uuid.UUID, services: ServicesDep, conn: ConnDep, project: ProjectDep, body: Duplicate | None = None) -> Job:
    """A new draft with the same spec, editable before it starts."""
    return Job.of(await service.duplicate_job(conn, services, project, job_id, body.name if body else None))


@router.post("/{job_id}/resume", status_code=202, response_model=Job)
async def resume_job(job_id: uuid.UUID, services: ServicesDep, conn: ConnDep, project: ProjectDep) -> Job:
    """A new attempt of a stopped or failed job, from its last checkpoint (its attempts are
    listed on the job)."""
    return await full(conn, await service.resume_job(conn, services.subjects, project, job_id))


@router.post("/{job_id}/start", response_model=Job)
async def start_job(job_id: uuid.UUID, services: ServicesDep, conn: ConnDep, project: ProjectDep) -> Job:
    """Queue a draft."""
    return Job.of(await service.start_job(conn, services.subjects, project, job_id))


@router.post("/{job_id}/stop", status_code=202, response_model=Job)
async def stop_job(job_id: uuid.UUID, services: ServicesDep, conn: ConnDep, project: ProjectDep) -> Job:
    """Stop a queued or running job. After at least one completed epoch it ends **stopped** and
    keeps its best model; before the first epoch it ends **canceled** and keeps nothing."""
    return Job.of(await service.stop_job(conn, services.subjects, project, job_id))


@router.post("/{job_id}/deploy", response_model=Job, status_code=202, responses={200: {"model": Job, "description": "Already registered"}})
async def deploy_job(job_id: uuid.UUID, services: ServicesDep, conn: ConnDep, project: ProjectDep) -> JSONResponse:
    """Register the job's model (jobs with ``registration: manual``, or again after a deletion).
    A canceled or failed job has no model: 409 with the reason. Deploying twice is harmless."""
    job, registered = await service.deploy_job(conn, services.subjects, project, job_id)
    body = (await full(conn, job)).model_dump(mode="json")
    return JSONResponse(status_code=200 if registered else 202, content=body)


@router.get("/{job_id}/logs", response_model=Logs)
async def get_logs(
    job_id: uuid.UUID,
    conn: ConnDep,
    project: ProjectDep,
    after: Annotated[int, Query(ge=0, description="Return lines after this line number")] = 0,
    limit: Annotated[int, Query(ge=1, le=10000)] = 1000,
    attempt: Annotated[int | None, Query(ge=1, description="Default: the latest attempt")] = None,
) -> Logs:
    await service.get_job(conn, project, job_id)
    rows = await repo.logs(conn, job_id, after, limit, attempt)
    lines = [LogLineOut(**dict(r)) for r in rows]
    return Logs(lines=lines, next_after=lines[-1].line_no if lines else after)


@router.get("/{job_id}/metrics", response_model=Metrics)
async def get_metrics(job_id: uuid.UUID, conn: ConnDep, project: ProjectDep) -> Metrics:
    """Step-level and epoch-level metrics of the latest attempt, one row per step / epoch."""
    job = await service.get_job(conn, project, job_id)
    rows: dict[str, dict[int, dict[str, int | float]]] = {"step": defaultdict(dict), "epoch": defaultdict(dict)}
    for r in await repo.metric_points(conn, job_id, job["attempt"]):
        row = rows[r["scope"]][r["idx"]]
        row.setdefault(r["scope"], r["idx"])
        row.setdefault("epoch", r["epoch"])
        row[r["name"]] = r["value"]
    return Metrics(steps=[rows["step"][k] for k in sorted(rows["step"])], epochs=[rows["epoch"][k] for k in sorted(rows["epoch"])])


MAX_LISTED_FILES = 1000


async def _output_key(conn: asyncpg.Connection, services: ServicesDep, project: ProjectDep, job_id: uuid.UUID, attempt: int | None) -> str:
    job = await service.get_job(conn, project, job_id)
    uri = job["output_uri"]
    if attempt is not None:
        uri = await conn.fetchval("SELECT output_uri FROM attempts WHERE job_id = $1 AND attempt = $2", job_id, attempt)
        if uri is None:
            raise NotFound(f"job {job_id} has no attempt {attempt}", field="attempt")
    key = services.store.key_of(uri) if uri else None
    if key is None:
        raise NotFound(f"job {job_id} has no outputs yet (they appear once its trainer starts)")
    return key


@router.get("/{job_id}/files", response_model=JobFiles)
async def list_files(
    job_id: uuid.UUID,
    services: ServicesDep,
    conn: ConnDep,
    project: ProjectDep,
    attempt: Annotated[int | None, Query(ge=1, description="Default: the latest attempt")] = None,
) -> JobFiles:
    """What the trainer wrote (checkpoints, weights, ONNX, metrics, the split), downloadable
    before and without registration."""
    key = await _output_key(conn, services, project, job_id, attempt)
    objects = await services.store.list(key)
    root = key.rstrip("/") + "/"
    files = [JobFile(path=o.key.removeprefix(root), size=o.size) for o in objects[:MAX_LISTED_FILES]]
    return JobFiles(uri=services.store.uri(key), files=files, truncated=len(objects) > MAX_LISTED_FILES)


@router.get("/{job_id}/files/{path:path}", response_model=None)
async def download_file(
    job_id: uuid.UUID,
    path: str,
    services: ServicesDep,
    conn: ConnDep,
    project: ProjectDep,
    attempt: Annotated[int | None, Query(ge=1, description="Default: the latest attempt")] = None,
) -> RedirectResponse | StreamingResponse:
    """One of the job's output files, or a folder of them as a .tar."""
    try:
        rel = clean_key(path)
    except StorageError:
        rel = ""
    if not rel:
        raise InvalidInput(f"{path!r} is not a path inside the job's outputs", field="path")
    key = await _output_key(conn, services, project, job_id, attempt)
    return await downloads.respond(services.store, f"{key}/{rel}", PurePosixPath(rel).name, missing=f"job {job_id} has no output {rel!r}")


@router.get("/{job_id}/split")
async def get_split(job_id: uuid.UUID, services: ServicesDep, conn: ConnDep, project: ProjectDep) -> dict[str, object]:
    """The train/val split the job's trainer used (saved with its outputs): evaluate on ``val``,
    never on training items. Items are dataset-relative paths (images) or record numbers (JSONL)."""
    job = await service.get_job(conn, project, job_id)
    key = services.store.key_of(job["output_uri"]) if job["output_uri"] else None
    if key is None or await services.store.stat(f"{key}/split.json") is None:
        raise NotFound(f"job {job_id} has no recorded split yet (its trainer saves it when it starts)")
    return json.loads(await services.store.get_bytes(f"{key}/split.json"))  # type: ignore[no-any-return]


@router.get("/{job_id}/events", response_class=EventSourceResponse)
async def job_events(
    job_id: uuid.UUID,
    services: ServicesDep,
    project: ProjectDep,
    last_event_id: Annotated[str | None, Header()] = None,
) -> EventSourceResponse:
    """Server-Sent Events: a ``snapshot`` of the job, then every event about it (state changes,
    step metrics, completed epochs, log lines, registration) from the beginning, or after
    ``Last-Event-ID`` when resuming. Event names are the event kinds: ``status``, ``metrics``,
    ``epoch-completed``, ``logs``, ``artifact-uploaded``, ``model-registered``, …"""
    async with services.pool.acquire() as conn:  # not held while the stream is open
        job = await full(conn, await service.get_job(conn, project, job_id), services.common)
    snapshot = {"event": "snapshot", "data": job.model_dump_json()}
    source = streams.events(
        services.js,
        services.subjects.jobs_stream,
        services.subjects.all_of_job(job_id),
        after=streams.parse_last_event_id(last_event_id),
        first=snapshot,
    )
    return EventSourceResponse(source, ping=int(services.settings.sse_ping_seconds))
