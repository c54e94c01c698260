"""Bring your own trainer: capability profiles, and the checks on custom scripts and images."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from ..conftest import serving
from .conftest import tar_of, upload

SCRIPT = b"import forge_sdk\nwith forge_sdk.init() as run:\n    run.log('hello')\n"
SPEC: dict[str, Any] = {
    "name": "custom",
    "task": "classification",
    "dataset": {"name": "shapes", "version": 1},
    "base_model": "timm/test_vit",
}

PROFILE: dict[str, Any] = {
    "name": "my-trainer",
    "version": "1.2.0",
    "tasks": ["classification"],
    "accelerators": {"cpu": {"grade": "certified"}, "nvidia": {"image": "registry.example/my-trainer-cu:1.2", "grade": "compatible"}},
    "script_uri": "http://scripts.example/train.py",
    "hyperparameters": {
        "type": "object",
        "properties": {
            "epochs": {"type": "integer", "minimum": 1, "default": 5},
            "width": {"type": "integer", "enum": [32, 64, 128], "default": 64},
        },
        "additionalProperties": False,
    },
    "metrics": ["accuracy", "loss"],
    "main_metric": "accuracy",
}


@pytest.fixture
def script_server(tmp_path: Path) -> Iterator[str]:
    (tmp_path / "train.py").write_bytes(SCRIPT)
    (tmp_path / "big.py").write_bytes(b"#" * 2_000_000)
    (tmp_path / "broken.py").write_bytes(b"def (:\n")
    with serving(tmp_path) as url:
        yield url


async def test_a_profile_round_trips_and_lists_next_to_the_builtins(api: httpx.AsyncClient) -> None:
    r = await api.post("/v1/trainers", json=PROFILE)
    assert r.status_code == 201, r.text
    assert (await api.post("/v1/trainers", json=PROFILE)).status_code == 409
    r = await api.post("/v1/trainers", json={**PROFILE, "name": "classification"})
    assert r.status_code == 409 and r.json()["detail"] == "'classification' is the name of a built-in trainer; pick another"
    got = (await api.get("/v1/trainers/my-trainer")).json()
    assert got["hyperparameters"] == PROFILE["hyperparameters"] and got["accelerators"]["nvidia"]["grade"] == "compatible"
    names = {t["name"] for t in (await api.get("/v1/trainers", params={"task": "classification"})).json()}
    assert {"classification", "my-trainer"} <= names
    on_nvidia = {t["name"] for t in (await api.get("/v1/trainers", params={"task": "classification", "accelerator": "nvidia"})).json()}
    assert "my-trainer" in on_nvidia
    assert "my-trainer" not in {t["name"] for t in (await api.get("/v1/trainers", params={"task": "detection"})).json()}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"main_metric": "f1"}, "main_metric 'f1' is not among metrics"),
        ({"accelerators": {"tpu": {"grade": "compatible"}}}, "unknown accelerator profile(s) tpu"),
        (
            {"hyperparameters": {"type": "object", "properties": {"epochs": {"type": "integer", "default": "five"}}}},
            "the defaults do not satisfy the schema",
        ),
        ({"hyperparameters": {"type": "wrong"}}, "not a valid JSON Schema"),
        (
            {"script_uri": None, "accelerators": {"cpu": {"grade": "certified"}}},
            "needs an image for at least one accelerator, or a script_uri",
        ),
        ({"tasks": ["painting"]}, "tasks.0"),
    ],
)
async def test_a_broken_profile_is_refused(api: httpx.AsyncClient, change: dict[str, Any], message: str) -> None:
    r = await api.post("/v1/trainers", json={**PROFILE, **change})
    assert r.status_code == 422 and message in r.json()["detail"], r.text


async def test_a_job_is_checked_against_its_trainers_schema(api: httpx.AsyncClient, sample_dataset: Path, script_server: str) -> None:
    await upload(api, "shapes", tar_of(sample_dataset))
    await api.post("/v1/trainers", json={**PROFILE, "script_uri": f"{script_server}/train.py"})
    r = await api.post("/v1/jobs", json={**SPEC, "trainer": "my-trainer", "hyperparameters": {"width": 50}})
    assert r.status_code == 422 and r.json()["field"] == "hyperparameters.width" and "is not one of [32, 64, 128]" in r.json()["detail"]
    r = await api.post("/v1/jobs", json={**SPEC, "trainer": "my-trainer", "hyperparameters": {"depth": 3}})
    assert r.status_code == 422 and r.json()["field"] == "hyperparameters.depth"
    r = await api.post("/v1/jobs", json={**SPEC, "trainer": "my-trainer", "hyperparameters": {"epochs": 2}})
    assert r.status_code == 201, r.text
    assert r.json()["hyperparameters"] == {"epochs": 2, "width": 64}  # defaults from the schema
    r = await api.post("/v1/jobs", json={**SPEC, "trainer": "nobody"})
    assert r.status_code == 422 and r.json()["field"] == "trainer"


async def test_a_script_is_fetched_once_pinned_and_recorded(
    api: httpx.AsyncClient, sample_dataset: Path, script_server: str, common_settings: Any
) -> None:
    await upload(api, "shapes", tar_of(sample_dataset))
    digest = hashlib.sha256(SCRIPT).hexdigest()
    r = await api.post("/v1/jobs", json={**SPEC, "custom_script_uri": f"{script_server}/train.py", "custom_script_sha256": digest})
    assert r.status_code == 201, r.text
    conn = await asyncpg.connect(common_settings.database_url)
    spec = await conn.fetchval("SELECT spec::text FROM jobs WHERE id = $1", __import__("uuid").UUID(r.json()["id"]))
    await conn.close()
    assert f'"sha256": "{digest}"' in spec
    stored = common_settings.objects_dir / "scripts" / f"{digest}.py"
    assert stored.read_bytes() == SCRIPT


async def test_a_queued_job_is_reprioritised_and_duplicated_without_fetching_its_script_again(
    api: httpx.AsyncClient, sample_dataset: Path, script_server: str, tmp_path: Path
) -> None:
    await upload(api, "shapes", tar_of(sample_dataset))
    job = (await api.post("/v1/jobs", json={**SPEC, "custom_script_uri": f"{script_server}/train.py", "start": True})).json()
    (tmp_path / "train.py").write_bytes(b"print('the source moved on')\n")  # the server now serves other bytes
    r = await api.patch(f"/v1/jobs/{job['id']}", json={"priority": "high"})
    assert r.status_code == 200 and r.json()["priority"] == "high" and r.json()["state"] == "queued", r.text
    copy = await api.post(f"/v1/jobs/{job['id']}/duplicate", json={"name": "again"})
    assert copy.status_code == 201, copy.text  # the same bytes as the original: comparable runs
    assert (await api.patch(f"/v1/jobs/{job['id']}", json={"name": "x"})).status_code == 409


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"custom_script_uri": "ftp://example.com/train.py"}, "custom_script_uri", "must be s3://, http:// or https://"),
        ({"custom_script_uri": "/etc/passwd"}, "custom_script_uri", "not a bare path"),
        ({"custom_script_uri": "{server}/big.py"}, "custom_script_uri", "larger than 1048576 bytes"),
        ({"custom_script_uri": "{server}/missing.py"}, "custom_script_uri", "answered HTTP 404"),
        ({"custom_script_uri": "{server}/broken.py"}, "custom_script_uri", "is not valid Python"),
        ({"custom_script_uri": "{server}/train.py", "custom_script_sha256": "0" * 64}, "custom_script_sha256", "not the pinned"),
        ({"custom_script_uri": "s3://bucket/train.py"}, "custom_script_uri", "no S3 endpoint configured"),
        ({"custom_image": "registry.example/trainer:1"}, "custom_image", "needs a container runtime"),
        (
            {"custom_script_uri": "{server}/train.py", "task": "llm-sft", "base_model": "qwen2-tiny"},
            "custom_script_uri",
            "llm-sft jobs run the built-in SFT trainer only",
        ),
    ],
)
async def test_refused_custom_code_says_why(
    api: httpx.AsyncClient, tmp_path: Path, sample_dataset: Path, script_server: str, body: dict[str, Any], field: str, message: str
) -> None:
    from ..unit.datasets import helpers

    await upload(api, "shapes", tar_of(sample_dataset))
    await upload(api, "chat", tar_of(helpers.build_sft(tmp_path / "chat")))
    spec = {**SPEC, **{k: v.replace("{server}", script_server) if isinstance(v, str) else v for k, v in body.items()}}
    if spec["task"] == "llm-sft":
        spec["dataset"] = {"name": "chat", "version": 1}
    r = await api.post("/v1/jobs", json=spec)
    assert r.status_code == 422, r.text
    assert r.json()["field"] == field and message in r.json()["detail"], r.json()


async def test_only_allowed_hosts_serve_scripts(common_settings: Any, sample_dataset: Path, script_server: str) -> None:
    from forge_api.app import create_app
    from forge_api.settings import ApiSettings

    app = create_app(common_settings, ApiSettings(script_allowed_hosts="scripts.example.com"))
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://forge") as api:
            await upload(api, "shapes", tar_of(sample_dataset))
            r = await api.post("/v1/jobs", json={**SPEC, "custom_script_uri": f"{script_server}/train.py"})
            assert r.status_code == 422 and "may only come from scripts.example.com" in r.json()["detail"]


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "169.254.169.254", "[::1]", "0.0.0.0"])
async def test_scripts_never_come_from_the_apis_own_machine_unless_named(
    common_settings: Any, sample_dataset: Path, script_server: str, host: str
) -> None:
    from forge_api.app import create_app
    from forge_api.settings import ApiSettings

    port = script_server.rsplit(":", 1)[1]
    app = create_app(common_settings, ApiSettings())
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://forge") as api:
            await upload(api, "shapes", tar_of(sample_dataset))
            r = await api.post("/v1/jobs", json={**SPEC, "custom_script_uri": f"http://{host}:{port}/train.py"})
            assert r.status_code == 422 and r.json()["field"] == "custom_script_uri", r.text
            assert "FORGE_API_SCRIPT_ALLOWED_HOSTS" in r.json()["detail"]


async def test_a_slow_script_host_holds_no_database_connection(common_settings: Any, sample_dataset: Path) -> None:
    import asyncio
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from forge_api.app import create_app
    from forge_api.settings import ApiSettings

    release, asked = threading.Event(), threading.Event()

    class Slow(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.set()
            release.wait(30)
            self.send_response(200)
            self.send_header("Content-Length", str(len(SCRIPT)))
            self.end_headers()
            self.wfile.write(SCRIPT)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    # two connections: the outbox listener holds one, so a fetch holding the other would stall everyone
    app = create_app(common_settings.model_copy(update={"db_pool_size": 2}), ApiSettings(script_allowed_hosts="127.0.0.1"))
    try:
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://forge") as api:
                await upload(api, "shapes", tar_of(sample_dataset))
                uri = f"http://127.0.0.1:{server.server_port}/train.py"
                creating = asyncio.create_task(api.post("/v1/jobs", json={**SPEC, "custom_script_uri": uri}))
                assert await asyncio.to_thread(asked.wait, 10), "the api never fetched the script"
                listed = await asyncio.wait_for(api.get("/v1/jobs"), 5)  # answered while the script host dawdles
                assert listed.status_code == 200 and listed.json() == []
                release.set()
                created = await creating
                assert created.status_code == 201, created.text
    finally:
        release.set()
        server.shutdown()


async def test_a_script_that_trickles_in_is_cut_off_at_the_time_limit(common_settings: Any, sample_dataset: Path) -> None:
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from forge_api.app import create_app
    from forge_api.settings import ApiSettings

    class Trickle(BaseHTTPRequestHandler):  # never idle long enough for a per-read timeout
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "400")
            self.end_headers()
            for _ in range(40):
                try:
                    self.wfile.write(b"#" * 10)
                    self.wfile.flush()
                except OSError:
                    return
                time.sleep(0.1)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Trickle)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    app = create_app(common_settings, ApiSettings(script_allowed_hosts="127.0.0.1", script_timeout_seconds=1.0))
    try:
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://forge") as api:
                await upload(api, "shapes", tar_of(sample_dataset))
                started = time.monotonic()
                r = await api.post("/v1/jobs", json={**SPEC, "custom_script_uri": f"http://127.0.0.1:{server.server_port}/slow.py"})
                assert r.status_code == 422 and "took longer than 1 s" in r.json()["detail"], r.text
                assert time.monotonic() - started < 3.5
    finally:
        server.shutdown()
