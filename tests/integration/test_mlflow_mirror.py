"""The MLflow mirror against a real MLflow tracking store (sqlite backend)."""

from __future__ import annotations

import uuid
from pathlib import Path

import asyncpg
import pytest

from forge_common.events import (
    EpochCompleted,
    EpochCompletedData,
    JobStatusChanged,
    JobStatusChangedData,
    MetricsReported,
    MetricsReportedData,
    ModelRegistered,
    ModelRegisteredData,
)
from forge_common.states import JobState
from forge_log_relay.mlflow_mirror import MlflowMirror

from .helpers import insert_job

pytest.importorskip("mlflow")


async def test_a_job_becomes_an_mlflow_run_with_params_metrics_state_and_a_link(pool: asyncpg.Pool, tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    async with pool.acquire() as conn:
        job = await insert_job(
            conn, state="running", name="mirrored", hyperparameters={"epochs": 2, "lr": 0.01}, base_model="timm/resnet18"
        )
    mirror = MlflowMirror(pool, uri, job_url="http://forge.example")
    status = lambda state: JobStatusChanged.of(JobStatusChangedData(job_id=job, name="mirrored", state=state, attempt=1), source="t")  # noqa: E731
    await mirror.on_status(status(JobState.RUNNING))
    for step in range(1, 2501):  # more than one MLflow batch
        await mirror.on_metrics(
            MetricsReported.of(MetricsReportedData(job_id=job, step=step, epoch=1, metrics={"loss": 1 / step}), source="t")
        )
    await mirror.on_epoch(EpochCompleted.of(EpochCompletedData(job_id=job, epoch=1, metrics={"top1": 0.75}, is_best=True), source="t"))
    await mirror.on_registered(
        ModelRegistered.of(ModelRegisteredData(job_id=job, model_id=uuid.uuid4(), model_name="mirrored", version=3), source="t")
    )
    await mirror.on_status(status(JobState.SUCCEEDED))  # flushes, then ends the run

    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("forge").experiment_id])
    assert run.info.status == "FINISHED" and run.info.run_name == "mirrored"
    assert run.data.params["hp.epochs"] == "2" and run.data.params["hp.lr"] == "0.01"
    assert run.data.tags["forge.url"] == f"http://forge.example/jobs/{job}" and run.data.tags["forge.model"] == "mirrored v3"
    history = client.get_metric_history(run.info.run_id, "loss")
    assert len(history) == 2500 and sorted(m.step for m in history) == list(range(1, 2501))
    assert client.get_metric_history(run.info.run_id, "epoch/top1")[0].value == 0.75
    # a second mirror (a restarted relay) continues the same run
    again = MlflowMirror(pool, uri)
    assert await again.run_for(job) == run.info.run_id
