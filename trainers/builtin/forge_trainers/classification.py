"""Image classification with any timm architecture, on an ImageNet-style folder.

Built on the public Trainer SDK only. Run it inside Forge, or by hand::

    INPUT_URI=./my-images OUTPUT_DIR=./out \\
    CONFIG_JSON='{"base_model": "timm/resnet18", "hyperparameters": {"epochs": 5, "imgsz": 64}}' \\
    python -m forge_trainers.classification

Each epoch: train, then top-1/top-5/val loss on the held-out split; ``last.pt`` (everything needed
to resume) and ``best.pt`` (by top-1) are checkpointed. At the end — or on Stop after at least one
epoch — the best weights are exported as ``model.pt``, ``model.safetensors`` and ``model.onnx``
(dynamic batch, checked against torch with onnxruntime), with ``metrics.json``, the split and the
registration descriptor. The loop, checkpoints and export are :mod:`forge_trainers.cv`'s.
"""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

import forge_sdk
from forge_sdk import Run, TrainerError, datasets

from . import pool
from .cv import IMAGENET_MEAN, IMAGENET_STD, CachedItems, Exported, Params, TaskData, VisionTask, fit, read_rgb, to_tensor

MEAN = IMAGENET_MEAN
STD = IMAGENET_STD
MAIN_METRIC = "top1"

__all__ = ["MAIN_METRIC", "ClassificationTask", "Params", "main", "train"]


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
    return to_tensor(read_rgb(path, size), MEAN, STD)


class Images(CachedItems[tuple[torch.Tensor, int]]):
    """(image, class index) pairs."""

    def __init__(self, root: Path, items: list[tuple[str, int]], size: int, cache_limit: int = 4096) -> None:
        super().__init__(len(items), cache_limit)
        self.root = root
        self.items = items
        self.size = size

    def read(self, i: int) -> tuple[torch.Tensor, int]:
        path, label = self.items[i]
        return load_image(self.root / path, self.size), label

    def flip(self, item: tuple[torch.Tensor, int]) -> tuple[torch.Tensor, int]:
        return torch.flip(item[0], dims=[2]), item[1]


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
        try:  # a user's upload: tensors only, never pickled code
            loaded = torch.load(path, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as exc:
            raise TrainerError(
                "bad_config",
                f"{path.name} holds more than tensors (pickled objects are not loaded, they could run code): {str(exc).splitlines()[0]}",
                "save the weights with torch.save(model.state_dict(), ...) or as .safetensors",
            ) from exc
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


# ---- the task ---------------------------------------------------------------------------------------


class ClassificationTask(VisionTask):
    name = "classification"
    main_metric = MAIN_METRIC
    params_type: ClassVar[type[Params]] = Params
    families = ("timm",)

    def __init__(self) -> None:
        self.arch = ""
        self.classes: list[str] = []

    def check_family(self, spec: pool.BaseModelSpec) -> None:
        self.arch = architecture(spec)

    def load_data(self, root: Path, p: Params) -> TaskData:
        split = make_split(root, p.train_val_ratio, p.seed)
        if len(split.classes) < 2:
            raise TrainerError("dataset_error", f"found {len(split.classes)} class folder(s) in the dataset; need at least two")
        self.classes = split.classes
        how = "explicit" if split.explicit else f"ratio {p.train_val_ratio}, seed {p.seed}"
        return TaskData(
            classes=split.classes,
            train=Images(root, split.train, p.imgsz),
            val=Images(root, split.val, p.imgsz),
            split={
                "classes": split.classes,
                "train": split.train,
                "val": split.val,
                "explicit": split.explicit,
                "seed": p.seed,
                "ratio": p.train_val_ratio,
            },
            summary=f"{len(split.classes)} classes, {len(split.train)} training and {len(split.val)} validation images ({how} split)",
        )

    def create_model(
        self, run: Run, spec: pool.BaseModelSpec, source: Path | str | None, classes: list[str], p: Params, *, load_weights: bool
    ) -> torch.nn.Module:
        if isinstance(source, str):
            raise TrainerError("bad_config", "timm hub checkpoints are not supported: register the checkpoint as a local or s3 base model")
        model = create_model(self.arch, len(classes), p.imgsz)
        if load_weights and source is not None:
            load_checkpoint(model, source, run)
        return model

    def backbone_parameters(self, model: torch.nn.Module) -> list[torch.nn.Parameter]:
        head = {id(p) for p in model.get_classifier().parameters()}  # type: ignore[operator]
        return [param for param in model.parameters() if id(param) not in head]

    def loss(self, model: torch.nn.Module, batch: Any, device: torch.device) -> tuple[torch.Tensor, int]:
        images, labels = batch
        return F.cross_entropy(model(images.to(device)), labels.to(device)), int(labels.numel())

    def evaluate(self, model: torch.nn.Module, loader: DataLoader[Any], device: torch.device) -> dict[str, float]:
        return evaluate(model, loader, device, len(self.classes))

    def meta(self, p: Params, classes: list[str]) -> dict[str, Any]:
        return {"architecture": self.arch, "classes": classes, "imgsz": p.imgsz, "mean": MEAN, "std": STD}

    def save_weights(self, model: torch.nn.Module, out: Path, meta: dict[str, Any]) -> Exported:
        from safetensors.torch import save_file

        torch.save({"model": model.state_dict(), **meta}, out / "model.pt")
        tensors = {k: v.contiguous() for k, v in model.state_dict().items()}
        save_file(tensors, str(out / "model.safetensors"), metadata={"meta": json.dumps(meta)})
        return Exported(out / "model.pt", [out / "model.safetensors"])


def train(run: Run) -> None:
    fit(run, ClassificationTask())


def main() -> None:
    with forge_sdk.init() as run:
        train(run)


if __name__ == "__main__":
    main()
