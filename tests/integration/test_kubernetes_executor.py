"""The Kubernetes executor's logic against the in-memory cluster (``kube_fake.FakeKube``), which
makes the transitions a cluster makes: pending reasons, image pulls, exits, OOM kills, deadlines,
stop by pod deletion, lost nodes and capacity; the scheduler and the log-relay with it (real
database and bus); and, when ``FORGE_TEST_KUBECONFIG`` names a cluster, one tiny real Job."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlparse

import asyncpg
import pytest

from forge_common.events import EpochCompleted, EpochCompletedData, LogLines, decode
from forge_common.outbox import OutboxRelay
from forge_common.settings import CommonSettings
from forge_common.states import JobState
from forge_common.storage import open_store
from forge_common.subjects import Subjects
from forge_log_relay import kubernetes_source
from forge_log_relay.kubernetes_source import KubernetesSource
from forge_log_relay.service import LogRelay
from forge_log_relay.settings import LogRelaySettings
from forge_scheduler.executors.base import ExitStatus, Handle, LaunchSpec
from forge_scheduler.executors.kubernetes import ABSENT_GRACE_SECONDS, LOST_AFTER_SECONDS, KubernetesExecutor, job_name
from forge_scheduler.service import Scheduler, decide_outcome
from forge_scheduler.settings import SchedulerSettings
from forge_sdk.protocol import Epoch, Outcome, Step, format_line, to_json

from .conftest import collect
from .helpers import insert_attempt, insert_job
from .kube_fake import FakeKube

NS = "forge"
UNSCHEDULABLE = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available."


def make_executor(fake: FakeKube, **overrides: Any) -> KubernetesExecutor:
    values: dict[str, Any] = {
        "kube_namespace": NS,
        "kube_pending_timeout_seconds": 600,
        "kube_image_pull_timeout_seconds": 120,
        "kube_cpu_request": "1",
        "kube_memory_request": "2Gi",
        **overrides,
    }
    return KubernetesExecutor(fake, SchedulerSettings(**values), clock=fake.now)


async def launch(executor: KubernetesExecutor, job_id: str = "job-1", attempt: int = 1, **spec: Any) -> tuple[Handle, str]:
    values: dict[str, Any] = {"command": ["python", "-m", "forge_trainers.classification"], "env": {"OUTPUT_DIR": "s3://b/x"}, **spec}
    handle = await executor.launch(LaunchSpec(job_id=job_id, attempt=attempt, run_ref=executor.run_ref(job_id, attempt), **values))
    return handle, job_name(job_id, attempt)


def outcome_line(state: str, epochs: int = 0, **extra: Any) -> str:
    return format_line(Outcome(state=state, epochs_completed=epochs, **extra))  # type: ignore[arg-type]


def decide(status: ExitStatus, result: Outcome | None, *, stop: bool = False, epochs: int = 0, last_error: str | None = None) -> Any:
    return decide_outcome(stop_requested=stop, exit_status=status, result=result, epochs_completed=epochs, last_error=last_error)


@pytest.fixture
def fake() -> FakeKube:
    cluster = FakeKube()
    cluster.add_node("gpu-1", {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "4", "pods": "110"})
    return cluster


# ---- one attempt's life ---------------------------------------------------------------------------


async def test_pending_with_a_reason_then_running_then_succeeded_with_the_outcome(fake: FakeKube) -> None:
    executor = make_executor(fake)
    handle, name = await launch(executor, accelerator="nvidia", devices=1)
    assert handle.run_ref == f"{NS}/{name}" and executor.log_uri(handle.run_ref) == f"k8s://{NS}/{name}"
    assert await executor.poll(handle) is None
    assert await executor.pending_reason(handle) == "waiting for the Kubernetes scheduler to place the trainer pod"

    fake.unschedulable(name, UNSCHEDULABLE)
    assert await executor.poll(handle) is None
    assert await executor.pending_reason(handle) == f"unschedulable: {UNSCHEDULABLE}"

    fake.schedule(name, "gpu-1")
    assert "ContainerCreating" in (await executor.pending_reason(handle) or "")
    fake.start(name)
    assert await executor.poll(handle) is None and await executor.pending_reason(handle) is None

    best = {"top1": 0.9}
    fake.write(
        name, f"epoch 1\n{format_line(Epoch(epoch=1, metrics=best, is_best=True))}\n{outcome_line('succeeded', 1, best_metrics=best)}\n"
    )
    fake.exit(name, 0)
    status = await executor.poll(handle)
    assert status == ExitStatus(returncode=0)
    result = await executor.read_result(handle)
    assert result is not None and result.state == "succeeded" and result.best_metrics == best
    assert decide(status, result).state is JobState.SUCCEEDED
    assert fake.pods_created == 1

    await executor.cleanup(handle)
    assert fake.job_deletions == [], "a finished Job stays until its TTL, so its log can be read to the end"


async def test_an_outcome_written_as_the_termination_message_is_read_from_there(fake: FakeKube) -> None:
    executor = make_executor(fake)
    handle, name = await launch(executor)
    fake.schedule(name, "gpu-1")
    fake.start(name)
    fake.write(name, "no progress lines from this trainer\n")
    written = Outcome(state="failed", reason="dataset_error", message="class folder 'cats' is empty", epochs_completed=0)
    fake.exit(name, 3, message=to_json(written))
    status = await executor.poll(handle)
    assert status is not None and status.returncode == 3 and status.reason is None
    result = await executor.read_result(handle)
    assert result is not None and (result.state, result.reason, result.message) == ("failed", "dataset_error", written.message)
    assert decide(status, result).reason == "dataset_error"


async def test_a_crash_leaves_its_log_tail_as_the_termination_message(fake: FakeKube) -> None:
    executor = make_executor(fake)
    handle, name = await launch(executor)
    fake.schedule(name, "gpu-1")
    fake.start(name)
    fake.write(name, "Traceback (most recent call last):\nValueError: bad learning rate\n")
    fake.write(name, outcome_line("failed", reason="trainer_crash", message="ValueError: bad learning rate") + "\n")
    fake.exit(name, 1)
    pod = fake.pod_of(name)
    terminated = pod.status.container_statuses[0].state.terminated  # type: ignore[index, union-attr]
    assert terminated is not None and "ValueError: bad learning rate" in (terminated.message or "")  # FallbackToLogsOnError
    status = await executor.poll(handle)
    assert status is not None and status.returncode == 1
    result = await executor.read_result(handle)
    assert result is not None and result.reason == "trainer_crash"
    assert await executor.last_error(handle) == "ValueError: bad learning rate"


async def test_an_image_that_cannot_be_pulled_fails_as_image_pull_after_the_timeout(fake: FakeKube) -> None:
    executor = make_executor(fake, kube_image_pull_timeout_seconds=120)
    handle, name = await launch(executor, image="registry.example/team/trainer:missing")
    fake.schedule(name, "gpu-1")
    fake.pull_fails(name, "ErrImagePull", 'failed to pull "registry.example/team/trainer:missing": not found')
    assert await executor.poll(handle) is None
    reason = await executor.pending_reason(handle)
    assert reason is not None and reason.startswith("cannot pull the trainer image registry.example/team/trainer:missing (ErrImagePull)")
    fake.advance(60)
    fake.pull_fails(name, "ImagePullBackOff", 'Back-off pulling image "registry.example/team/trainer:missing"')
    assert await executor.poll(handle) is None  # 60 s of 120
    fake.advance(61)
    status = await executor.poll(handle)
    assert status is not None and status.reason == "image_pull" and status.returncode is None
    assert "registry.example/team/trainer:missing" in (status.error or "")
    assert (NS, name) not in fake.jobs, "the Job is deleted, so it can never start later"
    decision = decide(status, None)
    assert (decision.state, decision.reason) == (JobState.FAILED, "image_pull") and "image-pull Secret" in (decision.hint or "")


async def test_an_invalid_image_name_fails_at_once(fake: FakeKube) -> None:
    executor = make_executor(fake)
    handle, name = await launch(executor, image="Not A Valid Image")
    fake.schedule(name, "gpu-1")
    fake.pull_fails(name, "InvalidImageName", 'couldn\'t parse image name "Not A Valid Image"')
    status = await executor.poll(handle)
    assert status is not None and status.reason == "image_pull"


async def test_a_missing_secret_fails_the_attempt_with_the_kubelets_message(fake: FakeKube) -> None:
    executor = make_executor(fake, kube_image_pull_timeout_seconds=30)
    handle, name = await launch(executor)
    fake.schedule(name, "gpu-1")
    fake.config_fails(name, 'secret "forge-s3" not found')
    assert 'secret "forge-s3" not found' in (await executor.pending_reason(handle) or "")
    fake.advance(31)
    assert await executor.poll(handle) is None  # the timer starts when the executor first sees it
    fake.advance(31)
    status = await executor.poll(handle)
    assert status is not None and 'secret "forge-s3" not found' in (status.error or "")
    assert decide(status, None).state is JobState.FAILED


async def test_unschedulable_for_longer_than_the_timeout_fails_as_unschedulable(fake: FakeKube) -> None:
    executor = make_executor(fake, kube_pending_timeout_seconds=600)
    handle, name = await launch(executor, accelerator="nvidia", devices=8)
    fake.unschedulable(name, UNSCHEDULABLE)
    fake.advance(599)
    assert await executor.poll(handle) is None
    fake.advance(2)
    status = await executor.poll(handle)
    assert status is not None and status.reason == "unschedulable" and UNSCHEDULABLE in (status.error or "")
    assert (NS, name) not in fake.jobs
    decision = decide(status, None)
    assert (decision.state, decision.reason) == (JobState.FAILED, "unschedulable") and UNSCHEDULABLE in (decision.message or "")


async def test_oom_killed_is_out_of_memory(fake: FakeKube) -> None:
    executor = make_executor(fake)
    handle, name = await launch(executor)
    fake.schedule(name, "gpu-1")
    fake.start(name)
    fake.write(name, "epoch 1 step 10\n")
    fake.oom(name)
    status = await executor.poll(handle)
    assert status is not None and (status.returncode, status.signal, status.reason) == (137, signal.SIGKILL, "out_of_memory")
    assert await executor.read_result(handle) is None  # killed before the SDK could say anything
    decision = decide(status, None)
    assert (decision.state, decision.reason) == (JobState.FAILED, "out_of_memory")


async def test_the_deadline_fails_the_attempt_even_when_the_trainer_reports_stopped(fake: FakeKube) -> None:
    executor = make_executor(fake)
    handle, name = await launch(executor, time_limit_seconds=3600)
    fake.schedule(name, "gpu-1")
    fake.start(name)
    fake.advance(3600)
    fake.expire_deadline(name)
    assert fake.signals == [(fake.pod_of(name).metadata.name, "SIGTERM")]  # type: ignore[union-attr]
    assert await executor.poll(handle) is None  # the trainer is saving within its grace
    fake.write(name, outcome_line("stopped", 2) + "\n")
    fake.exit(name, 0)
    status = await executor.poll(handle)
    assert status is not None and status.reason == "deadline_exceeded"
    decision = decide(status, await executor.read_result(handle), epochs=2)
    assert (decision.state, decision.reason) == (JobState.FAILED, "deadline_exceeded")


async def test_stop_deletes_the_pod_with_the_grace_period_and_reads_the_outcome(fake: FakeKube) -> None:
    executor = make_executor(fake)
    handle, name = await launch(executor, stop_grace_seconds=90)
    fake.schedule(name, "gpu-1")
    fake.start(name)
    fake.write(name, format_line(Epoch(epoch=1, metrics={"acc": 0.5}, is_best=True)) + "\n")
    pod = fake.pod_of(name).metadata.name  # type: ignore[union-attr]

    assert await executor.terminate(handle, 90) is True
    assert fake.pod_deletions == [(NS, pod, 90)] and fake.signals == [(pod, "SIGTERM")]
    assert await executor.poll(handle) is None  # finishing its step, saving
    assert await executor.terminate(handle, 90) is True and fake.signals == [(pod, "SIGTERM")], "a second stop sends nothing new"

    fake.write(name, "stopping after step 17\n" + outcome_line("stopped", 1, best_metrics={"acc": 0.5}) + "\n")
    fake.exit(name, 0)
    status = await executor.poll(handle)
    assert status == ExitStatus(returncode=0)
    result = await executor.read_result(handle)
    assert result is not None and result.state == "stopped" and result.best_metrics == {"acc": 0.5}
    assert decide(status, result, stop=True, epochs=1).state is JobState.STOPPED

    # the Job controller removes the deleted pod soon after: the Job's status still tells the exit,
    # the outcome is gone with the pod, and the decision stays right without it
    fake.reap()
    late = await executor.poll(handle)
    assert late == ExitStatus(returncode=0) and await executor.read_result(handle) is None
    assert decide(late, None, stop=True, epochs=1).state is JobState.STOPPED
    assert fake.pods_created == 1, "the deleted pod was not replaced"


async def test_a_trainer_that_ignores_sigterm_is_killed(fake: FakeKube) -> None:
    executor = make_executor(fake)
    handle, name = await launch(executor)
    fake.schedule(name, "gpu-1")
    fake.start(name)
    await executor.terminate(handle, 60)
    assert await executor.kill(handle) is True
    assert [g for _, _, g in fake.pod_deletions] == [60, 0]
    status = await executor.poll(handle)
    assert status is not None and status.returncode == 137
    assert decide(status, None, stop=True, epochs=0).state is JobState.CANCELED
    assert fake.pods_created == 1


async def test_stop_while_pending_cancels_without_a_replacement_pod(fake: FakeKube) -> None:
    executor = make_executor(fake)
    handle, name = await launch(executor)
    fake.unschedulable(name, UNSCHEDULABLE)
    assert await executor.terminate(handle, 60) is True
    status = await executor.poll(handle)
    assert status is not None and status.lost
    assert decide(status, None, stop=True).state is JobState.CANCELED
    assert fake.pods_created == 1 and not fake.pods


async def test_a_lost_node_is_node_lost_and_retryable(fake: FakeKube) -> None:
    executor = make_executor(fake)
    handle, name = await launch(executor)
    fake.schedule(name, "gpu-1")
    fake.start(name)
    fake.write(name, "training\n")
    fake.lose_node("gpu-1")
    status = await executor.poll(handle)
    assert status is not None and status.lost and status.reason == "node_lost" and status.returncode is None
    decision = decide(status, None)
    assert (decision.state, decision.reason) == (JobState.FAILED, "node_lost")
    assert fake.pods_created == 1, "the Job controller did not start a second pod: a retry is the scheduler's decision"


async def test_a_pod_whose_kubelet_stopped_answering_is_lost_after_its_grace(fake: FakeKube) -> None:
    executor = make_executor(fake)
    handle, name = await launch(executor)
    fake.schedule(name, "gpu-1")
    fake.start(name)
    await executor.terminate(handle, 30)  # the kubelet never reports the exit
    fake.advance(30 + LOST_AFTER_SECONDS - 1)
    assert await executor.poll(handle) is None
    fake.advance(2)
    status = await executor.poll(handle)
    assert status is not None and status.lost and status.reason == "node_lost"


async def test_a_job_that_vanished_with_its_pod_is_lost(fake: FakeKube) -> None:
    executor = make_executor(fake)
    handle, name = await launch(executor)
    await fake.delete_job(NS, name)
    assert await executor.poll(handle) is None  # maybe not created yet: another replica may be launching it
    fake.advance(ABSENT_GRACE_SECONDS + 1)
    status = await executor.poll(handle)
    assert status is not None and status.lost and status.reason is None
    assert decide(status, None).reason == "interrupted"


async def test_launching_the_same_attempt_twice_reattaches(fake: FakeKube) -> None:
    executor = make_executor(fake)
    first, _ = await launch(executor, job_id="job-9")
    again = await executor.launch(
        LaunchSpec(job_id="job-9", attempt=1, run_ref=first.run_ref, command=["python"], env={})
    )  # a scheduler that died after creating the Job
    assert again == first and fake.pods_created == 1


async def test_cleanup_deletes_a_job_whose_pod_never_ended(fake: FakeKube) -> None:
    executor = make_executor(fake)
    handle, name = await launch(executor)
    fake.schedule(name, "gpu-1")
    fake.start(name)
    await executor.cleanup(handle)
    pod = fake.pod_of(name).metadata.name  # type: ignore[union-attr]
    assert (NS, name) not in fake.jobs and (pod, "SIGKILL") in fake.signals
    fake.reap()
    assert not fake.pods


# ---- capacity ---------------------------------------------------------------------------------------


async def test_capacity_is_allocatable_minus_what_other_workloads_request(fake: FakeKube) -> None:
    fake.add_node("gpu-2", {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "2"}, taints=[("nvidia.com/gpu", "", "NoSchedule")])
    fake.add_node("cpu-1", {"cpu": "4", "memory": "16Gi"})
    fake.add_node("broken", {"cpu": "64", "memory": "256Gi", "amd.com/gpu": "8"}, ready=False)
    fake.add_node("drained", {"cpu": "64", "memory": "256Gi", "gpu.intel.com/xe": "8"}, unschedulable=True)
    fake.add_pod("other", "inference", node="gpu-1", requests={"nvidia.com/gpu": "1", "cpu": "4", "memory": "8Gi"})
    fake.add_pod("other", "finished", node="gpu-1", requests={"nvidia.com/gpu": "2"}, phase="Succeeded")
    executor = make_executor(fake)
    _, name = await launch(executor, accelerator="nvidia")  # Forge's own: counted by the scheduler
    fake.schedule(name, "gpu-1")
    fake.start(name)

    found = {c.profile: c for c in await executor.capacity()}
    assert set(found) == {"cpu", "nvidia"}, "only what some node offers (amd: not Ready; intel: cordoned)"
    assert found["nvidia"].total == 3 and "3 of 4 nvidia.com/gpu free on 1 node(s)" in found["nvidia"].detail
    # cpu: gpu-1 has 12 CPUs / 56Gi free (by 1 CPU / 2Gi: 12), cpu-1 4 / 16Gi (4); gpu-2 is tainted
    assert found["cpu"].total == 16

    tolerant = make_executor(fake, kube_tolerations={"*": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]})
    found = {c.profile: c for c in await tolerant.capacity()}
    assert found["nvidia"].total == 5 and found["cpu"].total == 16 + 8
    assert found["nvidia"].per_job == 4, "one pod runs on one node: gpu-1 has 4 (3 of them free now), gpu-2 has 2"
    assert (found["nvidia"].allocatable, found["nvidia"].per_job_now) == (6, 2)  # now: Forge's own attempt holds one too

    pinned = make_executor(fake, kube_cpu_slots=2, kube_node_selector={"nvidia": {"pool": "a100"}})
    found = {c.profile: c for c in await pinned.capacity()}
    assert found["cpu"].total == 2 and "nvidia" not in found  # no node carries the label the profile asks for


async def test_a_wide_attempt_needs_one_node_with_room_not_room_in_sum() -> None:
    fake = FakeKube()
    for node in ("gpu-a", "gpu-b"):
        fake.add_node(node, {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "4", "pods": "110"})
    executor = make_executor(fake)
    for i, node in enumerate(("gpu-a", "gpu-b")):  # two of Forge's 2-GPU attempts, spread over the nodes
        _, name = await launch(executor, job_id=f"half-{i}", accelerator="nvidia", devices=2)
        fake.schedule(name, node)
        fake.start(name)
    (nvidia,) = [c for c in await executor.capacity() if c.profile == "nvidia"]
    assert (nvidia.total, nvidia.per_job) == (8, 4)  # what can ever run: a 4-GPU job is accepted
    assert nvidia.per_job_now == 2  # what can start now: it waits until a node is whole again


async def test_capacity_without_cluster_wide_pod_access_says_so(fake: FakeKube) -> None:
    fake.forbid_cluster_wide = True
    fake.add_pod("other", "inference", node="gpu-1", requests={"nvidia.com/gpu": "1"})
    found = {c.profile: c for c in await make_executor(fake).capacity()}
    assert found["nvidia"].total == 4 and "not counted" in found["nvidia"].detail


# ---- with the scheduler (real database and bus) -------------------------------------------------


@pytest.fixture
def scheduler_on(pool: asyncpg.Pool, common_settings: CommonSettings) -> Any:
    def make(fake: FakeKube) -> Scheduler:
        settings = SchedulerSettings(executor="kubernetes", kube_namespace=NS, poll_seconds=0.05, stop_grace_seconds=75)
        executor = KubernetesExecutor(fake, settings, clock=fake.now)
        return Scheduler(pool, open_store(common_settings), executor, Subjects(common_settings.bus_prefix), settings, common_settings)

    return make


async def _attempt(pool: asyncpg.Pool, job_id: uuid.UUID) -> asyncpg.Record:
    async with pool.acquire() as conn:
        row = await conn.fetchrow("SELECT * FROM attempts WHERE job_id = $1 ORDER BY attempt DESC LIMIT 1", job_id)
    assert row is not None
    return row


async def _job(pool: asyncpg.Pool, job_id: uuid.UUID) -> asyncpg.Record:
    async with pool.acquire() as conn:
        row = await conn.fetchrow("SELECT * FROM jobs WHERE id = $1", job_id)
    assert row is not None
    return row


async def test_the_scheduler_runs_a_job_as_a_kubernetes_job(pool: asyncpg.Pool, scheduler_on: Any, fake: FakeKube) -> None:
    scheduler = scheduler_on(fake)
    async with pool.acquire() as conn:
        job_id = await insert_job(conn, state="queued", name="k8s", attempt=0)
    assert await scheduler.admit() == [job_id]
    name = job_name(str(job_id), 1)
    attempt = await _attempt(pool, job_id)
    assert (attempt["executor"], attempt["run_ref"], attempt["log_uri"]) == ("kubernetes", f"{NS}/{name}", f"k8s://{NS}/{name}")
    job = fake.jobs[(NS, name)]
    container = job.spec.template.spec.containers[0]  # type: ignore[union-attr]
    assert container.command == ["python", "-m", "forge_trainers.classification"]
    assert not [e for e in container.env or [] if e.name.startswith("S3_") and e.value is not None and "KEY" in e.name]

    await scheduler.check_running()
    assert (await _attempt(pool, job_id))["pending_reason"] == "waiting for the Kubernetes scheduler to place the trainer pod"
    fake.unschedulable(name, UNSCHEDULABLE)
    await scheduler.check_running()
    assert (await _attempt(pool, job_id))["pending_reason"] == f"unschedulable: {UNSCHEDULABLE}"

    fake.schedule(name, "gpu-1")
    fake.start(name)
    await scheduler.check_running()
    assert (await _attempt(pool, job_id))["pending_reason"] is None
    fake.write(name, outcome_line("succeeded", 2, best_metrics={"top1": 0.75}) + "\n")
    fake.exit(name, 0)
    assert await scheduler.check_running() == 1
    row = await _job(pool, job_id)
    assert row["state"] == "succeeded" and row["epochs_completed"] == 2 and row["best_metrics"] == {"top1": 0.75}
    assert (await _attempt(pool, job_id))["exit_code"] == 0


async def test_a_trainer_that_never_started_has_the_executors_account_as_its_log(
    pool: asyncpg.Pool, js: Any, common_settings: CommonSettings, scheduler_on: Any, fake: FakeKube
) -> None:
    scheduler = scheduler_on(fake)
    async with pool.acquire() as conn:
        job_id = await insert_job(conn, state="queued", name="k8s-no-image", attempt=0)
    await scheduler.admit()
    name = job_name(str(job_id), 1)
    fake.schedule(name, "gpu-1")
    await scheduler.check_running()  # pending: waiting for the container
    fake.pull_fails(name, "InvalidImageName", 'couldn\'t parse image name "Not A Valid Image"')
    assert await scheduler.check_running() == 1
    row = await _job(pool, job_id)
    assert row["state"] == "failed" and row["error"]["reason"] == "image_pull"
    async with pool.acquire() as conn:
        lines = [
            r["text"] for r in await conn.fetch("SELECT text FROM log_lines WHERE job_id = $1 AND attempt = 1 ORDER BY line_no", job_id)
        ]
    assert lines[0].startswith("[forge] it was waiting: ") and "cannot pull the trainer image" in lines[1]
    assert lines[-1].startswith("[forge] hint: ")
    await OutboxRelay(pool, js, producer="scheduler").drain()
    (msg,) = await collect(js, Subjects(common_settings.bus_prefix).job(job_id, "logs"), 1)
    event = decode(msg.data)
    assert isinstance(event, LogLines) and event.data.eof and [line.text for line in event.data.lines] == lines  # followers stop waiting


async def test_stop_through_the_scheduler_is_a_graceful_pod_deletion(pool: asyncpg.Pool, scheduler_on: Any, fake: FakeKube) -> None:
    scheduler = scheduler_on(fake)
    async with pool.acquire() as conn:
        job_id = await insert_job(conn, state="queued", name="k8s-stop", attempt=0)
    await scheduler.admit()
    name = job_name(str(job_id), 1)
    fake.schedule(name, "gpu-1")
    fake.start(name)
    await scheduler.record_epoch(
        EpochCompleted.of(EpochCompletedData(job_id=job_id, attempt=1, epoch=1, metrics={"acc": 0.4}, is_best=True), source="/test")
    )
    await scheduler.request_stop(job_id)
    pod = fake.pod_of(name).metadata.name  # type: ignore[union-attr]
    assert fake.pod_deletions == [(NS, pod, 75)] and fake.signals == [(pod, "SIGTERM")]
    assert await scheduler.check_running() == 0  # saving within its grace
    fake.write(name, outcome_line("stopped", 1, best_metrics={"acc": 0.4}) + "\n")
    fake.exit(name, 0)
    assert await scheduler.check_running() == 1
    row = await _job(pool, job_id)
    assert row["state"] == "stopped" and row["epochs_completed"] == 1


# ---- the log-relay follows pod logs --------------------------------------------------------------


@pytest.fixture
def relay_on_fake(fake: FakeKube, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeKube]:
    monkeypatch.setattr(kubernetes_source, "MIN_INTERVAL_SECONDS", 0.01)
    kubernetes_source.use_client(fake, clock=lambda: fake.now().timestamp())
    yield fake
    kubernetes_source.use_client(None)


def training_lines(epochs: int) -> list[str]:
    out, step = ["starting"], 0
    for e in range(1, epochs + 1):
        for _ in range(3):
            step += 1
            out.append(format_line(Step(step=step, epoch=e, metrics={"loss": 1.0 / step})))
        out.append(f"epoch {e} done")
        out.append(format_line(Epoch(epoch=e, metrics={"acc": e / 10}, is_best=True, total_epochs=epochs)))
    return out


async def wait_for(predicate: Any, timeout: float = 20.0) -> None:
    async with asyncio.timeout(timeout):
        while not await predicate():
            await asyncio.sleep(0.02)


async def test_the_log_relay_follows_a_pod_log_without_duplicates_across_a_restart(
    pool: asyncpg.Pool, js: Any, common_settings: CommonSettings, relay_on_fake: FakeKube
) -> None:
    fake = relay_on_fake
    subjects = Subjects(common_settings.bus_prefix)
    async with pool.acquire() as conn:
        job_id = await insert_job(conn)
    executor = make_executor(fake)
    handle, name = await launch(executor, job_id=str(job_id))
    async with pool.acquire() as conn:
        await insert_attempt(conn, job_id, log_uri=executor.log_uri(handle.run_ref))
    fake.schedule(name, "gpu-1")
    fake.start(name)
    lines = training_lines(3)  # 16 lines: 9 steps, 3 epochs, 4 plain

    async def cursor_at(n: int) -> Any:
        async def check() -> bool:
            async with pool.acquire() as conn:
                return (await conn.fetchval("SELECT line_no FROM log_cursors WHERE job_id = $1", job_id)) == n

        return check

    first = LogRelay(pool, js, subjects, LogRelaySettings(poll_seconds=0.01))
    await first.resume()
    fake.write(name, "".join(x + "\n" for x in lines[:3]))
    await wait_for(await cursor_at(3))
    fake.write(name, "".join(x + "\n" for x in lines[3:6]))  # the same instant as the lines already read
    await wait_for(await cursor_at(6))
    fake.advance(5)
    fake.write(name, lines[6] + "\n")
    await wait_for(await cursor_at(7))
    await first.close()  # the relay goes away mid-run

    for line in lines[7:]:
        fake.advance(0.25)
        fake.write(name, line + "\n")
    fake.write(name, "last words without a newline")
    fake.exit(name, 0)
    async with pool.acquire() as conn:
        await conn.execute("UPDATE attempts SET finished_at = now() WHERE job_id = $1", job_id)
    second = LogRelay(pool, js, subjects, LogRelaySettings(poll_seconds=0.01))
    await second.resume()

    async def done() -> bool:
        async with pool.acquire() as conn:
            return bool(await conn.fetchval("SELECT done FROM log_cursors WHERE job_id = $1", job_id))

    await wait_for(done)
    await second.close()
    async with pool.acquire() as conn:
        texts = [r["text"] for r in await conn.fetch("SELECT text FROM log_lines WHERE job_id = $1 ORDER BY line_no", job_id)]
        steps = await conn.fetchval("SELECT count(*) FROM metric_points WHERE job_id = $1 AND scope = 'step'", job_id)
    assert texts == ["starting", "epoch 1 done", "epoch 2 done", "epoch 3 done", "last words without a newline"]
    assert steps == 9
    epochs = [decode(m.data) for m in await collect(js, subjects.job(job_id, "epoch-completed"), 3)]
    assert [e.data.epoch for e in epochs] == [1, 2, 3]


async def test_the_pod_log_source_maps_offsets_exactly(fake: FakeKube) -> None:
    executor = make_executor(fake)
    _, name = await launch(executor)
    source = KubernetesSource(fake, NS, name, min_interval=0, overlap_seconds=2, clock=lambda: fake.now().timestamp())
    assert await source.aread(0, 1000) == b""  # not started: nothing, and no error
    fake.schedule(name, "gpu-1")
    fake.start(name)
    text = "ünïcode line\n" + "same instant\n" * 3
    fake.write(name, text)
    assert await source.aread(0, 1000) == text.encode()
    fake.write(name, "same instant\n" * 2)  # identical timestamps as lines already held
    data = await source.aread(len(text.encode()), 1000)
    assert data == b"same instant\n" * 2
    offset = len(text.encode()) + len(data)
    fake.advance(3600)  # far beyond the overlap: only the window since the newest line is asked for
    fake.write(name, "an hour later\npartial")
    assert await source.aread(offset, 1000) == b"an hour later\npartial"
    assert await source.aread(offset, 5) == b"an ho"  # limit honoured
    restarted = KubernetesSource(fake, NS, name, min_interval=0, clock=lambda: fake.now().timestamp())
    assert await restarted.aread(offset, 1000) == b"an hour later\npartial"
    assert await restarted.aread(0, 14) == "ünïcode line\n".encode()[:14]  # an earlier offset: re-read


# ---- a real cluster, when one is given ---------------------------------------------------------------

KUBECONFIG = os.environ.get("FORGE_TEST_KUBECONFIG")


@pytest.mark.skipif(
    not KUBECONFIG,
    reason="needs a real Kubernetes cluster: set FORGE_TEST_KUBECONFIG to a kubeconfig file "
    "(optionally FORGE_TEST_KUBE_NAMESPACE, default 'default', and FORGE_TEST_KUBE_IMAGE, default python:3.11-slim)",
)
async def test_a_real_cluster_runs_follows_and_deletes_a_tiny_job() -> None:
    from kubernetes.client import V1ObjectMeta, V1Secret

    from forge_scheduler.executors.kube_client import OfficialKubeClient

    assert KUBECONFIG is not None
    client = OfficialKubeClient.from_config(KUBECONFIG)
    namespace = os.environ.get("FORGE_TEST_KUBE_NAMESPACE", "default")
    suffix = uuid.uuid4().hex[:8]
    secret = f"forge-test-s3-{suffix}"
    await asyncio.to_thread(
        client.core.create_namespaced_secret,
        namespace,
        V1Secret(metadata=V1ObjectMeta(name=secret), string_data={"S3_ACCESS_KEY": "unused", "S3_SECRET_KEY": "unused"}),
    )
    settings = SchedulerSettings(
        kube_namespace=namespace, kube_s3_secret_name=secret, kube_cpu_request="50m", kube_memory_request="128Mi", kube_ttl_seconds=300
    )
    executor = KubernetesExecutor(client, settings)
    progress = format_line(Step(step=1, epoch=1, metrics={"loss": 0.5}))
    script = f"print('hello from forge'); print({progress!r}); print({outcome_line('succeeded', 1)!r})"
    job_id = f"itest-{suffix}"
    spec = LaunchSpec(
        job_id=job_id,
        attempt=1,
        run_ref=executor.run_ref(job_id, 1),
        command=["python", "-c", script],
        env={"FORGE_JOB_ID": job_id},
        image=os.environ.get("FORGE_TEST_KUBE_IMAGE", "python:3.11-slim"),
        stop_grace_seconds=5,
        time_limit_seconds=600,
    )
    handle = await executor.launch(spec)
    name = job_name(job_id, 1)
    try:
        source = KubernetesSource(client, namespace, name, min_interval=0.5)
        status, output, reasons = None, b"", set()
        async with asyncio.timeout(300):
            while status is None or progress.encode() not in output:
                status = status or await executor.poll(handle)
                if status is None:
                    reasons.add(await executor.pending_reason(handle))
                output += await source.aread(len(output), 1 << 20)
                await asyncio.sleep(1)
        assert status.returncode == 0, (status, reasons)
        assert b"hello from forge" in output and progress.encode() in output
        result = await executor.read_result(handle)
        assert result is not None and result.state == "succeeded"
    finally:
        await client.delete_job(namespace, name, grace_seconds=0)
        await asyncio.to_thread(client.core.delete_namespaced_secret, secret, namespace)
    async with asyncio.timeout(120):
        while await client.list_pods(namespace, f"forge.run={name}"):
            await asyncio.sleep(1)
    assert await client.read_job(namespace, name) is None


# ---- the official client's wiring, against a stand-in API server -------------------------------------


class _StandInApi(BaseHTTPRequestHandler):
    """Answers a few Kubernetes API paths with canned responses and records every request."""

    routes: dict[tuple[str, str], tuple[int, bytes]] = {}
    seen: list[tuple[str, str, bytes]] = []

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.seen.append((self.command, self.path, body))
        missing = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "not found", "code": 404})
        status, payload = self.routes.get((self.command, urlparse(self.path).path), (404, missing.encode()))
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_DELETE = _answer

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _status(code: int, message: str) -> tuple[int, bytes]:
    return code, json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "code": code}).encode()


@pytest.fixture
def stand_in_api() -> Iterator[tuple[str, type[_StandInApi]]]:
    handler = type("Api", (_StandInApi,), {"routes": {}, "seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


async def test_the_official_client_speaks_the_api_and_translates_its_errors(stand_in_api: tuple[str, type[_StandInApi]]) -> None:
    from kubernetes.client import ApiClient, Configuration, CoreV1Api

    from forge_log_relay.kubernetes_source import _OfficialPodLogs
    from forge_scheduler.executors.kube_client import KubeConflict, KubeForbidden, OfficialKubeClient
    from forge_scheduler.executors.kubernetes import build_job, manifest

    url, api = stand_in_api
    configuration = Configuration(host=url)
    client = OfficialKubeClient(ApiClient(configuration))
    executor = KubernetesExecutor(client, SchedulerSettings(kube_namespace=NS))
    spec = LaunchSpec(job_id="j1", attempt=1, run_ref=executor.run_ref("j1", 1), command=["python"], env={})
    job = manifest(build_job(spec, executor.settings))
    name = job["metadata"]["name"]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p1", "namespace": NS, "labels": {"forge.run": name}}}
    api.routes.update(
        {
            ("POST", f"/apis/batch/v1/namespaces/{NS}/jobs"): (201, json.dumps(job).encode()),
            ("GET", f"/api/v1/namespaces/{NS}/pods"): (200, json.dumps({"kind": "PodList", "apiVersion": "v1", "items": [pod]}).encode()),
            ("GET", "/api/v1/pods"): _status(403, 'pods is forbidden: User "system:serviceaccount:forge:forge-scheduler" cannot list'),
            ("GET", f"/api/v1/namespaces/{NS}/pods/p1/log"): (200, b"\xff\xfe raw bytes\n"),
            ("GET", f"/api/v1/namespaces/{NS}/pods/p2/log"): _status(400, 'container "trainer" in pod "p2" is waiting to start'),
            ("DELETE", f"/api/v1/namespaces/{NS}/pods/p1"): (200, json.dumps(pod).encode()),
            ("DELETE", f"/apis/batch/v1/namespaces/{NS}/jobs/{name}"): (200, json.dumps({"kind": "Status", "status": "Success"}).encode()),
            ("GET", "/api/v1/nodes"): (200, json.dumps({"kind": "NodeList", "apiVersion": "v1", "items": []}).encode()),
        }
    )
    created = await client.create_job(NS, build_job(spec, executor.settings))
    assert created.metadata is not None and created.metadata.name == name
    method, _, body = api.seen[-1]
    assert method == "POST" and json.loads(body) == job, "the manifest reaches the API exactly as validated"
    assert await client.read_job(NS, "missing") is None
    assert [p.metadata.name for p in await client.list_pods(NS, f"forge.run={name}") if p.metadata] == ["p1"]
    assert "labelSelector=forge.run" in api.seen[-1][1]
    with pytest.raises(KubeForbidden, match="cannot list"):
        await client.list_pods(None)
    assert await client.read_pod_log(NS, "p1", container="trainer", tail_lines=5) == b"\xff\xfe raw bytes\n"
    assert "tailLines=5" in api.seen[-1][1] and "container=trainer" in api.seen[-1][1]
    assert await client.read_pod_log(NS, "p2", container="trainer") is None
    assert await client.delete_pod(NS, "p1", 30) is True and "gracePeriodSeconds=30" in api.seen[-1][1]
    assert await client.delete_pod(NS, "gone", 30) is False
    assert await client.delete_job(NS, name) is True and "propagationPolicy=Background" in api.seen[-1][1]
    assert await client.list_nodes() == []

    api.routes[("POST", f"/apis/batch/v1/namespaces/{NS}/jobs")] = _status(409, f'jobs.batch "{name}" already exists')
    with pytest.raises(KubeConflict, match="already exists"):
        await client.create_job(NS, build_job(spec, executor.settings))

    relay_side = _OfficialPodLogs(CoreV1Api(ApiClient(configuration)))
    assert await relay_side.read_pod_log(NS, "p1", container="trainer", timestamps=True) == b"\xff\xfe raw bytes\n"
    assert "timestamps=true" in api.seen[-1][1]
    assert await relay_side.read_pod_log(NS, "p2", container="trainer") is None
