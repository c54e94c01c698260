"""NATS JetStream: streams declared in code, events published with ``Nats-Msg-Id``, consumers that
ack only after the work is committed and dead-letter what can never succeed.

Services consume with FastStream (typed handlers over durable pull consumers, see
:func:`durable`); the outbox relay, the log-relay and the api's live streams use the same nats-py
connection directly.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import nats
from faststream import BaseMiddleware
from faststream.exceptions import NackMessage, RejectMessage
from faststream.nats import JStream, NatsBroker
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import AckPolicy as JsAckPolicy
from nats.js.api import ConsumerConfig, DeliverPolicy
from nats.js.errors import BadRequestError
from pydantic import ValidationError

from .errors import PermanentFailure
from .events import Event
from .settings import CommonSettings
from .subjects import Subjects

log = logging.getLogger(__name__)

MAX_DELIVER = 5
# seconds to wait before the n-th redelivery of a failed message
BACKOFF = (1.0, 2.0, 5.0, 15.0, 30.0)


def encode(event: Event[Any]) -> bytes:
    return event.model_dump_json(exclude_none=True).encode()


def headers_for(event: Event[Any]) -> dict[str, str]:
    """Message id for JetStream's duplicate window, plus CloudEvents binary-mode hints."""
    headers = {
        "Nats-Msg-Id": str(event.id),
        "Content-Type": "application/cloudevents+json",
        "ce-type": event.type,
        "ce-id": str(event.id),
        "ce-source": event.source,
    }
    if event.traceparent:
        headers["traceparent"] = event.traceparent
    return headers


async def connect(settings: CommonSettings, *, name: str) -> tuple[Client, JetStreamContext]:
    nc = await nats.connect(settings.nats_url, name=name, max_reconnect_attempts=-1, reconnect_time_wait=1)
    return nc, nc.jetstream()


async def ensure_streams(js: JetStreamContext, subjects: Subjects, *, max_age_days: float = 30.0) -> None:
    """Create the streams, or bring an existing one's configuration up to date."""
    for config in subjects.stream_configs(max_age_seconds=max_age_days * 24 * 3600):
        try:
            await js.add_stream(config)
        except BadRequestError as exc:
            if "already in use" not in (exc.description or ""):
                raise
            await js.update_stream(config)


async def publish(js: JetStreamContext, subjects: Subjects, event: Event[Any]) -> int:
    """Publish now (for facts that carry a deterministic id); returns the stream sequence."""
    ack = await js.publish(subjects.of(event), encode(event), headers=headers_for(event))
    return int(ack.seq)


def make_broker(settings: CommonSettings, subjects: Subjects, *, name: str) -> NatsBroker:
    """A FastStream broker whose consumers dead-letter what cannot succeed (see below)."""
    return NatsBroker(
        settings.nats_url,
        name=name,
        middlewares=[dead_letter_middleware(subjects)],
        max_reconnect_attempts=-1,
        reconnect_time_wait=1,
        logger=logging.getLogger(f"forge.{name}.bus"),
        log_level=logging.DEBUG,
    )


def durable(subjects: Subjects, service: str, kind: str, *, ack_wait: float = 60.0) -> dict[str, Any]:
    """Keyword arguments for ``broker.subscriber``: a durable consumer of one kind of event, shared
    by every replica of the service through a deliver group (each event goes to one replica).

    Push delivery rather than pull: nats-py's ``fetch`` raises a bare ``asyncio.TimeoutError``
    that FastStream 0.7's pull loop does not expect, which restarts the loop with an error on
    every idle second (see docs/decisions.md)."""
    name = subjects.durable(service, kind)
    return {
        "subject": subjects.every(kind),
        "stream": JStream(subjects.jobs_stream, declare=False),
        "queue": name,  # nats-py makes the deliver group's name the durable name too
        "config": ConsumerConfig(
            durable_name=name,
            deliver_group=name,
            ack_policy=JsAckPolicy.EXPLICIT,
            ack_wait=ack_wait,
            max_deliver=MAX_DELIVER + 1,
            max_ack_pending=256,
            deliver_policy=DeliverPolicy.ALL,
            filter_subject=subjects.every(kind),
        ),
    }


def dead_letter_middleware(subjects: Subjects) -> Callable[..., BaseMiddleware]:
    """A FastStream middleware: success acks; a permanent failure (a malformed message, a
    ``PermanentFailure``) or the last allowed delivery goes to ``<prefix>.dlq.<consumer>`` and is
    terminated; anything else is nacked with backoff for redelivery."""

    class DeadLetter(BaseMiddleware):
        async def consume_scope(self, call_next: Callable[[Any], Awaitable[Any]], msg: Any) -> Any:
            raw = msg.raw_message
            delivered, consumer = 1, "unknown"
            try:
                delivered = int(raw.metadata.num_delivered)
                consumer = str(raw.metadata.consumer)
            except Exception:  # core NATS or the in-memory test broker: no JetStream metadata
                pass
            try:
                return await call_next(msg)
            except (PermanentFailure, ValidationError, json.JSONDecodeError) as exc:
                await _dead_letter(msg, subjects, consumer, exc, delivered)
                raise RejectMessage() from exc
            except Exception as exc:
                if delivered >= MAX_DELIVER:
                    await _dead_letter(msg, subjects, consumer, exc, delivered)
                    raise RejectMessage() from exc
                delay = BACKOFF[min(delivered, len(BACKOFF)) - 1]
                log.warning("%s: delivery %d failed (%s); retrying in %.0fs", consumer, delivered, exc, delay)
                raise NackMessage(delay=delay) from exc

    return DeadLetter


async def _dead_letter(msg: Any, subjects: Subjects, consumer: str, exc: BaseException, delivered: int) -> None:
    log.error("%s: dead-lettering a message from %s after %d deliveries: %s", consumer, msg.raw_message.subject, delivered, exc)
    raw = msg.raw_message
    headers = {
        "Nats-Msg-Id": f"dlq-{uuid.uuid4()}",
        "Forge-Error": f"{type(exc).__name__}: {exc}"[:2000],
        "Forge-Original-Subject": raw.subject,
        "Forge-Deliveries": str(delivered),
    }
    try:
        await raw._client.jetstream().publish(subjects.dlq(consumer), raw.data, headers=headers)
    except Exception as pub_exc:  # never lose the original error for the sake of the DLQ
        log.error("%s: could not publish to the dead-letter subject: %s", consumer, pub_exc)
