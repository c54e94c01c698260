"""Estimated starts: slots free as running jobs finish (by their progress, else a typical
duration) and each job ahead takes its typical duration; unknown stays unknown."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from forge_api.jobs.queue import estimate_starts

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
TYPICAL = {("classification", "cpu"): 60.0}


def job(task: str = "classification", **extra: Any) -> dict[str, Any]:
    return {"id": uuid.uuid4(), "task": task, "accelerator": "cpu", **extra}


def running(elapsed: float, progress: float, task: str = "classification") -> dict[str, Any]:
    return job(task, started_at=NOW - timedelta(seconds=elapsed), progress=progress)


def seconds(starts: dict[uuid.UUID, datetime | None], q: dict[str, Any]) -> float | None:
    at = starts[q["id"]]
    return None if at is None else (at - NOW).total_seconds()


def test_a_free_slot_starts_the_head_now_and_the_next_after_a_typical_run() -> None:
    queued = [job(), job()]
    starts = estimate_starts([], queued, 1, TYPICAL, NOW)
    assert [seconds(starts, q) for q in queued] == [0.0, 60.0]


def test_running_jobs_finish_by_their_progress_so_far() -> None:
    queued = [job(), job(), job()]
    starts = estimate_starts([running(30, 0.25), running(10, 0.5)], queued, 2, TYPICAL, NOW)
    # the second frees its slot in 10 s, the first in 90 s; each queued job then takes 60 s
    assert [seconds(starts, q) for q in queued] == [10.0, 70.0, 90.0]


def test_without_progress_a_typical_duration_serves_and_without_either_nothing_is_guessed() -> None:
    queued = [job()]
    assert seconds(estimate_starts([running(20, 0.0)], queued, 1, TYPICAL, NOW), queued[0]) == 40.0
    unknown = [running(20, 0.0, task="detection")]
    assert estimate_starts(unknown, queued, 1, TYPICAL, NOW) == {queued[0]["id"]: None}


def test_everything_behind_a_job_of_unknown_duration_is_unknown() -> None:
    queued = [job(), job("detection"), job()]
    starts = estimate_starts([], queued, 1, TYPICAL, NOW)
    assert [seconds(starts, q) for q in queued] == [0.0, 60.0, None]
    assert estimate_starts([], queued, 0, TYPICAL, NOW) == {q["id"]: None for q in queued}  # no slot at all
