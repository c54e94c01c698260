"""compose.yaml and the Dockerfiles (no Docker engine here: they are checked, not run)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic_settings import BaseSettings

from forge_api.settings import ApiSettings
from forge_common.settings import CommonSettings
from forge_log_relay.settings import LogRelaySettings
from forge_registrar.settings import RegistrarSettings
from forge_scheduler.settings import SchedulerSettings

ROOT = Path(__file__).resolve().parents[2]
SERVICES: dict[str, tuple[str, type[BaseSettings]]] = {
    "api": ("forge_api", ApiSettings),
    "scheduler": ("forge_scheduler", SchedulerSettings),
    "log-relay": ("forge_log_relay", LogRelaySettings),
    "registrar": ("forge_registrar", RegistrarSettings),
}
REQUIRED = {"FORGE_NATS_URL", "FORGE_DATABASE_URL", "FORGE_S3_ENDPOINT", "FORGE_S3_ACCESS_KEY", "FORGE_S3_SECRET_KEY", "FORGE_HOME"}


def env_vars(*classes: type[BaseSettings]) -> set[str]:
    return {f"{cls.model_config.get('env_prefix', '')}{name}".upper() for cls in classes for name in cls.model_fields}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "compose.yaml").read_text())  # type: ignore[no-any-return]


def substitute(value: str) -> str:
    """What compose would put in place of ${VAR:?…} (a stand-in value)."""
    return re.sub(r"\$\{([A-Z_]+)[^}]*\}", lambda m: f"stand-in-{m.group(1).lower()}", value)


def test_infrastructure_is_there_with_healthchecks(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert "-js" in services["nats"]["command"] and services["nats"]["volumes"]
    for name in ("nats", "postgres", "minio"):
        assert services[name]["healthcheck"]["test"], name


@pytest.mark.parametrize("name", list(SERVICES))
def test_each_service_builds_from_deploy_and_waits_for_healthy_dependencies(compose: dict[str, Any], name: str) -> None:
    module, _ = SERVICES[name]
    service = compose["services"][name]
    dockerfile = ROOT / service["build"]["dockerfile"]
    assert dockerfile.parent == ROOT / "deploy" and dockerfile.exists()
    text = dockerfile.read_text()
    for source in re.findall(r"^COPY (\S+) ", text, flags=re.M):
        assert (ROOT / source).exists(), f"{dockerfile.name} copies {source}, which does not exist"
    assert f'"-m", "{module}"' in text
    assert service["healthcheck"]["test"]
    assert {dep: spec["condition"] for dep, spec in service["depends_on"].items()} == {
        "nats": "service_healthy",
        "postgres": "service_healthy",
        "minio": "service_healthy",
    }


@pytest.mark.parametrize("name", list(SERVICES))
def test_each_service_gets_the_environment_its_settings_require(
    compose: dict[str, Any], name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, settings_cls = SERVICES[name]
    environment = {k: str(v) for k, v in compose["services"][name]["environment"].items()}
    assert REQUIRED <= environment.keys()
    unknown = environment.keys() - env_vars(CommonSettings, settings_cls)
    assert not unknown, f"{name}: variables no setting reads: {unknown}"
    for key, value in environment.items():
        if "SECRET" in key or "PASSWORD" in key or "ACCESS_KEY" in key:
            assert value.startswith("${") and ":?" in value, f"{key} must come from .env, with no default"
        monkeypatch.setenv(key, substitute(value))
    common, own = CommonSettings(), settings_cls()
    assert common.s3_config() is not None and common.nats_url == "nats://nats:4222"
    port = getattr(own, "health_port", None) or getattr(own, "port", None)
    assert port and str(port) in str(compose["services"][name]["healthcheck"]["test"])


def test_the_log_relay_reads_the_runs_the_scheduler_writes(compose: dict[str, Any]) -> None:
    runs = lambda name: [v for v in compose["services"][name]["volumes"] if v.startswith("runs:")]  # noqa: E731
    assert runs("scheduler") == ["runs:/var/lib/forge/runs"]
    assert runs("log-relay") == ["runs:/var/lib/forge/runs:ro"]
