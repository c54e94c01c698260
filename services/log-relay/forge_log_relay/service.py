"""Follow each running trainer's output: every line is published for live streams, progress lines
become metrics and epoch-completed events, and everything is persisted with a cursor so a restarted
relay continues exactly where it stopped.

Events are published as soon as a line is read (live latency) and carry deterministic ids, so a
line re-read after a crash is dropped by JetStream's duplicate window instead of counted twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlparse

import asyncpg
from nats.js import JetStreamContext

from forge_common import bus
from forge_common.events import (
    EpochCompleted,
    EpochCompletedData,
    LogLine,
    LogLines,
    LogLinesData,
    MetricsReported,
    MetricsReportedData,
    stable_id,
)
from forge_common.runtime import wait_event
from forge_common.subjects import Subjects
from forge_sdk import protocol

from . import repository as repo
from .settings import LogRelaySettings

log = logging.getLogger(__name__)

SOURCE = "/forge/log-relay"
READ_LIMIT = 1 << 20  # bytes read per pass
MAX_EVENT_BYTES = 512 * 1024  # well below NATS's default 1 MiB payload


class Source(Protocol):
    """Where an attempt's output is read from, incrementally from a byte offset."""

    def read(self, offset: int, limit: int) -> bytes: ...


class FileSource:
    """A trainer's output file, read incrementally from a byte offset."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self, offset: int, limit: int) -> bytes:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(offset)
                return fh.read(limit)
        except FileNotFoundError:
            return b""


def source_for(log_uri: str) -> Source:
    parsed = urlparse(log_uri)
    if parsed.scheme == "k8s":  # a trainer pod's log (Kubernetes executor)
        from .kubernetes_source import KubernetesSource

        return KubernetesSource.from_uri(log_uri)
    if parsed.scheme != "file":
        raise ValueError(f"cannot follow {log_uri!r}: only file:// and k8s:// outputs are supported by this relay")
    return FileSource(Path(unquote(parsed.path)))


@dataclass
class Batch:
    """What one read produced: events to publish (in order) and rows to persist."""

    events: list[Any] = field(default_factory=list)
    lines: list[tuple[int, datetime, str]] = field(default_factory=list)
    points: list[tuple[str, int, int, str, float, datetime]] = field(default_factory=list)


class LineParser:
    """Turns complete output lines into events and rows (pure: no I/O)."""

    def __init__(self, job_id: uuid.UUID, attempt: int, *, batch_lines: int, max_line_bytes: int) -> None:
        self.job_id = job_id
        self.attempt = attempt
        self.batch_lines = batch_lines
        self.max_line_bytes = max_line_bytes
        self._pending: list[LogLine] = []

    def _flush_lines(self, batch: Batch) -> None:
        """The pending plain lines as logs events, each below the bus's payload limit."""
        chunk: list[LogLine] = []
        size = 0
        for line in self._pending:
            cost = len(line.text.encode()) * 2 + 64  # JSON escaping can double a line
            if chunk and (len(chunk) >= self.batch_lines or size + cost > MAX_EVENT_BYTES):
                batch.events.append(self._lines_event(chunk))
                chunk, size = [], 0
            chunk.append(line)
            size += cost
        if chunk:
            batch.events.append(self._lines_event(chunk))
        self._pending = []

    def _lines_event(self, chunk: list[LogLine]) -> LogLines:
        return LogLines.of(
            LogLinesData(job_id=self.job_id, attempt=self.attempt, lines=chunk),
            source=SOURCE,
            id=stable_id(self.job_id, self.attempt, "logs", chunk[0].line_no),
        )

    def feed(self, batch: Batch, line_no: int, raw: bytes, now: datetime) -> None:
        text = raw[: self.max_line_bytes].decode("utf-8", errors="replace").rstrip("\r")
        record = protocol.parse_line(text)
        if record is not None:
            try:
                self._record(batch, line_no, record, now)
                return
            except (ValueError, OverflowError, OSError) as exc:  # a record no event can carry: keep it as text
                log.warning("job %s: line %d is not a usable progress record (%s); kept as a log line", self.job_id, line_no, exc)
        self._pending.append(LogLine(line_no=line_no, ts=now, text=text))
        batch.lines.append((line_no, now, text))

    def _record(self, batch: Batch, line_no: int, record: protocol.Record, now: datetime) -> None:
        at = datetime.fromtimestamp(record.t, UTC) if 0 < record.t < 32503680000 else now  # before year 3000
        events: list[Any] = []
        points: list[tuple[str, int, int, str, float, datetime]] = []
        if isinstance(record, protocol.Step):
            events.append(
                MetricsReported.of(
                    MetricsReportedData(
                        job_id=self.job_id,
                        attempt=self.attempt,
                        step=record.step,
                        epoch=record.epoch,
                        metrics=record.metrics,
                        progress=record.progress,
                        reported_at=at.timestamp(),
                    ),
                    source=SOURCE,
                    id=stable_id(self.job_id, self.attempt, "step", line_no),
                )
            )
            points.extend(("step", record.step, record.epoch, k, v, at) for k, v in record.metrics.items())
        elif isinstance(record, protocol.Epoch):
            events.append(
                EpochCompleted.of(
                    EpochCompletedData(
                        job_id=self.job_id,
                        attempt=self.attempt,
                        epoch=record.epoch,
                        total_epochs=record.total_epochs,
                        metrics=record.metrics,
                        main_metric=record.main_metric,
                        is_best=record.is_best,
                        checkpoint_uri=record.checkpoint_uri,
                    ),
                    source=SOURCE,
                    id=stable_id(self.job_id, self.attempt, "epoch", record.epoch),
                )
            )
            points.extend(("epoch", record.epoch, record.epoch, k, v, at) for k, v in record.metrics.items())
        if any(len(bus.encode(e)) > MAX_EVENT_BYTES for e in events):
            raise ValueError("the record is too large for one event")
        self._flush_lines(batch)  # keep the order: the plain lines before this record
        batch.events.extend(events)
        batch.points.extend(points)

    def end(self, batch: Batch) -> None:
        self._flush_lines(batch)


class Follower:
    def __init__(
        self,
        relay: LogRelay,
        job_id: uuid.UUID,
        attempt: int,
        source: Source,
        *,
        offset: int,
        line_no: int,
    ) -> None:
        self.relay = relay
        self.job_id = job_id
        self.attempt = attempt
        self.source = source
        self.offset = offset
        self.line_no = line_no
        self.finishing = asyncio.Event()

    async def step(self, final: bool) -> bool:
        """Read and relay what is new; returns whether anything was. While the trainer runs only
        complete lines are taken; once it has exited an unterminated last line counts too. The
        read position moves only after the events are published and the rows saved, so a failed
        step is repeated exactly (same line numbers, same event ids)."""
        data = await asyncio.to_thread(self.source.read, self.offset, READ_LIMIT)
        at_end = final and len(data) < READ_LIMIT
        end = len(data) if at_end else data.rfind(b"\n") + 1
        if end == 0 and len(data) >= READ_LIMIT:
            end = len(data)  # a flood with no newline (progress bars drawn with \r): cut it as a line
        if end == 0:
            return False
        chunk = data[:end]
        lines = chunk.split(b"\n")
        if chunk.endswith(b"\n"):
            lines.pop()
        now = datetime.now(UTC)
        batch = Batch()
        parser = LineParser(
            self.job_id, self.attempt, batch_lines=self.relay.settings.batch_lines, max_line_bytes=self.relay.settings.max_line_bytes
        )
        line_no = self.line_no
        for raw in lines:
            line_no += 1
            parser.feed(batch, line_no, raw, now)
        parser.end(batch)
        for event in batch.events:
            await bus.publish(self.relay.js, self.relay.subjects, event)
        async with self.relay.pool.acquire() as conn:
            await repo.save_batch(
                conn,
                self.job_id,
                self.attempt,
                lines=batch.lines,
                points=batch.points,
                byte_offset=self.offset + end,
                line_no=line_no,
                done=False,
            )
        self.offset += end
        self.line_no = line_no
        return True

    async def run(self) -> None:
        poll = self.relay.settings.poll_seconds
        while True:
            final = self.finishing.is_set()
            try:
                progressed = await self.step(final)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("job %s attempt %d: relaying output failed; retrying", self.job_id, self.attempt)
                await asyncio.sleep(1.0)
                continue  # the end is only concluded from a step that worked and found nothing
            if final and not progressed:
                await self._finish()
                return
            if not progressed:
                await wait_event(self.finishing, poll)

    async def _finish(self) -> None:
        """The output has been read to its end: say so, and remember it."""
        eof = LogLines.of(
            LogLinesData(job_id=self.job_id, attempt=self.attempt, lines=[], eof=True),
            source=SOURCE,
            id=stable_id(self.job_id, self.attempt, "logs", "eof"),
        )
        await bus.publish(self.relay.js, self.relay.subjects, eof)
        async with self.relay.pool.acquire() as conn:
            await repo.save_batch(
                conn, self.job_id, self.attempt, lines=[], points=[], byte_offset=self.offset, line_no=self.line_no, done=True
            )
        log.info("job %s attempt %d: output read to the end (%d lines)", self.job_id, self.attempt, self.line_no)


class LogRelay:
    def __init__(self, pool: asyncpg.Pool, js: JetStreamContext, subjects: Subjects, settings: LogRelaySettings) -> None:
        self.pool = pool
        self.js = js
        self.subjects = subjects
        self.settings = settings
        self.followers: dict[tuple[uuid.UUID, int], tuple[Follower, asyncio.Task[None]]] = {}

    async def follow(self, job_id: uuid.UUID, attempt: int, log_uri: str, *, finished: bool = False) -> None:
        key = (job_id, attempt)
        if key in self.followers:
            if finished:
                self.followers[key][0].finishing.set()
            return
        async with self.pool.acquire() as conn:
            cursor = await repo.get_cursor(conn, job_id, attempt)
        if cursor is not None and cursor["done"]:
            return
        try:
            source = source_for(log_uri)
        except ValueError as exc:
            log.error("job %s: %s", job_id, exc)
            return
        follower = Follower(
            self,
            job_id,
            attempt,
            source,
            offset=cursor["byte_offset"] if cursor else 0,
            line_no=cursor["line_no"] if cursor else 0,
        )
        if finished:
            follower.finishing.set()
        task = asyncio.create_task(follower.run(), name=f"follow:{job_id}:{attempt}")
        self.followers[key] = (follower, task)
        task.add_done_callback(lambda _t: self.followers.pop(key, None))

    async def finish(self, job_id: uuid.UUID, attempt: int, log_uri: str | None) -> None:
        """The trainer has exited: read the rest of its output, then stop following."""
        key = (job_id, attempt)
        if key in self.followers:
            self.followers[key][0].finishing.set()
        elif log_uri:
            await self.follow(job_id, attempt, log_uri, finished=True)

    async def resume(self) -> None:
        """After a restart: follow every attempt whose output was not read to its end."""
        async with self.pool.acquire() as conn:
            rows = await repo.unfinished_attempts(conn)
        for row in rows:
            await self.follow(row["job_id"], row["attempt"], row["log_uri"], finished=row["finished_at"] is not None)

    async def close(self) -> None:
        for _, task in list(self.followers.values()):
            task.cancel()
        for _, task in list(self.followers.values()):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
