"""Semantic segmentation with SegFormer (transformers), on COCO or YOLO datasets with masks.

Built on the public Trainer SDK only. Run it inside Forge, or by hand::

    INPUT_URI=./my-masks OUTPUT_DIR=./out \\
    CONFIG_JSON='{"base_model": "segformer-tiny", "base_model_spec": {…}, "hyperparameters": {"epochs": 50, "imgsz": 256}}' \\
    python -m forge_trainers.segmentation

Masks (COCO polygons or RLE, YOLO polygons) are rasterised with pycocotools into one label map
per image:

* **class 0 is background**: every pixel no mask covers. The model has ``1 + len(classes)``
  outputs (``id2label[0] == "background"``) and background counts in mIoU like any class, so a
  model that predicts background everywhere scores low, not high.
* **255 is ignored** (in the loss and the metrics): a box without a mask — the object is there,
  but which of its pixels are is unknown.
* larger masks are painted first, so a small object on top of a large one stays visible; crowd
  regions are painted with their class (semantic segmentation has no instances).

Each epoch: mIoU (``miou``, the main metric: the mean IoU over the classes present in the val
split's labels or predictions), pixel accuracy (``pixel_acc``), IoU per class (``iou/<name>``) and
the val loss, at ``imgsz`` x ``imgsz``. Exports ``model.pt``, the ``save_pretrained`` files and
``model.onnx`` (input ``images``, output ``logits`` [batch, 1 + classes, imgsz, imgsz]: upsampled
to the input, so ``argmax(1)`` is the label map).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch.utils.data import DataLoader

import forge_sdk
from forge_sdk import Run, TrainerError, datasets
from forge_sdk.datasets import DetectionImage, Mask

from . import pool
from .cv import HF_FAMILIES, CachedItems, Exported, Params, TaskData, VisionTask, create_hf_model, fit, read_rgb, save_hf, to_tensor
from .detection import load

MAIN_METRIC = "miou"
BACKGROUND = "background"
IGNORE = 255

SegItem = tuple[torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class SegmentationParams(Params):
    """SegmentationHyperparameters: the common CV ones with SegFormer's learning rate and weight decay."""

    lr: float = 0.00006
    weight_decay: float = 0.01


# ---- masks --------------------------------------------------------------------------------------


def decode_mask(mask: Mask, height: int, width: int) -> np.ndarray:
    """A polygon list or an RLE (compressed or not) as a boolean ``height`` x ``width`` array."""
    with warnings.catch_warnings():
        # pycocotools' compiled code trips numpy 2's __array__(copy=...) deprecation: harmless
        warnings.simplefilter("ignore", DeprecationWarning)
        return _decode(mask, height, width)


def _decode(mask: Mask, height: int, width: int) -> np.ndarray:
    from pycocotools import mask as coco_mask

    if isinstance(mask, dict):
        counts = mask["counts"]
        if isinstance(counts, list):
            rle = coco_mask.frPyObjects(mask, height, width)
        else:
            rle = {"size": list(mask["size"]), "counts": counts.encode() if isinstance(counts, str) else counts}
    else:
        rle = coco_mask.merge(coco_mask.frPyObjects([list(p) for p in mask], height, width))
    return np.asarray(coco_mask.decode(rle), dtype=bool)


def label_map(image: DetectionImage) -> np.ndarray:
    """The image's label map at its own size: 0 background, ``k + 1`` class ``k``, 255 ignored."""
    out = np.zeros((image.height, image.width), dtype=np.uint8)
    painted: list[tuple[int, np.ndarray]] = []
    for box, mask in zip(image.boxes, image.masks or [None] * len(image.boxes), strict=True):
        if mask is None:
            x0, y0 = int(box.x), int(box.y)
            out[y0 : int(np.ceil(box.y + box.h)), x0 : int(np.ceil(box.x + box.w))] = IGNORE
            continue
        painted.append((box.label + 1, decode_mask(mask, image.height, image.width)))
    for label, pixels in sorted(painted, key=lambda lp: -int(lp[1].sum())):
        out[pixels] = label
    return out


class MaskImages(CachedItems[SegItem]):
    """(image, label map) at ``size`` x ``size`` (labels resized with nearest neighbour)."""

    def __init__(self, root: Path, images: list[DetectionImage], size: int, mean: tuple[float, ...], std: tuple[float, ...]) -> None:
        super().__init__(len(images))
        self.root, self.images, self.size, self.mean, self.std = root, images, size, mean, std

    def read(self, i: int) -> SegItem:
        image = self.images[i]
        pixels = to_tensor(read_rgb(self.root / image.path, self.size), self.mean, self.std)
        labels = Image.fromarray(label_map(image)).resize((self.size, self.size), Image.Resampling.NEAREST)
        return pixels, torch.from_numpy(np.asarray(labels, dtype=np.int64).copy())

    def flip(self, item: SegItem) -> SegItem:
        return torch.flip(item[0], dims=[2]), torch.flip(item[1], dims=[1])


# ---- metrics ----------------------------------------------------------------------------------------


def confusion(pred: torch.Tensor, truth: torch.Tensor, classes: int) -> torch.Tensor:
    """Counts of (true class, predicted class) over the pixels that are not ignored."""
    valid = truth != IGNORE
    index = truth[valid] * classes + pred[valid]
    return torch.bincount(index, minlength=classes * classes).reshape(classes, classes)


def scores(matrix: torch.Tensor, names: list[str]) -> dict[str, float]:
    """mIoU over the classes that occur (in the truth or the predictions), pixel accuracy, IoU per class."""
    m = matrix.double()
    hits = m.diag()
    union = m.sum(0) + m.sum(1) - hits
    present = union > 0
    iou = torch.where(present, hits / union.clamp(min=1), torch.zeros_like(hits))
    out = {
        "miou": float(iou[present].mean()) if bool(present.any()) else 0.0,
        "pixel_acc": float(hits.sum() / m.sum().clamp(min=1)),
    }
    out.update({f"iou/{name}": float(iou[k]) for k, name in enumerate(names) if bool(present[k])})
    return out


# ---- the task ---------------------------------------------------------------------------------------


class UpsampledLogits(torch.nn.Module):
    """What ONNX exports: logits at the input's size (SegFormer predicts at a quarter of it)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        logits = self.model(pixel_values=images).logits
        return F.interpolate(logits, size=images.shape[-2:], mode="bilinear", align_corners=False)


class SegmentationTask(VisionTask):
    name = "segmentation"
    main_metric = MAIN_METRIC
    params_type: ClassVar[type[Params]] = SegmentationParams
    families = ("segformer",)

    def __init__(self) -> None:
        self.names: list[str] = []

    def load_data(self, root: Path, p: Params) -> TaskData:
        data = load(root)
        if not data.has_masks:
            raise TrainerError(
                "dataset_error", "the dataset has no masks: segmentation needs COCO polygons/RLE or YOLO polygon labels, not only boxes"
            )
        if BACKGROUND in data.categories:
            raise TrainerError("dataset_error", f"a class is named {BACKGROUND!r}: that name is reserved for the pixels no mask covers")
        split = datasets.split_indices(len(data.images), p.train_val_ratio, p.seed, explicit=data.explicit_split)
        train = [data.images[i] for i in split.train]
        val = [data.images[i] for i in split.val]
        self.names = [BACKGROUND, *data.categories]
        how = "explicit" if split.explicit else f"ratio {p.train_val_ratio}, seed {p.seed}"
        return TaskData(
            classes=self.names,
            train=MaskImages(root, train, p.imgsz, self.mean, self.std),
            val=MaskImages(root, val, p.imgsz, self.mean, self.std),
            split={
                "classes": self.names,
                "train": [img.path for img in train],
                "val": [img.path for img in val],
                "explicit": split.explicit,
                "seed": p.seed,
                "ratio": p.train_val_ratio,
            },
            summary=f"{len(data.categories)} classes + background, {len(train)} training and {len(val)} validation images ({how} split)",
        )

    def create_model(
        self, run: Run, spec: pool.BaseModelSpec, source: Path | str | None, classes: list[str], p: Params, *, load_weights: bool
    ) -> torch.nn.Module:
        model = create_hf_model(run, HF_FAMILIES["segformer"], spec, source, dict(enumerate(classes)), load_weights=load_weights)
        model.config.semantic_loss_ignore_index = IGNORE  # type: ignore[union-attr]
        return model

    def backbone_parameters(self, model: torch.nn.Module) -> list[torch.nn.Parameter]:
        return list(model.segformer.parameters())  # type: ignore[union-attr]

    def loss(self, model: torch.nn.Module, batch: Any, device: torch.device) -> tuple[torch.Tensor, int]:
        images, labels = batch
        return model(pixel_values=images.to(device), labels=labels.to(device)).loss, len(labels)

    def evaluate(self, model: torch.nn.Module, loader: DataLoader[Any], device: torch.device) -> dict[str, float]:
        model.eval()
        classes = len(self.names)
        matrix = torch.zeros(classes, classes, dtype=torch.long)
        loss_sum, seen = 0.0, 0
        for images, labels in loader:
            labels = labels.to(device)
            out = model(pixel_values=images.to(device), labels=labels)
            loss_sum += float(out.loss) * len(labels)
            seen += len(labels)
            logits = F.interpolate(out.logits.float(), size=labels.shape[-2:], mode="bilinear", align_corners=False)
            matrix += confusion(logits.argmax(1).cpu(), labels.cpu(), classes)
        return {**scores(matrix, self.names), "val_loss": loss_sum / max(seen, 1)}

    def meta(self, p: Params, classes: list[str]) -> dict[str, Any]:
        return {**super().meta(p, classes), "family": "segformer", "background": 0, "ignore_index": IGNORE}

    def save_weights(self, model: torch.nn.Module, out: Path, meta: dict[str, Any]) -> Exported:
        return save_hf(model, out, meta)

    def onnx_module(self, model: torch.nn.Module) -> torch.nn.Module:
        return UpsampledLogits(model)


def train(run: Run) -> None:
    fit(run, SegmentationTask())


def main() -> None:
    with forge_sdk.init() as run:
        train(run)


if __name__ == "__main__":
    main()


__all__ = ["MAIN_METRIC", "SegmentationParams", "SegmentationTask", "decode_mask", "label_map", "main", "train"]
