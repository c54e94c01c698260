"""Follow a trainer pod's log (``k8s://<namespace>/<job name>``) with the relay's byte offsets,
although the Kubernetes log API has none.

The offset the relay persists counts bytes of the container's output, as for a file. The API can
only give a log from the start, from ``sinceSeconds`` ago, or its last lines, so this source reads
with ``timestamps=true`` and keeps, per pod, the lines from the relay's offset on:

* the first read (and any read for an offset before what it holds — a relay that restarted)
  takes the whole log and maps offsets onto it, counting the bytes of each line without its
  timestamp prefix: the same output gives the same offsets, so a restarted relay continues
  exactly where its persisted cursor points, with no line twice;
* every later read asks only for the last few seconds — since the newest complete line it has,
  plus an overlap for clock skew between this machine and the node — and drops what it has
  already: lines stamped before that newest line, and as many lines stamped exactly as it as it
  already holds. An unterminated last piece is never kept: it comes again, completed.

Reads are at least ``min_interval`` apart (the relay polls files much faster than an API server
should be asked). When the pod has not started, or is gone, a read returns nothing: what the
relay persisted is then all there is (the API serves it from the database).

Limits, both from the kubelet: a restart re-reads the whole log, and when the kubelet has rotated
it (10 MiB by default) only the newest file is served, so offsets after a restart no longer match
and lines may be skipped; a line the runtime stored in pieces (over 16 KiB, or flushed without a
newline) keeps the inner pieces' timestamps in its text.
"""

from __future__ import annotations

import asyncio
import calendar
import collections
import math
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import unquote, urlparse

CONTAINER = "trainer"  # the trainer container's name in the scheduler's Jobs
LABEL_RUN = "forge.run"  # the label that carries the Job's name on its pod

_STAMP = re.compile(rb"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2}) ")


class PodLogClient(Protocol):
    """The two calls this source needs (the scheduler's ``KubeClient`` has the same shape)."""

    async def list_pods(self, namespace: str | None, label_selector: str | None = None, field_selector: str | None = None) -> list[Any]: ...

    async def read_pod_log(
        self,
        namespace: str,
        name: str,
        *,
        container: str,
        since_seconds: int | None = None,
        tail_lines: int | None = None,
        timestamps: bool = False,
    ) -> bytes | None: ...


def parse_stamp(raw: bytes) -> tuple[int | None, bytes]:
    """(nanoseconds since the epoch, the rest) of one ``<RFC 3339 time> <text>`` line; None when
    the line carries no timestamp."""
    match = _STAMP.match(raw)
    if match is None:
        return None, raw
    seconds, fraction, zone = match.groups()
    ts = calendar.timegm(time.strptime(seconds.decode(), "%Y-%m-%dT%H:%M:%S"))
    if zone != b"Z":
        sign = 1 if zone[:1] == b"+" else -1
        ts -= sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    nanos = int((fraction or b"0").ljust(9, b"0"))
    return ts * 1_000_000_000 + nanos, raw[match.end() :]


@dataclass
class _Line:
    ts: int
    data: bytes  # one line with its newline, or an unterminated last piece

    @property
    def complete(self) -> bool:
        return self.data.endswith(b"\n")


def split_log(raw: bytes) -> list[_Line]:
    """Lines of a timestamped log; a line without a stamp inherits the one before it."""
    lines: list[_Line] = []
    pieces = raw.split(b"\n")
    for i, piece in enumerate(pieces):
        last = i == len(pieces) - 1
        if last and not piece:
            break
        ts, text = parse_stamp(piece)
        stamp = ts if ts is not None else (lines[-1].ts if lines else 0)
        lines.append(_Line(stamp, text if last else text + b"\n"))
    return lines


class KubernetesSource:
    """A trainer pod's log, read incrementally from a byte offset (``FileSource``'s interface)."""

    def __init__(
        self,
        client: PodLogClient,
        namespace: str,
        job_name: str,
        *,
        min_interval: float = 1.0,
        overlap_seconds: float = 60.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.job_name = job_name
        self.min_interval = min_interval
        self.overlap_seconds = overlap_seconds
        self.clock = clock
        self._lines: collections.deque[_Line] = collections.deque()  # the log from byte self._base on
        self._base = 0
        self._synced = False
        self._newest: int | None = None  # timestamp of the newest complete line held or consumed
        self._at_newest = 0  # how many complete lines carry exactly that timestamp
        self._pod: str | None = None
        self._last_call = -math.inf
        self._lock = threading.Lock()

    @classmethod
    def from_uri(cls, log_uri: str, client: PodLogClient | None = None) -> KubernetesSource:
        parsed = urlparse(log_uri)
        name = unquote(parsed.path).strip("/")
        if parsed.scheme != "k8s" or not parsed.netloc or not name or "/" in name:
            raise ValueError(f"cannot follow {log_uri!r}: expected k8s://<namespace>/<job name>")
        return cls(client or default_client(), parsed.netloc, name, min_interval=MIN_INTERVAL_SECONDS, clock=_clock)

    def read(self, offset: int, limit: int) -> bytes:
        """Blocking (the relay calls it in a worker thread): waits out ``min_interval``, then asks."""
        with self._lock:
            wait = self._last_call + self.min_interval - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            try:
                return asyncio.run(self.aread(offset, limit))
            finally:
                self._last_call = time.monotonic()

    async def aread(self, offset: int, limit: int) -> bytes:
        pod = await self._find_pod()
        if pod is None:
            return b""
        if not self._synced or offset < self._base:
            raw = await self.client.read_pod_log(self.namespace, pod, container=CONTAINER, timestamps=True)
            if raw is None:
                return b""
            self._lines.clear()
            self._base, self._newest, self._at_newest = 0, None, 0
            self._add(split_log(raw))
            self._synced = True
        else:
            raw = await self.client.read_pod_log(self.namespace, pod, container=CONTAINER, timestamps=True, since_seconds=self._window())
            if raw is not None:
                self._add(split_log(raw))
        self._drop_before(offset)
        start = offset - self._base
        if start < 0:
            return b""
        return b"".join(line.data for line in self._lines)[start : start + limit]

    async def _find_pod(self) -> str | None:
        if self._pod is None:
            pods = await self.client.list_pods(self.namespace, f"{LABEL_RUN}={self.job_name}")
            named = [p for p in pods if p.metadata is not None and p.metadata.name]
            if not named:
                return None
            newest = max(named, key=lambda p: (p.metadata.creation_timestamp is not None, p.metadata.creation_timestamp or 0))
            self._pod = newest.metadata.name
        return self._pod

    def _window(self) -> int | None:
        """``sinceSeconds`` that reaches back to the newest complete line, with the overlap."""
        if self._newest is None:
            return None  # nothing complete yet: the whole (short) log
        age = self.clock() - self._newest / 1e9
        return max(1, math.ceil(age + self.overlap_seconds))

    def _add(self, fetched: list[_Line]) -> None:
        if self._lines and not self._lines[-1].complete:
            self._lines.pop()  # the unterminated piece comes again, longer or completed
        skip = self._at_newest
        for line in fetched:
            if self._newest is not None:
                if line.ts < self._newest:
                    continue
                if line.ts == self._newest and skip > 0:
                    skip -= 1
                    continue
            self._lines.append(line)
            if line.complete:
                if line.ts == self._newest:
                    self._at_newest += 1
                else:
                    self._newest, self._at_newest = line.ts, 1
                skip = 0

    def _drop_before(self, offset: int) -> None:
        while self._lines and self._base + len(self._lines[0].data) <= offset and self._lines[0].complete:
            self._base += len(self._lines.popleft().data)


# ---- the client in a running relay ---------------------------------------------------------------

MIN_INTERVAL_SECONDS = 1.0  # between two reads of one pod's log
_client: PodLogClient | None = None
_clock: Callable[[], float] = time.time


def use_client(client: PodLogClient | None, *, clock: Callable[[], float] | None = None) -> None:
    """The client (and the clock, for ``sinceSeconds``) every ``k8s://`` source uses from now on —
    for tests, with an in-memory cluster on its own time; None: the defaults again."""
    global _client, _clock
    _client = client
    _clock = clock or time.time


def default_client() -> PodLogClient:
    """The official client, configured in-cluster (the relay's service account), or from the
    kubeconfig in ``$KUBECONFIG`` / ``~/.kube/config`` outside a cluster."""
    global _client
    if _client is None:
        _client = _OfficialPodLogs.connect()
    return _client


class _OfficialPodLogs:
    """``PodLogClient`` on the official ``kubernetes`` client (blocking calls in a worker thread)."""

    def __init__(self, core: Any) -> None:
        self.core = core

    @classmethod
    def connect(cls) -> _OfficialPodLogs:
        from kubernetes import client, config

        try:
            config.load_incluster_config()  # type: ignore[no-untyped-call]
        except config.ConfigException:
            try:
                config.load_kube_config()  # type: ignore[no-untyped-call]
            except (config.ConfigException, OSError) as exc:
                raise ValueError(f"cannot follow Kubernetes pod logs: neither in a cluster nor a kubeconfig ({exc})") from None
        return cls(client.CoreV1Api())

    async def list_pods(self, namespace: str | None, label_selector: str | None = None, field_selector: str | None = None) -> list[Any]:
        if namespace is None:
            raise ValueError("the log-relay lists pods in one namespace only")
        result = await asyncio.to_thread(
            self.core.list_namespaced_pod, namespace, label_selector=label_selector, field_selector=field_selector
        )
        return list(result.items or [])

    async def read_pod_log(
        self,
        namespace: str,
        name: str,
        *,
        container: str,
        since_seconds: int | None = None,
        tail_lines: int | None = None,
        timestamps: bool = False,
    ) -> bytes | None:
        from forge_common.kube import read_pod_log

        return await asyncio.to_thread(
            read_pod_log,
            self.core,
            namespace,
            name,
            container=container,
            since_seconds=since_seconds,
            tail_lines=tail_lines,
            timestamps=timestamps,
        )
