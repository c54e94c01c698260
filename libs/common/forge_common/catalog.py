"""The event catalogue as an AsyncAPI 3.0 document, generated from the event classes themselves
(so it cannot drift from what is published)."""

from __future__ import annotations

import inspect
from typing import Any

from pydantic.json_schema import models_json_schema

from .events import EVENT_CLASSES
from .subjects import Subjects


def asyncapi(subjects: Subjects, *, nats_url: str = "nats://127.0.0.1:4222", version: str = "0.1.0") -> dict[str, Any]:
    _, top = models_json_schema([(cls, "serialization") for cls in EVENT_CLASSES], ref_template="#/components/schemas/{model}")
    schemas = top.get("$defs", {})
    host = nats_url.split("://", 1)[-1]
    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    messages: dict[str, Any] = {}
    for cls in EVENT_CLASSES:
        name = cls.__name__
        kind = cls.KIND
        event_type = cls.model_fields["type"].default
        messages[name] = {
            "name": name,
            "title": event_type,
            "summary": inspect.getdoc(cls) or "",
            "contentType": "application/cloudevents+json",
            "headers": {
                "type": "object",
                "properties": {
                    "Nats-Msg-Id": {"type": "string", "description": "= the CloudEvents id; JetStream drops duplicates"},
                    "ce-type": {"type": "string", "const": event_type},
                    "traceparent": {"type": "string", "description": "W3C trace context, also in the body"},
                },
            },
            "payload": {"$ref": f"#/components/schemas/{cls.__name__}"},
        }
        channels[kind] = {
            "address": f"{subjects.prefix}.job.{{job_id}}.{kind}",
            "description": f"{event_type} events, one subject per job; subscribe to {subjects.every(kind)} for every job",
            "parameters": {"job_id": {"description": "The job the event is about (also the CloudEvents subject)"}},
            "messages": {name: {"$ref": f"#/components/messages/{name}"}},
        }
        operations[f"receive{name}"] = {
            "action": "receive",
            "channel": {"$ref": f"#/channels/{kind}"},
            "summary": f"Follow {event_type} (durable consumer on stream {subjects.jobs_stream}, filter {subjects.every(kind)})",
        }
    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "Forge events",
            "version": version,
            "description": (
                "Every event is a CloudEvents 1.0 structured-mode JSON document (payload under `data`, the job id as "
                f"`subject`) on `{subjects.prefix}.job.<job id>.<kind>` in the JetStream stream `{subjects.jobs_stream}`. "
                "Schemas only grow: new fields get defaults; ignore fields you do not know."
            ),
        },
        "servers": {"nats": {"host": host, "protocol": "nats", "description": "NATS with JetStream"}},
        "defaultContentType": "application/cloudevents+json",
        "channels": channels,
        "operations": operations,
        "components": {"messages": messages, "schemas": schemas},
    }
