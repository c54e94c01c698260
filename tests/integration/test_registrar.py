"""The registrar turns an output prefix into a model version: precisely by descriptor, or by scan."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import asyncpg

from forge_common.events import ArtifactUploaded, ArtifactUploadedData, ModelRegistered, decode
from forge_common.outbox import OutboxRelay
from forge_common.settings import CommonSettings
from forge_common.states import JobState
from forge_common.storage import open_store
from forge_common.subjects import Subjects
from forge_registrar.service import Registrar

from .conftest import collect
from .helpers import insert_job


def uploaded(job_id: uuid.UUID, uri: str, registration: str = "auto") -> ArtifactUploaded:
    return ArtifactUploaded.of(
        ArtifactUploadedData(job_id=job_id, attempt=1, artifact_id="job", uri=uri, outcome=JobState.SUCCEEDED, registration=registration),  # type: ignore[arg-type]
        source="test",
    )


async def test_a_descriptor_registers_exactly_what_it_names(pool: asyncpg.Pool, js: Any, common_settings: CommonSettings) -> None:
    store = open_store(common_settings)
    out = store.location("jobs/a/1")
    weights = out.put_bytes("weights/final.bin.pt", b"w")
    out.put_bytes("model.onnx", b"an onnx file the descriptor does not name")
    out.put_bytes("job.metrics.json", json.dumps({"weights_uri": weights, "onnx_uri": None, "metrics": {"top1": 0.9}}).encode())
    async with pool.acquire() as conn:
        job_id = await insert_job(conn, state="succeeded")
    registrar = Registrar(pool, Subjects(common_settings.bus_prefix), None)
    row = await registrar.on_artifact_uploaded(uploaded(job_id, out.uri))
    assert row is not None and (row["version"], row["weights_uri"], row["onnx_uri"]) == (1, weights, None)
    assert row["metrics"] == {"top1": 0.9}
    await OutboxRelay(pool, js, producer="registrar").drain()
    (msg,) = await collect(js, Subjects(common_settings.bus_prefix).job(job_id, "model-registered"), 1)
    event = decode(msg.data)
    assert isinstance(event, ModelRegistered) and event.data.model_name == "job" and event.data.version == 1


async def test_without_a_descriptor_the_prefix_is_scanned(pool: asyncpg.Pool, common_settings: CommonSettings) -> None:
    store = open_store(common_settings)
    out = store.location("jobs/b/1")
    out.put_bytes("checkpoints/last.pt", b"last")
    out.put_bytes("model.pt", b"final")
    out.put_bytes("model.onnx", b"onnx")
    out.put_bytes("metrics.json", b'{"acc": 0.5}')
    async with pool.acquire() as conn:
        job_id = await insert_job(conn, state="stopped")
    row = await Registrar(pool, Subjects(common_settings.bus_prefix), None).on_artifact_uploaded(uploaded(job_id, out.uri))
    assert row is not None
    assert row["onnx_uri"] == out.uri_of("model.onnx") and row["weights_uri"] == out.uri_of("model.pt")
    assert row["metrics"] == {"acc": 0.5}


async def test_versions_increase_per_name_and_registering_twice_is_a_no_op(pool: asyncpg.Pool, common_settings: CommonSettings) -> None:
    store = open_store(common_settings)
    registrar = Registrar(pool, Subjects(common_settings.bus_prefix), None)
    versions = []
    for i in range(2):
        out = store.location(f"jobs/c{i}/1")
        out.put_bytes("model.pt", b"w")
        async with pool.acquire() as conn:
            job_id = await insert_job(conn, state="succeeded", name="same-name")
        row = await registrar.on_artifact_uploaded(uploaded(job_id, out.uri))
        again = await registrar.on_artifact_uploaded(uploaded(job_id, out.uri))
        assert row is not None and again is not None and again["id"] == row["id"]
        versions.append(row["version"])
    assert versions == [1, 2]


async def test_nothing_to_register_and_manual_registration_register_nothing(
    pool: asyncpg.Pool, common_settings: CommonSettings, tmp_path: Path
) -> None:
    store = open_store(common_settings)
    registrar = Registrar(pool, Subjects(common_settings.bus_prefix), None)
    empty = store.location("jobs/d/1")
    empty.put_bytes("notes.txt", b"no weights here")
    manual = store.location("jobs/e/1")
    manual.put_bytes("model.pt", b"w")
    async with pool.acquire() as conn:
        a = await insert_job(conn, state="succeeded")
        b = await insert_job(conn, state="succeeded")
    assert await registrar.on_artifact_uploaded(uploaded(a, empty.uri)) is None
    assert await registrar.on_artifact_uploaded(uploaded(b, manual.uri, registration="manual")) is None
    async with pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM model_versions") == 0


async def test_a_descriptor_cannot_register_files_outside_its_jobs_output(pool: asyncpg.Pool, common_settings: CommonSettings) -> None:
    store = open_store(common_settings)
    elsewhere = store.location("jobs/someone-else/1").put_bytes("model.onnx", b"not yours")
    out = store.location("jobs/f/1")
    own = out.put_bytes("model.pt", b"w")
    out.put_bytes("job.metrics.json", json.dumps({"weights_uri": elsewhere, "onnx_uri": out.uri + "/../../g/model.onnx"}).encode())
    async with pool.acquire() as conn:
        job_id = await insert_job(conn, state="succeeded")
    row = await Registrar(pool, Subjects(common_settings.bus_prefix), None).on_artifact_uploaded(uploaded(job_id, out.uri))
    assert row is not None and (row["weights_uri"], row["onnx_uri"]) == (own, None)  # the descriptor ignored: a scan


async def test_huge_metrics_are_cut_to_their_top_level_numbers(pool: asyncpg.Pool, common_settings: CommonSettings) -> None:
    out = open_store(common_settings).location("jobs/h/1")
    out.put_bytes("model.pt", b"w")
    metrics = {"top1": 0.9, "loss": 0.1, "confusion": [[i] * 500 for i in range(500)], "note": "x"}
    out.put_bytes("metrics.json", json.dumps(metrics).encode())
    async with pool.acquire() as conn:
        job_id = await insert_job(conn, state="succeeded")
    row = await Registrar(pool, Subjects(common_settings.bus_prefix), None).on_artifact_uploaded(uploaded(job_id, out.uri))
    assert row is not None and row["metrics"] == {"top1": 0.9, "loss": 0.1}
