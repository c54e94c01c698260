"""What the queue looks like from outside: positions, what a job waits for, when it may start,
and which accelerators can be asked for at all (from what the executors report)."""

from __future__ import annotations

import heapq
import statistics
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from forge_common import db
from forge_common.accelerators import PROFILES, slots_needed
from forge_common.errors import InvalidInput


@dataclass(frozen=True)
class Offer:
    profile: str
    total: int
    detail: str
    executor: str
    per_job: int  # the most devices one job can ever get (one node's worth on Kubernetes)
    allocatable: int  # what the profile could ever offer; more than ``total`` while others hold some


async def offers(conn: asyncpg.Connection) -> dict[str, Offer]:
    """Profiles some executor can allocate (busy or not: a busy one queues). Before any scheduler
    has reported: cpu."""
    rows = await conn.fetch("SELECT * FROM accelerator_capacity ORDER BY executor, profile")
    if not rows:
        return {"cpu": Offer("cpu", 1, "no scheduler has reported yet", "local", 1, 1)}
    out: dict[str, Offer] = {}
    for r in rows:
        allocatable = r["total"] if r["allocatable"] is None else r["allocatable"]
        if allocatable > 0 and r["profile"] not in out:
            per_job = allocatable if r["per_job"] is None else r["per_job"]
            out[r["profile"]] = Offer(r["profile"], r["total"], r["detail"], r["executor"], per_job, allocatable)
    return out


async def check_accelerator(conn: asyncpg.Connection, profile: str, devices: int) -> None:
    """Refuse what no executor can ever run; a profile that is merely busy is accepted (queued)."""
    if profile not in PROFILES:
        raise InvalidInput(f"unknown accelerator {profile!r}; profiles: {', '.join(PROFILES)}", field="accelerator")
    available = await offers(conn)
    if profile not in available:
        names = ", ".join(f"{o.profile} ({o.total})" for o in available.values()) or "none"
        resource = PROFILES[profile].resource
        raise InvalidInput(
            f"accelerator {profile!r} is not available here (no allocatable {resource or profile}); available: {names}",
            field="accelerator",
        )
    offer = available[profile]
    if profile != "cpu" and devices > offer.per_job:
        where = f" on one node ({offer.allocatable} in all)" if offer.per_job < offer.allocatable else ""
        raise InvalidInput(
            f"the job asks for {devices} {profile} devices; at most {offer.per_job} can be allocated{where}", field="devices"
        )


# The queued jobs admitted before a given one: higher priority, or the same and earlier.
_AHEAD = "state = 'queued' AND accelerator = $1 AND (priority > $2 OR (priority = $2 AND (queued_at, id) < ($3, $4)))"


def _ahead_args(job: asyncpg.Record) -> tuple[Any, ...]:
    return job["accelerator"], job["priority"], job["queued_at"], job["id"]


async def position(conn: asyncpg.Connection, job: asyncpg.Record) -> int | None:
    """1-based place in its profile's queue (priority first, then arrival), None unless queued."""
    if job["state"] != "queued":
        return None
    return int(await conn.fetchval(f"SELECT count(*) FROM jobs WHERE {_AHEAD}", *_ahead_args(job))) + 1


async def _running(conn: asyncpg.Connection, profile: str) -> list[dict[str, Any]]:
    rows = await conn.fetch(
        "SELECT id, task, accelerator, started_at, progress FROM jobs WHERE state = 'running' AND accelerator = $1", profile
    )
    return [dict(r) for r in rows]


def blocker(profile: str, offer: Offer | None, need: int, held: int, ahead: int) -> str:
    """Why a queued job that needs ``need`` slots, with ``ahead`` jobs before it, has not started."""
    parts = [f"{ahead} job{'s' if ahead != 1 else ''} ahead on {profile}"]
    resource = (PROFILES[profile].resource if profile in PROFILES else None) or profile
    if offer is None:
        parts.append(f"no allocatable {resource}")
    elif need > offer.per_job:
        parts.append(f"needs {need} {profile} devices on one node; at most {offer.per_job} on one node")
    elif offer.total == 0:
        parts.append(f"no free {resource}: other workloads hold all {offer.allocatable}")
    elif held + need > offer.total:
        parts.append(f"all {offer.total} {profile} slot{'s' if offer.total != 1 else ''} busy")
    else:
        parts.append("about to start")
    return "; ".join(parts)


async def waiting_for(conn: asyncpg.Connection, job: asyncpg.Record, queue_position: int | None) -> str | None:
    """Why a queued job has not started (or why a started attempt is still pending)."""
    if job["state"] == "running":
        return await conn.fetchval("SELECT pending_reason FROM attempts WHERE job_id = $1 AND attempt = $2", job["id"], job["attempt"])
    if queue_position is None:
        return None
    profile = job["accelerator"]
    offer = (await offers(conn)).get(profile)
    return blocker(profile, offer, slots_needed(profile, job["spec"]), await db.slots_in_use(conn, profile), queue_position - 1)


async def estimated_start(conn: asyncpg.Connection, job: asyncpg.Record) -> datetime | None:
    """When a queued job may start (None when unknown or not queued): only the jobs ahead of it matter."""
    if job["state"] != "queued":
        return None
    profile = job["accelerator"]
    offer = (await offers(conn)).get(profile)
    rows = await conn.fetch(
        f"SELECT id, task, accelerator FROM jobs WHERE {_AHEAD} ORDER BY priority DESC, queued_at, id", *_ahead_args(job)
    )
    queued = [*map(dict, rows), {"id": job["id"], "task": job["task"], "accelerator": profile}]
    starts = estimate_starts(
        await _running(conn, profile), queued, offer.total if offer else 0, await typical_durations(conn), datetime.now(UTC)
    )
    return starts[job["id"]]


async def typical_durations(conn: asyncpg.Connection) -> dict[tuple[str, str], float]:
    """Median run time of recent successful jobs, per (task, accelerator)."""
    rows = await conn.fetch(
        "SELECT task, accelerator, extract(epoch FROM finished_at - started_at) AS seconds FROM jobs"
        " WHERE state = 'succeeded' AND started_at IS NOT NULL ORDER BY finished_at DESC LIMIT 500"
    )
    by: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        by.setdefault((r["task"], r["accelerator"]), []).append(float(r["seconds"]))
    return {k: statistics.median(v) for k, v in by.items()}


def estimate_starts(
    running: list[dict[str, Any]], queued: list[dict[str, Any]], slots: int, typical: dict[tuple[str, str], float], now: datetime
) -> dict[uuid.UUID, datetime | None]:
    """When each queued job (in queue order) may start: slots free as running jobs finish (by their
    progress so far, or a typical duration) and each job ahead takes its typical duration."""
    if slots <= 0:
        return {q["id"]: None for q in queued}
    free_at: list[float] = []
    for r in running:
        elapsed = (now - r["started_at"]).total_seconds()
        if r["progress"] and r["progress"] > 0.02:
            remaining = elapsed * (1 - r["progress"]) / r["progress"]
        elif (r["task"], r["accelerator"]) in typical:
            remaining = max(0.0, typical[(r["task"], r["accelerator"])] - elapsed)
        else:
            return {q["id"]: None for q in queued}
        free_at.append(remaining)
    free_at += [0.0] * max(0, slots - len(free_at))
    heapq.heapify(free_at)
    out: dict[uuid.UUID, datetime | None] = {}
    unknown = False
    for q in queued:
        start = heapq.heappop(free_at)
        out[q["id"]] = None if unknown else now + timedelta(seconds=start)
        duration = typical.get((q["task"], q["accelerator"]))
        if duration is None:
            unknown = True  # everything behind an unknown duration is unknown too
            duration = 0.0
        heapq.heappush(free_at, start + duration)
    return out


async def queue_view(conn: asyncpg.Connection, project_id: uuid.UUID) -> list[dict[str, Any]]:
    """Every profile's queue in admission order, with positions, what each job waits for and
    estimated starts."""
    available = await offers(conn)
    typical = await typical_durations(conn)
    now = datetime.now(UTC)
    out: list[dict[str, Any]] = []
    profiles = {*available, *[r["accelerator"] for r in await conn.fetch("SELECT DISTINCT accelerator FROM jobs WHERE state = 'queued'")]}
    for profile in sorted(profiles):
        held = await db.slots_in_use(conn, profile)
        queued = [
            dict(r)
            for r in await conn.fetch(
                "SELECT id, name, task, accelerator, priority, queued_at, spec->'devices' AS devices FROM jobs"
                " WHERE state = 'queued' AND accelerator = $1"
                " AND project_id = $2 ORDER BY priority DESC, queued_at, id",
                profile,
                project_id,
            )
        ]
        running = await _running(conn, profile)
        slots = available[profile].total if profile in available else 0
        starts = estimate_starts(running, queued, slots, typical, now)
        out.append(
            {
                "accelerator": profile,
                "slots": slots,
                "running": len(running),
                "queued": [
                    {
                        "id": q["id"],
                        "name": q["name"],
                        "task": q["task"],
                        "priority": q["priority"],
                        "position": i + 1,
                        "waiting_for": blocker(
                            profile, available.get(profile), slots_needed(profile, {"devices": q["devices"] or 1}), held, i
                        ),
                        "estimated_start": starts[q["id"]],
                    }
                    for i, q in enumerate(queued)
                ],
            }
        )
    return out


async def runs_images(conn: asyncpg.Connection) -> bool:
    """Whether some scheduler can run custom trainer images (Kubernetes, or a local container runtime)."""
    return bool(await conn.fetchval("SELECT true FROM accelerator_capacity WHERE runs_images LIMIT 1"))
