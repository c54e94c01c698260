from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class ApiSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FORGE_API_", extra="ignore")

    host: str = Field("127.0.0.1", description="Address the API listens on")
    port: int = Field(8000, ge=0, le=65535, description="Port the API listens on")
    max_upload_bytes: int = Field(50 * 1024**3, ge=1, description="Largest dataset archive accepted")
    max_body_bytes: int = Field(
        8 * 1024**2, ge=1, description="Largest request body other than a dataset archive (job specs, trainer profiles)"
    )
    max_archive_files: int = Field(500_000, ge=1, description="Most files a dataset archive may hold")
    max_extracted_bytes: int = Field(200 * 1024**3, ge=1, description="Largest total size of an archive's files once unpacked")
    upload_dir: Path | None = Field(None, description="Scratch space for uploads being checked (default: $FORGE_HOME/tmp)")
    script_max_bytes: int = Field(1024 * 1024, ge=1, description="Largest custom training script accepted")
    script_timeout_seconds: float = Field(10.0, gt=0, description="How long fetching a custom training script may take")
    script_allowed_hosts: str = Field(
        "",
        description="Comma-separated HTTP hosts custom scripts may come from (empty: any host that is not loopback or"
        " link-local; name a loopback host here to allow it). s3:// scripts come from the configured S3 endpoint",
    )
    import_roots: str = Field(
        "",
        description="Comma-separated folders on the api's machine that datasets may be imported from (empty: only s3:// imports)",
    )
    sse_ping_seconds: float = Field(15.0, gt=0, description="Keep-alive interval of live event streams")
