"""Deploy policies and the registry: manual registration by deploy, idempotence, refusals with a
reason, deletion through the registrar, and the event catalogue."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import jsonschema

from forge_common import bus, db
from forge_common.events import EVENT_CLASSES, DeployRequested, decode
from forge_common.outbox import OutboxRelay
from forge_common.settings import CommonSettings
from forge_common.storage import open_store
from forge_common.subjects import Subjects
from forge_registrar.service import Registrar

from .conftest import collect, tar_of, upload
from .helpers import insert_attempt, insert_job


async def finished_job(conn: asyncpg.Connection, settings: CommonSettings, state: str, registration: str = "manual") -> uuid.UUID:
    job = await insert_job(conn, state=state, name=f"model-{state}", registration=registration)
    out = open_store(settings).location(f"jobs/{job}/1")
    out.put_bytes("model.onnx", b"onnx")
    await insert_attempt(conn, job, log_uri="file:///tmp/none", finished=True)
    await conn.execute("UPDATE attempts SET outcome = $2, output_uri = $3 WHERE job_id = $1", job, state, out.uri)
    return job


async def test_a_manual_job_is_registered_on_deploy_once(api: httpx.AsyncClient, common_settings: CommonSettings, js: Any) -> None:
    pool = await db.connect(common_settings.database_url)
    subjects = Subjects(common_settings.bus_prefix)
    try:
        async with pool.acquire() as conn:
            job = await finished_job(conn, common_settings, "stopped")
        r = await api.post(f"/v1/jobs/{job}/deploy")
        assert r.status_code == 202 and r.json()["model"] is None
        (msg,) = await collect(js, subjects.job(job, "deploy-requested"), 1)
        event = decode(msg.data)
        assert isinstance(event, DeployRequested)
        row = await Registrar(pool, subjects, None).on_deploy_requested(event.job_id)
        assert row is not None and row["version"] == 1 and row["onnx_uri"].endswith("model.onnx")
        again = await api.post(f"/v1/jobs/{job}/deploy")
        assert again.status_code == 200 and again.json()["model"] == {"name": "model-stopped", "version": 1}
        assert await Registrar(pool, subjects, None).on_deploy_requested(job) is not None  # a repeated request changes nothing
        async with pool.acquire() as conn:
            assert await conn.fetchval("SELECT count(*) FROM model_versions") == 1
    finally:
        await pool.close()


async def test_a_resumed_job_registers_its_newer_model_as_a_new_version(
    api: httpx.AsyncClient, common_settings: CommonSettings, js: Any
) -> None:
    pool = await db.connect(common_settings.database_url)
    subjects = Subjects(common_settings.bus_prefix)
    registrar = Registrar(pool, subjects, None)
    try:
        async with pool.acquire() as conn:
            job = await finished_job(conn, common_settings, "stopped")
        assert (await registrar.on_deploy_requested(job))["version"] == 1  # type: ignore[index]
        # resumed: attempt 2 trains on and succeeds with a better model
        out = open_store(common_settings).location(f"jobs/{job}/2")
        out.put_bytes("model.onnx", b"better onnx")
        async with pool.acquire() as conn:
            await insert_attempt(conn, job, attempt=2, log_uri="file:///tmp/none", finished=True)
            await conn.execute("UPDATE attempts SET outcome = 'succeeded', output_uri = $2 WHERE job_id = $1 AND attempt = 2", job, out.uri)
            await conn.execute("UPDATE jobs SET state = 'succeeded', attempt = 2 WHERE id = $1", job)
        r = await api.post(f"/v1/jobs/{job}/deploy")
        assert r.status_code == 202, "the version of attempt 1 must not count as attempt 2's registration"
        await collect(js, subjects.job(job, "deploy-requested"), 1)
        row = await registrar.on_deploy_requested(job)
        assert row is not None and (row["version"], row["attempt"]) == (2, 2) and row["onnx_uri"] == out.uri_of("model.onnx")
        shown = await api.get(f"/v1/jobs/{job}")
        assert shown.json()["model"] == {"name": "model-stopped", "version": 2}
        assert [(a["attempt"], a["outcome"]) for a in shown.json()["attempts"]] == [(1, "stopped"), (2, "succeeded")]
        assert (await api.post(f"/v1/jobs/{job}/deploy")).status_code == 200
    finally:
        await pool.close()


async def test_deleting_a_version_never_touches_the_same_name_in_another_project(common_settings: CommonSettings) -> None:
    pool = await db.connect(common_settings.database_url)
    registrar = Registrar(pool, Subjects(common_settings.bus_prefix), None)
    try:
        async with pool.acquire() as conn:
            mine = await finished_job(conn, common_settings, "succeeded")
            other_project = uuid.uuid4()
            await conn.execute("INSERT INTO projects (id, name) VALUES ($1, $2)", other_project, f"p-{other_project}")
            theirs = await finished_job(conn, common_settings, "succeeded")
            await conn.execute("UPDATE jobs SET project_id = $2 WHERE id = $1", theirs, other_project)
        assert (await registrar.on_deploy_requested(mine))["version"] == 1  # type: ignore[index]
        assert (await registrar.on_deploy_requested(theirs))["version"] == 1  # type: ignore[index]
        assert await registrar.delete_version(theirs, "model-succeeded", 1)
        async with pool.acquire() as conn:
            left = await conn.fetch("SELECT job_id FROM model_versions")
        assert [r["job_id"] for r in left] == [mine]
    finally:
        await pool.close()


async def test_deploying_a_job_without_a_model_is_refused_with_the_reason(api: httpx.AsyncClient, common_settings: CommonSettings) -> None:
    pool = await db.connect(common_settings.database_url)
    try:
        async with pool.acquire() as conn:
            canceled = await insert_job(conn, state="canceled")
            failed = await insert_job(conn, state="failed")
            running = await insert_job(conn, state="running")
    finally:
        await pool.close()
    r = await api.post(f"/v1/jobs/{canceled}/deploy")
    assert r.status_code == 409 and "canceled before its first completed epoch" in r.json()["detail"]
    r = await api.post(f"/v1/jobs/{failed}/deploy")
    assert r.status_code == 409 and "it failed" in r.json()["detail"]
    r = await api.post(f"/v1/jobs/{running}/deploy")
    assert r.status_code == 409 and "only a succeeded or stopped job has a model" in r.json()["detail"]


async def test_a_deleted_version_leaves_the_registry_through_the_registrar(
    api: httpx.AsyncClient, common_settings: CommonSettings, js: Any, sample_dataset: Path
) -> None:
    pool = await db.connect(common_settings.database_url)
    subjects = Subjects(common_settings.bus_prefix)
    try:
        async with pool.acquire() as conn:
            job = await finished_job(conn, common_settings, "succeeded", registration="auto")
        registrar = Registrar(pool, subjects, None)
        await registrar.on_deploy_requested(job)
        r = await api.delete("/v1/models/model-succeeded/versions/1")
        assert r.status_code == 202
        (msg,) = await collect(js, subjects.job(job, "model-deletion-requested"), 1)
        event = decode(msg.data)
        assert await registrar.delete_version(event.job_id, event.data.model_name, event.data.version)
        assert (await api.get("/v1/models/model-succeeded/versions/1")).status_code == 404
        await OutboxRelay(pool, js, producer="registrar").drain()
        (deleted,) = await collect(js, subjects.job(job, "model-deleted"), 1)
        assert decode(deleted.data).data.version == 1
        assert (await api.delete("/v1/models/model-succeeded/versions/1")).status_code == 404
    finally:
        await pool.close()


async def test_the_asyncapi_document_describes_every_event_as_published(api: httpx.AsyncClient, common_settings: CommonSettings) -> None:
    doc = (await api.get("/asyncapi.json")).json()
    assert doc["asyncapi"] == "3.0.0" and doc["defaultContentType"] == "application/cloudevents+json"
    prefix = common_settings.bus_prefix
    for cls in EVENT_CLASSES:
        channel = doc["channels"][cls.KIND]
        assert channel["address"] == f"{prefix}.job.{{job_id}}.{cls.KIND}"
        # a real event of each kind validates against the schema the document gives for it
        root = {"$ref": f"#/components/schemas/{cls.__name__}", "components": doc["components"]}
        jsonschema.Draft202012Validator(root).validate(json.loads(bus.encode(_example(cls))))


def _example(cls: Any) -> Any:
    from forge_common.events import (
        ArtifactUploadedData,
        DeployRequestedData,
        EpochCompletedData,
        JobStatusChangedData,
        JobSubmittedData,
        LogLine,
        LogLinesData,
        MetricsReportedData,
        ModelRegisteredData,
        ModelVersionDeletedData,
        ModelVersionDeletionRequestedData,
        ResumeRequestedData,
        StopRequestedData,
    )
    from forge_common.states import JobState

    job = uuid.uuid4()
    data = {
        "submitted": JobSubmittedData(job_id=job, name="n", task="classification"),
        "stop-requested": StopRequestedData(job_id=job),
        "resume-requested": ResumeRequestedData(job_id=job),
        "deploy-requested": DeployRequestedData(job_id=job),
        "model-deletion-requested": ModelVersionDeletionRequestedData(job_id=job, model_name="m", version=1),
        "model-deleted": ModelVersionDeletedData(job_id=job, model_name="m", version=1),
        "status": JobStatusChangedData(job_id=job, name="n", state=JobState.RUNNING, reason="x"),
        "epoch-completed": EpochCompletedData(job_id=job, epoch=1, metrics={"top1": 0.5}),
        "metrics": MetricsReportedData(job_id=job, step=1, epoch=1, metrics={"loss": 1.0}),
        "logs": LogLinesData(job_id=job, lines=[LogLine(line_no=1, ts="2026-12-02T00:00:00Z", text="hi")]),  # type: ignore[arg-type]
        "artifact-uploaded": ArtifactUploadedData(job_id=job, artifact_id="a", uri="s3://b/p", outcome=JobState.SUCCEEDED),
        "model-registered": ModelRegisteredData(job_id=job, model_id=uuid.uuid4(), model_name="m", version=1),
    }[cls.KIND]
    return cls.of(data, source="/test")


async def test_the_global_stream_carries_every_jobs_state_changes(api: httpx.AsyncClient, sample_dataset: Path) -> None:
    import asyncio

    await upload(api, "shapes", tar_of(sample_dataset))
    spec = {"task": "classification", "dataset": {"name": "shapes", "version": 1}, "base_model": "timm/test_vit"}
    a = (await api.post("/v1/jobs", json={**spec, "name": "a"})).json()
    b = (await api.post("/v1/jobs", json={**spec, "name": "b", "start": True})).json()
    r = await api.get("/v1/events", params={"kinds": "nonsense"})
    assert r.status_code == 422 and "unknown event kind" in r.json()["detail"]
    # ASGITransport buffers whole responses, so read the stream's generator directly
    from forge_api import streams

    services = api.app.state.services  # type: ignore[attr-defined]
    gen = streams.events(
        services.js, services.subjects.jobs_stream, [services.subjects.every("status"), services.subjects.every("submitted")], after=None
    )
    got = []
    async with asyncio.timeout(10):
        async for item in gen:
            got.append((item["event"], json.loads(item["data"])["subject"]))
            if len(got) == 3:
                break
    await gen.aclose()
    assert got == [("status", a["id"]), ("status", b["id"]), ("submitted", b["id"])]


async def test_the_global_stream_can_start_live_without_history(api: httpx.AsyncClient, sample_dataset: Path) -> None:
    import asyncio

    from forge_api import streams

    await upload(api, "shapes", tar_of(sample_dataset))
    spec = {"task": "classification", "dataset": {"name": "shapes", "version": 1}, "base_model": "timm/test_vit"}
    before = (await api.post("/v1/jobs", json={**spec, "name": "before"})).json()
    services = api.app.state.services  # type: ignore[attr-defined]
    await collect(services.js, services.subjects.job(before["id"], "status"), 1)  # it is in the stream already
    gen = streams.events(services.js, services.subjects.jobs_stream, services.subjects.every("status"), after=None, live_only=True)
    first = asyncio.ensure_future(gen.__anext__())
    await asyncio.sleep(0.5)
    after = (await api.post("/v1/jobs", json={**spec, "name": "after"})).json()
    item = await asyncio.wait_for(first, 10)
    await gen.aclose()
    assert json.loads(item["data"])["subject"] == after["id"]
    r = await api.get("/v1/events", params={"since": "yesterday"})
    assert r.status_code == 422 and r.json()["field"] == "since"


async def test_a_version_keeps_its_adapter_folder_and_serves_it_as_a_tar(api: httpx.AsyncClient, common_settings: CommonSettings) -> None:
    import io
    import tarfile

    store = open_store(common_settings)
    pool = await db.connect(common_settings.database_url)
    try:
        async with pool.acquire() as conn:
            job = await insert_job(conn, state="succeeded", name="lora")
        out = store.location(f"jobs/{job}/1")
        weights = out.put_bytes("adapter/adapter_model.safetensors", b"s" * 70_000)  # spans several tar blocks
        out.put_bytes("adapter/adapter_config.json", b'{"r": 8}')
        out.put_bytes("adapter/tokenizer/tokenizer.json", b"{}")
        elsewhere = store.location("jobs/someone-else/1").put_bytes("secret.bin", b"not yours")
        descriptor = {
            "weights_uri": weights,
            "adapter_uri": out.uri_of("adapter"),
            "merged_uri": out.uri_of("merged-was-never-written"),
            "stolen_uri": elsewhere,  # outside the job's output: ignored
            "Odd Name_uri": out.uri_of("adapter"),  # not a part name: ignored
            "method": "lora",
        }
        out.put_bytes("lora.metrics.json", json.dumps(descriptor).encode())
        row = await Registrar(pool, Subjects(common_settings.bus_prefix), None).register(job, 1, out.uri, "lora")
        assert row is not None and set(row["files"]) == {"adapter", "merged"}
    finally:
        await pool.close()
    version = (await api.get("/v1/models/lora/versions/1")).json()
    assert version["files"]["adapter"] == out.uri_of("adapter")
    r = await api.get("/v1/models/lora/versions/1/download", params={"file": "adapter"})
    assert r.status_code == 200 and r.headers["content-disposition"] == 'attachment; filename="lora-v1-adapter.tar"'
    with tarfile.open(fileobj=io.BytesIO(r.content)) as tar:
        got = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
    assert got == {
        "adapter_config.json": b'{"r": 8}',
        "adapter_model.safetensors": b"s" * 70_000,
        "tokenizer/tokenizer.json": b"{}",
    }
    single = await api.get("/v1/models/lora/versions/1/download", params={"file": "weights"})
    assert single.status_code == 200 and single.content == b"s" * 70_000
    gone = await api.get("/v1/models/lora/versions/1/download", params={"file": "merged"})
    assert gone.status_code == 404 and "missing from object storage" in gone.json()["detail"]
    unknown = await api.get("/v1/models/lora/versions/1/download", params={"file": "stolen"})
    assert unknown.status_code == 404 and "(it has: weights, adapter, merged)" in unknown.json()["detail"]


async def test_a_jobs_outputs_are_listed_and_downloadable_before_registration(
    api: httpx.AsyncClient, common_settings: CommonSettings
) -> None:
    import io
    import tarfile

    pool = await db.connect(common_settings.database_url)
    try:
        async with pool.acquire() as conn:
            job = await finished_job(conn, common_settings, "succeeded")  # manual: nothing registered
        out = open_store(common_settings).location(f"jobs/{job}/1")
        out.put_bytes("checkpoints/best/model.pt", b"best")
        out.put_bytes("split.json", b'{"train": [], "val": []}')
        async with pool.acquire() as conn:
            await conn.execute("UPDATE jobs SET output_uri = $2 WHERE id = $1", job, out.uri)
        async with pool.acquire() as conn:
            empty = await insert_job(conn, state="queued", name="not-started")
    finally:
        await pool.close()
    listed = (await api.get(f"/v1/jobs/{job}/files")).json()
    assert listed["uri"] == out.uri and not listed["truncated"]
    assert {f["path"]: f["size"] for f in listed["files"]} == {"checkpoints/best/model.pt": 4, "model.onnx": 4, "split.json": 24}
    one = await api.get(f"/v1/jobs/{job}/files/model.onnx")
    assert one.status_code == 200 and one.content == b"onnx"
    folder = await api.get(f"/v1/jobs/{job}/files/checkpoints")
    assert folder.status_code == 200 and folder.headers["content-disposition"] == 'attachment; filename="checkpoints.tar"'
    with tarfile.open(fileobj=io.BytesIO(folder.content)) as tar:
        assert tar.getnames() == ["best/model.pt"]
    assert (await api.get(f"/v1/jobs/{job}/files/checkpoints", params={"attempt": 1})).status_code == 200
    assert (await api.get(f"/v1/jobs/{job}/files/model.onnx", params={"attempt": 7})).json()["field"] == "attempt"
    escape = await api.get(f"/v1/jobs/{job}/files/checkpoints/..%2F..%2Fother")
    assert escape.status_code == 422 and "not a path inside" in escape.json()["detail"]
    missing = await api.get(f"/v1/jobs/{job}/files/nope.bin")
    assert missing.status_code == 404 and "has no output 'nope.bin'" in missing.json()["detail"]
    none_yet = await api.get(f"/v1/jobs/{empty}/files")
    assert none_yet.status_code == 404 and "no outputs yet" in none_yet.json()["detail"]
