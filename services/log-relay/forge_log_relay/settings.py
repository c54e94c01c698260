from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class LogRelaySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FORGE_LOG_RELAY_", extra="ignore")

    poll_seconds: float = Field(0.02, gt=0, le=10, description="How often a followed output is checked for new lines")
    max_line_bytes: int = Field(65536, ge=256, description="Longer output lines are cut to this size")
    batch_lines: int = Field(500, ge=1, le=10000, description="Most lines in one logs event")
    health_port: int = Field(0, ge=0, le=65535, description="Port of the log-relay's /healthz and /readyz (0: off)")
