from __future__ import annotations

from faststream.nats import NatsBroker

from forge_common import bus, telemetry
from forge_common.events import ArtifactUploaded, DeployRequested, ModelVersionDeletionRequested
from forge_common.subjects import Subjects

from .service import Registrar

SERVICE = "registrar"


def register(broker: NatsBroker, subjects: Subjects, registrar: Registrar) -> None:
    @broker.subscriber(**bus.durable(subjects, SERVICE, ArtifactUploaded.KIND))
    async def on_artifact_uploaded(event: ArtifactUploaded) -> None:
        with telemetry.span("registrar.on_artifact_uploaded", traceparent=event.traceparent, job_id=event.job_id):
            await registrar.on_artifact_uploaded(event)

    @broker.subscriber(**bus.durable(subjects, SERVICE, DeployRequested.KIND))
    async def on_deploy_requested(event: DeployRequested) -> None:
        with telemetry.span("registrar.on_deploy_requested", traceparent=event.traceparent, job_id=event.job_id):
            await registrar.on_deploy_requested(event.job_id)

    @broker.subscriber(**bus.durable(subjects, SERVICE, ModelVersionDeletionRequested.KIND))
    async def on_model_deletion_requested(event: ModelVersionDeletionRequested) -> None:
        await registrar.delete_version(event.job_id, event.data.model_name, event.data.version)
