import json
import uuid

import pytest
from pydantic import ValidationError

from forge_common import bus
from forge_common.events import (
    BY_KIND,
    BY_TYPE,
    EVENT_CLASSES,
    EpochCompleted,
    EpochCompletedData,
    JobStatusChanged,
    JobStatusChangedData,
    JobSubmitted,
    JobSubmittedData,
    decode,
    stable_id,
)
from forge_common.states import JobState
from forge_common.subjects import Subjects


def submitted() -> JobSubmitted:
    return JobSubmitted.of(
        JobSubmittedData(job_id=uuid.uuid4(), name="n", task="classification"),
        source="/forge/api",
        traceparent="00-" + "a" * 32 + "-" + "b" * 16 + "-01",
    )


def test_an_event_is_a_structured_cloudevent() -> None:
    event = submitted()
    doc = json.loads(bus.encode(event))
    assert doc["specversion"] == "1.0"
    assert doc["type"] == "forge.job.submitted"
    assert doc["source"] == "/forge/api"
    assert doc["subject"] == str(event.job_id)
    assert doc["datacontenttype"] == "application/json"
    assert doc["traceparent"].startswith("00-")
    assert doc["data"]["job_id"] == str(event.job_id)
    assert {"id", "time"} <= doc.keys()


def test_round_trip_through_the_wire_keeps_every_field() -> None:
    event = JobStatusChanged.of(
        JobStatusChangedData(job_id=uuid.uuid4(), name="x", state=JobState.FAILED, reason="out_of_memory", hint="try 8"),
        source="/forge/scheduler",
    )
    again = decode(bus.encode(event))
    assert again == event


def test_consumers_ignore_fields_they_do_not_know() -> None:
    doc = json.loads(bus.encode(submitted()))
    doc["brand_new"] = 1
    doc["data"]["also_new"] = {"x": 1}
    assert isinstance(decode(json.dumps(doc)), JobSubmitted)


def test_a_malformed_event_is_rejected() -> None:
    doc = json.loads(bus.encode(submitted()))
    del doc["data"]["job_id"]
    with pytest.raises(ValidationError):
        decode(json.dumps(doc))
    with pytest.raises(ValueError, match="not a Forge event"):
        decode(json.dumps({"type": "something.else"}))


def test_events_are_frozen() -> None:
    event = submitted()
    with pytest.raises(ValidationError):
        event.source = "/elsewhere"  # type: ignore[misc]


def test_types_and_kinds_are_unique_and_complete() -> None:
    assert len(BY_TYPE) == len(BY_KIND) == len(EVENT_CLASSES)
    for name in ["submitted", "stop-requested", "status", "epoch-completed", "metrics", "logs", "artifact-uploaded", "model-registered"]:
        assert name in BY_KIND


def test_subjects_put_every_job_event_under_the_job() -> None:
    s = Subjects("forge")
    event = submitted()
    assert s.of(event) == f"forge.job.{event.job_id}.submitted"
    assert s.every("status") == "forge.job.*.status"
    assert s.all_of_job(event.job_id) == f"forge.job.{event.job_id}.>"
    assert s.jobs_stream == "FORGE_JOBS"
    with pytest.raises(ValueError):
        Subjects("Bad.Prefix")


def test_headers_carry_the_message_id_for_deduplication() -> None:
    event = submitted()
    headers = bus.headers_for(event)
    assert headers["Nats-Msg-Id"] == str(event.id)
    assert headers["traceparent"] == event.traceparent
    assert headers["ce-type"] == event.type


def test_stable_ids_make_repeated_facts_duplicates() -> None:
    job = uuid.uuid4()
    a = EpochCompleted.of(EpochCompletedData(job_id=job, epoch=1), source="x", id=stable_id(job, 1, "epoch", 1))
    b = EpochCompleted.of(EpochCompletedData(job_id=job, epoch=1), source="x", id=stable_id(job, 1, "epoch", 1))
    c = EpochCompleted.of(EpochCompletedData(job_id=job, epoch=2), source="x", id=stable_id(job, 1, "epoch", 2))
    assert a.id == b.id != c.id
