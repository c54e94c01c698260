"""The Kubernetes executor: one ``batch/v1`` Job per attempt, in the trainer image of its profile.

The Job
  ``forge-<job id>-<attempt>`` (DNS-1123 safe), one pod, ``backoffLimit: 0`` and
  ``podReplacementPolicy: Failed`` plus a pod-failure policy that fails the Job when its pod is
  disrupted: the Job controller never starts a second pod — whether to try again (a new attempt
  from the last checkpoint) is the scheduler's decision, recorded in the database. The container
  runs the trainer command with the LaunchSpec's environment, the object-storage credentials from
  a Secret (``secretKeyRef``; never inline, and stripped from the LaunchSpec if they were there),
  the profile's extended resource (``nvidia.com/gpu`` …) as request and limit, a writable
  ``emptyDir`` for the run (scratch folder and result file) and a memory-backed ``/dev/shm``.
  ``activeDeadlineSeconds`` is the job's time limit, ``terminationGracePeriodSeconds`` the stop
  grace, ``ttlSecondsAfterFinished`` how long a finished Job and its log stay readable.

Stop
  ``terminate`` deletes the pod with the grace period: the kubelet sends SIGTERM to the trainer
  (the SDK finishes its step, saves, reports ``stopped``/``canceled`` and exits), SIGKILL when
  the grace has passed; ``kill`` deletes it with grace 0. A Job whose pod does not exist yet is
  deleted instead, so no pod appears later. The deleted pod is not replaced (see above).

Results and errors
  The SDK writes its outcome to ``FORGE_RESULT_FILE``, a file in the run's ``emptyDir``, and
  prints it as its last progress line. ``read_result`` takes it from the container's termination
  message when that holds one (a trainer that writes its outcome to ``/dev/termination-log``, or
  the log tail the kubelet copies there on a failed exit — ``FallbackToLogsOnError``), else from
  the tail of the pod's log. ``FORGE_RESULT_FILE`` deliberately does not point at the
  termination-log file itself: the kubelet bind-mounts that file, and the SDK's atomic write
  (temp file + rename) fails on a mount point with EBUSY. ``last_error`` is the most telling line
  at the end of the log, else of the termination message, else the reason the pod is waiting.

Polling
  ``poll`` reads the pod (found by label) and, when needed, the Job: a terminated container gives
  its exit code and reason (``OOMKilled`` → out_of_memory, the Job's ``DeadlineExceeded`` →
  deadline_exceeded, a disruption → node_lost); a pod that stays unschedulable longer than the
  pending timeout, or whose image cannot be pulled for longer than the pull timeout, fails the
  attempt (its Job is deleted first, so it cannot start later); a pod that vanished without a
  status is ``lost``.

Capacity
  Per profile, the allocatable amount of its resource on the Ready, schedulable nodes that its
  node selector and tolerations admit, minus what the non-terminated pods there request — except
  Forge's own trainer pods, which the scheduler already counts as running attempts. The CPU
  profile is a configured number of jobs or what the free CPU and memory fit at the trainer's
  requests. A GPU profile no node offers is not reported at all.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from forge_common.accelerators import PROFILES, Profile
from forge_common.settings import CommonSettings
from forge_sdk import protocol

from ..settings import SchedulerSettings
from .base import Capacity, ExitStatus, Handle, LaunchSpec
from .kube_client import KubeClient, KubeConflict, KubeForbidden
from .local import pick_error_line

if TYPE_CHECKING:
    from kubernetes.client import V1Container, V1ContainerStateTerminated, V1Job, V1Node, V1Pod, V1PodSpec, V1Toleration

log = logging.getLogger(__name__)

CONTAINER = "trainer"
RUN_DIR = "/forge/run"  # the writable emptyDir: scratch folder and result file
RESULT_FILE = f"{RUN_DIR}/result.json"
WORK_DIR = f"{RUN_DIR}/work"
TERMINATION_LOG = "/dev/termination-log"
SECRET_ENV = ("S3_ACCESS_KEY", "S3_SECRET_KEY")  # come from the Secret, never from the LaunchSpec
LABEL_RUN = "forge.run"  # the Job's name, on the Job and its pod: how an attempt's pod is found
LABEL_PROFILE = "forge.profile"
APP_LABELS = {
    "app.kubernetes.io/name": "forge-trainer",
    "app.kubernetes.io/component": "trainer",
    "app.kubernetes.io/part-of": "forge",
    "app.kubernetes.io/managed-by": "forge-scheduler",
}
PULL_ERRORS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "RegistryUnavailable"})
HOPELESS_PULL = frozenset({"InvalidImageName", "ErrImageNeverPull"})  # retrying the pull cannot help
CONFIG_ERRORS = frozenset({"CreateContainerConfigError", "CreateContainerError"})  # a missing Secret, a bad mount …
NODE_GONE = frozenset({"Evicted", "NodeLost", "NodeAffinity", "Shutdown", "Terminated", "UnexpectedAdmissionError", "Preempting"})
LOG_TAIL_LINES = 200
# A pod whose deletion deadline passed this long ago without a terminated container sits on a node
# that no longer reports (its kubelet is gone): it is lost.
LOST_AFTER_SECONDS = 120.0
# Neither Job nor pod: lost only when still so this long after first seen — another scheduler
# replica (or this one) may be between recording the attempt and creating its Job.
ABSENT_GRACE_SECONDS = 30.0

_DNS_UNSAFE = re.compile(r"[^a-z0-9-]+")
_LABEL_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


# ---- names -------------------------------------------------------------------------------------


def job_name(job_id: str, attempt: int) -> str:
    """``forge-<job id>-<attempt>``: a DNS-1123 label of at most 63 characters (a Job's name ends up
    in a label value). An id that had to be changed to fit gets a short hash, so two ids never meet."""
    safe = _DNS_UNSAFE.sub("-", job_id.lower()).strip("-")
    suffix = f"-{attempt}"
    name = f"forge-{safe}"
    if safe != job_id or len(name) + len(suffix) > 63:
        digest = hashlib.sha256(job_id.encode()).hexdigest()[:8]
        name = f"{name[: 63 - len(suffix) - 9].rstrip('-')}-{digest}"
    return name + suffix


def split_run_ref(run_ref: str) -> tuple[str, str]:
    namespace, sep, name = run_ref.partition("/")
    if not sep or not namespace or not name or "/" in name:
        raise ValueError(f"not a Kubernetes run reference (<namespace>/<job name>): {run_ref!r}")
    return namespace, name


def label_value(value: str) -> str:
    """A label value Kubernetes accepts: at most 63 of [A-Za-z0-9_.-], alphanumeric at both ends."""
    return _LABEL_UNSAFE.sub("-", value)[:63].strip("-_.")


def trainer_image(settings: SchedulerSettings, profile: Profile, custom: str | None) -> str:
    """A custom image as given; otherwise the built-in trainer image of the profile."""
    return custom or f"{settings.kube_image}{profile.image_suffix}:{settings.kube_image_tag}"


# ---- the Job -------------------------------------------------------------------------------------


def _profile_options(table: Mapping[str, Any], profile: str) -> list[Any]:
    """Entries for every profile ("*") followed by the profile's own."""
    return [table[key] for key in ("*", profile) if key in table]


def node_selector_for(settings: SchedulerSettings, profile: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for selector in _profile_options(settings.kube_node_selector, profile):
        out.update(selector)
    return out


_TOLERATION_KEYS = {"key", "operator", "value", "effect", "tolerationSeconds"}


def tolerations_for(settings: SchedulerSettings, profile: str) -> list[V1Toleration]:
    from kubernetes.client import V1Toleration

    out = []
    for entries in _profile_options(settings.kube_tolerations, profile):
        for entry in entries:
            unknown = set(entry) - _TOLERATION_KEYS
            if unknown:
                raise ValueError(
                    f"kube_tolerations[{profile!r}]: unknown field(s) {sorted(unknown)}; a toleration has {sorted(_TOLERATION_KEYS)}"
                )
            toleration = V1Toleration.from_dict(dict(entry))
            assert toleration is not None
            out.append(toleration)
    return out


def _env(spec: LaunchSpec, settings: SchedulerSettings) -> list[Any]:
    from kubernetes.client import V1EnvVar, V1EnvVarSource, V1SecretKeySelector

    plain = {k: v for k, v in spec.env.items() if k not in SECRET_ENV}
    plain.update(pod_env())
    env = [V1EnvVar(name=k, value=v) for k, v in sorted(plain.items())]
    for key in SECRET_ENV:
        selector = V1SecretKeySelector(name=settings.kube_s3_secret_name, key=key)
        env.append(V1EnvVar(name=key, value_from=V1EnvVarSource(secret_key_ref=selector)))
    return env


def pod_env() -> dict[str, str]:
    """What every trainer container gets from the executor: paths inside the pod, unbuffered output."""
    return {"FORGE_RESULT_FILE": RESULT_FILE, "FORGE_WORK_DIR": WORK_DIR, "PYTHONUNBUFFERED": "1"}


def _resources(spec: LaunchSpec, settings: SchedulerSettings, profile: Profile) -> Any:
    from kubernetes.client import V1ResourceRequirements

    requests = {"cpu": settings.kube_cpu_request, "memory": settings.kube_memory_request}
    limits = {"memory": settings.kube_memory_limit or settings.kube_memory_request}
    if profile.resource is not None:
        # extended resources are whole devices, requested and limited alike
        requests[profile.resource] = limits[profile.resource] = str(max(1, spec.devices))
    return V1ResourceRequirements(requests=requests, limits=limits)


def _container(spec: LaunchSpec, settings: SchedulerSettings, profile: Profile) -> V1Container:
    from kubernetes.client import V1Container, V1SecurityContext, V1VolumeMount

    return V1Container(
        name=CONTAINER,
        image=trainer_image(settings, profile, spec.image),
        command=list(spec.command) or None,  # none given (a custom image): the image's own entrypoint
        env=_env(spec, settings),
        resources=_resources(spec, settings, profile),
        volume_mounts=[V1VolumeMount(name="run", mount_path=RUN_DIR), V1VolumeMount(name="shm", mount_path="/dev/shm")],
        termination_message_path=TERMINATION_LOG,
        termination_message_policy="FallbackToLogsOnError",
        security_context=V1SecurityContext(allow_privilege_escalation=False),
    )


def _pod_spec(spec: LaunchSpec, settings: SchedulerSettings, profile: Profile) -> V1PodSpec:
    from kubernetes.client import V1EmptyDirVolumeSource, V1LocalObjectReference, V1PodSpec, V1Volume

    secrets = [name for name in (settings.kube_image_pull_secret, spec.image_pull_secret) if name]
    pull = [V1LocalObjectReference(name=name) for name in dict.fromkeys(secrets)] or None
    return V1PodSpec(
        containers=[_container(spec, settings, profile)],
        restart_policy="Never",
        termination_grace_period_seconds=max(1, math.ceil(spec.stop_grace_seconds)),
        service_account_name=settings.kube_service_account,
        automount_service_account_token=False,  # a trainer needs no Kubernetes API
        enable_service_links=False,  # no environment variables for every Service in the namespace
        image_pull_secrets=pull,
        node_selector=node_selector_for(settings, profile.name) or None,
        tolerations=tolerations_for(settings, profile.name) or None,
        volumes=[
            V1Volume(name="run", empty_dir=V1EmptyDirVolumeSource()),
            V1Volume(name="shm", empty_dir=V1EmptyDirVolumeSource(medium="Memory")),  # DataLoader workers
        ],
    )


def labels_for(spec: LaunchSpec, name: str) -> dict[str, str]:
    labels = {k: label_value(v) for k, v in spec.labels.items()}
    labels.update(
        {
            **APP_LABELS,
            "forge.job-id": label_value(spec.job_id),
            "forge.attempt": str(spec.attempt),
            LABEL_RUN: name,
            LABEL_PROFILE: spec.accelerator,
        }
    )
    return labels


def build_job(spec: LaunchSpec, settings: SchedulerSettings) -> V1Job:
    """The Job for one attempt (pure: the same spec and settings give the same manifest)."""
    from kubernetes.client import (
        V1Job,
        V1JobSpec,
        V1ObjectMeta,
        V1PodFailurePolicy,
        V1PodFailurePolicyOnPodConditionsPattern,
        V1PodFailurePolicyRule,
        V1PodTemplateSpec,
    )

    profile = PROFILES.get(spec.accelerator)
    if profile is None:
        raise ValueError(f"unknown accelerator profile {spec.accelerator!r}; profiles: {', '.join(PROFILES)}")
    namespace, name = split_run_ref(spec.run_ref)
    labels = labels_for(spec, name)
    disrupted = V1PodFailurePolicyRule(
        action="FailJob", on_pod_conditions=[V1PodFailurePolicyOnPodConditionsPattern(type="DisruptionTarget", status="True")]
    )
    limit = spec.time_limit_seconds
    return V1Job(
        api_version="batch/v1",
        kind="Job",
        metadata=V1ObjectMeta(name=name, namespace=namespace, labels=labels),
        spec=V1JobSpec(
            backoff_limit=0,
            completions=1,
            parallelism=1,
            active_deadline_seconds=int(limit) if limit else None,
            ttl_seconds_after_finished=settings.kube_ttl_seconds,
            pod_replacement_policy="Failed",
            pod_failure_policy=V1PodFailurePolicy(rules=[disrupted]),
            template=V1PodTemplateSpec(metadata=V1ObjectMeta(labels=labels), spec=_pod_spec(spec, settings, profile)),
        ),
    )


def manifest(job: V1Job) -> dict[str, Any]:
    """The JSON-ready manifest of a model (what the API server receives)."""
    from kubernetes.client import ApiClient

    return ApiClient().sanitize_for_serialization(job)  # type: ignore[no-any-return, no-untyped-call]


# ---- reading pods --------------------------------------------------------------------------------


def _condition(pod: V1Pod, kind: str) -> Any:
    for cond in (pod.status.conditions if pod.status else None) or []:
        if cond.type == kind:
            return cond
    return None


def _container_status(pod: V1Pod) -> Any:
    for status in (pod.status.container_statuses if pod.status else None) or []:
        if status.name == CONTAINER:
            return status
    return None


def _terminated(pod: V1Pod) -> V1ContainerStateTerminated | None:
    status = _container_status(pod)
    return status.state.terminated if status is not None and status.state is not None else None


def _waiting(pod: V1Pod) -> Any:
    status = _container_status(pod)
    return status.state.waiting if status is not None and status.state is not None else None


def _running(pod: V1Pod) -> bool:
    status = _container_status(pod)
    return bool(status is not None and status.state is not None and status.state.running is not None)


def _unschedulable(pod: V1Pod) -> Any:
    cond = _condition(pod, "PodScheduled")
    return cond if cond is not None and cond.status == "False" and cond.reason == "Unschedulable" else None


def _disrupted(pod: V1Pod) -> bool:
    cond = _condition(pod, "DisruptionTarget")
    return bool(cond is not None and cond.status == "True") or (pod.status is not None and pod.status.reason in NODE_GONE)


def _job_condition(job: V1Job | None, kind: str) -> Any:
    for cond in (job.status.conditions if job is not None and job.status else None) or []:
        if cond.type == kind and cond.status == "True":
            return cond
    return None


def _job_deadline(job: V1Job | None) -> bool:
    failed = _job_condition(job, "Failed")
    return bool(failed is not None and failed.reason == "DeadlineExceeded")


def _name(obj: V1Pod | V1Node) -> str:
    return (obj.metadata.name if obj.metadata is not None else None) or ""


def _newest(pods: list[V1Pod]) -> V1Pod | None:
    epoch = datetime.min.replace(tzinfo=UTC)
    return max(pods, key=lambda p: (p.metadata.creation_timestamp or epoch) if p.metadata else epoch, default=None)


def _signal_of(term: V1ContainerStateTerminated) -> int | None:
    if term.signal:
        return int(term.signal)
    code = term.exit_code
    return code - 128 if 128 < code <= 128 + 64 else None  # how a shell reports death by a signal


def outcome_in(text: str) -> protocol.Outcome | None:
    """The trainer's outcome in a termination message or a log tail: the whole text as the SDK's
    result JSON, else the last ``@@forge`` outcome line in it."""
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            record = protocol.parse_record(stripped)
        except protocol.ProtocolError:
            record = None
        if isinstance(record, protocol.Outcome):
            return record
    for line in reversed(text.splitlines()):
        record = protocol.parse_line(line)
        if isinstance(record, protocol.Outcome):
            return record
    return None


# ---- capacity ------------------------------------------------------------------------------------


def _tolerates(tolerations: list[V1Toleration], taint: Any) -> bool:
    for t in tolerations:
        if t.effect and t.effect != taint.effect:
            continue
        if (t.operator or "Equal") == "Exists":
            if not t.key or t.key == taint.key:
                return True
        elif t.key == taint.key and (t.value or "") == (taint.value or ""):
            return True
    return False


def node_admits(node: V1Node, selector: dict[str, str], tolerations: list[V1Toleration]) -> bool:
    """Ready, schedulable, labelled as the selector asks, and every hard taint tolerated."""
    if node.spec is not None and node.spec.unschedulable:
        return False
    ready = [c for c in ((node.status.conditions if node.status else None) or []) if c.type == "Ready"]
    if not ready or ready[0].status != "True":
        return False
    labels = (node.metadata.labels if node.metadata else None) or {}
    if any(labels.get(k) != v for k, v in selector.items()):
        return False
    taints = (node.spec.taints if node.spec else None) or []
    return all(_tolerates(tolerations, t) for t in taints if t.effect in ("NoSchedule", "NoExecute"))


def _quantity(value: str | None) -> Decimal:
    from kubernetes.utils import parse_quantity

    return Decimal(parse_quantity(value)) if value else Decimal(0)  # type: ignore[no-untyped-call]


def _requests(pod: V1Pod) -> dict[str, Decimal]:
    """What a pod holds on its node: the sum over its containers (init containers run first, so
    the larger of their biggest request and the sum counts — as the scheduler does)."""
    out: dict[str, Decimal] = {}
    spec = pod.spec
    if spec is None:
        return out
    for c in spec.containers or []:
        for k, v in ((c.resources.requests if c.resources else None) or {}).items():
            out[k] = out.get(k, Decimal(0)) + _quantity(v)
    for c in spec.init_containers or []:
        for k, v in ((c.resources.requests if c.resources else None) or {}).items():
            out[k] = max(out.get(k, Decimal(0)), _quantity(v))
    return out


@dataclass
class _NodeRoom:
    name: str
    allocatable: dict[str, Decimal]
    used: dict[str, Decimal]

    def free(self, resource: str) -> Decimal:
        return max(Decimal(0), self.allocatable.get(resource, Decimal(0)) - self.used.get(resource, Decimal(0)))


# ---- the executor --------------------------------------------------------------------------------


def _now() -> datetime:
    return datetime.now(UTC)


class KubernetesExecutor:
    name = "kubernetes"
    runs_images = True

    def __init__(self, client: KubeClient, settings: SchedulerSettings, *, clock: Callable[[], datetime] = _now) -> None:
        self.client = client
        self.settings = settings
        self.namespace = settings.kube_namespace
        self.clock = clock
        self._pull_failing_since: dict[str, datetime] = {}  # run_ref → when a pull error was first seen
        self._absent_since: dict[str, datetime] = {}  # run_ref → when neither its Job nor its pod was found
        self._warned_secrets = False
        for profile in PROFILES:  # fail at start-up, not at the first launch, on a bad toleration
            tolerations_for(settings, profile)

    @classmethod
    def from_settings(cls, settings: SchedulerSettings, common: CommonSettings) -> KubernetesExecutor:
        from .kube_client import OfficialKubeClient

        if common.s3_config() is None:
            raise ValueError(
                "the Kubernetes executor needs object storage its pods can reach: set FORGE_S3_ENDPOINT "
                "(and create the Secret named by the kube_s3_secret_name setting in the trainers' namespace)"
            )
        return cls(OfficialKubeClient.from_config(settings.kube_config), settings)

    # -- where things are ----------------------------------------------------------------------------

    def run_ref(self, job_id: str, attempt: int) -> str:
        return f"{self.namespace}/{job_name(job_id, attempt)}"

    def log_uri(self, run_ref: str) -> str:
        return f"k8s://{run_ref}"

    def trainer_env(self, run_ref: str) -> dict[str, str]:
        return pod_env()

    # -- running -------------------------------------------------------------------------------------

    async def launch(self, spec: LaunchSpec) -> Handle:
        if any(k in spec.env for k in SECRET_ENV) and not self._warned_secrets:
            log.warning(
                "trainer environments carry S3 credentials: dropped, pods read them from Secret %r", self.settings.kube_s3_secret_name
            )
            self._warned_secrets = True
        job = build_job(spec, self.settings)
        namespace, name = split_run_ref(spec.run_ref)
        try:
            await self.client.create_job(namespace, job)
        except KubeConflict:
            # launched before (a scheduler that died right after creating it): the same attempt?
            existing = await self.client.read_job(namespace, name)
            labels = (existing.metadata.labels if existing is not None and existing.metadata else None) or {}
            if labels.get("forge.job-id") != label_value(spec.job_id) or labels.get("forge.attempt") != str(spec.attempt):
                raise
            log.info("job %s attempt %d: Job %s exists already; re-attaching", spec.job_id, spec.attempt, spec.run_ref)
        return Handle(run_ref=spec.run_ref)

    async def _pod(self, namespace: str, name: str) -> V1Pod | None:
        return _newest(await self.client.list_pods(namespace, f"{LABEL_RUN}={name}"))

    async def poll(self, handle: Handle) -> ExitStatus | None:
        namespace, name = split_run_ref(handle.run_ref)
        pod = await self._pod(namespace, name)
        if pod is None:
            return await self._poll_without_pod(handle.run_ref, await self.client.read_job(namespace, name))
        term = _terminated(pod)
        if term is not None:
            self._pull_failing_since.pop(handle.run_ref, None)
            job = await self.client.read_job(namespace, name)
            return ExitStatus(returncode=term.exit_code, signal=_signal_of(term), reason=self._exit_reason(pod, term, job))
        phase = pod.status.phase if pod.status else None
        if phase == "Succeeded":
            return ExitStatus(returncode=0)
        if phase == "Failed" or (pod.metadata is not None and pod.metadata.deletion_timestamp is not None):
            return self._ending_without_exit(pod)
        if _running(pod):
            self._pull_failing_since.pop(handle.run_ref, None)
            return None
        return await self._check_pending(handle.run_ref, pod)

    def _exit_reason(self, pod: V1Pod, term: V1ContainerStateTerminated, job: V1Job | None) -> str | None:
        if _job_deadline(job) or (pod.status is not None and pod.status.reason == "DeadlineExceeded"):
            return "deadline_exceeded"
        if term.reason == "OOMKilled":
            return "out_of_memory"
        if _disrupted(pod):
            return "node_lost"
        return None

    def _ending_without_exit(self, pod: V1Pod) -> ExitStatus | None:
        """A pod that is being deleted or has failed, with no exit recorded for the trainer. While
        the deletion's grace runs the kubelet may still report one; after it (plus a margin), or
        when the pod failed outright (evicted, its node gone), nothing will come: lost."""
        deleting = pod.metadata.deletion_timestamp if pod.metadata else None
        failed = pod.status is not None and pod.status.phase == "Failed"
        if not failed and deleting is not None and (self.clock() - deleting).total_seconds() < LOST_AFTER_SECONDS:
            return None
        return ExitStatus(returncode=None, lost=True, reason="node_lost")

    async def _poll_without_pod(self, run_ref: str, job: V1Job | None) -> ExitStatus | None:
        if job is None:
            # neither Job nor pod: not created yet (being launched), deleted by someone, or removed
            # by its TTL while no scheduler ran
            first = self._absent_since.setdefault(run_ref, self.clock())
            if (self.clock() - first).total_seconds() < ABSENT_GRACE_SECONDS:
                return None
            self._absent_since.pop(run_ref, None)
            return ExitStatus(returncode=None, lost=True)
        self._absent_since.pop(run_ref, None)
        if _job_condition(job, "Complete") is not None or _job_condition(job, "SuccessCriteriaMet") is not None:
            return ExitStatus(returncode=0)
        failed = _job_condition(job, "Failed") or _job_condition(job, "FailureTarget")
        if failed is not None:
            if failed.reason == "DeadlineExceeded":
                return ExitStatus(returncode=None, lost=True, reason="deadline_exceeded")
            # the pod failed and is gone with its status: disrupted (node lost, evicted) or deleted
            return ExitStatus(returncode=None, lost=True, reason="node_lost" if failed.reason == "PodFailurePolicy" else None)
        created = job.metadata.creation_timestamp if job.metadata else None
        if created is not None and (self.clock() - created).total_seconds() > self.settings.kube_pending_timeout_seconds:
            namespace, name = split_run_ref(run_ref)
            return await self._give_up(
                run_ref,
                "unschedulable",
                f"the Job controller created no pod for {self.settings.kube_pending_timeout_seconds:.0f}s "
                f"(a ResourceQuota or an admission policy may refuse it: kubectl -n {namespace} describe job {name})",
            )
        return None

    async def _check_pending(self, run_ref: str, pod: V1Pod) -> ExitStatus | None:
        now = self.clock()
        unschedulable = _unschedulable(pod)
        if unschedulable is not None:
            since = unschedulable.last_transition_time or (pod.metadata.creation_timestamp if pod.metadata else None) or now
            if (now - since).total_seconds() >= self.settings.kube_pending_timeout_seconds:
                return await self._give_up(
                    run_ref,
                    "unschedulable",
                    f"no node could take the trainer for {self.settings.kube_pending_timeout_seconds:.0f}s: {unschedulable.message or 'unschedulable'}",
                )
            return None
        waiting = _waiting(pod)
        reason = waiting.reason if waiting is not None else None
        if reason in PULL_ERRORS or reason in CONFIG_ERRORS:
            first = self._pull_failing_since.setdefault(run_ref, now)
            waited = (now - first).total_seconds()
            if reason in HOPELESS_PULL or waited >= self.settings.kube_image_pull_timeout_seconds:
                image = pod.spec.containers[0].image if pod.spec and pod.spec.containers else "?"
                if reason in CONFIG_ERRORS:
                    # decide_outcome reports an error without a reason as a crash of the command/image
                    return await self._give_up(run_ref, None, f"the trainer container cannot be created: {waiting.message or reason}")
                return await self._give_up(run_ref, "image_pull", f"cannot pull the trainer image {image}: {waiting.message or reason}")
        else:
            self._pull_failing_since.pop(run_ref, None)
        return None

    async def _give_up(self, run_ref: str, reason: str | None, message: str) -> ExitStatus:
        """Fail an attempt that cannot start: delete its Job first, so it never starts later."""
        namespace, name = split_run_ref(run_ref)
        await self.client.delete_job(namespace, name, grace_seconds=0)
        self._pull_failing_since.pop(run_ref, None)
        log.warning("%s: %s", run_ref, message)
        return ExitStatus(returncode=None, error=message, reason=reason, never_started=True)

    async def pending_reason(self, handle: Handle) -> str | None:
        namespace, name = split_run_ref(handle.run_ref)
        pod = await self._pod(namespace, name)
        if pod is None:
            job = await self.client.read_job(namespace, name)
            return "waiting for the Job controller to create the trainer pod" if job is not None else None
        if _running(pod) or _terminated(pod) is not None:
            return None
        unschedulable = _unschedulable(pod)
        if unschedulable is not None:
            return f"unschedulable: {unschedulable.message or 'no node fits'}"
        waiting = _waiting(pod)
        if waiting is not None and waiting.reason in PULL_ERRORS:
            image = pod.spec.containers[0].image if pod.spec and pod.spec.containers else "?"
            return f"cannot pull the trainer image {image} ({waiting.reason}): {waiting.message or 'no details'}"
        if waiting is not None and waiting.reason in CONFIG_ERRORS:
            return f"the trainer container cannot be created ({waiting.reason}): {waiting.message or 'no details'}"
        node = pod.spec.node_name if pod.spec else None
        if node is None:
            return "waiting for the Kubernetes scheduler to place the trainer pod"
        what = (waiting.reason if waiting is not None else None) or "starting"
        return f"on node {node}: {what} (pulling the image, mounting volumes)" if what == "ContainerCreating" else f"on node {node}: {what}"

    async def _stop(self, handle: Handle, grace: int) -> bool:
        namespace, name = split_run_ref(handle.run_ref)
        pods = await self.client.list_pods(namespace, f"{LABEL_RUN}={name}")
        live = [p for p in pods if _terminated(p) is None and (p.status is None or p.status.phase not in ("Succeeded", "Failed"))]
        sent = False
        for pod in live:
            if pod.metadata is not None and pod.metadata.deletion_timestamp is not None and grace > 0:
                sent = True  # already terminating: its SIGTERM went out
                continue
            sent = await self.client.delete_pod(namespace, _name(pod), grace) or sent
        if not pods:
            job = await self.client.read_job(namespace, name)
            if job is not None and _job_condition(job, "Complete") is None and _job_condition(job, "Failed") is None:
                sent = await self.client.delete_job(namespace, name, grace_seconds=grace)  # no pod yet: none may come
        return sent

    async def terminate(self, handle: Handle, grace_seconds: float) -> bool:
        """Delete the pod with the grace period: SIGTERM now, SIGKILL from the kubelet after it."""
        return await self._stop(handle, max(1, math.ceil(grace_seconds)))

    async def kill(self, handle: Handle) -> bool:
        return await self._stop(handle, 0)

    async def _log_tail(self, namespace: str, pod: V1Pod, lines: int) -> str | None:
        data = await self.client.read_pod_log(namespace, _name(pod), container=CONTAINER, tail_lines=lines)
        return data.decode("utf-8", errors="replace") if data else None

    async def read_result(self, handle: Handle) -> protocol.Outcome | None:
        namespace, name = split_run_ref(handle.run_ref)
        pod = await self._pod(namespace, name)
        if pod is None:
            return None
        term = _terminated(pod)
        if term is not None and term.message and (found := outcome_in(term.message)) is not None:
            return found
        tail = await self._log_tail(namespace, pod, 50)
        return outcome_in(tail) if tail else None

    async def last_error(self, handle: Handle) -> str | None:
        namespace, name = split_run_ref(handle.run_ref)
        pod = await self._pod(namespace, name)
        if pod is None:
            return None
        tail = await self._log_tail(namespace, pod, LOG_TAIL_LINES)
        if tail and (line := pick_error_line(tail.splitlines())):
            return line
        term = _terminated(pod)
        if term is not None and term.message and (line := pick_error_line(term.message.splitlines())):
            return line
        waiting = _waiting(pod)
        if waiting is not None and waiting.message:
            return str(waiting.message)[:500]
        unschedulable = _unschedulable(pod)
        return str(unschedulable.message)[:500] if unschedulable is not None and unschedulable.message else None

    async def cleanup(self, handle: Handle) -> None:
        """Delete the Job of an attempt whose pod has not ended (it must not run on); a finished
        one stays until its TTL, so the log-relay can read the last lines of its log."""
        namespace, name = split_run_ref(handle.run_ref)
        self._pull_failing_since.pop(handle.run_ref, None)
        pods = await self.client.list_pods(namespace, f"{LABEL_RUN}={name}")
        if any(_terminated(p) is None and (p.status is None or p.status.phase not in ("Succeeded", "Failed")) for p in pods):
            await self.client.delete_job(namespace, name, grace_seconds=0)
            for pod in pods:  # the Job's garbage collection would get there too, a little later
                await self.client.delete_pod(namespace, _name(pod), 0)
        elif not pods:
            job = await self.client.read_job(namespace, name)
            if job is not None and _job_condition(job, "Complete") is None and _job_condition(job, "Failed") is None:
                await self.client.delete_job(namespace, name, grace_seconds=0)

    # -- what it can offer -----------------------------------------------------------------------------

    async def capacity(self) -> list[Capacity]:
        nodes = await self.client.list_nodes()
        pods, scope = await self._busy_pods()
        rooms = self._rooms(nodes, pods)
        rooms_now = self._rooms(nodes, pods, with_own=True)
        out = []
        for profile in PROFILES.values():
            selector = node_selector_for(self.settings, profile.name)
            tolerations = tolerations_for(self.settings, profile.name)
            admitted = [_name(n) for n in nodes if _name(n) in rooms and node_admits(n, selector, tolerations)]
            eligible = [rooms[n] for n in admitted]
            found = self._cpu_capacity(eligible) if profile.resource is None else self._device_capacity(profile, eligible)
            if found is None:
                continue
            per_job_now = None
            if profile.resource is not None:  # where a wide attempt could start now, Forge's own pods included
                per_job_now = max((int(rooms_now[n].free(profile.resource)) for n in admitted), default=0)
            out.append(Capacity(found.profile, found.total, found.detail + scope, found.per_job, found.allocatable, per_job_now))
        return out

    async def _busy_pods(self) -> tuple[list[V1Pod], str]:
        """The non-terminated pods on every node; only this namespace's when the service account
        may not list pods cluster-wide (then other namespaces' use is not subtracted — said so)."""
        selector = "status.phase!=Succeeded,status.phase!=Failed"
        try:
            return await self.client.list_pods(None, field_selector=selector), ""
        except KubeForbidden:
            pods = await self.client.list_pods(self.namespace, field_selector=selector)
            return pods, " (pods of other namespaces not counted: the scheduler may not list them)"

    def _rooms(self, nodes: list[V1Node], pods: list[V1Pod], *, with_own: bool = False) -> dict[str, _NodeRoom]:
        rooms = {
            n.metadata.name: _NodeRoom(
                n.metadata.name, {k: _quantity(v) for k, v in ((n.status.allocatable if n.status else None) or {}).items()}, {}
            )
            for n in nodes
            if n.metadata is not None and n.metadata.name
        }
        for pod in pods:
            node = pod.spec.node_name if pod.spec else None
            if node not in rooms or (self._is_own(pod) and not with_own):
                continue  # Forge's own attempts are counted by the scheduler as running jobs
            if pod.status is not None and pod.status.phase in ("Succeeded", "Failed"):
                continue
            for k, v in _requests(pod).items():
                rooms[node].used[k] = rooms[node].used.get(k, Decimal(0)) + v
        return rooms

    def _is_own(self, pod: V1Pod) -> bool:
        labels = (pod.metadata.labels if pod.metadata else None) or {}
        namespace = pod.metadata.namespace if pod.metadata else None
        return labels.get("app.kubernetes.io/managed-by") == APP_LABELS["app.kubernetes.io/managed-by"] and namespace == self.namespace

    def _device_capacity(self, profile: Profile, rooms: list[_NodeRoom]) -> Capacity | None:
        assert profile.resource is not None
        offering = [r for r in rooms if r.allocatable.get(profile.resource, Decimal(0)) > 0]
        if not offering:
            return None  # no node offers it: the profile is not there
        free = [int(r.free(profile.resource)) for r in offering]
        on_node = [int(r.allocatable[profile.resource]) for r in offering]
        detail = (
            f"{sum(free)} of {sum(on_node)} {profile.resource} free on {len(offering)} node(s) "
            f"(at most {max(free)} on one node; other workloads hold {sum(on_node) - sum(free)})"
        )
        # busy or not, a job can ever get one node's allocatable (one pod runs on one node)
        return Capacity(profile.name, sum(free), detail, per_job=max(on_node), allocatable=sum(on_node))

    def _cpu_capacity(self, rooms: list[_NodeRoom]) -> Capacity | None:
        if self.settings.kube_cpu_slots is not None:
            n = self.settings.kube_cpu_slots
            return Capacity("cpu", n, f"{n} CPU job(s) at once (configured)")
        if not rooms:
            return None
        cpu, memory = _quantity(self.settings.kube_cpu_request), _quantity(self.settings.kube_memory_request)

        def fitting(room: _NodeRoom, *, busy: bool) -> int:
            have_cpu = room.free("cpu") if busy else room.allocatable.get("cpu", Decimal(0))
            have_memory = room.free("memory") if busy else room.allocatable.get("memory", Decimal(0))
            by_cpu = int(have_cpu / cpu) if cpu > 0 else 1 << 16
            by_memory = int(have_memory / memory) if memory > 0 else 1 << 16
            return min(by_cpu, by_memory)

        fits = sum(fitting(room, busy=True) for room in rooms)
        ever = sum(fitting(room, busy=False) for room in rooms)
        detail = f"{fits} CPU job(s) fit the free CPU and memory of {len(rooms)} node(s) at {self.settings.kube_cpu_request} CPU / {self.settings.kube_memory_request} each"
        return Capacity("cpu", fits, detail, allocatable=ever)
