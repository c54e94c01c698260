"""The MLflow mirror as operators turn it on: the stack started with FORGE_MLFLOW_TRACKING_URI,
a job trained through the platform becomes an MLflow run, and the job links to it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from forge_cli.samples import shapes

from .conftest import Stack, running_stack, upload_folder

pytestmark = pytest.mark.slow
mlflow = pytest.importorskip("mlflow")

UI = "http://mlflow.example:5000"


@pytest.fixture(scope="module")
def mirrored(nats_url: str, postgres_admin_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, str]]:
    home = tmp_path_factory.mktemp("forge-mlflow-home")
    uri = f"sqlite:///{home / 'mlflow.db'}"
    with running_stack(nats_url, postgres_admin_url, home, FORGE_MLFLOW_TRACKING_URI=uri, FORGE_MLFLOW_UI_URL=UI) as s:
        upload_folder(s, "shapes", shapes(tmp_path_factory.mktemp("d") / "shapes", per_class=16, size=32))
        yield s, uri


def test_a_job_is_mirrored_to_mlflow_and_links_to_its_run(mirrored: tuple[Stack, str], tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    stack, uri = mirrored
    body = {
        "name": "mirrored-vit",
        "task": "classification",
        "dataset": {"name": "shapes", "version": 1},
        "base_model": "timm/test_vit",
        "hyperparameters": {"epochs": 2, "imgsz": 32, "batch": 8, "lr": 0.003},
        "start": True,
    }
    job = stack.client.post("/v1/jobs", body)
    done = stack.wait_state(job["id"], {"succeeded", "failed"})
    assert done["state"] == "succeeded", stack.diagnostics()
    stack.wait_model(job["id"])
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("forge")
    assert experiment is not None, stack.log("forge_log_relay")[-3000:]
    deadline, runs = time.monotonic() + 90, []
    while time.monotonic() < deadline:  # the mirror batches: its run ends shortly after the job
        runs = client.search_runs([experiment.experiment_id])
        if runs and runs[0].info.status == "FINISHED" and "forge.model" in runs[0].data.tags:
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"the MLflow run did not finish: {runs}\n{stack.log('forge_log_relay')[-3000:]}")
    (run,) = runs
    assert run.info.run_name == "mirrored-vit" and run.info.status == "FINISHED"
    assert run.data.params["hp.epochs"] == "2" and run.data.tags["forge.model"] == "mirrored-vit v1"
    assert len(client.get_metric_history(run.info.run_id, "epoch/top1")) == 2
    assert client.get_metric_history(run.info.run_id, "loss")
    link = stack.job(job["id"])["mlflow_url"]
    assert link == f"{UI}/#/experiments/{experiment.experiment_id}/runs/{run.info.run_id}"
