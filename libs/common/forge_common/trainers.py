"""Trainer capability profiles: how a trainer announces itself, and how a job's hyperparameters
are checked against what it accepts.

A profile names the tasks a trainer serves, the accelerators it supports (with the image for
each, on Kubernetes, and an honest grade), the hyperparameters it accepts as a JSON Schema with
defaults, the metrics it reports and the main one. Built-in trainers are profiles too (generated
from the same models the api validates with), so the Training form and the CLI list both the same
way.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import jsonschema
from pydantic import BaseModel, ConfigDict, Field, model_validator

from .accelerators import PROFILES, route_of
from .errors import InvalidInput
from .jobspec import HYPERPARAMETERS, MAIN_METRIC, TRAINERS, Task

Grade = Literal["certified", "compatible", "build-only"]


class AcceleratorSupport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    image: str | None = Field(None, description="The trainer image for this accelerator (Kubernetes executor)")
    grade: Grade = Field("build-only", description="certified (verified on real devices), compatible, or build-only")


class TrainerProfile(BaseModel):
    """What ``POST /v1/trainers`` accepts."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]{0,99}$", description="What jobs name in ``trainer``")
    version: str = Field(min_length=1, max_length=50)
    description: str = Field("", max_length=2000)
    tasks: list[Task] = Field(min_length=1)
    accelerators: dict[str, AcceleratorSupport] = Field(min_length=1, description="Profile name → image and grade")
    script_uri: str | None = Field(
        None, description="A training script (s3:// or http(s)://) run with the SDK's runner, when there is no image"
    )
    hyperparameters: dict[str, Any] = Field(description="JSON Schema (an object schema) of the hyperparameters, with defaults")
    metrics: list[str] = Field(min_length=1, description="The metrics the trainer reports")
    main_metric: str = Field(description="The metric epochs are ranked by (one of metrics)")
    higher_is_better: bool = Field(True, description="Whether a larger main metric is better")

    @model_validator(mode="after")
    def _consistent(self) -> TrainerProfile:
        unknown = sorted(set(self.accelerators) - set(PROFILES))
        if unknown:
            raise ValueError(f"unknown accelerator profile(s) {', '.join(unknown)}; known: {', '.join(PROFILES)}")
        if self.main_metric not in self.metrics:
            raise ValueError(f"main_metric {self.main_metric!r} is not among metrics {self.metrics}")
        if not self.script_uri and not any(a.image for a in self.accelerators.values()):
            raise ValueError("a trainer needs an image for at least one accelerator, or a script_uri")
        try:
            jsonschema.Draft202012Validator.check_schema(self.hyperparameters)
        except jsonschema.SchemaError as exc:
            raise ValueError(f"hyperparameters is not a valid JSON Schema: {exc.message}") from None
        if self.hyperparameters.get("type") != "object":
            raise ValueError("hyperparameters must be an object schema (type: object)")
        defaults = defaults_of(self.hyperparameters)
        problem = first_error(self.hyperparameters, defaults)
        if problem:
            raise ValueError(f"the defaults do not satisfy the schema: {problem[1]}")
        return self


def defaults_of(schema: dict[str, Any]) -> dict[str, Any]:
    return {k: v["default"] for k, v in schema.get("properties", {}).items() if isinstance(v, dict) and "default" in v}


def first_error(schema: dict[str, Any], instance: dict[str, Any]) -> tuple[str, str] | None:
    """(field path, message) of the first violation, or None."""
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(instance), key=lambda e: (list(e.path), e.message))
    if not errors:
        return None
    err = errors[0]
    path = ".".join(str(p) for p in err.path)
    if err.validator == "additionalProperties":
        extra = re.findall(r"'([^']+)' was unexpected", err.message)
        path = extra[0] if extra else path
        return path, f"{path}: unknown field"
    if err.validator == "required":
        missing = re.findall(r"'([^']+)' is a required property", err.message)
        path = missing[0] if missing else path
    return path, f"{path}: {err.message}" if path else err.message


def resolve_with_profile(profile: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """A registered trainer's hyperparameters: defaults filled in, the schema enforced (422 naming the field)."""
    schema = profile["hyperparameters"]
    resolved = {**defaults_of(schema), **given}
    problem = first_error(schema, resolved)
    if problem:
        field, message = problem
        raise InvalidInput(f"hyperparameters.{message}", field=f"hyperparameters.{field}" if field else "hyperparameters")
    return resolved


def builtin_profiles() -> list[dict[str, Any]]:
    """The built-in trainers, described the same way a registered trainer is."""
    out = []
    for task, module in TRAINERS.items():
        route = route_of(task)
        out.append(
            {
                "name": module.removeprefix("forge_trainers.") if task not in (Task.LLM_SFT, Task.VLM_SFT) else "sft",
                "version": "builtin",
                "description": (HYPERPARAMETERS[task].__doc__ or "").strip(),
                "tasks": [task.value],
                "accelerators": {name: {"image": None, "grade": p.grades[route]} for name, p in PROFILES.items()},
                "script_uri": None,
                "hyperparameters": HYPERPARAMETERS[task].model_json_schema(),
                "metrics": [MAIN_METRIC[task]],
                "main_metric": MAIN_METRIC[task],
                "higher_is_better": MAIN_METRIC[task] != "eval_loss",
                "builtin": True,
            }
        )
    return out
