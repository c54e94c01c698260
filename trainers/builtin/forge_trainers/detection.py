"""Object detection with RT-DETR (transformers), on COCO or YOLO TXT datasets.

Built on the public Trainer SDK only. Run it inside Forge, or by hand::

    INPUT_URI=./my-boxes OUTPUT_DIR=./out \\
    CONFIG_JSON='{"base_model": "rt-detr-tiny", "base_model_spec": {…}, "hyperparameters": {"epochs": 50, "imgsz": 320}}' \\
    python -m forge_trainers.detection

Families ``rt-detr`` (``RTDetrForObjectDetection``) and ``rt-detr-v2``
(``RTDetrV2ForObjectDetection``): from a config (random initialisation, full training) or from a
local/S3/hub Hugging Face checkpoint (fine-tuning; the class heads are re-initialised when the
class count differs). Images are resized to ``imgsz`` x ``imgsz`` and only rescaled to [0, 1] (what
RT-DETR's image processor does), so a hub checkpoint sees the inputs it was trained on.

Each epoch: mAP50-95 (``map``, the main metric), mAP50 (``map50``), AP per class (``ap/<name>``) and
the val loss, with pycocotools' COCOeval against the val split's boxes in original pixels. Exports
``model.pt``, the ``save_pretrained`` files (``config.json``, ``model.safetensors``) and
``model.onnx`` (input ``images``; outputs ``logits`` [batch, queries, classes] and ``boxes``
[batch, queries, 4] as normalised cx, cy, w, h).
"""

from __future__ import annotations

import contextlib
import copy
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch.utils.data import DataLoader

import forge_sdk
from forge_sdk import Run, TrainerError, datasets
from forge_sdk.datasets import DetectionData, DetectionImage

from . import pool
from .cv import (
    HF_FAMILIES,
    CachedItems,
    Exported,
    Params,
    TaskData,
    VisionTask,
    create_hf_model,
    fit,
    read_rgb,
    save_hf,
    to_tensor,
    val_images,
)

MAIN_METRIC = "map"
MAX_DETECTIONS = 100


@dataclass(frozen=True)
class DetectionParams(Params):
    """DetectionHyperparameters: the common CV ones with RT-DETR's learning rate and weight decay."""

    lr: float = 0.0001
    weight_decay: float = 0.0001


# ---- data -----------------------------------------------------------------------------------------

Target = dict[str, torch.Tensor]
DetItem = tuple[torch.Tensor, Target, int]


def load(root: Path) -> DetectionData:
    try:
        data = datasets.load_detection(root)
    except datasets.DatasetError as exc:
        raise TrainerError("dataset_error", str(exc.problems[0]) if exc.problems else str(exc)) from None
    if not data.categories:
        raise TrainerError("dataset_error", "the dataset names no classes")
    return data


def crowds(image: DetectionImage) -> list[bool]:
    return list(image.iscrowd) or [False] * len(image.boxes)


def target_of(image: DetectionImage) -> Target:
    """RT-DETR's target: class indices and normalised cx, cy, w, h. Crowd regions are left out:
    COCOeval ignores them, so they must not be learnt as single objects."""
    kept = [b for b, crowd in zip(image.boxes, crowds(image), strict=True) if not crowd]
    boxes = [((b.x + b.w / 2) / image.width, (b.y + b.h / 2) / image.height, b.w / image.width, b.h / image.height) for b in kept]
    return {
        "class_labels": torch.tensor([b.label for b in kept], dtype=torch.long),
        "boxes": torch.tensor(boxes, dtype=torch.float32).reshape(-1, 4),
    }


class BoxImages(CachedItems[DetItem]):
    """(image, target, index into the split) — resizing keeps normalised boxes unchanged."""

    def __init__(self, root: Path, images: list[DetectionImage], size: int, mean: tuple[float, ...], std: tuple[float, ...]) -> None:
        super().__init__(len(images))
        self.root, self.images, self.size, self.mean, self.std = root, images, size, mean, std

    def read(self, i: int) -> DetItem:
        image = self.images[i]
        return to_tensor(read_rgb(self.root / image.path, self.size), self.mean, self.std), target_of(image), i

    def flip(self, item: DetItem) -> DetItem:
        image, target, i = item
        boxes = target["boxes"].clone()
        boxes[:, 0] = 1.0 - boxes[:, 0]
        return torch.flip(image, dims=[2]), {"class_labels": target["class_labels"], "boxes": boxes}, i


def collate(items: list[DetItem]) -> tuple[torch.Tensor, list[Target], list[int]]:
    return torch.stack([i[0] for i in items]), [i[1] for i in items], [i[2] for i in items]


# ---- evaluation -----------------------------------------------------------------------------------------


def coco_ground_truth(images: list[DetectionImage], categories: list[str]) -> dict[str, Any]:
    """The val split as a COCO document in original pixels (ids from 1: COCOeval treats 0 as
    "unmatched")."""
    annotations: list[dict[str, Any]] = []
    for index, image in enumerate(images):
        for box, crowd in zip(image.boxes, crowds(image), strict=True):
            annotations.append(
                {
                    "id": len(annotations) + 1,
                    "image_id": index + 1,
                    "category_id": box.label + 1,
                    "bbox": [box.x, box.y, box.w, box.h],
                    "area": box.w * box.h,
                    "iscrowd": int(crowd),
                }
            )
    return {
        "images": [{"id": i + 1, "width": img.width, "height": img.height} for i, img in enumerate(images)],
        "categories": [{"id": k + 1, "name": name} for k, name in enumerate(categories)],
        "annotations": annotations,
    }


def decode(logits: torch.Tensor, boxes: torch.Tensor, image: DetectionImage, image_id: int) -> list[dict[str, Any]]:
    """One image's best ``MAX_DETECTIONS`` (query, class) pairs as COCO results in pixels — RT-DETR's
    own post-processing (sigmoid scores, top-k over queries x classes)."""
    scores = logits.float().sigmoid().flatten()
    count = min(MAX_DETECTIONS, scores.numel())
    top, index = scores.topk(count)
    classes = logits.shape[-1]
    out = []
    for score, flat in zip(top.tolist(), index.tolist(), strict=True):
        cx, cy, w, h = boxes[flat // classes].tolist()
        bw, bh = w * image.width, h * image.height
        out.append(
            {
                "image_id": image_id,
                "category_id": flat % classes + 1,
                "bbox": [cx * image.width - bw / 2, cy * image.height - bh / 2, bw, bh],
                "score": score,
            }
        )
    return out


def coco_metrics(gt: dict[str, Any], results: list[dict[str, Any]], categories: list[str]) -> dict[str, float]:
    """mAP50-95, mAP50 and AP per class from COCOeval (its printing kept out of the job's log)."""
    metrics: dict[str, float] = {"map": 0.0, "map50": 0.0}
    if not results or not gt["annotations"]:
        return metrics
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    with contextlib.redirect_stdout(io.StringIO()):
        truth = COCO()
        truth.dataset = gt
        truth.createIndex()
        found = truth.loadRes(results)
        evaluation = COCOeval(truth, found, iouType="bbox")
        evaluation.evaluate()
        evaluation.accumulate()
        evaluation.summarize()
    metrics["map"] = max(0.0, float(evaluation.stats[0]))
    metrics["map50"] = max(0.0, float(evaluation.stats[1]))
    precision = evaluation.eval["precision"]  # [iou thresholds, recall, class, area, max dets]
    for k, name in enumerate(categories):
        values = precision[:, :, k, 0, -1]
        values = values[values > -1]
        if values.size:  # a class without val boxes has no AP
            metrics[f"ap/{name}"] = float(values.mean())
    return metrics


# ---- the task ---------------------------------------------------------------------------------------


class RTDetrWrapper(torch.nn.Module):
    """What ONNX exports: plain (logits, boxes) tensors instead of a ModelOutput."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.model(pixel_values=images)
        return out.logits, out.pred_boxes


class DetectionTask(VisionTask):
    name = "detection"
    main_metric = MAIN_METRIC
    params_type: ClassVar[type[Params]] = DetectionParams
    families = ("rt-detr", "rt-detr-v2")
    onnx_outputs = ("logits", "boxes")
    max_grad_norm = 0.1
    mean = (0.0, 0.0, 0.0)
    std = (1.0, 1.0, 1.0)

    def __init__(self) -> None:
        self.family = ""
        self.categories: list[str] = []
        self.val_set: list[DetectionImage] = []

    def check_family(self, spec: pool.BaseModelSpec) -> None:
        super().check_family(spec)
        self.family = spec.family

    def load_data(self, root: Path, p: Params) -> TaskData:
        data = load(root)
        split = datasets.split_indices(len(data.images), p.train_val_ratio, p.seed, explicit=data.explicit_split)
        train = [data.images[i] for i in split.train]
        self.val_set = [data.images[i] for i in split.val]
        self.categories = list(data.categories)
        boxes = sum(len(img.boxes) for img in train)
        how = "explicit" if split.explicit else f"ratio {p.train_val_ratio}, seed {p.seed}"
        return TaskData(
            classes=self.categories,
            train=BoxImages(root, train, p.imgsz, self.mean, self.std),
            val=BoxImages(root, self.val_set, p.imgsz, self.mean, self.std),
            split={
                "classes": self.categories,
                "train": [img.path for img in train],
                "val": [img.path for img in self.val_set],
                "explicit": split.explicit,
                "seed": p.seed,
                "ratio": p.train_val_ratio,
            },
            summary=(
                f"{len(self.categories)} classes, {len(train)} training images ({boxes} boxes) and "
                f"{len(self.val_set)} validation images ({how} split)"
            ),
        )

    def create_model(
        self, run: Run, spec: pool.BaseModelSpec, source: Path | str | None, classes: list[str], p: Params, *, load_weights: bool
    ) -> torch.nn.Module:
        return create_hf_model(
            run, HF_FAMILIES[self.family], spec, source, {i: name for i, name in enumerate(classes)}, load_weights=load_weights
        )

    def backbone_parameters(self, model: torch.nn.Module) -> list[torch.nn.Parameter]:
        return list(model.model.backbone.parameters())  # type: ignore[union-attr]

    def collate(self, items: list[Any]) -> Any:
        return collate(items)

    def loss(self, model: torch.nn.Module, batch: Any, device: torch.device) -> tuple[torch.Tensor, int]:
        images, targets, _ = batch
        labels = [{k: v.to(device) for k, v in t.items()} for t in targets]
        return model(pixel_values=images.to(device), labels=labels).loss, len(targets)

    def evaluate(self, model: torch.nn.Module, loader: DataLoader[Any], device: torch.device) -> dict[str, float]:
        model.eval()
        loss_sum, seen, results = 0.0, 0, []
        for images, targets, indices in loader:
            labels = [{k: v.to(device) for k, v in t.items()} for t in targets]
            out = model(pixel_values=images.to(device), labels=labels)
            loss_sum += float(out.loss) * len(targets)
            seen += len(targets)
            for row, index in enumerate(indices):
                results.extend(decode(out.logits[row].cpu(), out.pred_boxes[row].cpu(), self.val_set[index], index + 1))
        metrics = coco_metrics(coco_ground_truth(self.val_set, self.categories), results, self.categories)
        return {**metrics, "val_loss": loss_sum / max(seen, 1)}

    def meta(self, p: Params, classes: list[str]) -> dict[str, Any]:
        return {**super().meta(p, classes), "family": self.family, "box_format": "cxcywh, normalised to [0, 1]"}

    def save_weights(self, model: torch.nn.Module, out: Path, meta: dict[str, Any]) -> Exported:
        return save_hf(model, out, meta)

    def onnx_module(self, model: torch.nn.Module) -> torch.nn.Module:
        return RTDetrWrapper(model)

    def onnx_check_batch(self, val: CachedItems[Any], p: Params) -> torch.Tensor:
        return val_images(val)

    def compare_onnx(self, ours: list[np.ndarray], reference: list[np.ndarray]) -> float:
        return compare_detections(ours[0], ours[1], reference[0], reference[1])

    def rounding_spread(self, module: torch.nn.Module, batch: torch.Tensor) -> float:
        """torch in float64 against torch in float32: large only when query selection hinges on ties."""
        precise = copy.deepcopy(module).double().eval()
        with torch.no_grad():
            logits, boxes = precise(batch.double())
            reference = module.eval()(batch)
        return compare_detections(logits.float().numpy(), boxes.float().numpy(), reference[0].numpy(), reference[1].numpy())


def compare_detections(logits_a: np.ndarray, boxes_a: np.ndarray, logits_b: np.ndarray, boxes_b: np.ndarray, top: int = 10) -> float:
    """The largest score or box difference between two sets of detections, ignoring query order.

    Near-tied encoder scores may pick queries in another order (or swap one at the selection's
    edge), so queries are not compared by position: each image's ``top`` highest-scoring queries of
    ``a`` are matched to ``b``'s queries by the Hungarian method on score and box distance, and the
    sorted score lists are compared as well."""
    from scipy.optimize import linear_sum_assignment

    worst = 0.0
    for la, ba, lb, bb in zip(logits_a, boxes_a, logits_b, boxes_b, strict=True):
        sa, sb = _sigmoid(la), _sigmoid(lb)
        ka = min(top, len(sa))
        keep = np.argsort(-sa.max(-1))[:ka]
        features_a = np.concatenate([sa[keep], ba[keep]], axis=1)
        features_b = np.concatenate([sb, bb], axis=1)
        cost = np.abs(features_a[:, None, :] - features_b[None, :, :]).sum(-1)
        rows, cols = linear_sum_assignment(cost)
        worst = max(worst, float(np.abs(features_a[rows] - features_b[cols]).max()))
        ranked_a, ranked_b = np.sort(sa.max(-1))[::-1][:ka], np.sort(sb.max(-1))[::-1][:ka]
        worst = max(worst, float(np.abs(ranked_a - ranked_b).max()))
    return worst


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.asarray(1.0 / (1.0 + np.exp(-x.astype(np.float64))))


def train(run: Run) -> None:
    fit(run, DetectionTask())


def main() -> None:
    with forge_sdk.init() as run:
        train(run)


if __name__ == "__main__":
    main()


__all__ = ["MAIN_METRIC", "DetectionParams", "DetectionTask", "compare_detections", "main", "train"]
