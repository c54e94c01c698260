from __future__ import annotations

import sys
from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class SchedulerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FORGE_SCHEDULER_", extra="ignore")

    cpu_slots: int = Field(1, ge=0, le=1024, description="Jobs the local executor runs at once on the CPU profile")
    stop_grace_seconds: float = Field(60.0, gt=0, description="After Stop, how long a trainer may take to save and exit before SIGKILL")
    run_dir: Path | None = Field(None, description="Where local runs keep their output and scratch files (default: $FORGE_HOME/runs)")
    trainer_python: str = Field(sys.executable, description="Python interpreter that runs the built-in trainers")
    container_runtime: str | None = Field(
        None,
        description="A container CLI (docker or podman) the local executor runs custom trainer images with;"
        " unset: custom images need the Kubernetes executor",
    )
    poll_seconds: float = Field(0.5, gt=0, description="How often running trainers are checked")
    keep_work_dir: bool = Field(False, description="Keep a finished run's scratch folder (for debugging)")
    executor: Literal["local", "kubernetes"] = Field(
        "local", description="Where trainers run: processes on this machine, or Kubernetes Jobs"
    )
    max_retries: int = Field(
        1, ge=0, le=10, description="New attempts (from the last checkpoint) after an infrastructure failure; OOM is never retried"
    )
    capacity_refresh_seconds: float = Field(
        30.0, gt=0, description="How often the executor's capacity (devices, node allocatable) is re-read"
    )
    detect_devices: bool = Field(True, description="Count GPUs with the trainers' torch at start-up (local executor)")
    health_port: int = Field(0, ge=0, le=65535, description="Port of the scheduler's /healthz and /readyz (0: off)")
    kube_namespace: str = Field("forge", description="Namespace of the trainer Jobs (Kubernetes executor)")
    kube_config: Path | None = Field(
        None, description="Kubeconfig file of the Kubernetes executor (unset: the scheduler pod's in-cluster service account)"
    )
    kube_image: str = Field(
        "ghcr.io/forge/trainer", description="Built-in trainer image; the profile's suffix (-cu, -rocm, -xpu) and the tag are appended"
    )
    kube_image_tag: str = Field("latest", description="Tag of the built-in trainer images (pin a release in production)")
    kube_image_pull_secret: str | None = Field(
        None, description="Secret (type kubernetes.io/dockerconfigjson) that trainer pods pull their image with, built-in or custom"
    )
    kube_s3_secret_name: str = Field(
        "forge-s3",
        description="Secret in the trainers' namespace holding their object-storage credentials as S3_ACCESS_KEY and S3_SECRET_KEY",
    )
    kube_service_account: str | None = Field(
        None, description="ServiceAccount of trainer pods (unset: the namespace's default); no API token is mounted either way"
    )
    kube_cpu_request: str = Field("1", description="CPU request of a trainer container (a Kubernetes quantity)")
    kube_memory_request: str = Field("4Gi", description="Memory request of a trainer container (a Kubernetes quantity)")
    kube_memory_limit: str | None = Field(
        None, description="Memory limit of a trainer container (unset: the request); a trainer above it is OOMKilled: out_of_memory"
    )
    kube_cpu_slots: int | None = Field(
        None, ge=0, le=100000, description="CPU jobs at once on Kubernetes (unset: what the nodes' free CPU and memory fit at the requests)"
    )
    kube_node_selector: dict[str, dict[str, str]] = Field(
        {},
        description='Node selector per profile as JSON, e.g. {"nvidia": {"nvidia.com/gpu.present": "true"}}; the key "*" applies to every profile',
    )
    kube_tolerations: dict[str, list[dict[str, str | int]]] = Field(
        {},
        description='Tolerations per profile as JSON, e.g. {"nvidia": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}; "*" applies to every profile',
    )
    kube_pending_timeout_seconds: float = Field(
        900.0, gt=0, description="How long a trainer pod may stay unschedulable before the attempt fails as unschedulable"
    )
    kube_image_pull_timeout_seconds: float = Field(
        300.0, gt=0, description="How long a trainer image may fail to pull (or its container to be created) before the attempt fails"
    )
    kube_ttl_seconds: int = Field(
        3600,
        ge=0,
        description="How long a finished trainer Job and its pod log stay before Kubernetes deletes them (ttlSecondsAfterFinished)",
    )
