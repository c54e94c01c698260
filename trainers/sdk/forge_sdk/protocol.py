"""The trainer's output protocol: ordinary log lines plus machine-readable progress lines.

A progress line is one JSON object on one line after the fixed prefix ``@@forge ``::

    @@forge {"kind":"step","t":1733131200.12,"step":12,"epoch":1,"metrics":{"loss":0.41}}

Anything else a trainer prints is a plain log line. The log-relay parses these lines into
events; this module is the single definition of the format, used by the SDK to write it and by
the platform to read it. A line that starts with the prefix but does not parse is kept as a plain
log line (never an error): a user's trainer must not be able to break the relay.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from typing import Any, Literal

PREFIX = "@@forge "

OutcomeState = Literal["succeeded", "stopped", "canceled", "failed"]
OUTCOME_STATES: tuple[str, ...] = ("succeeded", "stopped", "canceled", "failed")


class ProtocolError(ValueError):
    """A progress line that carries the prefix but is not a valid record."""


def _finite(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def clean_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    """Keep numeric, finite metrics with string names; drop the rest (NaN cannot be charted)."""
    out: dict[str, float] = {}
    for name, value in metrics.items():
        number = _finite(value)
        if isinstance(name, str) and name and number is not None:
            out[name] = number
    return out


@dataclass(frozen=True)
class Start:
    """The trainer started: how many epochs it will run and, if known, steps per epoch."""

    total_epochs: int
    steps_per_epoch: int | None = None
    start_epoch: int = 0
    main_metric: str | None = None
    kind: Literal["start"] = "start"
    t: float = field(default_factory=time.time)


@dataclass(frozen=True)
class Step:
    """A training step's metrics (loss, learning rate, …) for live curves."""

    step: int
    epoch: int
    metrics: dict[str, float]
    progress: float | None = None
    kind: Literal["step"] = "step"
    t: float = field(default_factory=time.time)


@dataclass(frozen=True)
class Epoch:
    """One epoch finished (1-based): its metrics and whether it is the best so far."""

    epoch: int
    metrics: dict[str, float]
    is_best: bool
    total_epochs: int | None = None
    main_metric: str | None = None
    checkpoint_uri: str | None = None
    kind: Literal["epoch"] = "epoch"
    t: float = field(default_factory=time.time)


@dataclass(frozen=True)
class Artifact:
    """A file the trainer put into its output location."""

    name: str
    uri: str
    kind: Literal["artifact"] = "artifact"
    t: float = field(default_factory=time.time)


@dataclass(frozen=True)
class Outcome:
    """How the trainer ended. Written last, also to the result file when one is given."""

    state: OutcomeState
    epochs_completed: int = 0
    reason: str | None = None
    message: str | None = None
    hint: str | None = None
    best_metrics: dict[str, float] = field(default_factory=dict)
    kind: Literal["outcome"] = "outcome"
    t: float = field(default_factory=time.time)


Record = Start | Step | Epoch | Artifact | Outcome


def to_json(record: Record) -> str:
    # vars(), not asdict(): records hold only plain values, and this runs on every training step
    return json.dumps(vars(record), separators=(",", ":"), allow_nan=False)


def format_line(record: Record) -> str:
    """The exact line a trainer prints for a record (without the newline)."""
    return PREFIX + to_json(record)


def _int(obj: dict[str, Any], key: str, *, required: bool = True, minimum: int = 0) -> int | None:
    value = obj.get(key)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ProtocolError(f"'{key}' must be an integer >= {minimum}, got {value!r}")
    return value


def _metrics(obj: dict[str, Any]) -> dict[str, float]:
    value = obj.get("metrics", {})
    if not isinstance(value, dict):
        raise ProtocolError(f"'metrics' must be an object, got {type(value).__name__}")
    return clean_metrics(value)


def _str(obj: dict[str, Any], key: str) -> str | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ProtocolError(f"'{key}' must be a string")
    return value


def record_from_dict(obj: dict[str, Any]) -> Record:
    """Validate a decoded record; raises ProtocolError naming the bad field."""
    kind = obj.get("kind")
    t = _finite(obj.get("t")) or time.time()
    if kind == "step":
        progress = _finite(obj.get("progress"))
        return Step(
            step=_int(obj, "step") or 0,
            epoch=_int(obj, "epoch") or 0,
            metrics=_metrics(obj),
            progress=None if progress is None else min(max(progress, 0.0), 1.0),
            t=t,
        )
    if kind == "epoch":
        return Epoch(
            epoch=_int(obj, "epoch", minimum=1) or 1,
            metrics=_metrics(obj),
            is_best=bool(obj.get("is_best", False)),
            total_epochs=_int(obj, "total_epochs", required=False, minimum=1),
            main_metric=_str(obj, "main_metric"),
            checkpoint_uri=_str(obj, "checkpoint_uri"),
            t=t,
        )
    if kind == "start":
        return Start(
            total_epochs=_int(obj, "total_epochs", minimum=1) or 1,
            steps_per_epoch=_int(obj, "steps_per_epoch", required=False, minimum=1),
            start_epoch=_int(obj, "start_epoch", required=False) or 0,
            main_metric=_str(obj, "main_metric"),
            t=t,
        )
    if kind == "artifact":
        name, uri = _str(obj, "name"), _str(obj, "uri")
        if not name or not uri:
            raise ProtocolError("'artifact' needs 'name' and 'uri'")
        return Artifact(name=name, uri=uri, t=t)
    if kind == "outcome":
        state = obj.get("state")
        if state not in OUTCOME_STATES:
            raise ProtocolError(f"'state' must be one of {', '.join(OUTCOME_STATES)}, got {state!r}")
        best = obj.get("best_metrics") or {}
        return Outcome(
            state=state,
            epochs_completed=_int(obj, "epochs_completed", required=False) or 0,
            reason=_str(obj, "reason"),
            message=_str(obj, "message"),
            hint=_str(obj, "hint"),
            best_metrics=clean_metrics(best) if isinstance(best, dict) else {},
            t=t,
        )
    raise ProtocolError(f"unknown record kind {kind!r}")


def parse_record(text: str) -> Record:
    """Parse a record's JSON (without the prefix)."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProtocolError(f"not JSON: {exc.msg} at column {exc.colno}") from None
    if not isinstance(obj, dict):
        raise ProtocolError("a record must be a JSON object")
    return record_from_dict(obj)


def parse_line(line: str) -> Record | None:
    """The record on a progress line, or None for a plain log line (or a malformed one)."""
    line = line.rstrip("\r\n")
    if not line.startswith(PREFIX):
        return None
    try:
        return parse_record(line[len(PREFIX) :])
    except ProtocolError:
        return None
