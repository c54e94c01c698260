"""The job state machine as one pure table.

::

    draft ──start──► queued ──admitted──► running ──► succeeded
                       ▲ │                   │ stop requested
                       │ │ stop              ├── no epoch completed ──► canceled (no artifacts)
                       │ ▼                   ├── ≥1 epoch completed ──► stopped  (best model kept)
                       │ canceled            ├── crash / OOM / deadline ─► failed
                       │                     └── infrastructure failure, retries left ─► queued
                       └────── resume (a new attempt from the last checkpoint) ◄── stopped, failed

The ended states are final except through *resume*, a user's request for a new attempt of a
stopped or failed job. The database enforces it with compare-and-set: ``UPDATE jobs SET state=$2 WHERE id=$1 AND
state = ANY($3)`` where ``$3`` is :func:`sources_of` the target; zero rows means the move was
not allowed (or another replica made it first).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from .errors import InvalidTransition


class JobState(StrEnum):
    DRAFT = "draft"
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    STOPPED = "stopped"
    CANCELED = "canceled"
    FAILED = "failed"


TRANSITIONS: Mapping[JobState, frozenset[JobState]] = {
    JobState.DRAFT: frozenset({JobState.QUEUED}),
    JobState.QUEUED: frozenset({JobState.RUNNING, JobState.CANCELED}),
    JobState.RUNNING: frozenset({JobState.SUCCEEDED, JobState.STOPPED, JobState.CANCELED, JobState.FAILED, JobState.QUEUED}),
    JobState.SUCCEEDED: frozenset(),
    JobState.STOPPED: frozenset({JobState.QUEUED}),
    JobState.CANCELED: frozenset(),
    JobState.FAILED: frozenset({JobState.QUEUED}),
}

# A run has ended (the job may still be resumed from stopped or failed).
TERMINAL: frozenset[JobState] = frozenset({JobState.SUCCEEDED, JobState.STOPPED, JobState.CANCELED, JobState.FAILED})
RESUMABLE: frozenset[JobState] = frozenset({JobState.STOPPED, JobState.FAILED})
ACTIVE: frozenset[JobState] = frozenset({JobState.QUEUED, JobState.RUNNING})
# Terminal states whose outputs are a usable model.
DEPLOYABLE: frozenset[JobState] = frozenset({JobState.SUCCEEDED, JobState.STOPPED})


def can_transition(current: JobState, target: JobState) -> bool:
    return target in TRANSITIONS[current]


def sources_of(target: JobState) -> list[str]:
    """Every state from which ``target`` may be entered (the CAS guard)."""
    return sorted(s.value for s, targets in TRANSITIONS.items() if target in targets)


def check_transition(current: JobState, target: JobState) -> None:
    if not can_transition(current, target):
        allowed = ", ".join(sorted(t.value for t in TRANSITIONS[current])) or "none (it is final)"
        raise InvalidTransition(f"a {current.value} job cannot become {target.value}; allowed: {allowed}")
