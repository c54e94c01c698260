"""The api against a real PostgreSQL, a real JetStream server and the local object store."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import httpx
from PIL import Image

from forge_common.events import decode
from forge_common.settings import CommonSettings
from forge_common.subjects import Subjects

from .conftest import collect, tar_of, upload

SPEC: dict[str, Any] = {
    "name": "shapes-vit",
    "task": "classification",
    "dataset": {"name": "shapes", "version": 1},
    "base_model": "timm/test_vit",
    "hyperparameters": {"epochs": 2, "imgsz": 32},
}


async def test_health_and_readiness(api: httpx.AsyncClient) -> None:
    assert (await api.get("/healthz")).json() == {"status": "ok"}
    ready = await api.get("/readyz")
    assert ready.status_code == 200 and ready.json() == {"status": "ok", "nats": True, "database": True}
    assert "/v1/jobs" in (await api.get("/openapi.json")).json()["paths"]


async def test_uploading_a_dataset_makes_an_immutable_content_addressed_version(
    api: httpx.AsyncClient, sample_dataset: Path, common_settings: CommonSettings
) -> None:
    data = tar_of(sample_dataset)
    first = await upload(api, "shapes", data)
    assert first.status_code == 201, first.text
    v = first.json()
    assert (v["version"], v["format"], v["tasks"], v["file_count"]) == (1, "imagenet-folder", ["classification"], 60)
    assert v["stats"]["num_classes"] == 3 and v["created"] is True
    stored = Path(v["uri"].removeprefix("file://"))
    assert stored.is_relative_to(common_settings.objects_dir) and len(list(stored.rglob("*.png"))) == 60
    again = await upload(api, "shapes", data, "same-content.tar.gz")
    assert again.status_code == 200 and again.json()["version"] == 1 and again.json()["created"] is False
    listed = (await api.get("/v1/datasets/shapes/versions")).json()
    assert [x["version"] for x in listed] == [1]
    assert (await api.get("/v1/datasets/shapes/versions/1")).json()["content_hash"] == v["content_hash"]


async def test_changed_content_is_the_next_version(api: httpx.AsyncClient, sample_dataset: Path, tmp_path: Path) -> None:
    await upload(api, "shapes", tar_of(sample_dataset))
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(sample_dataset, copy)
    Image.new("RGB", (32, 32), (1, 2, 3)).save(copy / "circle" / "extra.png")
    second = await upload(api, "shapes", tar_of(copy))
    assert second.status_code == 201 and second.json()["version"] == 2
    assert (await api.get("/v1/datasets")).json()[0]["latest_version"] == 2


async def test_a_rejected_upload_stores_nothing_and_names_the_file(
    api: httpx.AsyncClient, tmp_path: Path, common_settings: CommonSettings
) -> None:
    for cls in ("cat", "dog"):
        (tmp_path / "d" / cls).mkdir(parents=True)
        Image.new("RGB", (8, 8)).save(tmp_path / "d" / cls / "ok.png")
    (tmp_path / "d" / "dog" / "bad.png").write_bytes(b"garbage")
    response = await upload(api, "pets", tar_of(tmp_path / "d"))
    assert response.status_code == 422
    body = response.json()
    assert body["type"] == "invalid_input" and body["detail"].startswith("dog/bad.png: unreadable or corrupt image")
    assert body["report"]["errors"][0]["file"] == "dog/bad.png"
    assert (await api.get("/v1/datasets/pets/versions")).json() == []
    assert not list(common_settings.objects_dir.rglob("*.png"))


async def test_dataset_errors_are_4xx_with_a_message(api: httpx.AsyncClient) -> None:
    missing = await api.post("/v1/datasets/nope/versions", files={"file": ("a.zip", b"x")})
    assert missing.status_code == 404 and missing.json() == {"type": "not_found", "detail": "no dataset named 'nope'", "field": "name"}
    await api.post("/v1/datasets", json={"name": "d"})
    dup = await api.post("/v1/datasets", json={"name": "d"})
    assert dup.status_code == 409 and "already exists" in dup.json()["detail"]
    bad_name = await api.post("/v1/datasets", json={"name": "no spaces allowed"})
    assert bad_name.status_code == 422 and bad_name.json()["field"] == "name"
    not_archive = await api.post("/v1/datasets/d/versions", files={"file": ("a.zip", b"plain text")})
    assert not_archive.status_code == 422 and "not a .zip" in not_archive.json()["detail"]
    empty = await api.post("/v1/datasets/d/versions", files={"file": ("a.zip", b"")})
    assert empty.status_code == 422 and "empty" in empty.json()["detail"]
    no_file = await api.post("/v1/datasets/d/versions")
    assert no_file.status_code == 422 and no_file.json()["field"] == "file"


async def test_creating_and_starting_a_job_publishes_its_events(
    api: httpx.AsyncClient, sample_dataset: Path, js: Any, common_settings: CommonSettings
) -> None:
    await upload(api, "shapes", tar_of(sample_dataset))
    created = await api.post("/v1/jobs", json=SPEC)
    assert created.status_code == 201, created.text
    job = created.json()
    assert job["state"] == "draft" and job["progress"] == 0
    assert job["hyperparameters"]["epochs"] == 2 and job["hyperparameters"]["batch"] == 16  # defaults filled in
    started = await api.post(f"/v1/jobs/{job['id']}/start")
    assert started.status_code == 200 and started.json()["state"] == "queued"
    again = await api.post(f"/v1/jobs/{job['id']}/start")
    assert again.status_code == 409 and again.json()["detail"] == "only a draft can be started; this job is queued"
    subjects = Subjects(common_settings.bus_prefix)
    events = [decode(m.data) for m in await collect(js, subjects.all_of_job(job["id"]), 3)]
    assert [e.type for e in events] == ["forge.job.status-changed", "forge.job.status-changed", "forge.job.submitted"]
    assert [e.data.state for e in events if e.KIND == "status"] == ["draft", "queued"]
    assert (await api.get(f"/v1/jobs/{job['id']}")).json()["state"] == "queued"
    assert [j["id"] for j in (await api.get("/v1/jobs", params={"state": "queued"})).json()] == [job["id"]]


async def test_invalid_jobs_get_422_naming_the_field(api: httpx.AsyncClient, sample_dataset: Path) -> None:
    await upload(api, "shapes", tar_of(sample_dataset))

    async def problem(**changes: Any) -> dict[str, Any]:
        spec = json.loads(json.dumps(SPEC))
        for key, value in changes.items():
            if "." in key:
                a, b = key.split(".")
                spec[a][b] = value
            else:
                spec[key] = value
        r = await api.post("/v1/jobs", json=spec)
        assert r.status_code == 422, r.text
        return r.json()  # type: ignore[no-any-return]

    assert (await problem(**{"dataset.name": "unknown"}))["field"] == "dataset.name"
    p = await problem(**{"dataset.version": 7})
    assert p["field"] == "dataset.version" and "latest version is 1" in p["detail"]
    p = await problem(hyperparameters={"epochs": -1})
    assert p["field"] == "hyperparameters.epochs"
    p = await problem(hyperparameters={"learning_rate": 1})
    assert p["field"] == "hyperparameters.learning_rate" and "Extra inputs" in p["detail"]
    p = await problem(task="segmentation")
    assert p["field"] == "dataset" and "task segmentation needs a dataset in coco or yolo format" in p["detail"]
    p = await problem(base_model="rt-detr-tiny")
    assert p["field"] == "base_model" and "serves detection; task classification needs a base model of family timm" in p["detail"]
    p = await problem(task="painting")
    assert p["field"] == "task"
    p = await problem(base_model="timm/does_not_exist")
    assert p["field"] == "base_model" and "timm/resnet18" in p["detail"]  # it lists what there is
    p = await problem(accelerator="nvidia")
    assert p["field"] == "accelerator" and "available: cpu" in p["detail"]
    p = await problem(surprise=True)
    assert p["field"] == "surprise" and p["detail"] == "surprise: unknown field"
    r = await api.post("/v1/jobs", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["type"] == "invalid_input"


async def test_stop_rules(api: httpx.AsyncClient, sample_dataset: Path) -> None:
    await upload(api, "shapes", tar_of(sample_dataset))
    draft = (await api.post("/v1/jobs", json=SPEC)).json()
    r = await api.post(f"/v1/jobs/{draft['id']}/stop")
    assert r.status_code == 409 and "draft" in r.json()["detail"]
    queued = (await api.post("/v1/jobs", json={**SPEC, "start": True})).json()
    r = await api.post(f"/v1/jobs/{queued['id']}/stop")
    assert r.status_code == 202 and r.json()["stop_requested"] is True
    assert (await api.post("/v1/jobs/00000000-0000-0000-0000-000000000000/stop")).status_code == 404
    assert (await api.get("/v1/jobs/not-a-uuid")).status_code == 422


async def test_models_endpoints_answer_when_empty(api: httpx.AsyncClient) -> None:
    assert (await api.get("/v1/models")).json() == []
    r = await api.get("/v1/models/none/versions")
    assert r.status_code == 404 and r.json()["detail"] == "no model named 'none'"


async def report_capacity(pool_url: str, rows: list[tuple[Any, ...]]) -> None:
    import asyncpg

    conn = await asyncpg.connect(pool_url)
    try:
        await conn.execute("DELETE FROM accelerator_capacity")
        rows = [(*r, *[None] * (6 - len(r))) for r in rows]  # per_job, allocatable: the total unless given
        await conn.executemany(
            "INSERT INTO accelerator_capacity (executor, profile, total, detail, per_job, allocatable) VALUES ($1, $2, $3, $4, $5, $6)",
            rows,
        )
    finally:
        await conn.close()


async def test_only_allocatable_accelerators_are_offered(
    api: httpx.AsyncClient, sample_dataset: Path, common_settings: CommonSettings
) -> None:
    await upload(api, "shapes", tar_of(sample_dataset))
    await report_capacity(
        common_settings.database_url,
        [
            ("kubernetes", "cpu", 4, "4 CPU slots"),
            ("kubernetes", "nvidia", 2, "2 allocatable nvidia.com/gpu"),
            ("kubernetes", "amd", 0, "none"),
        ],
    )
    offered = {a["name"]: a for a in (await api.get("/v1/accelerators")).json()}
    assert set(offered) == {"cpu", "nvidia"}
    assert offered["nvidia"]["count"] == 2 and offered["nvidia"]["resource"] == "nvidia.com/gpu"
    assert offered["nvidia"]["grades"] == {"cv": "compatible", "llm": "compatible"}
    ok = await api.post("/v1/jobs", json={**SPEC, "accelerator": "nvidia", "devices": 2})
    assert ok.status_code == 201 and ok.json()["devices"] == 2
    never = await api.post("/v1/jobs", json={**SPEC, "accelerator": "amd"})
    assert (
        never.status_code == 422
        and never.json()["detail"] == "accelerator 'amd' is not available here (no allocatable amd.com/gpu); available: cpu (4), nvidia (2)"
    )
    too_many = await api.post("/v1/jobs", json={**SPEC, "accelerator": "nvidia", "devices": 3})
    assert too_many.status_code == 422 and too_many.json()["field"] == "devices"
    unknown = await api.post("/v1/jobs", json={**SPEC, "accelerator": "tpu"})
    assert unknown.status_code == 422 and "profiles: cpu, nvidia, amd, intel" in unknown.json()["detail"]
    await report_capacity(common_settings.database_url, [("kubernetes", "nvidia", 4, "4 free on 4 nodes", 1, 4)])
    assert [a["per_job"] for a in (await api.get("/v1/accelerators")).json()] == [1]
    spread = await api.post("/v1/jobs", json={**SPEC, "accelerator": "nvidia", "devices": 2})
    assert spread.status_code == 422 and spread.json()["detail"] == (
        "the job asks for 2 nvidia devices; at most 1 can be allocated on one node (4 in all)"
    )
    # the cluster shrank after the 2-device job above queued: it says what it waits for
    assert (await api.post(f"/v1/jobs/{ok.json()['id']}/start")).status_code == 200
    waiting = (await api.get(f"/v1/jobs/{ok.json()['id']}")).json()
    assert waiting["waiting_for"] == "0 jobs ahead on nvidia; needs 2 nvidia devices on one node; at most 1 on one node"
    # busy is not absent: other workloads hold every GPU, yet a job for them queues with the reason
    await report_capacity(common_settings.database_url, [("kubernetes", "nvidia", 0, "0 of 8 free", 4, 8)])
    busy = (await api.get("/v1/accelerators")).json()
    assert [(a["name"], a["count"], a["allocatable"]) for a in busy] == [("nvidia", 0, 8)]
    queued = await api.post("/v1/jobs", json={**SPEC, "accelerator": "nvidia", "devices": 4, "start": True})
    assert queued.status_code == 201, queued.text
    shown = (await api.get(f"/v1/jobs/{queued.json()['id']}")).json()
    assert shown["waiting_for"].endswith("no free nvidia.com/gpu: other workloads hold all 8")
    wider = await api.post("/v1/jobs", json={**SPEC, "accelerator": "nvidia", "devices": 5})
    assert wider.status_code == 422 and "at most 4 can be allocated on one node (8 in all)" in wider.json()["detail"]


async def test_the_queue_shows_positions_and_what_each_job_waits_for(
    api: httpx.AsyncClient, sample_dataset: Path, common_settings: CommonSettings
) -> None:
    await upload(api, "shapes", tar_of(sample_dataset))
    await report_capacity(common_settings.database_url, [("local", "cpu", 1, "1 CPU slot")])
    a = (await api.post("/v1/jobs", json={**SPEC, "name": "a", "start": True})).json()
    b = (await api.post("/v1/jobs", json={**SPEC, "name": "b", "start": True})).json()
    c = (await api.post("/v1/jobs", json={**SPEC, "name": "c", "start": True, "priority": "high"})).json()
    got = {j: (await api.get(f"/v1/jobs/{j}")).json() for j in (a["id"], b["id"], c["id"])}
    assert [got[j]["queue_position"] for j in (c["id"], a["id"], b["id"])] == [1, 2, 3]
    assert got[b["id"]]["waiting_for"] == "2 jobs ahead on cpu; about to start"
    queue = (await api.get("/v1/queue")).json()
    cpu = next(q for q in queue if q["accelerator"] == "cpu")
    assert [q["name"] for q in cpu["queued"]] == ["c", "a", "b"] and cpu["slots"] == 1
    # re-prioritise while queued
    r = await api.patch(f"/v1/jobs/{b['id']}", json={"priority": "high"})
    assert r.status_code == 200 and r.json()["priority"] == "high" and r.json()["queue_position"] == 1  # high, and queued before c
    r = await api.patch(f"/v1/jobs/{b['id']}", json={"hyperparameters": {"epochs": 1}})
    assert r.status_code == 409 and "can only be re-prioritised" in r.json()["detail"]
    listed = {j["name"]: j["queue_position"] for j in (await api.get("/v1/jobs")).json()}
    assert listed == {"b": 1, "c": 2, "a": 3}
    # c runs, half done after 100 s: the slot is busy, and the next job may start in about 100 s
    conn = await asyncpg.connect(common_settings.database_url)
    try:
        await conn.execute(
            "UPDATE jobs SET state = 'running', progress = 0.5, started_at = now() - interval '100 seconds' WHERE id = $1", c["id"]
        )
    finally:
        await conn.close()
    waiting = (await api.get(f"/v1/jobs/{b['id']}")).json()
    assert waiting["waiting_for"] == "0 jobs ahead on cpu; all 1 cpu slot busy"
    eta = datetime.fromisoformat(waiting["estimated_start"]) - datetime.now(UTC)
    assert 90 < eta.total_seconds() < 110
    cpu = next(q for q in (await api.get("/v1/queue")).json() if q["accelerator"] == "cpu")
    assert [(q["name"], q["waiting_for"]) for q in cpu["queued"]] == [
        ("b", "0 jobs ahead on cpu; all 1 cpu slot busy"),
        ("a", "1 job ahead on cpu; all 1 cpu slot busy"),
    ]
    assert cpu["queued"][1]["estimated_start"] is None  # b's duration is unknown: nothing after it can be guessed


async def test_drafts_can_be_edited_and_jobs_duplicated(api: httpx.AsyncClient, sample_dataset: Path) -> None:
    await upload(api, "shapes", tar_of(sample_dataset))
    draft = (await api.post("/v1/jobs", json=SPEC)).json()
    edited = await api.patch(f"/v1/jobs/{draft['id']}", json={"hyperparameters": {"epochs": 7, "imgsz": 48}, "name": "renamed"})
    assert edited.status_code == 200, edited.text
    assert edited.json()["name"] == "renamed" and edited.json()["hyperparameters"]["epochs"] == 7 and edited.json()["total_epochs"] == 7
    for change, field in (({"devices": 0}, "devices"), ({"name": ""}, "name"), ({"dataset": {"x": 1}}, "dataset.name")):
        r = await api.patch(f"/v1/jobs/{draft['id']}", json=change)  # checked once merged with the stored spec
        assert r.status_code == 422 and r.json()["field"] == field, r.text
    bad = await api.patch(f"/v1/jobs/{draft['id']}", json={"hyperparameters": {"epochs": 0}})
    assert bad.status_code == 422 and bad.json()["field"] == "hyperparameters.epochs"
    copy = await api.post(f"/v1/jobs/{draft['id']}/duplicate", json={"name": "copy"})
    assert copy.status_code == 201 and copy.json()["state"] == "draft" and copy.json()["id"] != draft["id"]
    assert copy.json()["hyperparameters"] == edited.json()["hyperparameters"] and copy.json()["name"] == "copy"


async def test_only_stopped_or_failed_jobs_can_be_resumed(
    api: httpx.AsyncClient, sample_dataset: Path, common_settings: CommonSettings, js: Any
) -> None:
    import asyncpg

    await upload(api, "shapes", tar_of(sample_dataset))
    job = (await api.post("/v1/jobs", json=SPEC)).json()
    r = await api.post(f"/v1/jobs/{job['id']}/resume")
    assert r.status_code == 409 and "only a stopped or failed job can be resumed; it is draft" in r.json()["detail"]
    conn = await asyncpg.connect(common_settings.database_url)
    await conn.execute("UPDATE jobs SET state = 'canceled' WHERE id = $1", job["id"])
    r = await api.post(f"/v1/jobs/{job['id']}/resume")
    assert r.status_code == 409 and "kept nothing" in r.json()["detail"]
    await conn.execute("UPDATE jobs SET state = 'failed' WHERE id = $1", job["id"])
    await conn.close()
    r = await api.post(f"/v1/jobs/{job['id']}/resume")
    assert r.status_code == 202
    subjects = Subjects(common_settings.bus_prefix)
    (msg,) = await collect(js, subjects.job(job["id"], "resume-requested"), 1)
    assert decode(msg.data).type == "forge.job.resume-requested"


async def test_losing_a_race_with_a_concurrent_delete_is_a_409_not_a_500(
    api: httpx.AsyncClient, sample_dataset: Path, common_settings: CommonSettings
) -> None:
    import asyncio

    import asyncpg

    await upload(api, "shapes", tar_of(sample_dataset))
    other = await asyncpg.connect(common_settings.database_url)
    try:
        tx = other.transaction()
        await tx.start()
        # another request deletes the version: not yet committed, so the api's checks still see it
        await other.execute("DELETE FROM dataset_versions")
        submit = asyncio.create_task(api.post("/v1/jobs", json=SPEC))
        async with asyncio.timeout(20):  # until the api's insert waits on the deleted row's lock
            while not await other.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
            ):
                await asyncio.sleep(0.02)
        await tx.commit()
        r = await submit
    finally:
        await other.close()
    assert r.status_code == 409 and r.json()["type"] == "conflict"
    assert "deleted by a concurrent request" in r.json()["detail"]


async def test_a_job_says_which_unit_decides_stop_versus_cancel(api: httpx.AsyncClient, sample_dataset: Path, tmp_path: Path) -> None:
    from ..unit.datasets import helpers

    await upload(api, "chat", tar_of(helpers.build_sft(tmp_path / "chat")))
    llm = {"task": "llm-sft", "dataset": {"name": "chat", "version": 1}, "base_model": "qwen2-tiny"}
    by_checkpoint = (await api.post("/v1/jobs", json={**llm, "name": "long", "hyperparameters": {"save_steps": 50}})).json()
    assert by_checkpoint["progress_unit"] == "checkpoint of 50 steps"
    assert (await api.post("/v1/jobs", json={**llm, "name": "short"})).json()["progress_unit"] == "epoch"
    await upload(api, "shapes", tar_of(sample_dataset))
    assert (await api.post("/v1/jobs", json=SPEC)).json()["progress_unit"] == "epoch"
