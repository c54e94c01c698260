"""Kubernetes reads the scheduler and the log-relay both make (the ``kubernetes`` package is
imported by the caller, which passes its ``CoreV1Api``)."""

from __future__ import annotations

from typing import Any


def read_pod_log(
    core: Any,
    namespace: str,
    name: str,
    *,
    container: str,
    since_seconds: int | None = None,
    tail_lines: int | None = None,
    timestamps: bool = False,
) -> bytes | None:
    """Blocking: a container's output exactly as it wrote it (no text decoding); None when there is
    none to read — 400: the container is waiting to start, 404: the pod is gone. Other API errors
    propagate as ``ApiException``."""
    from kubernetes.client.exceptions import ApiException

    try:
        response = core.read_namespaced_pod_log(
            name,
            namespace,
            container=container,
            since_seconds=since_seconds,
            tail_lines=tail_lines,
            timestamps=timestamps,
            _preload_content=False,
        )
    except ApiException as exc:
        if exc.status in (400, 404):
            return None
        raise
    return bytes(response.data)
