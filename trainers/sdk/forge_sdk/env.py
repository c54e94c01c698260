"""The trainer's environment contract: everything a trainer gets from the platform, by name.

| variable | meaning |
|---|---|
| ``INPUT_URI`` | the dataset version (``s3://bucket/prefix``, ``file:///dir`` or a path) |
| ``OUTPUT_DIR`` | where artifacts go (same URI forms); default ``./forge-output`` |
| ``FORGE_OUTPUT_URI`` | set by the script runner when ``OUTPUT_DIR`` is a local stand-in for remote storage |
| ``FORGE_SCRIPT_URI`` / ``FORGE_SCRIPT_SHA256`` | the custom script ``python -m forge_sdk.script`` runs, and its digest |
| ``CONFIG_JSON`` | the job's resolved spec as JSON (``hyperparameters`` with defaults filled in) |
| ``ARTIFACT_ID`` | names ``<ARTIFACT_ID>.metrics.json``, the file that registers precisely |
| ``S3_ENDPOINT`` / ``S3_ACCESS_KEY`` / ``S3_SECRET_KEY`` / ``S3_REGION`` / ``S3_SECURE`` | object storage |
| ``RESUME_FROM`` | an earlier attempt's output location to resume from (its ``checkpoints/last.*``) |
| ``FORGE_JOB_ID`` / ``FORGE_ATTEMPT`` | who this run is, for log messages |
| ``FORGE_RESULT_FILE`` | where the outcome JSON is written at exit (the executor reads it) |
| ``FORGE_WORK_DIR`` | local scratch space (default: a temporary folder) |
| ``TRACEPARENT`` | W3C trace context of the job, to join the platform's trace |
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .storage import S3Config

ENV_VARS = (
    "INPUT_URI",
    "OUTPUT_DIR",
    "FORGE_OUTPUT_URI",
    "FORGE_SCRIPT_URI",
    "FORGE_SCRIPT_SHA256",
    "CONFIG_JSON",
    "ARTIFACT_ID",
    "S3_ENDPOINT",
    "S3_ACCESS_KEY",
    "S3_SECRET_KEY",
    "S3_REGION",
    "S3_SECURE",
    "RESUME_FROM",
    "FORGE_JOB_ID",
    "FORGE_ATTEMPT",
    "FORGE_RESULT_FILE",
    "FORGE_WORK_DIR",
    "TRACEPARENT",
)


class ConfigError(ValueError):
    """The environment does not describe a runnable job; the message names the variable."""


@dataclass(frozen=True)
class TrainerEnv:
    output_dir: str
    config: dict[str, Any] = field(default_factory=dict)
    input_uri: str | None = None
    artifact_id: str = "model"
    s3: S3Config | None = None
    resume_from: str | None = None
    job_id: str | None = None
    attempt: int = 1
    result_file: str | None = None
    work_dir: str | None = None
    traceparent: str | None = None

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> TrainerEnv:
        env = dict(os.environ if environ is None else environ)
        raw = env.get("CONFIG_JSON") or "{}"
        try:
            config = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"CONFIG_JSON is not valid JSON: {exc.msg} at column {exc.colno}") from None
        if not isinstance(config, dict):
            raise ConfigError("CONFIG_JSON must be a JSON object")
        try:
            attempt = int(env.get("FORGE_ATTEMPT") or 1)
        except ValueError:
            raise ConfigError(f"FORGE_ATTEMPT must be an integer, got {env['FORGE_ATTEMPT']!r}") from None
        return cls(
            output_dir=env.get("FORGE_OUTPUT_URI") or env.get("OUTPUT_DIR") or str(Path("forge-output").resolve()),
            config=config,
            input_uri=env.get("INPUT_URI") or None,
            artifact_id=env.get("ARTIFACT_ID") or "model",
            s3=S3Config.from_env(env),
            resume_from=env.get("RESUME_FROM") or None,
            job_id=env.get("FORGE_JOB_ID") or None,
            attempt=attempt,
            result_file=env.get("FORGE_RESULT_FILE") or None,
            work_dir=env.get("FORGE_WORK_DIR") or None,
            traceparent=env.get("TRACEPARENT") or None,
        )

    def to_environ(self) -> dict[str, str]:
        """The variables that describe this environment (the inverse of ``from_environ``)."""
        out = {
            "OUTPUT_DIR": self.output_dir,
            "CONFIG_JSON": json.dumps(self.config, separators=(",", ":")),
            "ARTIFACT_ID": self.artifact_id,
            "FORGE_ATTEMPT": str(self.attempt),
        }
        optional = {
            "INPUT_URI": self.input_uri,
            "RESUME_FROM": self.resume_from,
            "FORGE_JOB_ID": self.job_id,
            "FORGE_RESULT_FILE": self.result_file,
            "FORGE_WORK_DIR": self.work_dir,
            "TRACEPARENT": self.traceparent,
        }
        out.update({k: v for k, v in optional.items() if v})
        if self.s3 is not None:
            out.update(
                {
                    "S3_ENDPOINT": self.s3.endpoint,
                    "S3_ACCESS_KEY": self.s3.access_key,
                    "S3_SECRET_KEY": self.s3.secret_key,
                    "S3_SECURE": "true" if self.s3.secure else "false",
                }
            )
            if self.s3.region:
                out["S3_REGION"] = self.s3.region
        return out
