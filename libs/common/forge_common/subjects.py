"""NATS subjects and JetStream streams, declared in code.

Every job event lives on ``<prefix>.job.<job id>.<kind>`` (kinds: ``submitted``,
``stop-requested``, ``status``, ``epoch-completed``, ``metrics``, ``logs``,
``artifact-uploaded``, ``model-registered``) in one stream, ``<PREFIX>_JOBS``, so a job's whole
story is one filter (``<prefix>.job.<id>.>``) in order, and one kind across jobs is another
(``<prefix>.job.*.status``). Messages that could not be processed go to ``<prefix>.dlq.<consumer>``
in ``<PREFIX>_DLQ``. The prefix lets tests and several installations share one server.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any

from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig

from .events import Event

_PREFIX_RE = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")


@dataclass(frozen=True)
class Subjects:
    prefix: str = "forge"

    def __post_init__(self) -> None:
        if not _PREFIX_RE.match(self.prefix):
            raise ValueError(f"bus prefix {self.prefix!r} must match {_PREFIX_RE.pattern}")

    @property
    def jobs_stream(self) -> str:
        return f"{self.prefix.upper().replace('-', '_')}_JOBS"

    @property
    def dlq_stream(self) -> str:
        return f"{self.prefix.upper().replace('-', '_')}_DLQ"

    def job(self, job_id: uuid.UUID | str, kind: str) -> str:
        return f"{self.prefix}.job.{job_id}.{kind}"

    def of(self, event: Event[Any]) -> str:
        return self.job(event.job_id, event.KIND)

    def every(self, kind: str) -> str:
        """One kind of event across all jobs (a durable consumer's filter)."""
        return f"{self.prefix}.job.*.{kind}"

    def all_of_job(self, job_id: uuid.UUID | str) -> str:
        return f"{self.prefix}.job.{job_id}.>"

    def dlq(self, consumer: str) -> str:
        return f"{self.prefix}.dlq.{consumer}"

    def durable(self, service: str, kind: str) -> str:
        """The durable consumer name a service uses for one kind of event."""
        return f"{self.prefix}-{service}-{kind}".replace(".", "_")

    def stream_configs(self, *, max_age_seconds: float = 30 * 24 * 3600, max_bytes: int = -1) -> list[StreamConfig]:
        return [
            StreamConfig(
                name=self.jobs_stream,
                description="Forge job events (CloudEvents JSON), one subject per job and kind",
                subjects=[f"{self.prefix}.job.>"],
                retention=RetentionPolicy.LIMITS,
                storage=StorageType.FILE,
                discard=DiscardPolicy.OLD,
                max_age=max_age_seconds,
                max_bytes=max_bytes,
                duplicate_window=120.0,
            ),
            StreamConfig(
                name=self.dlq_stream,
                description="Forge messages that could not be processed, with the error in headers",
                subjects=[f"{self.prefix}.dlq.>"],
                retention=RetentionPolicy.LIMITS,
                storage=StorageType.FILE,
                max_age=max_age_seconds,
            ),
        ]
