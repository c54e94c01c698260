"""A user's uploaded ``.pt`` is read as tensors only: a pickle that would run code is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from forge_sdk import TrainerError
from forge_trainers.classification import load_checkpoint


class Logged:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def log(self, message: str) -> None:
        self.lines.append(message)


class Payload:
    """Unpickling this would call os.system: what a hostile checkpoint does."""

    def __reduce__(self) -> tuple[Any, ...]:
        import os

        return (os.system, ("echo pwned > /dev/null",))


def test_a_plain_state_dict_loads(tmp_path: Path) -> None:
    source = torch.nn.Linear(4, 2)
    torch.save({"model": source.state_dict()}, tmp_path / "model.pt")
    target, run = torch.nn.Linear(4, 2), Logged()
    load_checkpoint(target, tmp_path, run)  # type: ignore[arg-type]
    assert torch.equal(target.weight, source.weight) and run.lines == ["loaded 2 tensors from model.pt"]


def test_a_checkpoint_holding_pickled_code_is_refused_with_the_reason(tmp_path: Path) -> None:
    torch.save({"model": torch.nn.Linear(4, 2).state_dict(), "extra": Payload()}, tmp_path / "model.pt")
    with pytest.raises(TrainerError) as caught:
        load_checkpoint(torch.nn.Linear(4, 2), tmp_path, Logged())  # type: ignore[arg-type]
    assert caught.value.reason == "bad_config" and "holds more than tensors" in str(caught.value)


def test_a_checkpoint_changed_since_its_registration_is_refused(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from forge_sdk.storage import location_from_uri
    from forge_trainers import pool

    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text('{"model_type": "qwen2"}')
    (ckpt / "model.safetensors").write_bytes(b"weights v1")
    registered = location_from_uri(str(ckpt)).content_digest()  # what the api records when it is registered
    run = SimpleNamespace(env=SimpleNamespace(s3=None), work_dir=tmp_path / "work", lines=[])
    run.log = run.lines.append
    spec = pool.BaseModelSpec(name="mine", family="qwen2", kind="local", uri=str(ckpt), digest=registered)
    assert pool.fetch(run, spec) == ckpt  # type: ignore[arg-type]
    assert run.lines[-1].startswith("base model mine: checkpoint matches its registered digest")
    (ckpt / "model.safetensors").write_bytes(b"weights v2")  # someone retrained into the same folder
    with pytest.raises(TrainerError) as caught:
        pool.fetch(run, spec)  # type: ignore[arg-type]
    assert caught.value.reason == "bad_config" and "changed since it was registered" in str(caught.value)
    unpinned = pool.BaseModelSpec(name="mine", family="qwen2", kind="local", uri=str(ckpt))
    assert pool.fetch(run, unpinned) == ckpt  # type: ignore[arg-type]  # nothing recorded, nothing to compare
