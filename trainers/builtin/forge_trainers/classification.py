"""Image classification with any timm architecture, on an ImageNet-style folder.

Built on the public Trainer SDK only. Run it inside Forge, or by hand::

    INPUT_URI=./my-images OUTPUT_DIR=./out \\
    CONFIG_JSON='{"base_model": "timm/resnet18", "hyperparameters": {"epochs": 5, "imgsz": 64}}' \\
    python -m forge_trainers.classification

Each epoch: train, then top-1/top-5/val loss on the held-out split; ``last.pt`` (everything needed
to resume) and ``best.pt`` (by top-1) are checkpointed. At the end — or on Stop after at least one
epoch — the best weights are exported as ``model.pt``, ``model.safetensors`` and ``model.onnx``
(dynamic batch, checked against torch with onnxruntime), with ``metrics.json``, the split and the
registration descriptor.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch.utils.data import DataLoader, Dataset

import forge_sdk
from forge_sdk import Run, TrainerError, datasets

from . import pool
from .common import export_onnx, oom_hint, rng_state, seed_everything, select_device, set_rng_state, verify_onnx

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
MAIN_METRIC = "top1"


@dataclass(frozen=True)
class Params:
    """The hyperparameters and their defaults (the platform sends them resolved)."""

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
    def from_config(cls, given: dict[str, Any]) -> Params:
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
        return params


# ---- data -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Split:
    classes: list[str]
    train: list[tuple[str, int]]
    val: list[tuple[str, int]]
    explicit: bool


def make_split(root: Path, ratio: float, seed: int) -> Split:
    """The dataset's own train/val folders when it has them; otherwise each class is cut at
    ``ratio`` with ``seed`` (the SDK's split: the same on every machine)."""
    try:
        data = datasets.load_classification(root)
    except datasets.DatasetError as exc:
        raise TrainerError("dataset_error", str(exc.problems[0]) if exc.problems else str(exc)) from None
    split = datasets.split_indices(len(data.items), ratio, seed, explicit=data.explicit_split, stratify=data.labels)
    return Split(data.classes, [data.items[i] for i in split.train], [data.items[i] for i in split.val], split.explicit)


def load_image(path: Path, size: int) -> torch.Tensor:
    with Image.open(path) as img:
        img = img.convert("RGB").resize((size, size), Image.BILINEAR)
        array = np.asarray(img, dtype=np.float32) / 255.0
    tensor = torch.from_numpy(array).permute(2, 0, 1)
    mean = torch.tensor(MEAN).view(3, 1, 1)
    std = torch.tensor(STD).view(3, 1, 1)
    return (tensor - mean) / std


class Images(Dataset[tuple[torch.Tensor, int]]):
    """Items decoded once and kept (small datasets) or per access (large ones)."""

    def __init__(self, root: Path, items: list[tuple[str, int]], size: int, cache_limit: int = 4096) -> None:
        self.root = root
        self.items = items
        self.size = size
        self.cache: dict[int, torch.Tensor] | None = {} if len(items) <= cache_limit else None
        self.flips: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        path, label = self.items[i]
        if self.cache is not None and i in self.cache:
            image = self.cache[i]
        else:
            try:
                image = load_image(self.root / path, self.size)
            except OSError as exc:
                raise TrainerError("dataset_error", f"{path}: cannot read the image ({exc})") from None
            if self.cache is not None:
                self.cache[i] = image
        if self.flips is not None and bool(self.flips[i]):
            image = torch.flip(image, dims=[2])
        return image, label


# ---- model --------------------------------------------------------------------------------------


def architecture(spec: pool.BaseModelSpec) -> str:
    arch = spec.config.get("architecture")
    if spec.family != "timm" or not isinstance(arch, str):
        raise TrainerError("bad_config", f"base model {spec.name!r} is not a timm model (family {spec.family!r})")
    return arch


def load_checkpoint(model: torch.nn.Module, folder: Path, run: Run) -> None:
    """Fine-tuning: start from a checkpoint's weights; a classifier head of another size is
    left freshly initialised (a new set of classes)."""
    path = pool.weights_file(folder)
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        state = load_file(str(path))
    else:
        loaded = torch.load(path, map_location="cpu", weights_only=False)
        state = loaded.get("model") or loaded.get("state_dict") or loaded if isinstance(loaded, dict) else loaded
    own = model.state_dict()
    usable = {k: v for k, v in state.items() if k in own and own[k].shape == v.shape}
    skipped = sorted(set(state) - set(usable))
    model.load_state_dict(usable, strict=False)
    run.log(f"loaded {len(usable)} tensors from {path.name}" + (f"; {len(skipped)} not used (e.g. {skipped[0]})" if skipped else ""))


def create_model(arch: str, num_classes: int, imgsz: int) -> torch.nn.Module:
    import timm

    if arch not in timm.list_models():
        raise TrainerError("bad_config", f"timm has no architecture {arch!r}")
    try:
        return timm.create_model(arch, pretrained=False, num_classes=num_classes, img_size=imgsz)
    except TypeError:  # convolutional models take any size and no img_size argument
        return timm.create_model(arch, pretrained=False, num_classes=num_classes)


def set_backbone_trainable(model: torch.nn.Module, trainable: bool) -> None:
    """Fine-tuning: while frozen only the classifier head learns (its parameters get gradients)."""
    head = {id(p) for p in model.get_classifier().parameters()}  # type: ignore[operator]
    for param in model.parameters():
        if id(param) not in head:
            param.requires_grad_(trainable)


def make_optimizer(model: torch.nn.Module, p: Params) -> torch.optim.Optimizer:
    if p.optimizer == "sgd":
        return torch.optim.SGD(model.parameters(), lr=p.lr, momentum=0.9, weight_decay=p.weight_decay)
    if p.optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=p.lr, weight_decay=p.weight_decay)
    if p.optimizer == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=p.lr, weight_decay=p.weight_decay)
    raise TrainerError("bad_config", f"unknown optimizer {p.optimizer!r}; use adamw, adam or sgd")


def lr_factor(step: int, total_steps: int, warmup_steps: int) -> float:
    """Linear warm-up, then cosine decay to 5 % of the peak."""
    if warmup_steps and step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return 0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


@torch.no_grad()
def evaluate(model: torch.nn.Module, loader: DataLoader[Any], device: torch.device, num_classes: int) -> dict[str, float]:
    model.eval()
    k = min(5, num_classes)
    total, loss_sum, top1, topk = 0, 0.0, 0, 0
    for images, labels in loader:
        images, labels = images.to(device), labels.to(device)
        logits = model(images).float()
        loss_sum += F.cross_entropy(logits, labels, reduction="sum").item()
        best = logits.topk(k, dim=1).indices
        top1 += (best[:, 0] == labels).sum().item()
        topk += (best == labels[:, None]).any(dim=1).sum().item()
        total += labels.numel()
    # top5 is top-min(5, classes): with fewer than five classes it is trivially 1
    return {"val_loss": loss_sum / total, "top1": top1 / total, "top5": topk / total}


# ---- the run ----------------------------------------------------------------------------------------


def train(run: Run) -> None:
    p = Params.from_config(run.hyperparameters)
    config = run.config
    device = select_device(str(config.get("accelerator", "cpu")))
    run.oom_hint = oom_hint(p.batch, device)
    spec = pool.spec_of(run)
    arch = architecture(spec)
    checkpoint = pool.fetch(run, spec)
    if isinstance(checkpoint, str):
        raise TrainerError("bad_config", "timm hub checkpoints are not supported: register the checkpoint as a local or s3 base model")
    root = run.input_dir()
    split = make_split(root, p.train_val_ratio, p.seed)
    if len(split.classes) < 2:
        raise TrainerError("dataset_error", f"found {len(split.classes)} class folder(s) in the dataset; need at least two")
    if not split.train or not split.val:
        raise TrainerError(
            "dataset_error", f"the split left {len(split.train)} training and {len(split.val)} validation images; both must be non-empty"
        )
    run.log(
        f"{len(split.classes)} classes, {len(split.train)} training and {len(split.val)} validation images ({'explicit' if split.explicit else f'ratio {p.train_val_ratio}, seed {p.seed}'} split)"
    )

    seed_everything(p.seed)
    model = create_model(arch, len(split.classes), p.imgsz)
    if checkpoint is not None and run.env.resume_from is None:  # a resume loads its own state
        load_checkpoint(model, checkpoint, run)
    model = model.to(device)
    optimizer = make_optimizer(model, p)
    train_set = Images(root, split.train, p.imgsz)
    val_set = Images(root, split.val, p.imgsz)
    val_loader = DataLoader(val_set, batch_size=p.batch, shuffle=False, num_workers=p.workers)
    steps_per_epoch = math.ceil(len(train_set) / p.batch)
    total_steps = steps_per_epoch * p.epochs
    warmup_steps = round(p.warmup_epochs * steps_per_epoch)
    use_amp = p.amp and device.type == "cuda"
    scaler = torch.amp.GradScaler("cuda", enabled=use_amp)

    best_top1, best_epoch, start_epoch = -1.0, 0, 0
    resumed = run.resume("last.pt")
    if resumed is not None:
        state = torch.load(resumed, map_location=device, weights_only=False)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scaler.load_state_dict(state["scaler"])
        best_top1, best_epoch, start_epoch = state["best_top1"], state["best_epoch"], state["epoch"]
        set_rng_state(state["rng"])
        run.resume("best.pt")
        run.trim_history(start_epoch)
        run.log(f"resumed after epoch {start_epoch} (best top-1 {best_top1:.4f} at epoch {best_epoch})")

    run.start(p.epochs, steps_per_epoch=steps_per_epoch, main_metric=MAIN_METRIC)
    (run.work_dir / "split.json").write_text(
        json.dumps(
            {
                "classes": split.classes,
                "train": split.train,
                "val": split.val,
                "explicit": split.explicit,
                "seed": p.seed,
                "ratio": p.train_val_ratio,
            }
        )
    )
    run.upload(run.work_dir / "split.json", "split.json")

    for epoch in range(start_epoch + 1, p.epochs + 1):
        set_backbone_trainable(model, epoch > p.freeze_backbone_epochs)
        model.train()
        order_rng = torch.Generator().manual_seed(p.seed * 100_003 + epoch)
        order = torch.randperm(len(train_set), generator=order_rng).tolist()
        train_set.flips = (torch.rand(len(train_set), generator=order_rng) < 0.5) if p.augment else None
        batches = [order[i : i + p.batch] for i in range(0, len(order), p.batch)]
        loader = DataLoader(train_set, batch_sampler=batches, num_workers=p.workers)
        loss_sum, seen = 0.0, 0
        interrupted = False
        for i, (images, labels) in enumerate(loader):
            step = (epoch - 1) * steps_per_epoch + i
            lr = p.lr * lr_factor(step, total_steps, warmup_steps)
            for group in optimizer.param_groups:
                group["lr"] = lr
            images, labels = images.to(device), labels.to(device)
            with torch.autocast(device.type, enabled=use_amp):
                loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            value = loss.item()
            loss_sum += value * labels.numel()
            seen += labels.numel()
            run.report(step + 1, epoch=epoch, loss=value, lr=lr)
            if run.should_stop():
                interrupted = True
                break
        if interrupted:
            run.log(f"stopped during epoch {epoch}; it does not count")
            break
        metrics = {"train_loss": loss_sum / max(seen, 1), **evaluate(model, val_loader, device, len(split.classes))}
        is_best = metrics[MAIN_METRIC] > best_top1
        if is_best:
            best_top1, best_epoch = metrics[MAIN_METRIC], epoch
            with run.checkpoint("best.pt") as path:
                torch.save({"model": model.state_dict(), "epoch": epoch, "metrics": metrics}, path)
        with run.checkpoint("last.pt") as path:
            torch.save(
                {
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "scaler": scaler.state_dict(),
                    "epoch": epoch,
                    "best_top1": best_top1,
                    "best_epoch": best_epoch,
                    "rng": rng_state(),
                },
                path,
            )
        run.log(f"epoch {epoch}/{p.epochs}: " + " ".join(f"{k}={v:.4f}" for k, v in metrics.items()) + (" (best)" if is_best else ""))
        run.epoch_completed(epoch, metrics, is_best=is_best, checkpoint_uri=run.output.uri_of("checkpoints/best.pt"))
        if run.should_stop():
            break
        if p.patience and epoch - best_epoch >= p.patience:
            run.log(f"no better top-1 for {p.patience} epoch(s): stopping early")
            break

    if run.epochs_completed >= 1:
        export(run, arch, split, p, best_epoch)


def export(run: Run, arch: str, split: Split, p: Params, best_epoch: int) -> None:
    """The best epoch's weights as model.pt / model.safetensors / model.onnx, plus metrics."""
    from safetensors.torch import save_file

    best = torch.load(run.checkpoint_path("best.pt"), map_location="cpu", weights_only=False)
    model = create_model(arch, len(split.classes), p.imgsz)
    model.load_state_dict(best["model"])
    model.eval()
    out = run.work_dir / "export"
    out.mkdir(exist_ok=True)
    meta = {"architecture": arch, "classes": split.classes, "imgsz": p.imgsz, "mean": MEAN, "std": STD, "epoch": best_epoch}
    torch.save({"model": model.state_dict(), **meta}, out / "model.pt")
    save_file(
        {k: v.contiguous() for k, v in model.state_dict().items()}, str(out / "model.safetensors"), metadata={"meta": json.dumps(meta)}
    )
    example = torch.zeros(1, 3, p.imgsz, p.imgsz)
    export_onnx(model, example, out / "model.onnx", input_name="images", output_name="logits")
    check = torch.randn(2, 3, p.imgsz, p.imgsz, generator=torch.Generator().manual_seed(0))
    diff = verify_onnx(model, out / "model.onnx", check)
    run.log(f"exported model.onnx (onnxruntime matches torch to {diff:.1e})")
    weights_uri = run.upload(out / "model.pt")
    run.upload(out / "model.safetensors")
    onnx_uri = run.upload(out / "model.onnx")
    (out / "classes.json").write_text(json.dumps(split.classes))
    run.upload(out / "classes.json")
    metrics = {**best["metrics"], "best_epoch": best_epoch, "main_metric": MAIN_METRIC, "epochs_completed": run.epochs_completed}
    run.write_metrics(metrics, weights_uri=weights_uri, onnx_uri=onnx_uri, params=asdict(p), onnx_max_abs_diff=diff)


def main() -> None:
    with forge_sdk.init() as run:
        train(run)


if __name__ == "__main__":
    main()
