"""Mirror each job as an MLflow run, for teams that already look at MLflow.

On when ``FORGE_MLFLOW_TRACKING_URI`` is set. It follows the same events as everyone else:
a job's first state change creates its run (params = the resolved hyperparameters and spec,
tags = lineage and a link back to the job), step metrics are logged in batches, each completed
epoch's metrics are logged at the epoch as ``epoch/<name>``, the registration is tagged, and the
final state ends the run (FINISHED, FAILED or KILLED). The mapping job → run lives in the
``mlflow_runs`` table, so a restart continues the same runs.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import defaultdict
from typing import Any

import asyncpg

from forge_common.events import EpochCompleted, JobStatusChanged, MetricsReported, ModelRegistered
from forge_common.runtime import wait_event
from forge_common.states import JobState

log = logging.getLogger(__name__)

END = {JobState.SUCCEEDED: "FINISHED", JobState.FAILED: "FAILED", JobState.CANCELED: "KILLED", JobState.STOPPED: "KILLED"}


class MlflowMirror:
    def __init__(
        self, pool: asyncpg.Pool, tracking_uri: str, *, experiment: str = "forge", job_url: str | None = None, flush_seconds: float = 1.0
    ) -> None:
        from mlflow.tracking import MlflowClient

        self.pool = pool
        self.client = MlflowClient(tracking_uri=tracking_uri)
        self.experiment_name = experiment
        self.job_url = job_url
        self.flush_seconds = flush_seconds
        self._experiment_id: str | None = None
        self._pending: dict[str, list[Any]] = defaultdict(list)
        self._lock = asyncio.Lock()

    async def _experiment(self) -> str:
        if self._experiment_id is None:
            found = await asyncio.to_thread(self.client.get_experiment_by_name, self.experiment_name)
            self._experiment_id = (
                found.experiment_id if found is not None else await asyncio.to_thread(self.client.create_experiment, self.experiment_name)
            )
        return self._experiment_id

    async def run_for(self, job_id: uuid.UUID) -> str | None:
        """The job's run, created (with its params and tags) the first time it is needed."""
        async with self._lock:
            async with self.pool.acquire() as conn:
                existing = await conn.fetchval("SELECT run_id FROM mlflow_runs WHERE job_id = $1", job_id)
                if existing:
                    return str(existing)
                job = await conn.fetchrow("SELECT id, name, task, spec FROM jobs WHERE id = $1", job_id)
            if job is None:
                return None
            spec = job["spec"]
            tags = {
                "forge.job_id": str(job["id"]),
                "forge.task": job["task"],
                "forge.dataset": f"{spec['dataset']['name']} v{spec['dataset']['version']}",
                "forge.base_model": spec.get("base_model", ""),
                "mlflow.runName": job["name"],
            }
            if self.job_url:
                tags["forge.url"] = self.job_url.rstrip("/") + f"/jobs/{job['id']}"
            experiment = await self._experiment()
            run = await asyncio.to_thread(self.client.create_run, experiment, tags=tags, run_name=job["name"])
            run_id = run.info.run_id
            params = {f"hp.{k}": v for k, v in spec.get("hyperparameters", {}).items()}
            params.update({"accelerator": spec.get("accelerator", "cpu"), "registration": spec.get("registration", "auto")})
            from mlflow.entities import Param

            await asyncio.to_thread(self.client.log_batch, run_id, params=[Param(k, str(v)[:6000]) for k, v in params.items()])
            async with self.pool.acquire() as conn:
                await conn.execute(
                    "INSERT INTO mlflow_runs (job_id, run_id, experiment_id) VALUES ($1, $2, $3) ON CONFLICT (job_id) DO NOTHING",
                    job_id,
                    run_id,
                    experiment,
                )
                run_id = str(await conn.fetchval("SELECT run_id FROM mlflow_runs WHERE job_id = $1", job_id))
            return run_id

    # -- events ------------------------------------------------------------------------------------

    async def on_status(self, event: JobStatusChanged) -> None:
        d = event.data
        run_id = await self.run_for(d.job_id)
        if run_id is None:
            return
        from mlflow.entities import RunTag

        tags = [RunTag("forge.state", d.state.value), RunTag("forge.attempt", str(d.attempt))]
        if d.reason:
            tags += [RunTag("forge.failure_reason", d.reason), RunTag("forge.failure_message", (d.message or "")[:5000])]
        await asyncio.to_thread(self.client.log_batch, run_id, tags=tags)
        if d.state in END:
            await self.flush()
            await asyncio.to_thread(self.client.set_terminated, run_id, END[d.state])

    async def on_metrics(self, event: MetricsReported) -> None:
        from mlflow.entities import Metric

        run_id = await self.run_for(event.job_id)
        if run_id is None:
            return
        d = event.data
        ts = int((d.reported_at or time.time()) * 1000)
        self._pending[run_id].extend(Metric(k, v, ts, d.step) for k, v in d.metrics.items())

    async def on_epoch(self, event: EpochCompleted) -> None:
        from mlflow.entities import Metric

        run_id = await self.run_for(event.job_id)
        if run_id is None:
            return
        ts = int(event.time.timestamp() * 1000)
        metrics = [Metric(f"epoch/{k}", v, ts, event.data.epoch) for k, v in event.data.metrics.items()]
        await asyncio.to_thread(self.client.log_batch, run_id, metrics=metrics)

    async def on_registered(self, event: ModelRegistered) -> None:
        from mlflow.entities import RunTag

        run_id = await self.run_for(event.job_id)
        if run_id is not None:
            d = event.data
            tags = [RunTag("forge.model", f"{d.model_name} v{d.version}")] + ([RunTag("forge.onnx_uri", d.onnx_uri)] if d.onnx_uri else [])
            await asyncio.to_thread(self.client.log_batch, run_id, tags=tags)

    async def flush(self) -> int:
        """Send the buffered step metrics, at most 1000 per call (MLflow's batch limit)."""
        pending, self._pending = self._pending, defaultdict(list)
        sent = 0
        for run_id, metrics in pending.items():
            for i in range(0, len(metrics), 1000):
                await asyncio.to_thread(self.client.log_batch, run_id, metrics=metrics[i : i + 1000])
                sent += len(metrics[i : i + 1000])
        return sent

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await wait_event(stop, self.flush_seconds)
            try:
                await self.flush()
            except Exception:
                log.exception("mlflow mirror: flushing metrics failed; they are dropped from the mirror (Forge keeps them)")
