"""One SFT run from start to outputs: config → data → tokenizer → model → loop → export."""

from __future__ import annotations

import logging
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import forge_sdk
from forge_sdk import Run, TrainerError, datasets

from .. import pool
from ..common import seed_everything, select_device
from . import checkpoints, modeling
from .chat import ChatEncoder, template_of
from .data import EncodeReport, Example, encode_split, pack
from .export import export
from .loop import MAIN_METRIC, Plan, Session, fit, make_optimizer, make_scheduler, replay, restore
from .modeling import Base, Precision
from .params import Params


def quiet_libraries() -> None:
    """Progress bars and advisory warnings of transformers/peft would drown the run's own log."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"transformers\..*")


def oom_hint(p: Params, device: torch.device) -> str:
    """What to change when memory runs out, given what is already set."""
    where = "GPU" if device.type != "cpu" else "CPU"
    tips = []
    if p.batch > 1:
        tips.append(f"batch {p.batch // 2} with gradient_accumulation {p.gradient_accumulation * 2} (the same effective batch)")
    if not p.gradient_checkpointing:
        tips.append("gradient_checkpointing: true")
    if p.method != "qlora":
        tips.append("method: qlora (a 4-bit base model)")
    if p.max_seq_length > 256:
        tips.append(f"a shorter max_seq_length (now {p.max_seq_length})")
    return f"the run ran out of {where} memory; try " + ("; ".join(tips) if tips else "a smaller base model")


def load_data(run: Run, p: Params, *, is_vlm: bool) -> tuple[Path, datasets.SFTData, datasets.Split]:
    root = run.input_dir()
    try:
        data = datasets.load_sft(root, "vlm-sft" if is_vlm else "llm-sft")
    except datasets.DatasetError as exc:
        raise TrainerError("dataset_error", str(exc.problems[0]) if exc.problems else str(exc)) from None
    split = datasets.split_indices(len(data.records), p.train_val_ratio, p.seed, explicit=data.explicit_split)
    if not split.train or not split.val:
        raise TrainerError(
            "dataset_error",
            f"the split left {len(split.train)} training and {len(split.val)} validation conversation(s); both must be non-empty",
            "add conversations, or a val.jsonl",
        )
    return root, data, split


def resolve_base(
    run: Run, spec: pool.BaseModelSpec, train: list[datasets.Conversation], p: Params, *, is_vlm: bool, resumed: Path | None
) -> Base:
    """The folder to load from; a from-config model is created once (or taken from the checkpoint)."""
    if spec.kind != "config":
        source = pool.fetch(run, spec)
        assert source is not None
        return Base(source, from_config=False)
    if resumed is not None and (resumed / checkpoints.BASE).is_dir():
        run.log("resuming: the from-config base model and its tokenizer come from the checkpoint")
        return Base(resumed / checkpoints.BASE, from_config=True)
    dest = run.work_dir / "base-init"
    modeling.create_from_config(spec, train, is_vlm=is_vlm, seed=p.seed, dest=dest, run=run)
    return Base(dest, from_config=True)


def encode(
    run: Run, encoder: ChatEncoder, p: Params, data: datasets.SFTData, split: datasets.Split
) -> tuple[list[Example], list[Example], dict[str, Any]]:
    train, train_report = encode_split(encoder, [data.records[i] for i in split.train], p.max_seq_length)
    val, val_report = encode_split(encoder, [data.records[i] for i in split.val], p.max_seq_length)
    run.log(f"assistant-only labels from {encoder.how}")
    run.log(train_report.line("train", p.max_seq_length))
    run.log(val_report.line("val", p.max_seq_length))
    if not train or not val:
        raise TrainerError(
            "dataset_error",
            f"no {'training' if not train else 'validation'} conversation has an assistant token within max_seq_length {p.max_seq_length}",
            "raise max_seq_length, or check that the conversations end with assistant turns",
        )
    stats = {f"{name}_{k}": v for name, rep in (("train", train_report), ("val", val_report)) for k, v in _counts(rep).items()}
    return train, val, stats


def _counts(report: EncodeReport) -> dict[str, int]:
    return {"truncated": report.truncated, "dropped": report.dropped_no_answer + report.dropped_image_cut, "tokens": report.tokens}


def build_model(
    base: Base, p: Params, spec: pool.BaseModelSpec, *, is_vlm: bool, precision: Precision, device: torch.device, resumed: Path | None
) -> Any:
    """Load and adapt; a resume takes the weights (full model or adapter) from its checkpoint."""
    weights = resumed / checkpoints.WEIGHTS if resumed is not None else None
    source = weights if weights is not None and p.method == "full" else base.source
    seed_everything(p.seed)
    model = modeling.load_model(source, p, is_vlm=is_vlm, precision=precision, device=device)
    model = modeling.adapt(model, p, family=spec.family, is_vlm=is_vlm, new_vocabulary=base.from_config)
    if p.uses_lora:
        model.peft_config["default"].base_model_name_or_path = spec.name
        if weights is not None:
            from peft import set_peft_model_state_dict
            from safetensors.torch import load_file

            set_peft_model_state_dict(model, load_file(str(weights / "adapter_model.safetensors"), device=str(device)))
    return model


def describe_model(run: Run, model: Any, p: Params) -> None:
    total = sum(w.numel() for w in model.parameters())
    trainable = sum(w.numel() for w in model.parameters() if w.requires_grad)
    run.log(f"method {p.method}: {trainable:,} trainable of {total:,} parameters ({100 * trainable / max(total, 1):.2f}%)")
    if p.uses_lora:
        adapted = modeling.adapted_modules(model)
        run.log(f"LoRA r={p.lora_r} alpha={p.lora_alpha} on {len(adapted)} module(s), e.g. {', '.join(adapted[:3])}")


@dataclass(frozen=True)
class Job:
    """What the config decides before any data or model is touched."""

    p: Params
    spec: pool.BaseModelSpec
    is_vlm: bool
    device: torch.device
    precision: Precision


def read_job(run: Run) -> Job:
    """Hyperparameters, device, base model and the checks that need nothing loaded."""
    p = Params.from_config(run.hyperparameters)
    device = select_device(str(run.config.get("accelerator", "cpu")))
    run.oom_hint = oom_hint(p, device)
    spec = pool.spec_of(run)
    job = Job(p, spec, modeling.is_vlm_task(run.config, spec), device, modeling.resolve_precision(p.mixed_precision, device))
    if p.method == "qlora":
        version = modeling.check_qlora(device, p.qlora_quant_type)
        run.log(f"qlora: bitsandbytes {version} runs 4-bit {p.qlora_quant_type} layers on {device.type}")
    if p.packing and job.is_vlm:
        raise TrainerError("bad_config", "packing is for llm-sft: a vlm-sft sequence carries its images", "set packing: false")
    return job


def chat_encoder(run: Run, job: Job, base: Base, root: Path) -> ChatEncoder:
    """The tokenizer (and processor) of the base, with the template the run trains with."""
    tokenizer, processor = modeling.load_tokenizer(base.source, is_vlm=job.is_vlm)
    template = template_of(tokenizer, processor, job.p.chat_template)
    if template is None:
        raise TrainerError(
            "bad_config",
            f"base model {job.spec.name!r} has no chat template, and hyperparameters.chat_template is not set",
            "set hyperparameters.chat_template to a Jinja chat template (e.g. ChatML), or start from a chat/instruct checkpoint",
        )
    for owner in (tokenizer, processor):
        if owner is not None:
            owner.chat_template = template  # the outputs carry the template the model learnt
    return ChatEncoder(tokenizer, processor, template, root)


def make_session(
    run: Run, job: Job, base: Base, encoder: ChatEncoder, rows: tuple[list[Example], list[Example]], resumed: Path | None
) -> Session:
    model = build_model(base, job.p, job.spec, is_vlm=job.is_vlm, precision=job.precision, device=job.device, resumed=resumed)
    describe_model(run, model, job.p)
    p, tokenizer = job.p, encoder.tokenizer
    plan = Plan(len(rows[0]), p.batch, p.gradient_accumulation, p.epochs, p.save_steps, p.seed)
    optimizer = make_optimizer(model, p)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    return Session(
        run=run,
        p=p,
        model=model,
        owner=encoder.processor or tokenizer,
        train=rows[0],
        val=rows[1],
        plan=plan,
        device=job.device,
        precision=job.precision,
        input_dtype=modeling.load_dtype(p, job.precision),
        pad_id=int(pad_id),
        optimizer=optimizer,
        scheduler=make_scheduler(optimizer, p, plan.total_steps),
        scaler=torch.amp.GradScaler(job.device.type) if job.precision.scaler else None,
        base_extra={checkpoints.BASE: Path(base.source)} if base.from_config else {},
    )


def resume(run: Run, session: Session, resumed: Path) -> None:
    """Continue an earlier attempt: its state, its best checkpoint, its history up to the last unit."""
    restore(session, resumed)
    if session.state.best_unit:
        checkpoints.fetch_best(run)
    run.trim_history(session.state.units_done)
    run.log(f"resumed at step {session.state.step} after {session.state.units_done} completed unit(s)")


def announce(run: Run, session: Session, split: datasets.Split) -> None:
    """``run.start`` (in units) and the split, before the first step."""
    p, plan = session.p, session.plan
    if not plan.units_are_epochs:
        run.log(
            f"save_steps {p.save_steps}: progress counts checkpoint units of {plan.unit_steps} step(s) "
            f"({plan.total_units} over {p.epochs} epoch(s) of {plan.steps_per_epoch} steps); a completed unit counts like an epoch for Stop"
        )
    run.start(plan.total_units, steps_per_epoch=plan.unit_steps, main_metric=MAIN_METRIC)
    run.write_json(
        "split.json", {"explicit": split.explicit, "seed": p.seed, "ratio": p.train_val_ratio, "train": split.train, "val": split.val}
    )


def run_training(run: Run) -> None:
    quiet_libraries()
    job = read_job(run)
    p = job.p
    root, data, split = load_data(run, p, is_vlm=job.is_vlm)
    run.log(
        f"{len(data.records)} conversations: {len(split.train)} train, {len(split.val)} val "
        f"({'explicit' if split.explicit else f'ratio {p.train_val_ratio}, seed {p.seed}'} split); "
        f"device {job.device}, precision {job.precision.name}"
    )
    resumed = checkpoints.fetch_last(run)
    base = resolve_base(run, job.spec, [data.records[i] for i in split.train], p, is_vlm=job.is_vlm, resumed=resumed)
    encoder = chat_encoder(run, job, base, root)
    train_rows, val_rows, stats = encode(run, encoder, p, data, split)
    if p.packing:
        packed = pack(train_rows, p.max_seq_length)
        run.log(f"packing: {len(train_rows)} conversations into {len(packed)} rows of at most {p.max_seq_length} tokens")
        train_rows = packed
    if resumed is None and run.should_stop():
        run.log("stop requested before training started: leaving without loading the model")
        return
    session = make_session(run, job, base, encoder, (train_rows, val_rows), resumed)
    if resumed is not None:
        resume(run, session, resumed)
    announce(run, session, split)
    replay(session)
    fit(session)
    if run.epochs_completed >= 1:
        best = {"unit": session.state.best_unit, "metrics": session.state.best_metrics}
        del session  # the training model's memory, before the merge loads the base again
        export(run, p, base, is_vlm=job.is_vlm, best=best, extra_metrics=stats)


def is_cpu_out_of_memory(exc: BaseException) -> bool:
    """The CPU allocator's failure is a plain RuntimeError the SDK would call a crash."""
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and ("can't allocate memory" in text or "not enough memory" in text)


def train(run: Run) -> None:
    """The whole run inside an SDK ``Run`` (its context decides the outcome)."""
    try:
        run_training(run)
    except RuntimeError as exc:
        if is_cpu_out_of_memory(exc):
            raise TrainerError("out_of_memory", f"{type(exc).__name__}: {exc}", run.oom_hint) from exc
        raise


def main() -> None:
    with forge_sdk.init() as run:
        train(run)
