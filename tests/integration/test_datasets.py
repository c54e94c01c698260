"""Dataset versions over HTTP for every format, imports from object storage, token statistics,
size limits, and deletion guarded by lineage."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from forge_api import limits
from forge_api.app import create_app
from forge_api.settings import ApiSettings
from forge_common import db
from forge_common.settings import CommonSettings
from forge_common.storage import open_store

from ..unit.datasets import helpers
from .conftest import tar_of, upload
from .helpers import insert_job


@pytest.mark.parametrize(
    ("build", "fmt", "tasks", "stat"),
    [
        (helpers.build_coco, "coco", ["detection", "segmentation"], "images"),
        (helpers.build_yolo, "yolo", ["detection", "segmentation"], "images"),  # its labels include a polygon
        (helpers.build_sft, "llm-sft", ["llm-sft"], "conversations"),
        (helpers.build_vlm, "vlm-sft", ["vlm-sft"], "conversations"),
        (helpers.build_imagenet, "imagenet-folder", ["classification"], "images"),
    ],
)
async def test_every_format_round_trips(api: httpx.AsyncClient, tmp_path: Path, build: Any, fmt: str, tasks: list[str], stat: str) -> None:
    root = build(tmp_path / "data")
    r = await upload(api, "d", tar_of(root))
    assert r.status_code == 201, r.text
    v = r.json()
    assert (v["format"], v["tasks"]) == (fmt, tasks)
    assert stat in json.dumps(v["stats"]) and v["report"]["ok"] is True


async def test_a_declared_format_is_checked_as_that_format(api: httpx.AsyncClient, tmp_path: Path) -> None:
    root = helpers.build_imagenet(tmp_path / "data")
    await api.post("/v1/datasets", json={"name": "d"})
    r = await api.post("/v1/datasets/d/versions", files={"file": ("d.tar.gz", tar_of(root))}, data={"format": "coco"})
    assert r.status_code == 422 and r.json()["report"]["format"] == "coco"


async def test_token_lengths_are_counted_with_a_pool_tokenizer(api: httpx.AsyncClient, tmp_path: Path) -> None:
    ckpt = helpers.wordy_checkpoint(tmp_path / "tok-model")
    assert (
        await api.post("/v1/base-models", json={"name": "wordy", "family": "qwen2", "source": {"kind": "local", "uri": str(ckpt)}})
    ).status_code == 201
    root = helpers.build_sft(tmp_path / "data")
    await api.post("/v1/datasets", json={"name": "chat"})
    r = await api.post("/v1/datasets/chat/versions", files={"file": ("d.tar.gz", tar_of(root))}, data={"tokenizer": "wordy"})
    assert r.status_code == 201, r.text
    assert r.json()["stats"]["length"]["unit"] == "tokens", r.json()["stats"]
    bad = await api.post("/v1/datasets/chat/versions", files={"file": ("d.tar.gz", tar_of(root))}, data={"tokenizer": "qwen2-tiny"})
    assert bad.status_code == 422 and bad.json()["field"] == "tokenizer"


async def test_a_prefix_in_object_storage_is_imported(s3_settings: CommonSettings, tmp_path: Path) -> None:
    settings = s3_settings
    store = open_store(settings)
    store.location("incoming/shapes").upload_tree(helpers.build_imagenet(tmp_path / "data"))
    app = create_app(settings, ApiSettings())
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://forge") as api:
            await api.post("/v1/datasets", json={"name": "imported"})
            uri = store.uri("incoming/shapes")
            r = await api.post("/v1/datasets/imported/imports", json={"uri": uri})
            assert r.status_code == 201, r.text
            v = r.json()
            assert v["format"] == "imagenet-folder" and v["uri"].startswith(f"s3://{settings.s3_bucket}/datasets/")
            again = await api.post("/v1/datasets/imported/imports", json={"uri": uri})
            assert again.status_code == 200 and again.json()["version"] == 1
            missing = await api.post("/v1/datasets/imported/imports", json={"uri": store.uri("nothing/here")})
            assert missing.status_code == 422 and "holds no files" in missing.json()["detail"]


async def test_an_archive_over_the_limit_is_refused(common_settings: CommonSettings, sample_dataset: Path) -> None:
    app = create_app(common_settings, ApiSettings(max_upload_bytes=1000))
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://forge") as api:
            r = await upload(api, "d", tar_of(sample_dataset))
            assert r.status_code == 413 and r.json()["type"] == "payload_too_large"
    assert not list(common_settings.objects_dir.rglob("*.png"))


async def test_bodies_over_the_limit_are_refused_before_they_are_read(common_settings: CommonSettings) -> None:
    app = create_app(common_settings, ApiSettings(max_upload_bytes=100_000, max_body_bytes=1000))
    pulled: list[int] = []

    async def chunks(n: int, size: int = 10_000) -> Any:
        yield b'--b\r\nContent-Disposition: form-data; name="file"; filename="a.tar"\r\n\r\n'
        for i in range(n):
            pulled.append(i)
            yield b"x" * size

    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://forge") as api:
            await api.post("/v1/datasets", json={"name": "d"})
            headers = {"content-type": "multipart/form-data; boundary=b", "content-length": str(10**12)}
            r = await api.post("/v1/datasets/d/versions", content=chunks(1), headers=headers)
            assert r.status_code == 413 and r.json()["type"] == "payload_too_large", r.text
            assert r.json()["limit"] == 100_000 + limits.MULTIPART_SLACK
            assert pulled == []  # a declared size over the limit: not one byte read
            r = await api.post("/v1/datasets/d/versions", content=chunks(1000), headers={"content-type": "multipart/form-data; boundary=b"})
            assert r.status_code == 413 and "limit" in r.json()["detail"]  # chunked: cut off at the limit
            assert len(pulled) < 30
            r = await api.post("/v1/jobs", content=b"{" + b" " * 2000 + b"}", headers={"content-type": "application/json"})
            assert r.status_code == 413 and r.json() == {
                "type": "payload_too_large",
                "detail": "the request body is over this endpoint's 1000-byte limit",
                "limit": 1000,
            }
            assert (await api.get("/v1/datasets/d")).status_code == 200
    assert not list(common_settings.objects_dir.rglob("datasets/*"))


async def test_a_version_a_model_was_trained_on_cannot_be_deleted(
    api: httpx.AsyncClient, sample_dataset: Path, common_settings: CommonSettings
) -> None:
    v1 = (await upload(api, "shapes", tar_of(sample_dataset))).json()
    conn = await asyncpg.connect(common_settings.database_url)
    await db.init_connection(conn)
    try:
        version_id = await conn.fetchval("SELECT id FROM dataset_versions WHERE version = 1")
        job = await insert_job(conn, state="succeeded", name="trained")
        await conn.execute("UPDATE jobs SET dataset_version_id = $2 WHERE id = $1", job, version_id)
        model = await conn.fetchval(
            "INSERT INTO models (id, project_id, name) SELECT gen_random_uuid(), project_id, 'trained' FROM jobs WHERE id = $1 RETURNING id",
            job,
        )
        await conn.execute(
            "INSERT INTO model_versions (id, model_id, version, job_id, attempt, artifacts_uri, dataset_version_id) VALUES (gen_random_uuid(), $1, 1, $2, 1, 'x', $3)",
            model,
            job,
            version_id,
        )
        r = await api.delete("/v1/datasets/shapes/versions/1")
        assert (
            r.status_code == 409 and r.json()["detail"] == "shapes v1 is the training data of trained v1: delete those model versions first"
        )
        await conn.execute("DELETE FROM model_versions")
        r = await api.delete("/v1/datasets/shapes/versions/1")
        assert r.status_code == 204
        assert await conn.fetchval("SELECT dataset_version_id FROM jobs WHERE id = $1", job) is None  # the job keeps its spec
    finally:
        await conn.close()
    assert (await api.get("/v1/datasets/shapes/versions/1")).status_code == 404
    assert not Path(v1["uri"].removeprefix("file://")).exists()


async def test_a_version_a_job_still_needs_cannot_be_deleted(
    api: httpx.AsyncClient, sample_dataset: Path, common_settings: CommonSettings
) -> None:
    v1 = (await upload(api, "needed", tar_of(sample_dataset))).json()
    conn = await asyncpg.connect(common_settings.database_url)
    await db.init_connection(conn)
    try:
        version_id = await conn.fetchval("SELECT id FROM dataset_versions WHERE version = 1")
        job = await insert_job(conn, state="stopped", name="resumable")
        await conn.execute("UPDATE jobs SET dataset_version_id = $2 WHERE id = $1", job, version_id)
        r = await api.delete("/v1/datasets/needed/versions/1")
        assert r.status_code == 409
        assert r.json()["detail"] == f"needed v1 is still needed by 1 job(s): resumable (stopped, {job}); delete or finish them first"
        assert Path(v1["uri"].removeprefix("file://")).exists()  # nothing lost
        await conn.execute("UPDATE jobs SET state = 'canceled' WHERE id = $1", job)
        assert (await api.delete("/v1/datasets/needed/versions/1")).status_code == 204
    finally:
        await conn.close()


async def test_local_folders_are_imported_only_from_the_configured_roots(common_settings: CommonSettings, tmp_path: Path) -> None:
    from ..unit.datasets import helpers

    allowed = tmp_path / "imports"
    data = helpers.build_imagenet(allowed / "shapes")
    for roots, uri, status, message in [
        ("", str(data), 422, "imports only from s3://"),
        (str(allowed), "/etc", 422, f"local imports must be under {allowed}"),
        (str(allowed), f"{allowed}/../../etc", 422, "local imports must be under"),
        (str(allowed), "relative/path", 422, "absolute path"),
        (str(allowed), data.as_uri(), 201, ""),
    ]:
        app = create_app(common_settings, ApiSettings(import_roots=roots))
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://forge") as api:
                await api.post("/v1/datasets", json={"name": "local"})
                r = await api.post("/v1/datasets/local/imports", json={"uri": uri})
                assert r.status_code == status, (uri, r.text)
                assert message in r.text
