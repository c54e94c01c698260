"""Thin consumers: a job started → follow its output; a job ended → read the rest, then stop."""

from __future__ import annotations

from faststream.nats import NatsBroker

from forge_common import bus
from forge_common.events import JobStatusChanged
from forge_common.states import TERMINAL, JobState
from forge_common.subjects import Subjects

from .service import LogRelay

SERVICE = "log-relay"


def register(broker: NatsBroker, subjects: Subjects, relay: LogRelay) -> None:
    @broker.subscriber(**bus.durable(subjects, SERVICE, JobStatusChanged.KIND))
    async def on_job_status_changed(event: JobStatusChanged) -> None:
        d = event.data
        if d.state is JobState.RUNNING and d.log_uri:
            await relay.follow(d.job_id, d.attempt, d.log_uri)
        elif d.state in TERMINAL and d.attempt > 0:
            await relay.finish(d.job_id, d.attempt, d.log_uri)
