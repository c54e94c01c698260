"""What `forge jobs watch` and `forge jobs logs -f` make of a job's stream: a resumed job's earlier
attempts replay first and must not end the watch of the attempt running now."""

from __future__ import annotations

from typing import Any

from forge_cli.follow import JobFollower


def status(state: str, attempt: int = 0) -> tuple[str, Any]:
    return "status", {"data": {"state": state, "attempt": attempt}}


def logs(attempt: int, eof: bool = False) -> tuple[str, Any]:
    return "logs", {"data": {"attempt": attempt, "lines": [], "eof": eof}}


REGISTERED = ("model-registered", {"data": {"model_name": "m", "version": 1}})
FIRST_ATTEMPT = [
    status("draft"),
    status("queued"),
    status("running", 1),
    logs(1),
    status("stopped", 1),
    logs(1, eof=True),
    REGISTERED,
    status("queued", 1),  # resumed
]


def fold(snapshot: dict[str, Any], events: list[tuple[str, Any]]) -> JobFollower:
    f = JobFollower()
    f.feed("snapshot", snapshot)
    for event, data in events:
        f.feed(event, data)
        f.feed("ping", None)
    return f


def test_a_resumed_jobs_first_attempt_does_not_end_the_watch() -> None:
    f = fold({"state": "running", "attempt": 2}, [*FIRST_ATTEMPT, status("running", 2), logs(2)])
    assert f.state == "running" and not f.ended and not f.settled and not f.output_read and f.registered is None
    f.feed(*status("succeeded", 2))
    assert f.ended and not f.settled  # waiting for this attempt's registration
    f.feed(*logs(2, eof=True))
    assert f.output_read
    f.feed(*REGISTERED)
    assert f.settled


def test_a_stopped_job_resumed_while_watched_waits_for_the_new_attempt() -> None:
    f = fold({"state": "stopped", "attempt": 1}, FIRST_ATTEMPT[:-1])
    assert f.settled and f.output_read
    f.feed(*status("queued", 1))
    f.feed(*status("running", 2))
    assert not f.ended and f.registered is None and not f.output_read


def test_a_resumed_job_still_in_the_queue_waits_for_its_next_attempt() -> None:
    f = fold({"state": "queued", "attempt": 1}, FIRST_ATTEMPT)
    assert f.state == "queued" and not f.ended and not f.output_read and f.registered is None
    f.feed(*status("running", 2))
    f.feed(*status("succeeded", 2))
    assert f.ended and not f.settled
    f.feed(*REGISTERED)
    assert f.settled


def test_a_finished_resumed_job_settles_on_its_own_registration() -> None:
    f = fold({"state": "succeeded", "attempt": 2}, FIRST_ATTEMPT)
    assert f.ended and not f.settled  # the first attempt's model is not this one's
    f.feed(*status("running", 2))
    f.feed(*status("succeeded", 2))
    f.feed(*REGISTERED)
    assert f.settled


def test_a_job_canceled_in_the_queue_never_ran() -> None:
    f = fold({"state": "queued", "attempt": 0}, [status("queued"), status("canceled")])
    assert f.never_ran and f.settled
    manual = fold({"state": "running", "attempt": 1, "registration": "manual"}, [status("running", 1), status("succeeded", 1)])
    assert manual.settled and manual.registered is None
