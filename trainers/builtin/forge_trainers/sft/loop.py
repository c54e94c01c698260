"""The training loop: units, steps, evaluation, checkpoints, stop and resume.

A *step* is one optimizer update (``gradient_accumulation`` micro-batches of ``batch`` rows). The
loss of a step is the mean over every assistant token of its micro-batches (each micro-batch's
mean is weighted by its token count), so splitting a batch into accumulation steps changes
nothing.

A *unit* is what the SDK counts as an epoch: by default one epoch; with ``save_steps`` set, a
checkpoint interval of that many steps (the last one may be shorter, and units run across epoch
boundaries). Each completed unit evaluates on the val split, keeps ``best`` when eval_loss improved,
writes ``last``, and calls ``run.epoch_completed(unit, …)``. The data order is a permutation per
epoch drawn from the seed, so the step number alone says which rows a step trains on, and a
resume continues exactly where the checkpoint was taken.
"""

from __future__ import annotations

import contextlib
import functools
import math
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from forge_sdk import Run, TrainerError

from ..common import rng_state, set_rng_state
from . import checkpoints
from .data import Example, collate, label_count, real_tokens, to_device
from .modeling import Precision
from .params import Params

MAIN_METRIC = "eval_loss"
SCHEDULERS = {"cosine": "cosine", "linear": "linear", "constant": "constant_with_warmup"}


@dataclass(frozen=True)
class Plan:
    """How many steps and units the run has, and which rows each step trains on."""

    rows: int
    batch: int
    accumulation: int
    epochs: int
    save_steps: int | None
    seed: int

    @property
    def micro_per_epoch(self) -> int:
        return math.ceil(self.rows / self.batch)

    @property
    def steps_per_epoch(self) -> int:
        return math.ceil(self.micro_per_epoch / self.accumulation)

    @property
    def total_steps(self) -> int:
        return self.steps_per_epoch * self.epochs

    @property
    def unit_steps(self) -> int:
        return min(self.save_steps, self.total_steps) if self.save_steps else self.steps_per_epoch

    @property
    def total_units(self) -> int:
        return math.ceil(self.total_steps / self.unit_steps)

    @property
    def units_are_epochs(self) -> bool:
        return self.unit_steps == self.steps_per_epoch

    def unit_of(self, step: int) -> int:
        return (step - 1) // self.unit_steps + 1

    def unit_ends(self, step: int) -> bool:
        return step % self.unit_steps == 0 or step == self.total_steps

    def order(self, epoch: int) -> list[int]:
        return _order(self.rows, self.seed, epoch)

    def micro_batches(self, step: int) -> list[list[int]]:
        epoch, window = divmod(step - 1, self.steps_per_epoch)
        order = self.order(epoch + 1)
        first = window * self.accumulation * self.batch
        last = min(first + self.accumulation * self.batch, self.rows)
        return [order[i : min(i + self.batch, last)] for i in range(first, last, self.batch)]

    def fingerprint(self) -> dict[str, Any]:
        return {**asdict(self), "unit_steps": self.unit_steps}


@functools.lru_cache(maxsize=2)
def _order(rows: int, seed: int, epoch: int) -> list[int]:
    """The epoch's permutation of the training rows (the same on every machine and attempt)."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return [int(i) for i in torch.randperm(rows, generator=generator)]


@dataclass
class State:
    """What the loop knows beyond the weights and optimizer; saved as ``state.json``."""

    step: int = 0
    units_done: int = 0
    best_loss: float | None = None
    best_unit: int = 0
    best_metrics: dict[str, float] = field(default_factory=dict)
    partial: list[dict[str, Any]] = field(default_factory=list)
    """The step records reported since the last completed unit (re-reported after a resume)."""
    unit_loss: float = 0.0
    unit_tokens: int = 0


@dataclass
class Session:
    """Everything one run trains with."""

    run: Run
    p: Params
    model: Any
    owner: Any
    """The tokenizer, or the processor of a VLM: saved next to the weights."""
    train: list[Example]
    val: list[Example]
    plan: Plan
    device: torch.device
    precision: Precision
    input_dtype: torch.dtype
    pad_id: int
    optimizer: torch.optim.Optimizer
    scheduler: Any
    scaler: torch.amp.GradScaler | None
    base_extra: dict[str, Path] = field(default_factory=dict)
    state: State = field(default_factory=State)

    trainable: list[torch.nn.Parameter] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.trainable = [p for p in self.model.parameters() if p.requires_grad]


def make_optimizer(model: Any, p: Params) -> torch.optim.Optimizer:
    """AdamW; matrices decay, biases and norms do not."""
    trainable = [(n, w) for n, w in model.named_parameters() if w.requires_grad]
    if not trainable:
        raise TrainerError("trainer_crash", "the model has no trainable parameter")
    decay = [w for _, w in trainable if w.ndim >= 2]
    no_decay = [w for _, w in trainable if w.ndim < 2]
    groups = [{"params": decay, "weight_decay": p.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW([g for g in groups if g["params"]], lr=p.lr)


def make_scheduler(optimizer: torch.optim.Optimizer, p: Params, total_steps: int) -> Any:
    from transformers import get_scheduler

    warmup = math.ceil(p.warmup_ratio * total_steps)
    return get_scheduler(SCHEDULERS[p.lr_scheduler], optimizer, num_warmup_steps=warmup, num_training_steps=total_steps)


@contextlib.contextmanager
def autocast(s: Session) -> Iterator[None]:
    dtype = s.precision.autocast
    with torch.autocast(device_type=s.device.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
        yield


def forward_loss(s: Session, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The model's mean loss over the batch's (shifted) assistant tokens."""
    with autocast(s):
        out = s.model(**to_device(batch, s.device, s.input_dtype), use_cache=False)
    loss: torch.Tensor = out.loss.float()
    return loss


def train_step(s: Session, step: int) -> tuple[dict[str, float], float, int]:
    """One optimizer update; returns its metrics, its summed loss and its token count."""
    s.model.train()
    started = time.perf_counter()
    batches = [collate([s.train[i] for i in rows], s.pad_id) for rows in s.plan.micro_batches(step)]
    total = sum(label_count(b) for b in batches)
    loss_sum, tokens = 0.0, 0
    for batch in batches:
        n = label_count(batch)
        tokens += real_tokens(batch, s.pad_id)
        if n == 0:
            continue
        loss = forward_loss(s, batch)
        weighted = loss * (n / total)
        (s.scaler.scale(weighted) if s.scaler is not None else weighted).backward()
        loss_sum += float(loss.item()) * n
    if s.scaler is not None:
        s.scaler.unscale_(s.optimizer)
    norm = torch.nn.utils.clip_grad_norm_(s.trainable, s.p.max_grad_norm)
    lr = float(s.optimizer.param_groups[0]["lr"])
    if s.scaler is not None:
        s.scaler.step(s.optimizer)
        s.scaler.update()
    elif total:
        s.optimizer.step()
    s.scheduler.step()
    s.optimizer.zero_grad(set_to_none=True)
    elapsed = max(time.perf_counter() - started, 1e-9)
    metrics = {"loss": loss_sum / max(total, 1), "lr": lr, "grad_norm": float(norm), "tokens_per_second": tokens / elapsed}
    return metrics, loss_sum, total


@torch.no_grad()
def evaluate(s: Session) -> dict[str, float]:
    """Token-level mean loss on the val split's answers, and its perplexity."""
    s.model.eval()
    loss_sum, count = 0.0, 0
    for i in range(0, len(s.val), s.p.batch):
        batch = collate(s.val[i : i + s.p.batch], s.pad_id)
        n = label_count(batch)
        if n:
            loss_sum += float(forward_loss(s, batch).item()) * n
            count += n
    eval_loss = loss_sum / max(count, 1)
    return {MAIN_METRIC: eval_loss, "perplexity": math.exp(min(eval_loss, 80.0))}


# ---- checkpoints ---------------------------------------------------------------------------------


def save_weights(s: Session, folder: Path) -> None:
    """The adapter (PEFT) or the whole model, with the tokenizer/processor: a loadable folder."""
    if s.p.uses_lora:
        # the embedding check would look the base model up by name (on the hub): we know it is unchanged
        s.model.save_pretrained(folder, save_embedding_layers=False)
    else:
        s.model.save_pretrained(folder)
    s.owner.save_pretrained(folder)


def save_best(s: Session) -> None:
    def build(folder: Path) -> None:
        save_weights(s, folder / checkpoints.WEIGHTS)
        (folder / checkpoints.STATE).write_text(_json({"unit": s.state.best_unit, "metrics": s.state.best_metrics}))

    checkpoints.write(s.run, checkpoints.BEST, build)


def save_last(s: Session) -> None:
    def build(folder: Path) -> None:
        save_weights(s, folder / checkpoints.WEIGHTS)
        state = {**asdict(s.state), "plan": s.plan.fingerprint(), "method": s.p.method}
        (folder / checkpoints.STATE).write_text(_json(state))
        trainer = {
            "optimizer": s.optimizer.state_dict(),
            "scheduler": s.scheduler.state_dict(),
            "scaler": s.scaler.state_dict() if s.scaler is not None else None,
            "rng": rng_state(),
        }
        torch.save(trainer, folder / checkpoints.TRAINER)

    checkpoints.write(s.run, checkpoints.LAST, build, extra=s.base_extra)


def _json(obj: Any) -> str:
    import json

    return json.dumps(obj, indent=1, sort_keys=True)


def restore(s: Session, folder: Path) -> None:
    """Optimizer, scheduler, scaler, RNG and loop state from an unpacked ``last`` (the weights
    were loaded with the model)."""
    state = checkpoints.read_state(folder)
    if state.get("plan") != s.plan.fingerprint() or state.get("method") != s.p.method:
        raise TrainerError(
            "bad_config",
            "cannot resume: the checkpoint was made with other settings or data "
            f"(checkpoint {state.get('method')} {state.get('plan')}, now {s.p.method} {s.plan.fingerprint()})",
            "resume with the job's original hyperparameters and dataset version",
        )
    trainer = torch.load(folder / checkpoints.TRAINER, map_location="cpu", weights_only=False)
    s.optimizer.load_state_dict(trainer["optimizer"])
    s.scheduler.load_state_dict(trainer["scheduler"])
    if s.scaler is not None and trainer.get("scaler"):
        s.scaler.load_state_dict(trainer["scaler"])
    set_rng_state(trainer["rng"])
    known = State.__dataclass_fields__
    s.state = State(**{k: v for k, v in state.items() if k in known})


# ---- the loop ------------------------------------------------------------------------------------


def record(s: Session, step: int, unit: int, metrics: dict[str, float]) -> None:
    s.run.report(step, epoch=unit, **metrics)
    s.state.partial.append({"step": step, "unit": unit, "metrics": metrics})


def replay(s: Session) -> None:
    """After a resume from a mid-unit checkpoint: report the unit's earlier steps again (the SDK
    trimmed the history to the last completed unit), so the history has every step once."""
    for rec in s.state.partial:
        s.run.report(int(rec["step"]), epoch=int(rec["unit"]), **rec["metrics"])


def complete_unit(s: Session, unit: int) -> None:
    metrics = evaluate(s)
    metrics["train_loss"] = s.state.unit_loss / max(s.state.unit_tokens, 1)
    if not s.plan.units_are_epochs:
        metrics["epoch"] = round(s.state.step / s.plan.steps_per_epoch, 4)
    is_best = s.state.best_loss is None or metrics[MAIN_METRIC] < s.state.best_loss
    if is_best:
        s.state.best_loss, s.state.best_unit, s.state.best_metrics = metrics[MAIN_METRIC], unit, dict(metrics)
        save_best(s)
    s.state.units_done, s.state.partial, s.state.unit_loss, s.state.unit_tokens = unit, [], 0.0, 0
    save_last(s)
    what = "epoch" if s.plan.units_are_epochs else "unit"
    s.run.log(
        f"{what} {unit}/{s.plan.total_units} (step {s.state.step}/{s.plan.total_steps}): "
        + " ".join(f"{k}={v:.4f}" for k, v in metrics.items())
        + (" (best)" if is_best else "")
    )
    s.run.epoch_completed(unit, metrics, is_best=is_best, checkpoint_uri=s.run.output.uri_of(f"checkpoints/{checkpoints.BEST}"))


def fit(s: Session) -> None:
    """Train from ``s.state.step`` to the end, or until a stop request (checked after each step)."""
    while s.state.step < s.plan.total_steps and not s.run.should_stop():
        step = s.state.step + 1
        metrics, loss_sum, tokens = train_step(s, step)
        s.state.step = step
        s.state.unit_loss += loss_sum
        s.state.unit_tokens += tokens
        unit = s.plan.unit_of(step)
        if s.p.eval_steps and step % s.p.eval_steps == 0 and not s.plan.unit_ends(step):
            metrics.update(evaluate(s))  # between units: a point on the curves (units evaluate anyway)
        record(s, step, unit, metrics)
        if s.plan.unit_ends(step):
            complete_unit(s, unit)
    if s.state.step < s.plan.total_steps and s.state.partial:
        if s.run.epochs_completed >= 1:
            save_last(s)
            s.run.log(f"stopped at step {s.state.step}: saved checkpoints/{checkpoints.LAST} there; the unfinished unit does not count")
        else:
            s.run.log(f"stopped at step {s.state.step}, before the first completed unit: nothing is kept")
