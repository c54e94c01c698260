"""Every message Forge sends, defined once: a CloudEvents 1.0 envelope around a typed payload.

On the wire an event is a CloudEvents *structured-mode* JSON document::

    {"specversion": "1.0", "id": "…", "type": "forge.job.submitted", "source": "/forge/api",
     "time": "2026-12-02T10:00:00Z", "subject": "<job id>", "datacontenttype": "application/json",
     "traceparent": "00-…", "data": {…}}

published on ``<prefix>.job.<job id>.<kind>`` with ``Nats-Msg-Id = id`` so JetStream drops
duplicates. Schemas only grow: new fields get defaults, consumers ignore unknown fields, and a
breaking change gets a new type and subject. Events are past tense; ``StopRequested`` is the one
command users name.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any, ClassVar, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from .states import JobState

_NAMESPACE = uuid.UUID("9a1d3e52-6f1f-4c55-9d1c-2f7b7c0e5a10")


def now() -> datetime:
    return datetime.now(UTC)


def stable_id(*parts: object) -> uuid.UUID:
    """A deterministic event id, so a re-published fact is dropped by JetStream as a duplicate."""
    return uuid.uuid5(_NAMESPACE, ":".join(str(p) for p in parts))


class Payload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    job_id: uuid.UUID


D = TypeVar("D", bound=Payload)


class Event(BaseModel, Generic[D]):
    """The CloudEvents envelope. Subclasses fix ``type`` and ``KIND`` (the last subject token)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    KIND: ClassVar[str]

    specversion: Literal["1.0"] = "1.0"
    id: uuid.UUID = Field(default_factory=uuid.uuid4)
    type: str
    source: str = Field(description="The producing service, e.g. /forge/scheduler")
    time: datetime = Field(default_factory=now)
    subject: str | None = Field(default=None, description="The job id the event is about")
    datacontenttype: Literal["application/json"] = "application/json"
    traceparent: str | None = Field(default=None, description="W3C trace context (CloudEvents distributed tracing)")
    tracestate: str | None = None
    data: D

    @classmethod
    def of(cls, data: Any, *, source: str, traceparent: str | None = None, id: uuid.UUID | None = None) -> Any:
        """Build an event around ``data`` (the job id becomes the CloudEvents subject)."""
        fields: dict[str, Any] = {"data": data, "source": source, "subject": str(data.job_id), "traceparent": traceparent}
        if id is not None:
            fields["id"] = id
        return cls(**fields)

    @property
    def job_id(self) -> uuid.UUID:
        return self.data.job_id


# ---- payloads and events ---------------------------------------------------------------------


class JobSubmittedData(Payload):
    name: str
    task: str
    accelerator: str = "cpu"
    priority: int = 0


class JobSubmitted(Event[JobSubmittedData]):
    """api → scheduler: a job left the draft state and wants a slot."""

    KIND: ClassVar[str] = "submitted"
    type: Literal["forge.job.submitted"] = "forge.job.submitted"


class StopRequestedData(Payload):
    reason: str = "user"


class StopRequested(Event[StopRequestedData]):
    """api → scheduler: the user pressed Stop (queued: cancel it; running: signal the trainer)."""

    KIND: ClassVar[str] = "stop-requested"
    type: Literal["forge.job.stop-requested"] = "forge.job.stop-requested"


class ResumeRequestedData(Payload):
    requested_by: str = "user"


class ResumeRequested(Event[ResumeRequestedData]):
    """api → scheduler: start a new attempt of a stopped or failed job from its last checkpoint."""

    KIND: ClassVar[str] = "resume-requested"
    type: Literal["forge.job.resume-requested"] = "forge.job.resume-requested"


class DeployRequestedData(Payload):
    requested_by: str = "user"


class DeployRequested(Event[DeployRequestedData]):
    """api → registrar: register the model of a succeeded or stopped job (manual registration)."""

    KIND: ClassVar[str] = "deploy-requested"
    type: Literal["forge.job.deploy-requested"] = "forge.job.deploy-requested"


class ModelVersionDeletionRequestedData(Payload):
    model_name: str
    version: int


class ModelVersionDeletionRequested(Event[ModelVersionDeletionRequestedData]):
    """api → registrar: remove a model version from the registry (its job's outputs stay)."""

    KIND: ClassVar[str] = "model-deletion-requested"
    type: Literal["forge.job.model-deletion-requested"] = "forge.job.model-deletion-requested"


class ModelVersionDeletedData(Payload):
    model_name: str
    version: int


class ModelVersionDeleted(Event[ModelVersionDeletedData]):
    """registrar → everyone: a model version left the registry."""

    KIND: ClassVar[str] = "model-deleted"
    type: Literal["forge.job.model-deleted"] = "forge.job.model-deleted"


class JobStatusChangedData(Payload):
    name: str
    state: JobState
    previous_state: JobState | None = None
    attempt: int = 0
    epochs_completed: int = 0
    progress: float = 0.0
    reason: str | None = Field(default=None, description="Why a job failed: a code such as out_of_memory")
    message: str | None = None
    hint: str | None = None
    executor: str | None = None
    log_uri: str | None = Field(default=None, description="Where the trainer's output is followed from")
    output_uri: str | None = None


class JobStatusChanged(Event[JobStatusChangedData]):
    """scheduler (and api for draft → queued) → everyone: the job moved in its state machine."""

    KIND: ClassVar[str] = "status"
    type: Literal["forge.job.status-changed"] = "forge.job.status-changed"


class EpochCompletedData(Payload):
    attempt: int = 1
    epoch: int
    total_epochs: int | None = None
    metrics: dict[str, float] = Field(default_factory=dict)
    main_metric: str | None = None
    is_best: bool = False
    checkpoint_uri: str | None = None


class EpochCompleted(Event[EpochCompletedData]):
    """log-relay → scheduler, api streams, mirrors: one whole epoch is done."""

    KIND: ClassVar[str] = "epoch-completed"
    type: Literal["forge.job.epoch-completed"] = "forge.job.epoch-completed"


class MetricsReportedData(Payload):
    attempt: int = 1
    step: int
    epoch: int
    metrics: dict[str, float]
    progress: float | None = None
    reported_at: float | None = Field(default=None, description="When the trainer printed it (unix seconds)")


class MetricsReported(Event[MetricsReportedData]):
    """log-relay → api streams, mirrors: step-level metrics for live curves."""

    KIND: ClassVar[str] = "metrics"
    type: Literal["forge.job.metrics"] = "forge.job.metrics"


class LogLine(BaseModel):
    model_config = ConfigDict(frozen=True)

    line_no: int
    ts: datetime
    text: str


class LogLinesData(Payload):
    attempt: int = 1
    lines: list[LogLine]
    eof: bool = Field(False, description="True on the last event of an attempt: its output has been read to the end")


class LogLines(Event[LogLinesData]):
    """log-relay → api streams: the trainer's output, a batch of consecutive lines."""

    KIND: ClassVar[str] = "logs"
    type: Literal["forge.job.logs"] = "forge.job.logs"


class ArtifactUploadedData(Payload):
    attempt: int = 1
    artifact_id: str
    uri: str = Field(description="The output prefix holding the job's artifacts")
    outcome: JobState
    registration: Literal["auto", "manual"] = "auto"


class ArtifactUploaded(Event[ArtifactUploadedData]):
    """scheduler (when the trainer exits with outputs) → registrar."""

    KIND: ClassVar[str] = "artifact-uploaded"
    type: Literal["forge.job.artifact-uploaded"] = "forge.job.artifact-uploaded"


class ModelRegisteredData(Payload):
    model_id: uuid.UUID
    model_name: str
    version: int
    weights_uri: str | None = None
    onnx_uri: str | None = None
    metrics: dict[str, Any] = Field(default_factory=dict)
    files: dict[str, str] = Field(default_factory=dict, description="Other parts by name (adapter, merged, …): a file or a folder URI")


class ModelRegistered(Event[ModelRegisteredData]):
    """registrar → everyone: a new model version exists."""

    KIND: ClassVar[str] = "model-registered"
    type: Literal["forge.job.model-registered"] = "forge.job.model-registered"


EVENT_CLASSES: tuple[type[Event[Any]], ...] = (
    JobSubmitted,
    StopRequested,
    ResumeRequested,
    DeployRequested,
    ModelVersionDeletionRequested,
    ModelVersionDeleted,
    JobStatusChanged,
    EpochCompleted,
    MetricsReported,
    LogLines,
    ArtifactUploaded,
    ModelRegistered,
)
BY_TYPE: dict[str, type[Event[Any]]] = {cls.model_fields["type"].default: cls for cls in EVENT_CLASSES}
BY_KIND: dict[str, type[Event[Any]]] = {cls.KIND: cls for cls in EVENT_CLASSES}


def decode(body: bytes | str) -> Event[Any]:
    """Parse any Forge event by its ``type``; raises ``ValueError`` for unknown or malformed ones."""
    import json

    obj = json.loads(body)
    if not isinstance(obj, dict) or obj.get("type") not in BY_TYPE:
        raise ValueError(f"not a Forge event: type {obj.get('type') if isinstance(obj, dict) else None!r}")
    return BY_TYPE[obj["type"]].model_validate(obj)
