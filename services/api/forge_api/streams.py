"""Live streams over Server-Sent Events, read straight from JetStream.

A job's stream is an ordered consumer on ``<prefix>.job.<id>.>`` that starts at the beginning (a
late joiner gets the history first, then live events) or right after ``Last-Event-ID`` (a dropped
connection resumes without gaps or duplicates): the SSE id *is* the stream sequence number.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from nats.errors import TimeoutError as NatsTimeout
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy


def parse_last_event_id(value: str | None) -> int | None:
    if not value:
        return None
    try:
        seq = int(value)
    except ValueError:
        return None
    return seq if seq > 0 else None


async def events(
    js: JetStreamContext,
    stream: str,
    subject: str | list[str],
    *,
    after: int | None,
    first: dict[str, Any] | None = None,
    live_only: bool = False,
) -> AsyncIterator[dict[str, Any]]:
    """SSE messages (``id``, ``event``, ``data``) for every event on ``subject``, forever."""
    if first is not None:
        yield first
    filters = [subject] if isinstance(subject, str) else subject
    config = ConsumerConfig(
        deliver_policy=DeliverPolicy.BY_START_SEQUENCE if after else DeliverPolicy.NEW if live_only else DeliverPolicy.ALL,
        opt_start_seq=after + 1 if after else None,
        inactive_threshold=60.0,
        filter_subjects=filters if len(filters) > 1 else None,
    )
    sub = await js.subscribe(filters[0], stream=stream, ordered_consumer=True, config=config, idle_heartbeat=5.0)
    try:
        while True:
            try:
                msg = await sub.next_msg(timeout=30)
            except NatsTimeout:
                continue
            # the subject's last token is the event's kind: <prefix>.job.<id>.<kind>
            kind = msg.subject.rsplit(".", 1)[-1]
            yield {"id": str(msg.metadata.sequence.stream), "event": kind, "data": msg.data.decode()}
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
