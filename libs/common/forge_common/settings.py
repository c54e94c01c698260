"""Settings shared by every service (``FORGE_…``); each service adds its own class with its own prefix.

Every field is described: ``python -m forge_common.settings`` prints the reference table that the
README's configuration section carries (a test keeps the two in step).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from forge_sdk.storage import S3Config


class CommonSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FORGE_", extra="ignore")

    home: Path = Field(Path(".forge"), description="Folder for local state: object store, runs, embedded servers")
    nats_url: str = Field("nats://127.0.0.1:4222", description="NATS server with JetStream")
    bus_prefix: str = Field("forge", description="Prefix of every subject and stream name (lets installations share a server)")
    bus_max_age_days: float = Field(30.0, gt=0, description="How long JetStream keeps job events")
    database_url: str = Field(
        "postgresql://postgres@127.0.0.1:5432/forge",
        description="PostgreSQL URL; the database is created if missing",
    )
    db_pool_size: int = Field(5, ge=1, le=100, description="Connections per service process")
    storage_dir: Path | None = Field(
        None, description="Local object store folder (default: $FORGE_HOME/objects); used when no S3 endpoint is set"
    )
    s3_endpoint: str | None = Field(None, description="S3 API endpoint (host:port or URL); when set, objects go to S3")
    s3_access_key: SecretStr | None = Field(None, description="S3 access key (required with FORGE_S3_ENDPOINT)")
    s3_secret_key: SecretStr | None = Field(None, description="S3 secret key (required with FORGE_S3_ENDPOINT)")
    s3_bucket: str = Field("forge", description="Bucket for datasets, job outputs and models")
    s3_region: str | None = Field(None, description="S3 region, if the server needs one")
    s3_secure: bool = Field(False, description="Use HTTPS for the S3 endpoint")
    telemetry_exporter: Literal["none", "console", "otlp", "file"] = Field(
        "none", description="Where OpenTelemetry spans go: none (off), console, otlp, or file (JSON lines)"
    )
    telemetry_endpoint: str | None = Field(None, description="OTLP/HTTP endpoint for spans (with exporter otlp)")
    telemetry_file: Path | None = Field(None, description="File that receives one JSON span per line (with exporter file)")
    log_level: str = Field("INFO", description="Log level of the services")
    public_url: str = Field("http://127.0.0.1:8000", description="Where users reach Forge (links in mirrors and messages)")
    mlflow_tracking_uri: str | None = Field(
        None, description="When set, every job is mirrored as an MLflow run (e.g. http://mlflow:5000 or sqlite:///mlflow.db)"
    )
    mlflow_experiment: str = Field("forge", description="The MLflow experiment the mirrored runs go to")
    mlflow_ui_url: str | None = Field(
        None, description="The MLflow web UI, for links from the job page (default: the tracking URI when it is http)"
    )

    @model_validator(mode="after")
    def _s3_needs_credentials(self) -> CommonSettings:
        if self.s3_endpoint and (self.s3_access_key is None or self.s3_secret_key is None):
            raise ValueError("FORGE_S3_ENDPOINT is set: FORGE_S3_ACCESS_KEY and FORGE_S3_SECRET_KEY are required")
        return self

    @property
    def objects_dir(self) -> Path:
        return (self.storage_dir or self.home / "objects").resolve()

    def s3_config(self) -> S3Config | None:
        if not self.s3_endpoint:
            return None
        assert self.s3_access_key is not None and self.s3_secret_key is not None
        return S3Config(
            endpoint=self.s3_endpoint,
            access_key=self.s3_access_key.get_secret_value(),
            secret_key=self.s3_secret_key.get_secret_value(),
            region=self.s3_region,
            secure=self.s3_secure,
        )


def reference_rows(*classes: type[BaseSettings]) -> list[tuple[str, str, str]]:
    """(variable, default, description) for every field of the given settings classes."""
    rows = []
    for cls in classes:
        prefix = cls.model_config.get("env_prefix", "")
        for name, field in cls.model_fields.items():
            default = field.default
            shown = "(required)" if field.is_required() else ("" if default is None else str(default))
            if isinstance(default, Path):
                shown = default.as_posix()
            rows.append((f"{prefix}{name}".upper(), shown, field.description or ""))
    return rows


def reference_markdown(*classes: type[BaseSettings]) -> str:
    lines = ["| variable | default | meaning |", "|---|---|---|"]
    for var, default, desc in reference_rows(*classes):
        lines.append(f"| `{var}` | {f'`{default}`' if default else ''} | {desc} |")
    return "\n".join(lines)
