"""Lint, format and types are part of the suite, so main cannot drift from the conventions."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / args[0]), *args[1:]], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing() -> None:
    result = run("ruff", "check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_code_is_formatted() -> None:
    result = run("ruff", "format", "--check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_shared_packages_type_check_strictly() -> None:
    result = run("mypy")
    assert result.returncode == 0, result.stdout + result.stderr


HEAVY = ("torch", "torchvision", "transformers", "peft", "timm", "bitsandbytes", "accelerate")
SERVICES = {
    "services/api": "forge_api.app",
    "services/scheduler": "forge_scheduler.app",
    "services/log-relay": "forge_log_relay.app",
    "services/registrar": "forge_registrar.app",
}


def _requirements(package: str) -> list[str]:
    import tomllib

    project = tomllib.loads((ROOT / package / "pyproject.toml").read_text())["project"]
    return [r.split(";")[0].strip().lower() for r in project.get("dependencies", [])]


def _imported(*modules: str) -> set[str]:
    code = "import importlib, json, sys\nfor m in sys.argv[1:]: importlib.import_module(m)\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([str(BIN / "python"), "-c", code, *modules], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
    import json

    return {name.split(".")[0] for name in json.loads(out.stdout.strip().splitlines()[-1])}


def test_services_and_libs_common_neither_require_nor_import_the_training_stack() -> None:
    for package in [*SERVICES, "libs/common"]:
        heavy = [r for r in _requirements(package) if r.split("[")[0].split(">")[0].split("=")[0].split("<")[0].strip() in HEAVY]
        assert not heavy, f"{package} requires {heavy}"
    loaded = _imported(*SERVICES.values())
    assert not loaded & set(HEAVY), f"importing the services loads {sorted(loaded & set(HEAVY))}"


def test_the_trainer_sdk_stands_alone() -> None:
    assert _requirements("trainers/sdk") == []  # minio and pillow are extras
    loaded = _imported("forge_sdk", "forge_sdk.datasets", "forge_sdk.storage", "forge_sdk.script")
    assert not loaded & {*HEAVY, "forge_common", "forge_api", "fastapi", "asyncpg", "nats"}, sorted(loaded)
