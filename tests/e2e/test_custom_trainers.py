"""Bring your own trainer, end to end: a script served by the test's own HTTP server or from the
S3 API, using only the SDK, is a first-class trainer; a script that knows nothing of Forge still
runs, logs and registers by scan. This module's stack keeps its objects in an S3 API server."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from forge_cli.samples import shapes
from forge_common.settings import CommonSettings
from forge_common.storage import open_store

from ..conftest import serving
from .conftest import Stack, running_stack, upload_folder

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
MINIMAL = (ROOT / "trainers/sdk/examples/minimal_torch.py").read_bytes()
NO_SDK = b"""
import os, pathlib, time
print("a plain script: no SDK, nothing machine-readable")
out = pathlib.Path(os.environ["OUTPUT_DIR"])
out.mkdir(parents=True, exist_ok=True)
for epoch in range(1, 4):
    print(f"epoch {epoch}: loss {1 / epoch:.3f}", flush=True)
    time.sleep(0.1)
(out / "weights.pth").write_bytes(b"\\0" * 256)
print("done")
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("scripts")
    (folder / "minimal.py").write_bytes(MINIMAL)
    (folder / "no_sdk.py").write_bytes(NO_SDK)
    with serving(folder) as url:
        yield url


@pytest.fixture(scope="module")
def s3_stack(
    nats_url: str, postgres_admin_url: str, s3_server: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    env = {
        "FORGE_S3_ENDPOINT": s3_server["endpoint"],
        "FORGE_S3_ACCESS_KEY": s3_server["access_key"],
        "FORGE_S3_SECRET_KEY": s3_server["secret_key"],
        "FORGE_S3_BUCKET": f"forge-{uuid.uuid4().hex[:8]}",
    }
    with running_stack(nats_url, postgres_admin_url, tmp_path_factory.mktemp("forge-s3-home"), **env) as s:
        upload_folder(s, "shapes", shapes(tmp_path_factory.mktemp("d") / "shapes", per_class=40, size=32))
        yield s


def submit(stack: Stack, name: str, script_uri: str, **extra: Any) -> dict[str, Any]:
    body = {
        "name": name,
        "task": "classification",
        "dataset": {"name": "shapes", "version": 1},
        "base_model": "timm/test_vit",
        "custom_script_uri": script_uri,
        "start": True,
        **extra,
    }
    return stack.client.post("/v1/jobs", body)  # type: ignore[no-any-return]


def test_an_sdk_script_from_a_web_server_trains_live_and_stops_with_its_model(s3_stack: Stack, served: str) -> None:
    job = submit(s3_stack, "script-stopped", f"{served}/minimal.py", hyperparameters={"epochs": 400})
    s3_stack.wait_event(job["id"], "metrics")  # live progress from a user's script
    s3_stack.wait_event(job["id"], "epoch-completed", lambda d: d["data"]["epoch"] == 1)
    s3_stack.client.post(f"/v1/jobs/{job['id']}/stop")
    done = s3_stack.wait_state(job["id"], {"succeeded", "stopped", "canceled", "failed"})
    assert done["state"] == "stopped", done
    done = s3_stack.wait_model(job["id"])
    version = s3_stack.client.get(f"/v1/models/{done['model']['name']}/versions/{done['model']['version']}")
    # registered precisely, by the script's <artifact>.metrics.json
    assert version["weights_uri"].startswith("s3://") and version["weights_uri"].endswith("/model.pt")
    assert version["metrics"]["classes"] == 3 and version["onnx_uri"] is None
    # from S3 the api hands out a presigned URL instead of streaming the bytes itself
    where = f"/v1/models/{done['model']['name']}/versions/{done['model']['version']}/download"
    redirect = s3_stack.client.http.get(where, params={"file": "weights"}, follow_redirects=False)
    assert redirect.status_code == 307 and "X-Amz-Signature=" in redirect.headers["location"]
    fetched = httpx.get(redirect.headers["location"], timeout=30)
    assert fetched.status_code == 200 and fetched.content  # the weights, straight from object storage
    outputs = s3_stack.client.http.get(f"/v1/jobs/{job['id']}/files/model.pt", follow_redirects=True)
    assert outputs.status_code == 200 and outputs.content == fetched.content


def test_an_sdk_script_from_the_s3_api_runs_to_success(s3_stack: Stack, s3_server: dict[str, str]) -> None:
    settings = CommonSettings(
        s3_endpoint=s3_server["endpoint"],
        s3_access_key=s3_server["access_key"],
        s3_secret_key=s3_server["secret_key"],
        s3_bucket="user-scripts",
    )
    store = open_store(settings)
    store.store.put_bytes("team/minimal.py", MINIMAL)
    job = submit(s3_stack, "script-from-s3", store.uri("team/minimal.py"), hyperparameters={"epochs": 3})
    done = s3_stack.wait_state(job["id"], {"succeeded", "stopped", "canceled", "failed"})
    assert done["state"] == "succeeded" and done["epochs_completed"] == 3, done
    assert s3_stack.wait_model(job["id"])["model"]["name"] == "script-from-s3"


def test_a_script_without_the_sdk_still_runs_logs_and_registers_by_scan(s3_stack: Stack, served: str) -> None:
    job = submit(s3_stack, "no-sdk", f"{served}/no_sdk.py")
    done = s3_stack.wait_state(job["id"], {"succeeded", "stopped", "canceled", "failed"})
    assert done["state"] == "succeeded", done
    lines = [line["text"] for line in s3_stack.client.get(f"/v1/jobs/{job['id']}/logs")["lines"]]
    assert "epoch 3: loss 0.333" in lines and "done" in lines
    done = s3_stack.wait_model(job["id"])
    version = s3_stack.client.get(f"/v1/models/no-sdk/versions/{done['model']['version']}")
    assert version["weights_uri"].endswith("/weights.pth")  # found by scanning the outputs
