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
