"""Streams and the catalogue for other systems: every job's state changes live, and the AsyncAPI
document of every event Forge publishes."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Query
from sse_starlette.sse import EventSourceResponse

from forge_common.catalog import asyncapi
from forge_common.errors import InvalidInput
from forge_common.events import BY_KIND

from . import streams
from .deps import ServicesDep

router = APIRouter(tags=["events"])


@router.get("/v1/events", response_class=EventSourceResponse)
async def all_jobs_events(
    services: ServicesDep,
    kinds: Annotated[str, Query(description="Comma-separated event kinds, e.g. status,model-registered")] = "status",
    since: Annotated[
        str, Query(pattern=r"^(start|now|\d+)$", description="start (history first), now (live only), or a sequence to continue after")
    ] = "start",
    last_event_id: Annotated[str | None, Header()] = None,
) -> EventSourceResponse:
    """Server-Sent Events across every job: by default each job state change. History first (or
    only live events with ``since=now``); resumes after ``Last-Event-ID``."""
    wanted = [k.strip() for k in kinds.split(",") if k.strip()]
    unknown = [k for k in wanted if k not in BY_KIND]
    if not wanted or unknown:
        raise InvalidInput(f"unknown event kind(s) {', '.join(unknown) or '(none)'}; known: {', '.join(BY_KIND)}", field="kinds")
    after = streams.parse_last_event_id(last_event_id) or (int(since) if since.isdigit() else None)
    source = streams.events(
        services.js,
        services.subjects.jobs_stream,
        [services.subjects.every(k) for k in wanted],
        after=after,
        live_only=since == "now" and after is None,
    )
    return EventSourceResponse(source, ping=int(services.settings.sse_ping_seconds))


@router.get("/asyncapi.json")
async def asyncapi_document(services: ServicesDep) -> dict[str, Any]:
    """The event catalogue (AsyncAPI 3.0): subjects, payload schemas, the CloudEvents envelope."""
    return asyncapi(services.subjects, nats_url=services.common.nats_url)
