from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class RegistrarSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FORGE_REGISTRAR_", extra="ignore")

    health_port: int = Field(0, ge=0, le=65535, description="Port of the registrar's /healthz and /readyz (0: off)")
