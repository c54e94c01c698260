"""An in-memory Kubernetes for tests: the ``KubeClient`` operations plus the controls a test uses
to drive a trainer pod through its life, with the state transitions a cluster makes.

What it enforces, as the API server, Job controller and kubelet would:

* a created Job gets a Pod (labels from its template plus ``job-name``); a failed pod is replaced
  only while the Job's ``backoffLimit`` allows it, and with ``podReplacementPolicy: Failed`` only
  once the old one has ended; the Job gets ``Complete``/``Failed`` conditions with the reasons a
  cluster gives (``BackoffLimitExceeded``, ``DeadlineExceeded``, ``PodFailurePolicy``);
* deleting a running pod sends SIGTERM and marks it terminating; the trainer's exit (or SIGKILL
  when the grace is up) ends it; a pod that never started is removed at once; an ended pod that
  was deleted stays readable until ``reap()`` (the Job controller's tracking finalizer) — after
  that it, and its log, are gone;
* a pod's log exists once its container has started, with RFC 3339 timestamps (trailing zeros
  trimmed, as Go writes them), ``sinceSeconds`` and ``tailLines``; on a failed exit without a
  termination message the kubelet's ``FallbackToLogsOnError`` copies the log tail there;
* ``lose_node`` marks the node NotReady, gives its pods the ``DisruptionTarget`` condition and
  removes them (pod garbage collection), and the Job fails by its pod-failure policy.

Time is the fake's own (``now()``, ``advance()``), so timeouts are tested without waiting. Every
object handed out is a copy: callers cannot change the fake's state except through its methods.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from kubernetes.client import (
    ApiClient,
    V1ContainerState,
    V1ContainerStateRunning,
    V1ContainerStateTerminated,
    V1ContainerStateWaiting,
    V1ContainerStatus,
    V1Job,
    V1JobCondition,
    V1JobStatus,
    V1Node,
    V1NodeCondition,
    V1NodeSpec,
    V1NodeStatus,
    V1ObjectMeta,
    V1Pod,
    V1PodCondition,
    V1PodSpec,
    V1PodStatus,
    V1Taint,
)
from pydantic import BaseModel

from forge_scheduler.executors.kube_client import KubeConflict, KubeError, KubeForbidden

TERMINATION_TAIL_LINES = 80  # what FallbackToLogsOnError copies: the last 80 lines or 2048 bytes
TERMINATION_TAIL_BYTES = 2048


def rfc3339(at: datetime) -> str:
    """A timestamp as the kubelet prints it (Go's RFC3339Nano: trailing zeros of the fraction trimmed)."""
    text = at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")
    fraction = f"{at.microsecond:06d}".rstrip("0")
    return f"{text}.{fraction}Z" if fraction else f"{text}Z"


_Model = TypeVar("_Model", bound=BaseModel)


def _copy(obj: _Model) -> _Model:
    return obj.model_copy(deep=True)


def _roundtrip(obj: _Model) -> _Model:
    """What the API server stores: the object as JSON and back (a model that cannot be serialised
    fails here as it would against a cluster)."""
    return type(obj).model_validate(ApiClient().sanitize_for_serialization(obj))  # type: ignore[no-untyped-call]


def _matches_labels(labels: dict[str, str], selector: str | None) -> bool:
    for term in filter(None, (t.strip() for t in (selector or "").split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key.strip()) == value.strip():
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if labels.get(key.strip()) != value.strip():
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def _field(pod: V1Pod, path: str) -> str | None:
    values = {
        "status.phase": pod.status.phase if pod.status else None,
        "spec.nodeName": pod.spec.node_name if pod.spec else None,
        "metadata.name": pod.metadata.name if pod.metadata else None,
        "metadata.namespace": pod.metadata.namespace if pod.metadata else None,
    }
    if path not in values:
        raise KubeError(f"field selector {path!r} is not supported for pods", 400)
    return values[path]


def _matches_fields(pod: V1Pod, selector: str | None) -> bool:
    for term in filter(None, (t.strip() for t in (selector or "").split(","))):
        if "!=" in term:
            path, value = term.split("!=", 1)
            if (_field(pod, path.strip()) or "") == value.strip():
                return False
        else:
            path, value = term.replace("==", "=").split("=", 1)
            if (_field(pod, path.strip()) or "") != value.strip():
                return False
    return True


@dataclass
class _LogEntry:
    at: datetime
    data: bytes  # one line with its newline, or a last piece without one


@dataclass
class _PodExtra:
    """What the fake knows about a pod beyond its object."""

    job: tuple[str, str] | None
    log: list[_LogEntry] = field(default_factory=list)
    counted: bool = False  # the Job controller has accounted for its end


class FakeKube:
    """``KubeClient`` in memory; see the module docstring for the transitions it enforces."""

    def __init__(self, *, now: datetime | None = None) -> None:
        self._now = now or datetime(2026, 1, 1, tzinfo=UTC)
        self._lock = threading.RLock()
        self._seq = itertools.count(1)
        self.jobs: dict[tuple[str, str], V1Job] = {}
        self.pods: dict[tuple[str, str], V1Pod] = {}
        self.nodes: dict[str, V1Node] = {}
        self._extra: dict[tuple[str, str], _PodExtra] = {}
        self.signals: list[tuple[str, str]] = []  # (pod name, "SIGTERM" | "SIGKILL"): what trainers received
        self.pod_deletions: list[tuple[str, str, int]] = []  # (namespace, pod name, grace seconds) asked for
        self.job_deletions: list[tuple[str, str]] = []
        self.pods_created = 0
        self.forbid_cluster_wide = False  # act as a service account that may list pods in its namespace only

    # -- time ------------------------------------------------------------------------------------

    def now(self) -> datetime:
        return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += timedelta(seconds=seconds)

    # -- KubeClient ------------------------------------------------------------------------------------

    async def create_job(self, namespace: str, job: V1Job) -> V1Job:
        with self._lock:
            stored: V1Job = _roundtrip(job)
            assert stored.metadata is not None and stored.spec is not None
            name = stored.metadata.name
            if not name:
                raise KubeError("create job failed (422): metadata.name: Required value", 422)
            if (namespace, name) in self.jobs:
                raise KubeConflict(f'kubernetes create job failed (409): jobs.batch "{name}" already exists', 409)
            if stored.spec.template.spec is None or stored.spec.template.spec.restart_policy not in ("Never", "OnFailure"):
                raise KubeError("create job failed (422): spec.template.spec.restartPolicy: Unsupported value", 422)
            stored.metadata.namespace = namespace
            stored.metadata.uid = str(uuid.uuid4())
            stored.metadata.creation_timestamp = self._now
            stored.status = V1JobStatus(active=0, failed=0, succeeded=0, start_time=self._now)
            self.jobs[(namespace, name)] = stored
            self._spawn(namespace, stored)
            return _copy(stored)

    async def read_job(self, namespace: str, name: str) -> V1Job | None:
        with self._lock:
            job = self.jobs.get((namespace, name))
            return _copy(job) if job is not None else None

    async def delete_job(self, namespace: str, name: str, *, grace_seconds: int | None = None) -> bool:
        with self._lock:
            self.job_deletions.append((namespace, name))
            if self.jobs.pop((namespace, name), None) is None:
                return False
            for key, extra in list(self._extra.items()):
                if extra.job == (namespace, name) and key in self.pods:
                    pod = self.pods[key]
                    grace = pod.spec.termination_grace_period_seconds if pod.spec else None
                    self._delete(key, 30 if grace is None else grace)  # garbage collection: the pod's own grace
            return True

    async def list_pods(self, namespace: str | None, label_selector: str | None = None, field_selector: str | None = None) -> list[V1Pod]:
        with self._lock:
            if namespace is None and self.forbid_cluster_wide:
                raise KubeForbidden("kubernetes list pods failed (403): pods is forbidden at the cluster scope", 403)
            return [
                _copy(p)
                for (ns, _), p in sorted(self.pods.items())
                if (namespace is None or ns == namespace)
                and _matches_labels((p.metadata.labels if p.metadata else None) or {}, label_selector)
                and _matches_fields(p, field_selector)
            ]

    async def delete_pod(self, namespace: str, name: str, grace_seconds: int) -> bool:
        with self._lock:
            self.pod_deletions.append((namespace, name, grace_seconds))
            if (namespace, name) not in self.pods:
                return False
            self._delete((namespace, name), grace_seconds)
            return True

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
        with self._lock:
            pod = self.pods.get((namespace, name))
            if pod is None or not self._started(pod):
                return None  # the API answers 404 / 400 "waiting to start"
            names = [c.name for c in (pod.spec.containers if pod.spec else [])]
            if container not in names:
                raise KubeError(f"read pod log failed (400): container {container} is not valid for pod {name}", 400)
            entries = self._extra[(namespace, name)].log
            if since_seconds is not None:
                since = self._now - timedelta(seconds=since_seconds)
                entries = [e for e in entries if e.at >= since]
            if tail_lines is not None:
                entries = entries[-tail_lines:] if tail_lines > 0 else []
            if timestamps:
                return b"".join(rfc3339(e.at).encode() + b" " + e.data for e in entries)
            return b"".join(e.data for e in entries)

    async def list_nodes(self) -> list[V1Node]:
        with self._lock:
            return [_copy(n) for _, n in sorted(self.nodes.items())]

    # -- the cluster around ---------------------------------------------------------------------------

    def add_node(
        self,
        name: str,
        allocatable: dict[str, str],
        *,
        labels: dict[str, str] | None = None,
        taints: list[tuple[str, str, str]] | None = None,  # (key, value, effect)
        ready: bool = True,
        unschedulable: bool = False,
    ) -> None:
        with self._lock:
            self.nodes[name] = V1Node(
                metadata=V1ObjectMeta(name=name, labels={"kubernetes.io/hostname": name, **(labels or {})}),
                spec=V1NodeSpec(
                    unschedulable=unschedulable or None,
                    taints=[V1Taint(key=k, value=v or None, effect=e) for k, v, e in taints or []] or None,
                ),
                status=V1NodeStatus(
                    allocatable=dict(allocatable),
                    capacity=dict(allocatable),
                    conditions=[V1NodeCondition(type="Ready", status="True" if ready else "False")],
                ),
            )

    def add_pod(
        self,
        namespace: str,
        name: str,
        *,
        node: str,
        requests: dict[str, str],
        phase: str = "Running",
        labels: dict[str, str] | None = None,
    ) -> None:
        """Another workload's pod (for capacity): it holds its requests on its node while it runs."""
        from kubernetes.client import V1Container, V1ResourceRequirements

        with self._lock:
            self.pods[(namespace, name)] = V1Pod(
                metadata=V1ObjectMeta(name=name, namespace=namespace, labels=labels or {}, creation_timestamp=self._now),
                spec=V1PodSpec(
                    node_name=node,
                    containers=[V1Container(name="main", image="other", resources=V1ResourceRequirements(requests=requests))],
                ),
                status=V1PodStatus(phase=phase),
            )
            self._extra[(namespace, name)] = _PodExtra(job=None)

    # -- driving a Job's pod ---------------------------------------------------------------------------
    # Each takes the Job's name (its current pod is meant) or a pod's name.

    def pod_of(self, name: str, namespace: str | None = None) -> V1Pod:
        """The newest pod of the Job ``name``, or the pod of that name."""
        with self._lock:
            return _copy(self.pods[self._key(name, namespace)])

    def schedule(self, name: str, node: str, namespace: str | None = None) -> None:
        with self._lock:
            pod = self.pods[self._key(name, namespace)]
            assert pod.spec is not None and pod.status is not None
            pod.spec.node_name = node
            self._set_condition(pod, "PodScheduled", "True")
            self._set_state(pod, waiting=V1ContainerStateWaiting(reason="ContainerCreating"))

    def unschedulable(self, name: str, message: str, namespace: str | None = None) -> None:
        with self._lock:
            pod = self.pods[self._key(name, namespace)]
            self._set_condition(pod, "PodScheduled", "False", reason="Unschedulable", message=message)

    def pull_fails(self, name: str, reason: str = "ErrImagePull", message: str = "", namespace: str | None = None) -> None:
        with self._lock:
            pod = self.pods[self._key(name, namespace)]
            self._require_scheduled(pod)
            self._set_state(pod, waiting=V1ContainerStateWaiting(reason=reason, message=message or None))

    def config_fails(self, name: str, message: str, namespace: str | None = None) -> None:
        """The container cannot be created (e.g. the Secret it reads is missing)."""
        with self._lock:
            pod = self.pods[self._key(name, namespace)]
            self._require_scheduled(pod)
            self._set_state(pod, waiting=V1ContainerStateWaiting(reason="CreateContainerConfigError", message=message))

    def start(self, name: str, namespace: str | None = None) -> None:
        with self._lock:
            pod = self.pods[self._key(name, namespace)]
            self._require_scheduled(pod)
            assert pod.status is not None
            pod.status.phase = "Running"
            pod.status.start_time = self._now
            self._set_state(pod, running=V1ContainerStateRunning(started_at=self._now))
            self._set_condition(pod, "Ready", "True")

    def write(self, name: str, text: str | bytes, namespace: str | None = None) -> None:
        """The trainer prints ``text``: one log entry per line, stamped with the fake's time."""
        with self._lock:
            key = self._key(name, namespace)
            pod = self.pods[key]
            if not self._running(pod):
                raise AssertionError(f"pod {key[1]} is not running: nothing can write to its log")
            data = text.encode() if isinstance(text, str) else text
            for line in data.splitlines(keepends=True):
                self._extra[key].log.append(_LogEntry(self._now, line))

    def exit(self, name: str, code: int, *, reason: str | None = None, message: str | None = None, namespace: str | None = None) -> None:
        """The trainer exits with ``code``; ``message`` is what it wrote to its termination-message file."""
        with self._lock:
            key = self._key(name, namespace)
            pod = self.pods[key]
            if not self._running(pod):
                raise AssertionError(f"pod {key[1]} is not running: it cannot exit")
            self._terminate(key, code, reason or ("Completed" if code == 0 else "Error"), message)

    def oom(self, name: str, namespace: str | None = None) -> None:
        """The kernel kills the trainer for exceeding its memory limit."""
        self.exit(name, 137, reason="OOMKilled", namespace=namespace)

    def expire_grace(self, name: str, namespace: str | None = None) -> None:
        """The deletion's grace period is over: the kubelet sends SIGKILL."""
        with self._lock:
            key = self._key(name, namespace)
            pod = self.pods[key]
            if self._running(pod):
                self.signals.append((key[1], "SIGKILL"))
                self._terminate(key, 137, "Error", None)

    def expire_deadline(self, job_name: str, namespace: str | None = None) -> None:
        """The Job ran past ``activeDeadlineSeconds``: it fails and its pods are deleted."""
        with self._lock:
            job_key = self._job_key(job_name, namespace)
            job = self.jobs[job_key]
            assert job.spec is not None and job.spec.active_deadline_seconds, "the Job has no activeDeadlineSeconds"
            self._fail_job(job, "DeadlineExceeded", "Job was active longer than specified deadline")
            for key, extra in list(self._extra.items()):
                if extra.job == job_key and key in self.pods:
                    pod = self.pods[key]
                    self._delete(key, (pod.spec.termination_grace_period_seconds if pod.spec else None) or 30)

    def lose_node(self, node: str) -> None:
        """The node stops reporting: its pods are disrupted and garbage-collected, without an exit."""
        with self._lock:
            status = self.nodes[node].status
            assert status is not None
            status.conditions = [V1NodeCondition(type="Ready", status="Unknown", reason="NodeStatusUnknown")]
            for key, pod in list(self.pods.items()):
                if pod.spec is not None and pod.spec.node_name == node:
                    self._set_condition(pod, "DisruptionTarget", "True", reason="DeletionByPodGC", message="PodGC: node is unreachable")
                    self._remove(key)

    def reap(self) -> None:
        """The Job controller accounts for deleted pods that have ended: they disappear."""
        with self._lock:
            for key, pod in list(self.pods.items()):
                if pod.metadata is not None and pod.metadata.deletion_timestamp is not None and not self._running(pod):
                    self._remove(key)

    # -- internals ---------------------------------------------------------------------------------

    def _key(self, name: str, namespace: str | None) -> tuple[str, str]:
        candidates = [k for k in self.pods if k[1] == name and namespace in (None, k[0])]
        if candidates:
            return candidates[0]
        owned = [
            (p.metadata.creation_timestamp, k)
            for k, p in self.pods.items()
            if (e := self._extra.get(k)) and e.job is not None and e.job[1] == name and namespace in (None, e.job[0]) and p.metadata
        ]
        if not owned:
            raise KeyError(f"no pod named {name!r} and no pod of a Job named {name!r}")
        return max(owned, key=lambda t: (t[0], t[1]))[1]

    def _job_key(self, name: str, namespace: str | None) -> tuple[str, str]:
        for key in self.jobs:
            if key[1] == name and namespace in (None, key[0]):
                return key
        raise KeyError(f"no Job named {name!r}")

    def _spawn(self, namespace: str, job: V1Job) -> None:
        assert job.metadata is not None and job.spec is not None
        template = job.spec.template
        assert template.spec is not None  # create_job refused a template without one
        name = f"{job.metadata.name}-{next(self._seq):05d}"
        labels = dict((template.metadata.labels if template.metadata else None) or {})
        labels.update({"job-name": job.metadata.name or "", "batch.kubernetes.io/job-name": job.metadata.name or ""})
        pod = V1Pod(
            api_version="v1",
            kind="Pod",
            metadata=V1ObjectMeta(name=name, namespace=namespace, labels=labels, creation_timestamp=self._now, uid=str(uuid.uuid4())),
            spec=_copy(template.spec),
            status=V1PodStatus(phase="Pending"),
        )
        self.pods[(namespace, name)] = pod
        self._extra[(namespace, name)] = _PodExtra(job=(namespace, job.metadata.name or ""))
        self.pods_created += 1
        assert job.status is not None
        job.status.active = (job.status.active or 0) + 1

    def _require_scheduled(self, pod: V1Pod) -> None:
        if pod.spec is None or not pod.spec.node_name:
            raise AssertionError("the pod is not scheduled: call schedule() first")

    def _set_condition(self, pod: V1Pod, kind: str, status: str, *, reason: str | None = None, message: str | None = None) -> None:
        """Set a condition; its transition time moves only when its status or reason changes."""
        assert pod.status is not None
        previous = next((c for c in pod.status.conditions or [] if c.type == kind), None)
        same = previous is not None and previous.status == status and previous.reason == reason
        changed_at = previous.last_transition_time if same and previous is not None else self._now
        conditions = [c for c in pod.status.conditions or [] if c.type != kind]
        conditions.append(V1PodCondition(type=kind, status=status, reason=reason, message=message, last_transition_time=changed_at))
        pod.status.conditions = conditions

    def _set_state(
        self,
        pod: V1Pod,
        *,
        waiting: V1ContainerStateWaiting | None = None,
        running: V1ContainerStateRunning | None = None,
        terminated: V1ContainerStateTerminated | None = None,
    ) -> None:
        assert pod.spec is not None and pod.status is not None
        container = pod.spec.containers[0]
        pod.status.container_statuses = [
            V1ContainerStatus(
                name=container.name,
                image=container.image or "",
                image_id="",
                ready=running is not None,
                restart_count=0,
                started=running is not None or None,
                state=V1ContainerState(waiting=waiting, running=running, terminated=terminated),
            )
        ]

    def _started(self, pod: V1Pod) -> bool:
        for status in (pod.status.container_statuses if pod.status else None) or []:
            if status.state is not None and (status.state.running is not None or status.state.terminated is not None):
                return True
        return False

    def _running(self, pod: V1Pod) -> bool:
        for status in (pod.status.container_statuses if pod.status else None) or []:
            if status.state is not None and status.state.running is not None:
                return True
        return False

    def _terminate(self, key: tuple[str, str], code: int, reason: str, message: str | None) -> None:
        pod = self.pods[key]
        assert pod.spec is not None and pod.status is not None
        container = pod.spec.containers[0]
        running = pod.status.container_statuses[0].state.running if pod.status.container_statuses else None  # type: ignore[union-attr]
        if message is None and code != 0 and container.termination_message_policy == "FallbackToLogsOnError":
            tail = b"".join(e.data for e in self._extra[key].log[-TERMINATION_TAIL_LINES:])[-TERMINATION_TAIL_BYTES:]
            message = tail.decode("utf-8", errors="replace") or None
        terminated = V1ContainerStateTerminated(
            exit_code=code,
            reason=reason,
            message=message,
            started_at=running.started_at if running is not None else None,
            finished_at=self._now,
        )
        self._set_state(pod, terminated=terminated)
        pod.status.phase = "Succeeded" if code == 0 else "Failed"
        self._set_condition(pod, "Ready", "False", reason="PodCompleted")
        self._sync_job(key)

    def _delete(self, key: tuple[str, str], grace: int) -> None:
        pod = self.pods[key]
        assert pod.metadata is not None
        if not self._running(pod):
            self._remove(key)  # never started, or ended and accounted for: nothing to wait for
            return
        if pod.metadata.deletion_timestamp is None or grace < (pod.metadata.deletion_grace_period_seconds or 0):
            pod.metadata.deletion_timestamp = self._now + timedelta(seconds=grace)
            pod.metadata.deletion_grace_period_seconds = grace
        if grace == 0:
            self.signals.append((key[1], "SIGKILL"))
            self._terminate(key, 137, "Error", None)
        else:
            self.signals.append((key[1], "SIGTERM"))

    def _remove(self, key: tuple[str, str]) -> None:
        self._sync_job(key, vanished=True)
        self.pods.pop(key, None)
        self._extra.pop(key, None)

    def _sync_job(self, key: tuple[str, str], *, vanished: bool = False) -> None:
        """The Job controller's view of a pod that ended (or vanished before it ended)."""
        extra = self._extra.get(key)
        pod = self.pods.get(key)
        if extra is None or pod is None or extra.job is None or extra.counted or extra.job not in self.jobs:
            return
        phase = pod.status.phase if pod.status else None
        if phase not in ("Succeeded", "Failed") and not vanished:
            return
        extra.counted = True
        job = self.jobs[extra.job]
        assert job.status is not None and job.spec is not None
        job.status.active = max(0, (job.status.active or 0) - 1)
        if self._job_finished(job):
            return
        if phase == "Succeeded":
            job.status.succeeded = (job.status.succeeded or 0) + 1
            job.status.completion_time = self._now
            job.status.conditions = [
                V1JobCondition(type="SuccessCriteriaMet", status="True", reason="CompletionsReached", last_transition_time=self._now),
                V1JobCondition(type="Complete", status="True", reason="CompletionsReached", last_transition_time=self._now),
            ]
            return
        job.status.failed = (job.status.failed or 0) + 1
        disrupted = any(c.type == "DisruptionTarget" and c.status == "True" for c in (pod.status.conditions if pod.status else None) or [])
        if disrupted and job.spec.pod_failure_policy is not None and self._fails_job_on_disruption(job):
            self._fail_job(job, "PodFailurePolicy", f"Pod {key[0]}/{key[1]} has condition DisruptionTarget matching FailJob rule")
        elif job.status.failed > (6 if job.spec.backoff_limit is None else job.spec.backoff_limit):
            self._fail_job(job, "BackoffLimitExceeded", "Job has reached the specified backoff limit")
        else:
            # a replacement: with podReplacementPolicy Failed the old pod has ended by now (it is counted)
            self._spawn(extra.job[0], job)

    @staticmethod
    def _fails_job_on_disruption(job: V1Job) -> bool:
        policy = job.spec.pod_failure_policy if job.spec else None
        for rule in (policy.rules if policy else None) or []:
            for pattern in rule.on_pod_conditions or []:
                if rule.action == "FailJob" and pattern.type == "DisruptionTarget" and (pattern.status or "True") == "True":
                    return True
        return False

    @staticmethod
    def _job_finished(job: V1Job) -> bool:
        return any(c.type in ("Complete", "Failed") and c.status == "True" for c in (job.status.conditions if job.status else None) or [])

    def _fail_job(self, job: V1Job, reason: str, message: str) -> None:
        assert job.status is not None
        if self._job_finished(job):
            return
        job.status.conditions = [
            V1JobCondition(type="FailureTarget", status="True", reason=reason, message=message, last_transition_time=self._now),
            V1JobCondition(type="Failed", status="True", reason=reason, message=message, last_transition_time=self._now),
        ]
