"""Checkpoints as single tar files under the outputs' ``checkpoints/`` (what the scheduler looks for).

A checkpoint is a folder — weights (the PEFT adapter or the whole model, with the tokenizer and
processor), ``state.json`` and, for ``last``, ``trainer.pt`` (optimizer, scheduler, scaler, RNG) —
but the SDK's ``run.checkpoint``/``run.resume`` move one file atomically, so the folder travels as
an uncompressed tar (weights do not compress; tar costs no CPU).

* ``checkpoints/last.tar``: everything to resume. Written at the end of every unit, and on Stop at
  the step the stop arrived (only once a unit completed: before that the outputs are deleted).
* ``checkpoints/best.tar``: the weights and metrics of the unit with the lowest eval_loss.

A from-config base model (random initialisation, trained tokenizer) is also stored in ``last``
under ``base/``: a resume on another machine then starts from the very same weights and
vocabulary instead of a re-draw.
"""

from __future__ import annotations

import json
import shutil
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from forge_sdk import Run, TrainerError

LAST, BEST = "last.tar", "best.tar"
WEIGHTS, BASE, STATE, TRAINER = "weights", "base", "state.json", "trainer.pt"


def write(run: Run, name: str, build: Callable[[Path], None], *, extra: dict[str, Path] | None = None) -> None:
    """Build the checkpoint folder with ``build(folder)``, tar it (plus ``extra`` folders under
    their names) and hand it to ``run.checkpoint`` (atomic locally, then uploaded)."""
    folder = run.work_dir / "checkpoint-build" / name.removesuffix(".tar")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    build(folder)
    with run.checkpoint(name) as path, tarfile.open(path, "w") as tar:
        for item in sorted(folder.iterdir()):
            tar.add(item, arcname=item.name)
        for arcname, source in (extra or {}).items():
            tar.add(source, arcname=arcname)
    shutil.rmtree(folder, ignore_errors=True)


def unpack(path: Path, dest: Path) -> Path:
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    try:
        with tarfile.open(path) as tar:
            tar.extractall(dest, filter="data")
    except (tarfile.TarError, OSError) as exc:
        raise TrainerError("bad_config", f"cannot resume: checkpoint {path.name} is unreadable ({exc})") from None
    return dest


def read_state(folder: Path) -> dict[str, Any]:
    try:
        state = json.loads((folder / STATE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TrainerError("bad_config", f"cannot resume: the checkpoint has no readable {STATE} ({exc})") from None
    if not isinstance(state, dict):
        raise TrainerError("bad_config", f"cannot resume: {STATE} is not an object")
    return state


def fetch_last(run: Run) -> Path | None:
    """The earlier attempt's ``last`` checkpoint, unpacked (None when not resuming)."""
    path = run.resume(LAST)
    if path is None:
        return None
    return unpack(path, run.work_dir / "resume" / "last")


def fetch_best(run: Run) -> None:
    """Carry the earlier attempt's best checkpoint into this attempt's outputs."""
    run.resume(BEST)


def best_weights(run: Run) -> Path:
    """The best unit's weights folder, unpacked from this attempt's ``best`` checkpoint."""
    path = run.checkpoint_path(BEST)
    if not path.exists():
        raise TrainerError("trainer_crash", "no best checkpoint although a unit completed")
    return unpack(path, run.work_dir / "best") / WEIGHTS
