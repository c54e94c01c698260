"""What the computer-vision trainers share: hyperparameters, image loading, the epoch loop,
checkpoint/resume and the export.

A trainer describes its task as a :class:`VisionTask` (how to read the data, build the model, compute
a loss, evaluate and save weights); :func:`fit` runs everything else the same way for every task, on
the public Trainer SDK only:

* one data order per epoch from a generator seeded with ``seed`` and the epoch (flips included), and
  every RNG state in ``last.pt`` — so a run resumed from ``last.pt`` repeats an uninterrupted run's
  losses exactly on CPU;
* ``last.pt`` every epoch, ``best.pt`` when the main metric improves, both through ``run.checkpoint``
  (atomic);
* Stop finishes the current step; after at least one completed epoch the best model is exported;
* at the end, ``model.pt`` (+ the task's other weight files), ``model.onnx`` with a dynamic batch
  axis checked with ``onnx.checker`` and onnxruntime against torch on another batch size,
  ``metrics.json``, ``split.json`` and the registration descriptor.
"""

from __future__ import annotations

import contextlib
import json
import math
import warnings
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torch.utils.data import default_collate as torch_default_collate

from forge_sdk import Run, TrainerError

from . import pool
from .common import oom_hint, rng_state, seed_everything, select_device, set_rng_state

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
ORDER_SEED_STRIDE = 100_003
"""Epoch ``e`` of a run with seed ``s`` shuffles with ``s * ORDER_SEED_STRIDE + e`` (never the global RNG)."""


# ---- hyperparameters --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Params:
    """The hyperparameters every CV trainer accepts (``_CommonCV`` in the job spec), with
    classification's ``lr``/``weight_decay`` defaults; tasks subclass it to change those two."""

    epochs: int = 100
    imgsz: int = 640
    batch: int = 16
    train_val_ratio: float = 0.8
    lr: float = 0.001
    optimizer: str = "adamw"
    weight_decay: float = 0.05
    warmup_epochs: float = 0.0
    seed: int = 0
    workers: int = 0
    augment: bool = True
    patience: int | None = None
    amp: bool = True
    freeze_backbone_epochs: int = 0

    @classmethod
    def from_config(cls: type[P], given: dict[str, Any]) -> P:
        """The resolved hyperparameters from ``CONFIG_JSON``; unknown names and bad values are a
        ``bad_config`` failure that names them (a run started by hand gets no api validation)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(given) - known)
        if unknown:
            raise TrainerError("bad_config", f"unknown hyperparameter(s): {', '.join(unknown)}")
        try:
            params = cls(**given)
        except TypeError as exc:
            raise TrainerError("bad_config", f"hyperparameters: {exc}") from None
        if params.epochs < 1 or params.batch < 1 or params.imgsz < 16 or not 0 < params.train_val_ratio < 1:
            raise TrainerError("bad_config", "hyperparameters out of range (epochs ≥ 1, batch ≥ 1, imgsz ≥ 16, 0 < train_val_ratio < 1)")
        if params.optimizer not in ("adamw", "adam", "sgd"):
            raise TrainerError("bad_config", f"unknown optimizer {params.optimizer!r}; use adamw, adam or sgd")
        return params


P = TypeVar("P", bound=Params)


def make_optimizer(parameters: Iterable[torch.nn.Parameter], p: Params) -> torch.optim.Optimizer:
    params = list(parameters)
    if p.optimizer == "sgd":
        return torch.optim.SGD(params, lr=p.lr, momentum=0.9, weight_decay=p.weight_decay)
    if p.optimizer == "adam":
        return torch.optim.Adam(params, lr=p.lr, weight_decay=p.weight_decay)
    if p.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=p.lr, weight_decay=p.weight_decay)
    raise TrainerError("bad_config", f"unknown optimizer {p.optimizer!r}; use adamw, adam or sgd")


def lr_factor(step: int, total_steps: int, warmup_steps: int) -> float:
    """Linear warm-up, then cosine decay to 5 % of the peak."""
    if warmup_steps and step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return 0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


# ---- images -------------------------------------------------------------------------------------------


def read_rgb(path: Path, size: int) -> np.ndarray:
    """An image as ``size`` x ``size`` RGB floats in [0, 1]; an unreadable file is a dataset error
    that names it (not a crash)."""
    try:
        with Image.open(path) as img:
            rgb = img.convert("RGB").resize((size, size), Image.Resampling.BILINEAR)
            return np.asarray(rgb, dtype=np.float32) / 255.0
    except OSError as exc:
        raise TrainerError("dataset_error", f"{path.name}: cannot read the image ({exc})") from None


def to_tensor(array: np.ndarray, mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    tensor = torch.from_numpy(np.ascontiguousarray(array)).permute(2, 0, 1)
    return (tensor - torch.tensor(mean).view(3, 1, 1)) / torch.tensor(std).view(3, 1, 1)


Item = TypeVar("Item")


class CachedItems(Dataset[Item], Generic[Item], ABC):
    """Items decoded once and kept (small datasets) or per access (large ones), and flipped
    horizontally when this epoch's ``flips`` says so (the flips come from the epoch's seeded
    generator, so a resumed run flips the same images)."""

    def __init__(self, count: int, cache_limit: int = 4096) -> None:
        self.count = count
        self.cache: dict[int, Item] | None = {} if count <= cache_limit else None
        self.flips: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.count

    @abstractmethod
    def read(self, i: int) -> Item:
        """The item as stored (not flipped)."""

    @abstractmethod
    def flip(self, item: Item) -> Item:
        """The item mirrored left–right (image and its labels)."""

    def __getitem__(self, i: int) -> Item:
        if self.cache is not None and i in self.cache:
            item = self.cache[i]
        else:
            item = self.read(i)
            if self.cache is not None:
                self.cache[i] = item
        if self.flips is not None and bool(self.flips[i]):
            item = self.flip(item)
        return item


# ---- the task interface --------------------------------------------------------------------------------


@dataclass
class TaskData:
    """What a task hands to the loop: its two datasets, the split to record, the class names."""

    classes: list[str]
    train: CachedItems[Any]
    val: CachedItems[Any]
    split: dict[str, Any]
    summary: str


@dataclass
class Exported:
    """Weight files a task wrote into the export folder; ``weights`` is the one registered."""

    weights: Path
    others: list[Path] = field(default_factory=list)


class VisionTask(ABC):
    """One CV task's specifics; :func:`fit` does the rest."""

    name: ClassVar[str]
    main_metric: ClassVar[str]
    params_type: ClassVar[type[Params]] = Params
    families: ClassVar[tuple[str, ...]]
    onnx_outputs: ClassVar[tuple[str, ...]] = ("logits",)
    onnx_tolerance: ClassVar[float] = 1e-3
    max_grad_norm: ClassVar[float | None] = None
    """Gradient clipping (RT-DETR's recipe clips at 0.1); None: no clipping."""
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD

    def check_family(self, spec: pool.BaseModelSpec) -> None:
        if spec.family not in self.families:
            raise TrainerError(
                "bad_config",
                f"base model {spec.name!r} is family {spec.family!r}; {self.name} trains {' or '.join(self.families)} models",
            )

    @abstractmethod
    def load_data(self, root: Path, p: Params) -> TaskData:
        """Read and split the dataset (through ``forge_sdk.datasets``)."""

    @abstractmethod
    def create_model(
        self, run: Run, spec: pool.BaseModelSpec, source: Path | str | None, classes: list[str], p: Params, *, load_weights: bool
    ) -> torch.nn.Module:
        """The model for ``classes``; with ``load_weights`` it starts from ``source``'s weights
        (fine-tuning), otherwise from a random initialisation (or a resumed state loaded later)."""

    @abstractmethod
    def backbone_parameters(self, model: torch.nn.Module) -> list[torch.nn.Parameter]:
        """What ``freeze_backbone_epochs`` freezes."""

    def collate(self, items: list[Any]) -> Any:
        return torch_default_collate(items)

    @abstractmethod
    def loss(self, model: torch.nn.Module, batch: Any, device: torch.device) -> tuple[torch.Tensor, int]:
        """The training loss of one batch and how many images it holds."""

    @abstractmethod
    def evaluate(self, model: torch.nn.Module, loader: DataLoader[Any], device: torch.device) -> dict[str, float]:
        """Metrics on the val split (the main metric, ``val_loss``, …)."""

    @abstractmethod
    def save_weights(self, model: torch.nn.Module, out: Path, meta: dict[str, Any]) -> Exported:
        """Write the weight files of the best model into ``out``."""

    def meta(self, p: Params, classes: list[str]) -> dict[str, Any]:
        """What a user of the exported model needs to feed it (saved with the weights)."""
        return {"task": self.name, "classes": classes, "imgsz": p.imgsz, "mean": self.mean, "std": self.std}

    def onnx_module(self, model: torch.nn.Module) -> torch.nn.Module:
        """What is exported: the model, or a wrapper that returns plain tensors."""
        return model

    def onnx_check_batch(self, val: CachedItems[Any], p: Params) -> torch.Tensor:
        """The batch onnxruntime and torch are compared on: two images (the export's example has one)."""
        return torch.randn(2, 3, p.imgsz, p.imgsz, generator=torch.Generator().manual_seed(0))

    def compare_onnx(self, ours: list[np.ndarray], reference: list[np.ndarray]) -> float:
        """The largest difference between onnxruntime's and torch's outputs."""
        return max(float(np.abs(a - b).max()) for a, b in zip(ours, reference, strict=True))

    def rounding_spread(self, module: torch.nn.Module, batch: torch.Tensor) -> float:
        """How far the outputs move with rounding alone (see :func:`check_onnx`); 0: not measured."""
        return 0.0


def val_images(val: CachedItems[Any], count: int = 3) -> torch.Tensor:
    """Up to ``count`` val images as a batch of at least two (the first mirrored when val has one):
    real images give well-separated scores, so an order-sensitive comparison is meaningful."""
    images = [val.read(i)[0] for i in range(min(count, len(val)))]
    if len(images) == 1:
        images.append(torch.flip(images[0], dims=[2]))
    return torch.stack(images)


# ---- checkpoints ----------------------------------------------------------------------------------------


@dataclass
class Progress:
    best_score: float = -math.inf
    best_epoch: int = 0
    epoch: int = 0


def save_last(run: Run, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler, progress: Progress) -> None:
    """Everything a resumed attempt needs to continue exactly where this epoch ended."""
    with run.checkpoint("last.pt") as path:
        torch.save(
            {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scaler": scaler.state_dict(),
                "epoch": progress.epoch,
                "best_score": progress.best_score,
                "best_epoch": progress.best_epoch,
                "rng": rng_state(),
            },
            path,
        )


def resume(
    run: Run, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler, device: torch.device
) -> Progress:
    """Load ``last.pt`` of ``RESUME_FROM`` (when set) and trim the history of the cut epoch."""
    path = run.resume("last.pt")
    if path is None:
        return Progress()
    state = torch.load(path, map_location=device, weights_only=False)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scaler.load_state_dict(state["scaler"])
    best = state.get("best_score", state.get("best_top1", -math.inf))  # best_top1: classification before the shared loop
    progress = Progress(best_score=float(best), best_epoch=int(state["best_epoch"]), epoch=int(state["epoch"]))
    set_rng_state(state["rng"])
    if progress.best_epoch:
        run.resume("best.pt")
    run.trim_history(progress.epoch)
    run.log(f"resumed after epoch {progress.epoch} (best {progress.best_score:.4f} at epoch {progress.best_epoch})")
    return progress


# ---- the loop ----------------------------------------------------------------------------------------------


@dataclass
class Session:
    """One run's state, shared by the loop's small steps."""

    run: Run
    task: VisionTask
    p: Params
    device: torch.device
    data: TaskData
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    use_amp: bool
    steps_per_epoch: int
    progress: Progress

    @property
    def total_steps(self) -> int:
        return self.steps_per_epoch * self.p.epochs

    @property
    def warmup_steps(self) -> int:
        return round(self.p.warmup_epochs * self.steps_per_epoch)


def fit(run: Run, task: VisionTask) -> Session:
    """Train ``task`` on the run's dataset, then export the best model (also after a Stop)."""
    s = setup(run, task)
    write_split(run, s.data.split)
    for epoch in range(s.progress.epoch + 1, s.p.epochs + 1):
        train_loss = train_epoch(s, epoch)
        if train_loss is None:
            run.log(f"stopped during epoch {epoch}; it does not count")
            break
        end_epoch(s, epoch, train_loss)
        if run.should_stop():
            break
        if s.p.patience and epoch - s.progress.best_epoch >= s.p.patience:
            run.log(f"no better {task.main_metric} for {s.p.patience} epoch(s): stopping early")
            break
    if run.epochs_completed >= 1:
        export(s)
    return s


def setup(run: Run, task: VisionTask) -> Session:
    """Parameters, device, data, model, optimizer and (when resuming) the saved state."""
    p = task.params_type.from_config(run.hyperparameters)
    device = select_device(str(run.config.get("accelerator", "cpu")))
    run.oom_hint = oom_hint(p.batch, device)
    spec = pool.spec_of(run)
    task.check_family(spec)
    source = pool.fetch(run, spec)
    data = task.load_data(run.input_dir(), p)
    if len(data.train) == 0 or len(data.val) == 0:
        raise TrainerError(
            "dataset_error", f"the split left {len(data.train)} training and {len(data.val)} validation images; both must be non-empty"
        )
    run.log(data.summary)
    seed_everything(p.seed)
    resuming = run.env.resume_from is not None  # a resume loads its own state, not the base model's
    model = task.create_model(run, spec, source, data.classes, p, load_weights=source is not None and not resuming).to(device)
    optimizer = make_optimizer(model.parameters(), p)
    use_amp = p.amp and device.type == "cuda"
    scaler = torch.amp.GradScaler("cuda", enabled=use_amp)
    progress = resume(run, model, optimizer, scaler, device)
    steps_per_epoch = math.ceil(len(data.train) / p.batch)
    run.start(p.epochs, steps_per_epoch=steps_per_epoch, main_metric=task.main_metric)
    return Session(run, task, p, device, data, model, optimizer, scaler, use_amp, steps_per_epoch, progress)


def write_split(run: Run, split: dict[str, Any]) -> None:
    path = run.work_dir / "split.json"
    path.write_text(json.dumps(split))
    run.upload(path, "split.json")


def set_backbone_trainable(task: VisionTask, model: torch.nn.Module, trainable: bool) -> None:
    """While frozen only the heads learn (the backbone's parameters get no gradients)."""
    for param in task.backbone_parameters(model):
        param.requires_grad_(trainable)


def epoch_loader(s: Session, epoch: int) -> DataLoader[Any]:
    """This epoch's batches: order and flips from a generator seeded by (seed, epoch) alone."""
    order_rng = torch.Generator().manual_seed(s.p.seed * ORDER_SEED_STRIDE + epoch)
    train = s.data.train
    order = torch.randperm(len(train), generator=order_rng).tolist()
    train.flips = (torch.rand(len(train), generator=order_rng) < 0.5) if s.p.augment else None
    batches = [order[i : i + s.p.batch] for i in range(0, len(order), s.p.batch)]
    return DataLoader(train, batch_sampler=batches, num_workers=s.p.workers, collate_fn=s.task.collate)


def train_epoch(s: Session, epoch: int) -> float | None:
    """One pass over the training split; None when a stop cut it short (after a finished step)."""
    set_backbone_trainable(s.task, s.model, epoch > s.p.freeze_backbone_epochs)
    s.model.train()
    loss_sum, seen = 0.0, 0
    for i, batch in enumerate(epoch_loader(s, epoch)):
        step = (epoch - 1) * s.steps_per_epoch + i
        value, count, lr = train_step(s, batch, step)
        loss_sum += value * count
        seen += count
        s.run.report(step + 1, epoch=epoch, loss=value, lr=lr)
        if s.run.should_stop():
            return None
    return loss_sum / max(seen, 1)


def train_step(s: Session, batch: Any, step: int) -> tuple[float, int, float]:
    lr = s.p.lr * lr_factor(step, s.total_steps, s.warmup_steps)
    for group in s.optimizer.param_groups:
        group["lr"] = lr
    with torch.autocast(s.device.type) if s.use_amp else contextlib.nullcontext():
        loss, count = s.task.loss(s.model, batch, s.device)
    s.optimizer.zero_grad(set_to_none=True)
    if not s.use_amp:  # the plain path: a disabled GradScaler still costs a little on every step
        loss.backward()  # type: ignore[no-untyped-call]
        if s.task.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(s.model.parameters(), s.task.max_grad_norm)
        s.optimizer.step()
        return loss.item(), count, lr
    s.scaler.scale(loss).backward()  # type: ignore[no-untyped-call]
    if s.task.max_grad_norm is not None:
        s.scaler.unscale_(s.optimizer)
        torch.nn.utils.clip_grad_norm_(s.model.parameters(), s.task.max_grad_norm)
    s.scaler.step(s.optimizer)
    s.scaler.update()
    return loss.item(), count, lr


def val_loader(s: Session) -> DataLoader[Any]:
    s.data.val.flips = None
    return DataLoader(s.data.val, batch_size=s.p.batch, shuffle=False, num_workers=s.p.workers, collate_fn=s.task.collate)


def end_epoch(s: Session, epoch: int, train_loss: float) -> None:
    """Evaluate, checkpoint (best, then last), report the epoch."""
    with torch.no_grad():
        s.model.eval()
        metrics = {"train_loss": train_loss, **s.task.evaluate(s.model, val_loader(s), s.device)}
    main = s.task.main_metric
    is_best = metrics[main] > s.progress.best_score
    s.progress.epoch = epoch
    if is_best:
        s.progress.best_score, s.progress.best_epoch = metrics[main], epoch
        with s.run.checkpoint("best.pt") as path:
            torch.save({"model": s.model.state_dict(), "epoch": epoch, "metrics": metrics}, path)
    save_last(s.run, s.model, s.optimizer, s.scaler, s.progress)
    shown = " ".join(f"{k}={v:.4f}" for k, v in metrics.items() if "/" not in k)
    s.run.log(f"epoch {epoch}/{s.p.epochs}: {shown}" + (" (best)" if is_best else ""))
    s.run.epoch_completed(epoch, metrics, is_best=is_best, checkpoint_uri=s.run.output.uri_of("checkpoints/best.pt"))


# ---- export ------------------------------------------------------------------------------------------------


def export_onnx(module: torch.nn.Module, example: torch.Tensor, path: Path, *, input_name: str, output_names: Sequence[str]) -> None:
    """Export with a dynamic batch axis (the legacy exporter: fast, and exact for these models).

    The module must be in eval mode *before* the call: the exporter restores the mode it found,
    and a wrapper left in training mode would switch the whole model back to training."""
    module.eval()
    axes = {name: {0: "batch"} for name in (input_name, *output_names)}
    with warnings.catch_warnings():
        # tracing warns about Python-side shape checks that are constant at a fixed image size
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            (example,),
            str(path),
            dynamo=False,
            opset_version=17,
            input_names=[input_name],
            output_names=list(output_names),
            dynamic_axes=axes,
        )


def run_onnx(path: Path, batch: torch.Tensor) -> list[np.ndarray]:
    """``onnx.checker`` on the file, then its outputs for ``batch`` from onnxruntime."""
    import onnx
    import onnxruntime as ort

    onnx.checker.check_model(onnx.load(str(path)))
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return list(session.run(None, {session.get_inputs()[0].name: batch.cpu().numpy()}))


def torch_outputs(module: torch.nn.Module, batch: torch.Tensor) -> list[np.ndarray]:
    with torch.no_grad():
        out = module.eval()(batch)
    outs = out if isinstance(out, tuple | list) else (out,)
    return [o.float().cpu().numpy() for o in outs]


def check_onnx(run: Run, task: VisionTask, module: torch.nn.Module, path: Path, batch: torch.Tensor) -> float:
    """onnxruntime against torch on ``batch``; returns the difference, raising when it is too large.

    A model whose outputs hinge on near-ties (an undertrained RT-DETR picks its queries by top-k
    over almost equal scores) answers differently to rounding alone: when torch in float64 differs
    from torch in float32 by as much as onnxruntime does, the export is not what is wrong."""
    diff = task.compare_onnx(run_onnx(path, batch), torch_outputs(module, batch))
    if diff <= task.onnx_tolerance:
        run.log(f"exported model.onnx (onnxruntime matches torch to {diff:.1e})")
        return diff
    spread = task.rounding_spread(module, batch)
    if diff > task.onnx_tolerance + 2 * spread:
        raise TrainerError("trainer_crash", f"the ONNX export does not match torch (max difference {diff:.2e})")
    run.log(
        f"exported model.onnx: onnxruntime differs from torch by {diff:.1e}, as torch in float64 does ({spread:.1e}): "
        "the model's outputs hinge on near-tied scores (train longer for a stable model)"
    )
    return diff


def export(s: Session) -> None:
    """The best epoch's weights, the checked ONNX, the metrics and the registration descriptor."""
    run, task, p = s.run, s.task, s.p
    best = torch.load(run.checkpoint_path("best.pt"), map_location="cpu", weights_only=False)
    model = s.model.to("cpu")
    model.load_state_dict(best["model"])
    model.eval()
    out = run.work_dir / "export"
    out.mkdir(exist_ok=True)
    meta = {**task.meta(p, s.data.classes), "epoch": s.progress.best_epoch}
    weights = task.save_weights(model, out, meta)
    module = task.onnx_module(model).eval()
    export_onnx(module, torch.zeros(1, 3, p.imgsz, p.imgsz), out / "model.onnx", input_name="images", output_names=task.onnx_outputs)
    diff = check_onnx(run, task, module, out / "model.onnx", task.onnx_check_batch(s.data.val, p))
    weights_uri = run.upload(weights.weights)
    for other in weights.others:
        run.upload(other)
    onnx_uri = run.upload(out / "model.onnx")
    (out / "classes.json").write_text(json.dumps(s.data.classes))
    run.upload(out / "classes.json")
    metrics = {
        **best["metrics"],
        "best_epoch": s.progress.best_epoch,
        "main_metric": task.main_metric,
        "epochs_completed": run.epochs_completed,
    }
    run.write_metrics(metrics, weights_uri=weights_uri, onnx_uri=onnx_uri, params=asdict(p), onnx_max_abs_diff=diff)


# ---- Hugging Face families (RT-DETR, SegFormer) -----------------------------------------------------------


@dataclass(frozen=True)
class HFFamily:
    """A pool family built with transformers: the config's ``model_type`` and the two classes."""

    model_type: str
    config_class: str
    model_class: str


HF_FAMILIES: dict[str, HFFamily] = {
    "rt-detr": HFFamily("rt_detr", "RTDetrConfig", "RTDetrForObjectDetection"),
    "rt-detr-v2": HFFamily("rt_detr_v2", "RTDetrV2Config", "RTDetrV2ForObjectDetection"),
    "segformer": HFFamily("segformer", "SegformerConfig", "SegformerForSemanticSegmentation"),
}


def create_hf_model(
    run: Run, family: HFFamily, spec: pool.BaseModelSpec, source: Path | str | None, id2label: dict[int, str], *, load_weights: bool
) -> torch.nn.Module:
    """A transformers model for these labels: from ``spec.config`` (random initialisation), or
    from a checkpoint folder / hub id. Fine-tuning (``load_weights``) keeps every weight whose shape
    still fits — a new class count re-initialises the class heads; without it only the
    checkpoint's architecture is used (a resumed run loads its own state next)."""
    import transformers
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    config_class = getattr(transformers, family.config_class)
    model_class = getattr(transformers, family.model_class)
    labels: dict[str, Any] = {"id2label": dict(id2label), "label2id": {name: i for i, name in id2label.items()}}
    if source is None:
        given = {k: v for k, v in spec.config.items() if k not in ("model_type", "num_labels", "id2label", "label2id")}
        try:
            config = config_class(**given, **labels)
        except (TypeError, ValueError) as exc:
            raise TrainerError("bad_config", f"base model {spec.name!r}: its config does not fit {family.config_class} ({exc})") from None
        return model_class(config)  # type: ignore[no-any-return]
    where = str(source)
    try:
        config = config_class.from_pretrained(where)
    except (OSError, ValueError) as exc:
        raise TrainerError(
            "bad_config", f"base model {spec.name!r}: cannot read a {family.model_type} config.json from {where} ({exc})"
        ) from None
    if config.model_type != family.model_type:
        raise TrainerError(
            "bad_config", f"base model {spec.name!r} is a {config.model_type!r} checkpoint, not {family.model_type!r} (its family says so)"
        )
    before = config.num_labels
    config.id2label, config.label2id = labels["id2label"], labels["label2id"]
    if not load_weights:
        return model_class(config)  # type: ignore[no-any-return]
    try:
        model = model_class.from_pretrained(where, config=config, ignore_mismatched_sizes=True, dtype=torch.float32)
    except (OSError, ValueError) as exc:
        raise TrainerError("bad_config", f"base model {spec.name!r}: cannot load its weights from {where} ({exc})") from None
    heads = (
        f"; the class heads are re-initialised for {len(id2label)} classes (the checkpoint has {before})" if before != len(id2label) else ""
    )
    run.log(f"fine-tuning from {spec.name}{heads}")
    return model  # type: ignore[no-any-return]


def save_hf(model: torch.nn.Module, out: Path, meta: dict[str, Any]) -> Exported:
    """``save_pretrained`` (``config.json`` + ``model.safetensors``: the output folder is itself a
    checkpoint a later job can fine-tune from) and ``model.pt`` (state, config and preprocessing)."""
    model.save_pretrained(out)  # type: ignore[operator]
    config = model.config.to_dict()  # type: ignore[union-attr,operator]
    torch.save({"model": model.state_dict(), "config": config, **meta}, out / "model.pt")
    return Exported(out / "model.pt", [out / "config.json", out / "model.safetensors"])
