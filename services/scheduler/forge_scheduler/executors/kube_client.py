"""The handful of Kubernetes operations the Kubernetes executor needs, behind one small interface.

Two implementations: ``OfficialKubeClient`` on the official ``kubernetes`` client (its calls block,
so each runs in a worker thread), and ``tests/integration/kube_fake.FakeKube`` (in memory, driven by tests). Both
speak the official client's models (``V1Job``, ``V1Pod``, ``V1Node``), so the executor's logic reads
the same objects in tests as against a cluster. Errors are translated into the few exceptions
below, so callers never depend on the transport's exception types.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from kubernetes.client import ApiClient, V1Job, V1Node, V1Pod


class KubeError(RuntimeError):
    """A Kubernetes API call failed; the message says which call and what the API answered."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class KubeConflict(KubeError):
    """The object already exists (HTTP 409)."""


class KubeForbidden(KubeError):
    """The service account may not do this (HTTP 403): its Role or ClusterRole lacks a rule."""


class KubeClient(Protocol):
    """What the executor (and the log-relay's pod-log source) asks of a cluster."""

    async def create_job(self, namespace: str, job: V1Job) -> V1Job:
        """Create a Job; KubeConflict when one of that name exists."""
        ...

    async def read_job(self, namespace: str, name: str) -> V1Job | None:
        """The Job, or None when there is none (never created, deleted, or removed by its TTL)."""
        ...

    async def delete_job(self, namespace: str, name: str, *, grace_seconds: int | None = None) -> bool:
        """Delete a Job and, in the background, its pods; False when there was none."""
        ...

    async def list_pods(self, namespace: str | None, label_selector: str | None = None, field_selector: str | None = None) -> list[V1Pod]:
        """Pods in a namespace (None: every namespace) matching the selectors."""
        ...

    async def delete_pod(self, namespace: str, name: str, grace_seconds: int) -> bool:
        """Delete a pod: its containers get SIGTERM, then SIGKILL after the grace; False when gone."""
        ...

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
        """A container's output as bytes; None when there is none to read (not started, or gone)."""
        ...

    async def list_nodes(self) -> list[V1Node]: ...


def _api_error(call: str, exc: Exception) -> KubeError:
    """The API's own message (its Status object) is what tells a user what to fix."""
    status = getattr(exc, "status", None)
    body = getattr(exc, "body", None)
    detail = str(getattr(exc, "reason", "") or exc)
    if body:
        try:
            detail = json.loads(body).get("message") or detail
        except (ValueError, AttributeError):
            detail = str(body)[:500]
    message = f"kubernetes {call} failed ({status}): {detail}"
    if status == 409:
        return KubeConflict(message, status)
    if status == 403:
        return KubeForbidden(f"{message} (grant it in the scheduler's Role/ClusterRole)", status)
    return KubeError(message, status)


class OfficialKubeClient:
    """``KubeClient`` on the official client (BatchV1Api, CoreV1Api)."""

    def __init__(self, api_client: ApiClient) -> None:
        from kubernetes.client import BatchV1Api, CoreV1Api

        self.api_client = api_client
        self.batch = BatchV1Api(api_client)
        self.core = CoreV1Api(api_client)

    @classmethod
    def from_config(cls, kubeconfig: Path | str | None = None) -> OfficialKubeClient:
        """From a kubeconfig file, or (when none is given) the pod's in-cluster service account."""
        from kubernetes import client, config

        if kubeconfig is not None:
            path = Path(kubeconfig).expanduser()
            if not path.is_file():
                raise ValueError(f"kubeconfig {path} does not exist")
            return cls(config.new_client_from_config(config_file=str(path)))  # type: ignore[no-untyped-call]
        configuration = client.Configuration()
        try:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except config.ConfigException as exc:
            raise ValueError(f"not running inside a cluster ({exc}): set a kubeconfig file for the Kubernetes executor") from None
        return cls(client.ApiClient(configuration))

    @staticmethod
    async def _call(call: str, fn: object, *args: object, missing_ok: bool = False, **kwargs: object) -> object:
        from kubernetes.client.exceptions import ApiException

        try:
            return await asyncio.to_thread(fn, *args, **kwargs)  # type: ignore[arg-type]
        except ApiException as exc:
            if missing_ok and exc.status == 404:
                return None
            raise _api_error(call, exc) from None

    async def create_job(self, namespace: str, job: V1Job) -> V1Job:
        return await self._call("create job", self.batch.create_namespaced_job, namespace, job)  # type: ignore[return-value]

    async def read_job(self, namespace: str, name: str) -> V1Job | None:
        return await self._call("read job", self.batch.read_namespaced_job, name, namespace, missing_ok=True)  # type: ignore[return-value]

    async def delete_job(self, namespace: str, name: str, *, grace_seconds: int | None = None) -> bool:
        found = await self._call(
            "delete job",
            self.batch.delete_namespaced_job,
            name,
            namespace,
            grace_period_seconds=grace_seconds,
            propagation_policy="Background",
            missing_ok=True,
        )
        return found is not None

    async def list_pods(self, namespace: str | None, label_selector: str | None = None, field_selector: str | None = None) -> list[V1Pod]:
        if namespace is None:
            result = await self._call(
                "list pods", self.core.list_pod_for_all_namespaces, label_selector=label_selector, field_selector=field_selector
            )
        else:
            result = await self._call(
                "list pods", self.core.list_namespaced_pod, namespace, label_selector=label_selector, field_selector=field_selector
            )
        return list(result.items or [])  # type: ignore[attr-defined]

    async def delete_pod(self, namespace: str, name: str, grace_seconds: int) -> bool:
        found = await self._call(
            "delete pod", self.core.delete_namespaced_pod, name, namespace, grace_period_seconds=grace_seconds, missing_ok=True
        )
        return found is not None

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
        from kubernetes.client.exceptions import ApiException

        from forge_common.kube import read_pod_log

        try:
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
        except ApiException as exc:
            raise _api_error("read pod log", exc) from None

    async def list_nodes(self) -> list[V1Node]:
        result = await self._call("list nodes", self.core.list_node)
        return list(result.items or [])  # type: ignore[attr-defined]
