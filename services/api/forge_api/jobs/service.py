"""Creating, starting and stopping jobs. Each change and the event that announces it are written
in one transaction (the outbox); the scheduler takes it from there."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg
from pydantic import ValidationError

from forge_common import outbox, telemetry
from forge_common.errors import Conflict, InvalidInput, NotFound
from forge_common.events import (
    DeployRequested,
    DeployRequestedData,
    JobStatusChanged,
    JobStatusChangedData,
    JobSubmitted,
    JobSubmittedData,
    ResumeRequested,
    ResumeRequestedData,
    StopRequested,
    StopRequestedData,
)
from forge_common.jobspec import MAIN_METRIC, PRIORITIES, TASK_FORMATS, Task, resolve_hyperparameters
from forge_common.states import DEPLOYABLE, RESUMABLE, JobState
from forge_common.subjects import Subjects
from forge_common.trainers import resolve_with_profile

from ..basemodels import service as basemodels
from ..deps import Services
from ..trainers import endpoints as trainers
from ..trainers import scripts
from . import queue
from . import repository as repo
from .schemas import JobCreate

SOURCE = "/forge/api"
PRODUCER = "api"


async def resolve_spec(
    conn: asyncpg.Connection,
    services: Services,
    project_id: uuid.UUID,
    body: JobCreate,
    *,
    previous: dict[str, Any] | None = None,
    script: scripts.Fetched | None = None,
) -> tuple[dict[str, Any], asyncpg.Record]:
    """Check every reference and fill in every default; the 422 names the field at fault."""
    dataset, version, latest = await repo.find_dataset_version(conn, project_id, body.dataset.name, body.dataset.version)
    if dataset is None:
        raise InvalidInput(f"no dataset named {body.dataset.name!r}", field="dataset.name")
    if version is None:
        have = f"its latest version is {latest}" if latest else "it has no versions yet"
        raise InvalidInput(f"dataset {body.dataset.name!r} has no version {body.dataset.version}; {have}", field="dataset.version")
    trainer = await _trainer(conn, project_id, body)
    hyperparameters = (
        resolve_with_profile(trainer, body.hyperparameters) if trainer else resolve_hyperparameters(body.task, body.hyperparameters)
    )
    formats = TASK_FORMATS[body.task]
    if version["format"] not in formats or body.task.value not in version["tasks"]:
        serves = ", ".join(version["tasks"]) or "no task"
        raise InvalidInput(
            f"dataset {body.dataset.name!r} v{body.dataset.version} is {version['format']} and serves {serves}; "
            f"task {body.task.value} needs a dataset in {' or '.join(formats)} format"
            + (" with masks or polygons" if body.task.value == "segmentation" else ""),
            field="dataset",
        )
    base_model = await basemodels.resolve(conn, project_id, body.base_model, body.task)
    await queue.check_accelerator(conn, body.accelerator, body.devices)
    custom = await _custom_code(conn, services, body, trainer, previous, script)
    spec = {
        "name": body.name,
        "task": body.task.value,
        "dataset": {
            "name": body.dataset.name,
            "version": body.dataset.version,
            "id": str(version["id"]),
            "format": version["format"],
            "uri": version["uri"],
            "content_hash": version["content_hash"],
        },
        "base_model": body.base_model,
        "base_model_spec": base_model,
        "hyperparameters": hyperparameters,
        "accelerator": body.accelerator,
        "devices": body.devices,
        "priority": body.priority,
        "time_limit_seconds": body.time_limit_seconds,
        "registration": body.registration,
        "trainer": body.trainer,
        "main_metric": trainer["main_metric"] if trainer else MAIN_METRIC[body.task],
        **custom,
    }
    return spec, version


async def _trainer(conn: asyncpg.Connection, project_id: uuid.UUID, body: JobCreate) -> dict[str, Any] | None:
    """The registered trainer profile the job names (None: the built-in trainer of its task)."""
    if body.trainer is None:
        return None
    profile = await trainers.get_profile(conn, project_id, body.trainer)
    if profile is None:
        raise InvalidInput(f"no trainer named {body.trainer!r} is registered (GET /v1/trainers)", field="trainer")
    if body.task.value not in profile["tasks"]:
        raise InvalidInput(f"trainer {body.trainer!r} serves {', '.join(profile['tasks'])}, not {body.task.value}", field="trainer")
    if body.accelerator not in profile["accelerators"]:
        raise InvalidInput(
            f"trainer {body.trainer!r} supports {', '.join(profile['accelerators'])}, not {body.accelerator}", field="accelerator"
        )
    return profile


def _sources(body: JobCreate, trainer: dict[str, Any] | None) -> tuple[str | None, str | None]:
    """(image, script URI) that replace the built-in trainer, from the job or its trainer's profile."""
    image = body.custom_image or ((trainer["accelerators"].get(body.accelerator) or {}).get("image") if trainer else None)
    script_uri = body.custom_script_uri or (trainer.get("script_uri") if trainer and not image else None)
    return image, script_uri


def _kept_script(previous: dict[str, Any] | None, script_uri: str, sha256: str | None) -> dict[str, Any] | None:
    """An edit or a duplicate keeps the fetched bytes (the source may have changed since)."""
    kept = (previous or {}).get("custom_script") or {}
    return kept if kept.get("uri") == script_uri and sha256 in (None, kept.get("sha256")) else None


async def prefetch_script(
    services: Services, project_id: uuid.UUID, body: JobCreate, previous: dict[str, Any] | None = None
) -> scripts.Fetched | None:
    """The job's custom script, fetched before the request takes a database connection: a slow
    script host must not hold one of the pool's few connections for seconds. None when there is
    nothing to fetch, or when the spec is wrong in a way ``resolve_spec`` will name."""
    if body.task in (Task.LLM_SFT, Task.VLM_SFT) or (body.custom_image and body.custom_script_uri):
        return None
    trainer = None
    if body.trainer is not None:
        async with services.pool.acquire() as conn:
            trainer = await trainers.get_profile(conn, project_id, body.trainer)
        if trainer is None or body.task.value not in trainer["tasks"] or body.accelerator not in trainer["accelerators"]:
            return None
    image, script_uri = _sources(body, trainer)
    if image or not script_uri or _kept_script(previous, script_uri, body.custom_script_sha256):
        return None
    return await scripts.fetch(services, script_uri, body.custom_script_sha256)


async def _custom_code(
    conn: asyncpg.Connection,
    services: Services,
    body: JobCreate,
    trainer: dict[str, Any] | None,
    previous: dict[str, Any] | None,
    prefetched: scripts.Fetched | None,
) -> dict[str, Any]:
    """The image or script that runs instead of the built-in trainer, checked and pinned."""
    image, script_uri = _sources(body, trainer)
    if not (image or script_uri):
        return {}
    if body.task in (Task.LLM_SFT, Task.VLM_SFT):
        raise InvalidInput(
            f"{body.task.value} jobs run the built-in SFT trainer only: custom images and scripts serve the computer-vision tasks",
            field="custom_image" if body.custom_image else "custom_script_uri" if body.custom_script_uri else "trainer",
        )
    if image and script_uri and body.custom_image and body.custom_script_uri:
        raise InvalidInput("give custom_image or custom_script_uri, not both", field="custom_script_uri")
    if image:
        if not await queue.runs_images(conn):
            raise InvalidInput(
                "a custom image needs a container runtime: this installation runs trainers as local processes; "
                "run the scheduler with the Kubernetes executor (FORGE_SCHEDULER_EXECUTOR=kubernetes) or give it a container"
                " runtime (FORGE_SCHEDULER_CONTAINER_RUNTIME=docker), or use custom_script_uri",
                field="custom_image" if body.custom_image else "trainer",
            )
        return {"custom_image": image, "image_pull_secret": body.image_pull_secret}
    assert script_uri is not None
    if kept := _kept_script(previous, script_uri, body.custom_script_sha256):
        return {"custom_script": kept}
    if prefetched is not None and prefetched.uri == script_uri and body.custom_script_sha256 in (None, prefetched.sha256):
        fetched = prefetched
    else:  # not fetched ahead (a caller without ``prefetch_script``, or the profile changed meanwhile)
        fetched = await scripts.fetch(services, script_uri, body.custom_script_sha256)
    return {"custom_script": {"uri": fetched.uri, "sha256": fetched.sha256, "size": fetched.size, "stored_uri": fetched.stored_uri}}


async def _announce_queued(conn: asyncpg.Connection, subjects: Subjects, job: asyncpg.Record, previous: JobState | None) -> None:
    """The status first: the outbox publishes in order, and the scheduler reacts to the submission,
    so its "running" follows this "queued" (unless its periodic admission pass got there first)."""
    await _announce_state(conn, subjects, job, previous)
    tp = job["traceparent"]
    submitted = JobSubmitted.of(
        JobSubmittedData(job_id=job["id"], name=job["name"], task=job["task"], accelerator=job["accelerator"], priority=job["priority"]),
        source=SOURCE,
        traceparent=tp,
    )
    await outbox.add(conn, subjects, submitted, producer=PRODUCER)


async def _announce_state(conn: asyncpg.Connection, subjects: Subjects, job: asyncpg.Record, previous: JobState | None) -> None:
    status = JobStatusChanged.of(
        JobStatusChangedData(job_id=job["id"], name=job["name"], state=JobState(job["state"]), previous_state=previous),
        source=SOURCE,
        traceparent=job["traceparent"],
    )
    await outbox.add(conn, subjects, status, producer=PRODUCER)


async def create_job(
    conn: asyncpg.Connection,
    services: Services,
    project_id: uuid.UUID,
    body: JobCreate,
    *,
    previous: dict[str, Any] | None = None,
    script: scripts.Fetched | None = None,
) -> asyncpg.Record:
    """``previous``: the spec this one is a copy of (its fetched script bytes are reused);
    ``script``: what ``prefetch_script`` fetched."""
    subjects = services.subjects
    job_id = uuid.uuid4()
    with telemetry.span("api.create_job", job_id=job_id) as traceparent:
        spec, version = await resolve_spec(conn, services, project_id, body, previous=previous, script=script)
        state = JobState.QUEUED if body.start else JobState.DRAFT
        async with conn.transaction():
            await repo.insert_job(
                conn,
                id=job_id,
                project_id=project_id,
                name=body.name,
                task=body.task.value,
                spec=spec,
                dataset_version_id=version["id"],
                base_model=body.base_model,
                accelerator=body.accelerator,
                priority=PRIORITIES[body.priority],
                state=state.value,
                traceparent=traceparent,
                total_epochs=spec["hyperparameters"].get("epochs"),
            )
            job = await repo.get_job(conn, project_id, job_id)
            assert job is not None
            if state is JobState.QUEUED:
                await _announce_queued(conn, subjects, job, None)
            else:
                await _announce_state(conn, subjects, job, None)
    return job


async def get_job(conn: asyncpg.Connection, project_id: uuid.UUID, job_id: uuid.UUID) -> asyncpg.Record:
    job = await repo.get_job(conn, project_id, job_id)
    if job is None:
        raise NotFound(f"no job {job_id}")
    return job


async def start_job(conn: asyncpg.Connection, subjects: Subjects, project_id: uuid.UUID, job_id: uuid.UUID) -> asyncpg.Record:
    await get_job(conn, project_id, job_id)
    async with conn.transaction():
        await repo.queue(conn, job_id)
        job = await get_job(conn, project_id, job_id)
        await _announce_queued(conn, subjects, job, JobState.DRAFT)
    return job


async def stop_job(conn: asyncpg.Connection, subjects: Subjects, project_id: uuid.UUID, job_id: uuid.UUID) -> asyncpg.Record:
    """Queued: it will be canceled. Running: the trainer is asked to stop — after ≥1 completed
    epoch the job ends stopped with its best model, before that canceled with nothing kept."""
    job = await get_job(conn, project_id, job_id)
    async with conn.transaction():
        if not await repo.request_stop(conn, job_id):
            state = (await get_job(conn, project_id, job_id))["state"]
            if state == JobState.DRAFT:
                raise Conflict("the job is a draft: it has not been started, so there is nothing to stop")
            raise Conflict(f"the job is already {state}")
        event = StopRequested.of(StopRequestedData(job_id=job_id), source=SOURCE, traceparent=job["traceparent"])
        await outbox.add(conn, subjects, event, producer=PRODUCER)
    return await get_job(conn, project_id, job_id)


async def resume_job(conn: asyncpg.Connection, subjects: Subjects, project_id: uuid.UUID, job_id: uuid.UUID) -> asyncpg.Record:
    """Ask for a new attempt of a stopped or failed job, from its last checkpoint."""
    job = await get_job(conn, project_id, job_id)
    if job["state"] not in RESUMABLE:
        why = {
            "succeeded": "it succeeded: duplicate it to train again",
            "canceled": "it was canceled before its first epoch and kept nothing: duplicate it to start over",
        }.get(job["state"], f"it is {job['state']}")
        raise Conflict(f"only a stopped or failed job can be resumed; {why}")
    event = ResumeRequested.of(ResumeRequestedData(job_id=job_id), source=SOURCE, traceparent=job["traceparent"])
    await outbox.add(conn, subjects, event, producer=PRODUCER)
    return job


def spec_fields(spec: dict[str, Any]) -> dict[str, Any]:
    """A recorded spec back as the fields a user submits (the script stays pinned to its bytes)."""
    fields: dict[str, Any] = {
        "name": spec["name"],
        "task": spec["task"],
        "dataset": {"name": spec["dataset"]["name"], "version": spec["dataset"]["version"]},
        "base_model": spec["base_model"],
        "hyperparameters": spec["hyperparameters"],
        "accelerator": spec.get("accelerator", "cpu"),
        "devices": spec.get("devices", 1),
        "priority": spec.get("priority", "normal"),
        "time_limit_seconds": spec.get("time_limit_seconds"),
        "registration": spec.get("registration", "auto"),
        "trainer": spec.get("trainer"),
    }
    if spec.get("custom_image") and not spec.get("trainer"):
        fields.update(custom_image=spec["custom_image"], image_pull_secret=spec.get("image_pull_secret"))
    if spec.get("custom_script") and not spec.get("trainer"):
        fields.update(custom_script_uri=spec["custom_script"]["uri"], custom_script_sha256=spec["custom_script"]["sha256"])
    return fields


async def duplicate_job(
    conn: asyncpg.Connection, services: Services, project_id: uuid.UUID, job_id: uuid.UUID, name: str | None
) -> asyncpg.Record:
    """A new draft with the same spec (the same dataset version, base model and script bytes: comparable)."""
    job = await get_job(conn, project_id, job_id)
    body = _edited(job, {"name": name or job["spec"]["name"], "start": False})
    return await create_job(conn, services, project_id, body, previous=job["spec"])


def _edited(job: asyncpg.Record, changes: dict[str, Any]) -> JobCreate:
    """The stored spec with a request's changes, checked as a whole (422 naming the field)."""
    try:
        return JobCreate.model_validate({**spec_fields(job["spec"]), **changes})
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        raise InvalidInput(f"{field}: {err['msg']}" if field else err["msg"], field=field or None) from None


async def prefetch_for_update(
    services: Services, project_id: uuid.UUID, job_id: uuid.UUID, changes: dict[str, Any]
) -> scripts.Fetched | None:
    """``prefetch_script`` for an edit of a draft (nothing for anything else: ``update_job`` says why)."""
    async with services.pool.acquire() as conn:
        job = await get_job(conn, project_id, job_id)
    if job["state"] != JobState.DRAFT:
        return None
    return await prefetch_script(services, project_id, _edited(job, changes), previous=job["spec"])


async def update_job(
    conn: asyncpg.Connection,
    services: Services,
    project_id: uuid.UUID,
    job_id: uuid.UUID,
    changes: dict[str, Any],
    script: scripts.Fetched | None = None,
) -> asyncpg.Record:
    """A draft can change anything; a queued job only its priority."""
    job = await get_job(conn, project_id, job_id)
    if job["state"] == JobState.QUEUED:
        extra = set(changes) - {"priority"}
        if extra:
            raise Conflict(f"a queued job can only be re-prioritised; {', '.join(sorted(extra))} can change while it is a draft")
        # only the priority: nothing else is re-resolved (the base model or script source may have changed since)
        priority = changes.get("priority") or job["spec"].get("priority", "normal")  # the PATCH schema checked the name
        if not await repo.set_priority(conn, job_id, priority, PRIORITIES[priority]):
            raise Conflict("the job changed state meanwhile; read it again")
        return await get_job(conn, project_id, job_id)
    if job["state"] != JobState.DRAFT:
        raise Conflict(f"the job is {job['state']}: only a draft can be edited, or a queued job re-prioritised")
    body = _edited(job, changes)
    new_spec, version = await resolve_spec(conn, services, project_id, body, previous=job["spec"], script=script)
    if not await repo.update_spec(conn, job_id, JobState(job["state"]), new_spec, version["id"], PRIORITIES[body.priority]):
        raise Conflict("the job changed state meanwhile; read it again")
    return await get_job(conn, project_id, job_id)


async def deploy_job(conn: asyncpg.Connection, subjects: Subjects, project_id: uuid.UUID, job_id: uuid.UUID) -> tuple[asyncpg.Record, bool]:
    """Register the model of a succeeded or stopped job; (job, already registered). Idempotent."""
    job = await get_job(conn, project_id, job_id)
    if job["state"] not in DEPLOYABLE:
        why = {
            "canceled": "it was canceled before its first completed epoch, so it kept no model",
            "failed": "it failed, so it produced no model to register (resume it, or fix it and run it again)",
        }.get(job["state"], f"it is {job['state']}: only a succeeded or stopped job has a model")
        raise Conflict(f"cannot deploy this job: {why}")
    if job["model_attempt"] is not None and job["model_attempt"] >= (await repo.latest_attempt_with_model(conn, job_id) or 0):
        return job, True  # a resumed job's newer model is not "already registered" by the older one
    event = DeployRequested.of(DeployRequestedData(job_id=job_id), source=SOURCE, traceparent=job["traceparent"])
    await outbox.add(conn, subjects, event, producer=PRODUCER)
    return job, False
