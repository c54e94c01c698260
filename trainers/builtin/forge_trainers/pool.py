"""Where a built-in trainer's starting point comes from: the job's ``base_model_spec``.

``CONFIG_JSON`` carries the pool entry the job named, as the api resolved it::

    {"name": "rt-detr-tiny", "family": "rt-detr", "tasks": ["detection"], "digest": null,
     "source": {"kind": "config" | "local" | "s3" | "hub", "uri": "…", "config": {…}, "tokenizer": {…}}}

``config`` sources initialise randomly from ``source.config``; ``local`` and ``s3`` sources are a
checkpoint folder (fetched into the run's work folder when remote); ``hub`` sources are loaded by
id (the trainer then needs internet). A run started by hand with only ``base_model`` set (e.g.
``timm/resnet18``) gets a from-config spec.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forge_sdk import Run, TrainerError
from forge_sdk.storage import LocalStore, Location, location_from_uri


@dataclass(frozen=True)
class BaseModelSpec:
    name: str
    family: str
    kind: str
    uri: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    tokenizer: dict[str, Any] | None = None
    digest: str | None = None  # what the checkpoint hashed to when it was registered


def spec_of(run: Run) -> BaseModelSpec:
    raw = run.config.get("base_model_spec")
    name = str(run.config.get("base_model", ""))
    if not raw:
        if name.startswith("timm/") and len(name) > 5:
            return BaseModelSpec(name=name, family="timm", kind="config", config={"architecture": name[5:]})
        raise TrainerError("bad_config", f"CONFIG_JSON has no base_model_spec for base model {name!r}")
    source = raw.get("source") or {}
    return BaseModelSpec(
        name=str(raw.get("name", name)),
        family=str(raw.get("family", "")),
        kind=str(source.get("kind", "config")),
        uri=source.get("uri"),
        config=dict(source.get("config") or {}),
        tokenizer=source.get("tokenizer"),
        digest=raw.get("digest"),
    )


def fetch(run: Run, spec: BaseModelSpec) -> Path | str | None:
    """A local folder holding the checkpoint (``local``/``s3``), the hub id (``hub``), or None
    for a from-config start."""
    if spec.kind == "config":
        return None
    if spec.kind == "hub":
        if not spec.uri:
            raise TrainerError("bad_config", f"base model {spec.name!r} is a hub source without an id")
        return spec.uri
    if not spec.uri:
        raise TrainerError("bad_config", f"base model {spec.name!r} has no uri")
    try:
        location = location_from_uri(spec.uri, run.env.s3)
    except Exception as exc:
        raise TrainerError("bad_config", f"base model {spec.name!r}: {exc}") from None
    if isinstance(location.store, LocalStore):
        folder = location.store.path(location.prefix)
        if not folder.is_dir():
            raise TrainerError("bad_config", f"base model {spec.name!r}: {folder} does not exist on this machine")
        verify(run, spec, location)
        return folder
    dest = run.work_dir / "base-model"
    if not (dest / ".complete").exists():
        verify(run, spec, location)
        run.log(f"fetching base model {spec.name} from {spec.uri}")
        location.download_to(dest)
        (dest / ".complete").touch()
    return dest


def verify(run: Run, spec: BaseModelSpec, location: Location) -> None:
    """The checkpoint must be the one registered: a job (and its rerun) trains from exactly the
    bytes the pool entry pinned, or fails saying the checkpoint changed."""
    if not spec.digest:
        return
    try:
        digest = location.content_digest()
    except Exception as exc:
        raise TrainerError("bad_config", f"base model {spec.name!r}: cannot read {spec.uri}: {exc}") from None
    if digest != spec.digest:
        raise TrainerError(
            "bad_config",
            f"base model {spec.name!r} changed since it was registered: {spec.uri} now hashes to {digest[:12]}…, "
            f"registered as {spec.digest[:12]}…; register the new checkpoint under a new name (or restore the old files)",
        )
    run.log(f"base model {spec.name}: checkpoint matches its registered digest {digest[:12]}…")


def weights_file(folder: Path) -> Path:
    """The checkpoint file in a folder: safetensors first, then .pt/.pth/.bin."""
    for pattern in ("*.safetensors", "*.pt", "*.pth", "*.bin"):
        found = sorted(folder.rglob(pattern))
        if found:
            best = [p for p in found if "best" in p.name or p.name.startswith("model")]
            return (best or found)[0]
    raise TrainerError("bad_config", f"no weights file (*.safetensors, *.pt, *.pth, *.bin) in {folder}")
