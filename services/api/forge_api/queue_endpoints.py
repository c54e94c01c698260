from __future__ import annotations

import uuid
from datetime import datetime

from fastapi import APIRouter
from pydantic import BaseModel, Field

from forge_common.accelerators import PROFILES

from .deps import ConnDep
from .jobs import queue
from .projects import ProjectDep

router = APIRouter(tags=["queue"])


class QueuedJob(BaseModel):
    id: uuid.UUID
    name: str
    task: str
    priority: int
    position: int
    waiting_for: str = Field(description="Why it has not started yet")
    estimated_start: datetime | None = Field(description="From the running jobs' progress and past durations; None when unknown")


class ProfileQueue(BaseModel):
    accelerator: str
    slots: int
    running: int
    queued: list[QueuedJob]


class Accelerator(BaseModel):
    name: str
    vendor: str
    resource: str | None
    count: int = Field(description="Free now (allocatable minus what other workloads request)")
    allocatable: int = Field(description="What the profile offers at all; a job for a busy profile queues")
    per_job: int = Field(description="The most devices one job can ask for (on Kubernetes: one node's allocatable)")
    detail: str
    executor: str
    grades: dict[str, str]


@router.get("/v1/queue", response_model=list[ProfileQueue])
async def get_queue(conn: ConnDep, project: ProjectDep) -> list[ProfileQueue]:
    """Every accelerator's queue in admission order (priority, then arrival) with estimated starts
    from the running jobs' progress and past durations."""
    return [ProfileQueue(**q) for q in await queue.queue_view(conn, project)]


@router.get("/v1/accelerators", response_model=list[Accelerator])
async def get_accelerators(conn: ConnDep) -> list[Accelerator]:
    """Only what can be allocated here, with counts and how well each route is verified on it."""
    offers = await queue.offers(conn)
    return [
        Accelerator(
            name=o.profile,
            vendor=PROFILES[o.profile].vendor,
            resource=PROFILES[o.profile].resource,
            count=o.total,
            allocatable=o.allocatable,
            per_job=o.per_job,
            detail=o.detail,
            executor=o.executor,
            grades=dict(PROFILES[o.profile].grades),
        )
        for o in offers.values()
    ]
