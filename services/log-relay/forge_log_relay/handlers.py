"""Thin consumers: a job started → follow its output; a job ended → read the rest, then stop."""

from __future__ import annotations

from faststream.nats import NatsBroker

from forge_common import bus
from forge_common.events import EpochCompleted, JobStatusChanged, MetricsReported, ModelRegistered
from forge_common.states import TERMINAL, JobState
from forge_common.subjects import Subjects

from .mlflow_mirror import MlflowMirror
from .service import LogRelay

SERVICE = "log-relay"


def register(broker: NatsBroker, subjects: Subjects, relay: LogRelay) -> None:
    @broker.subscriber(**bus.durable(subjects, SERVICE, JobStatusChanged.KIND))
    async def on_job_status_changed(event: JobStatusChanged) -> None:
        d = event.data
        if d.state is JobState.RUNNING and d.log_uri:
            await relay.follow(d.job_id, d.attempt, d.log_uri)
        elif d.attempt > 0 and (d.state in TERMINAL or (d.previous_state is JobState.RUNNING and d.state is JobState.QUEUED)):
            # the attempt ended (or was retried): read the rest of its output, then stop following
            await relay.finish(d.job_id, d.attempt, d.log_uri)


MIRROR = "log-relay-mlflow"


def register_mirror(broker: NatsBroker, subjects: Subjects, mirror: MlflowMirror) -> None:
    """The MLflow mirror's own durable consumers (it can fall behind without holding up the relay)."""

    @broker.subscriber(**bus.durable(subjects, MIRROR, JobStatusChanged.KIND))
    async def mirror_status(event: JobStatusChanged) -> None:
        await mirror.on_status(event)

    @broker.subscriber(**bus.durable(subjects, MIRROR, MetricsReported.KIND))
    async def mirror_metrics(event: MetricsReported) -> None:
        await mirror.on_metrics(event)

    @broker.subscriber(**bus.durable(subjects, MIRROR, EpochCompleted.KIND))
    async def mirror_epoch(event: EpochCompleted) -> None:
        await mirror.on_epoch(event)

    @broker.subscriber(**bus.durable(subjects, MIRROR, ModelRegistered.KIND))
    async def mirror_registered(event: ModelRegistered) -> None:
        await mirror.on_registered(event)
