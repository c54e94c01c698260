"""Live streams over a real HTTP server (ASGITransport buffers whole responses; SSE needs a socket)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import uvicorn

from forge_api.app import create_app
from forge_common import bus
from forge_common.events import MetricsReported, MetricsReportedData
from forge_common.settings import CommonSettings
from forge_common.subjects import Subjects

from ..conftest import free_port
from .conftest import collect, tar_of


@pytest.fixture
async def server(common_settings: CommonSettings) -> AsyncIterator[str]:
    port = free_port()
    config = uvicorn.Config(create_app(common_settings), host="127.0.0.1", port=port, log_level="warning")
    srv = uvicorn.Server(config)
    task = asyncio.create_task(srv.serve())
    async with asyncio.timeout(20):
        while not srv.started:
            await asyncio.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    await task


async def read_events(
    client: httpx.AsyncClient, url: str, count: int, headers: dict[str, str] | None = None
) -> list[tuple[str, str | None, Any]]:
    out: list[tuple[str, str | None, Any]] = []
    async with client.stream("GET", url, headers=headers or {}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        event, eid, data = "message", None, []
        async for line in response.aiter_lines():
            if line == "":
                if data:
                    out.append((event, eid, json.loads("\n".join(data))))
                    if len(out) == count:
                        return out
                event, eid, data = "message", None, []
            elif line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("id:"):
                eid = line[3:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
    return out


async def test_late_joiners_get_history_then_live_and_resume_without_gaps(
    server: str, sample_dataset: Any, common_settings: CommonSettings
) -> None:
    subjects = Subjects(common_settings.bus_prefix)
    async with httpx.AsyncClient(base_url=server, timeout=20) as client:
        await client.post("/v1/datasets", json={"name": "shapes"})
        await client.post("/v1/datasets/shapes/versions", files={"file": ("d.tar.gz", tar_of(sample_dataset))})
        job = (
            await client.post(
                "/v1/jobs",
                json={
                    "name": "j",
                    "task": "classification",
                    "dataset": {"name": "shapes", "version": 1},
                    "base_model": "timm/test_vit",
                    "start": True,
                },
            )
        ).json()
        job_id = uuid.UUID(job["id"])
        nc, js = await bus.connect(common_settings, name="test")
        try:
            await collect(js, subjects.all_of_job(job_id), 2)  # the api's outbox has published the job's first events
            for step in range(1, 4):  # history: three steps before anyone listens
                await bus.publish(
                    js,
                    subjects,
                    MetricsReported.of(MetricsReportedData(job_id=job_id, step=step, epoch=1, metrics={"loss": 1 / step}), source="test"),
                )
            url = f"/v1/jobs/{job_id}/events"
            reader = asyncio.create_task(read_events(client, url, 1 + 2 + 3 + 2))
            await asyncio.sleep(0.5)
            for step in range(4, 6):  # live
                await bus.publish(
                    js,
                    subjects,
                    MetricsReported.of(MetricsReportedData(job_id=job_id, step=step, epoch=1, metrics={"loss": 1 / step}), source="test"),
                )
            events = await asyncio.wait_for(reader, 20)
        finally:
            await nc.close()
        assert events[0][0] == "snapshot" and events[0][2]["id"] == job["id"] and events[0][1] is None
        names = [e[0] for e in events[1:]]
        assert names == ["status", "submitted", "metrics", "metrics", "metrics", "metrics", "metrics"]
        steps = [e[2]["data"]["step"] for e in events if e[0] == "metrics"]
        assert steps == [1, 2, 3, 4, 5]
        ids = [int(e[1]) for e in events[1:]]
        assert ids == sorted(ids) and len(set(ids)) == len(ids)
        # the connection drops after the third metrics event: resume from its id
        cut = events[5]
        resumed = await read_events(client, url, 1 + 2, headers={"Last-Event-ID": str(cut[1])})
        assert resumed[0][0] == "snapshot"
        assert [e[2]["data"]["step"] for e in resumed[1:]] == [4, 5]


async def test_unknown_jobs_are_404_before_any_stream(server: str) -> None:
    async with httpx.AsyncClient(base_url=server) as client:
        r = await client.get(f"/v1/jobs/{uuid.uuid4()}/events")
        assert r.status_code == 404 and r.json()["type"] == "not_found"


async def test_the_global_stream_resumes_after_its_last_event_id(server: str, sample_dataset: Any) -> None:
    async with httpx.AsyncClient(base_url=server, timeout=20) as client:
        await client.post("/v1/datasets", json={"name": "shapes"})
        await client.post("/v1/datasets/shapes/versions", files={"file": ("d.tar.gz", tar_of(sample_dataset))})
        spec = {"task": "classification", "dataset": {"name": "shapes", "version": 1}, "base_model": "timm/test_vit"}
        jobs = [(await client.post("/v1/jobs", json={**spec, "name": f"g{i}"})).json()["id"] for i in range(4)]  # drafts: one status each
        first = await read_events(client, "/v1/events", 4)
        assert [e[2]["subject"] for e in first] == jobs and all(e[0] == "status" for e in first)
        resumed = await read_events(client, "/v1/events", 2, headers={"Last-Event-ID": str(first[1][1])})  # dropped after the second
        assert [e[2]["subject"] for e in resumed] == jobs[2:]
        from_seq = await read_events(client, f"/v1/events?since={first[2][1]}", 1)
        assert [e[2]["subject"] for e in from_seq] == jobs[3:]
