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
