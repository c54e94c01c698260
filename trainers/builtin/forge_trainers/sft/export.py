"""The outputs of a run that completed at least one unit: the best unit's weights and metrics.

* ``adapter/`` (lora, qlora: the PEFT folder) or ``model/`` (full: a standalone checkpoint), each
  with the tokenizer (and the processor, for a VLM) so the folder is all a user needs with the
  base model;
* ``base-model/``: for a from-config base with an adapter, the random initialisation and trained
  tokenizer the adapter belongs to (nobody else has them);
* ``merged/`` with ``merge: true``: the base with the adapter folded in, a standalone checkpoint
  that loads with the Auto classes (merged on the CPU in the base's own dtype; for qlora the
  adapter is merged into the unquantized base, the usual way to deploy a QLoRA fine-tune);
* ``metrics.json`` and ``<ARTIFACT_ID>.metrics.json`` (weights_uri = the folder's main weights file).
"""

from __future__ import annotations

import gc
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

from forge_sdk import Run

from . import checkpoints
from .modeling import Base, load_tokenizer, main_weights_file, model_class
from .params import Params


def upload_folder(run: Run, folder: Path, prefix: str) -> dict[str, str]:
    """Every file of a folder under ``prefix/``; returns relative name → uri."""
    return {
        path.relative_to(folder).as_posix(): run.upload(path, f"{prefix}/{path.relative_to(folder).as_posix()}")
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def merge(run: Run, base: Base, adapter: Path, *, is_vlm: bool) -> Path:
    """The base (unquantized, its own dtype, on the CPU) with the adapter merged in."""
    from peft import PeftModel

    dest: Path = run.work_dir / "merged"
    shutil.rmtree(dest, ignore_errors=True)
    model = model_class(is_vlm).from_pretrained(base.source, dtype="auto")
    merged = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    merged.save_pretrained(dest)
    tokenizer, processor = load_tokenizer(adapter, is_vlm=is_vlm)
    (processor or tokenizer).save_pretrained(dest)
    del merged, model
    gc.collect()
    return dest


def export(run: Run, p: Params, base: Base, *, is_vlm: bool, best: dict[str, Any], extra_metrics: dict[str, Any]) -> None:
    weights = checkpoints.best_weights(run)
    name = "adapter" if p.uses_lora else "model"
    uris = upload_folder(run, weights, name)
    weights_uri = uris[main_weights_file(weights).relative_to(weights).as_posix()]
    extra: dict[str, Any] = {f"{name}_uri": run.output.uri_of(name)}
    if p.uses_lora and base.from_config:
        upload_folder(run, Path(base.source), "base-model")
        extra["base_model_uri"] = run.output.uri_of("base-model")
    if p.merge:
        if p.uses_lora:
            merged = merge(run, base, weights, is_vlm=is_vlm)
            upload_folder(run, merged, "merged")
            extra["merged_uri"] = run.output.uri_of("merged")
            run.log(f"merged the adapter into the base: {extra['merged_uri']}")
        else:
            run.log("merge: a full fine-tune is already a standalone model; nothing to merge")
    metrics = {
        **best["metrics"],
        "best_epoch": best["unit"],
        "main_metric": "eval_loss",
        "epochs_completed": run.epochs_completed,
        **extra_metrics,
    }
    run.write_metrics(metrics, weights_uri=weights_uri, method=p.method, params=asdict(p), **extra)
