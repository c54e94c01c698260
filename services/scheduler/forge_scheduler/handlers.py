"""Thin consumers: decode (FastStream does it from the type), call the service, return to ack."""

from __future__ import annotations

from faststream.nats import NatsBroker

from forge_common import bus, telemetry
from forge_common.events import EpochCompleted, JobSubmitted, ResumeRequested, StopRequested
from forge_common.subjects import Subjects

from .service import Scheduler

SERVICE = "scheduler"


def register(broker: NatsBroker, subjects: Subjects, scheduler: Scheduler) -> None:
    @broker.subscriber(**bus.durable(subjects, SERVICE, JobSubmitted.KIND))
    async def on_job_submitted(event: JobSubmitted) -> None:
        with telemetry.span("scheduler.on_job_submitted", traceparent=event.traceparent, job_id=event.job_id):
            await scheduler.admit()

    @broker.subscriber(**bus.durable(subjects, SERVICE, StopRequested.KIND))
    async def on_stop_requested(event: StopRequested) -> None:
        with telemetry.span("scheduler.on_stop_requested", traceparent=event.traceparent, job_id=event.job_id):
            await scheduler.request_stop(event.job_id)

    @broker.subscriber(**bus.durable(subjects, SERVICE, ResumeRequested.KIND))
    async def on_resume_requested(event: ResumeRequested) -> None:
        with telemetry.span("scheduler.on_resume_requested", traceparent=event.traceparent, job_id=event.job_id):
            await scheduler.resume(event.job_id)

    @broker.subscriber(**bus.durable(subjects, SERVICE, EpochCompleted.KIND))
    async def on_epoch_completed(event: EpochCompleted) -> None:
        await scheduler.record_epoch(event)
