"""CV throughput: images per second of each built-in CV trainer's model on this machine.

For classification (timm ``test_vit``), detection (the ``rt-detr-tiny`` and ``rt-detr-v2-tiny``
seeds) and segmentation (the ``segformer-tiny`` seed), on generated images read through the
trainers' own dataset code (decoded once and cached, as in a run):

* **train**: the trainer's training step (forward with the loss, backward, AdamW; RT-DETR's
  gradient clipping) — what an epoch costs;
* **eval**: the trainer's evaluation (forward, loss and the task's metrics: COCOeval for
  detection, the confusion matrix for segmentation);
* **onnx**: the exported model in onnxruntime (CPU), batch 8.

The first ``--warmup`` steps are not timed.

    .venv/bin/python bench/cv_throughput.py [--imgsz 128] [--batch 8] [--steps 20]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageDraw

from forge_cli.samples import shapes
from forge_common.basemodels import SEEDS
from forge_sdk import Run, TrainerEnv
from forge_trainers import classification, cv, detection, segmentation


def coco_shapes(root: Path, count: int, size: int) -> Path:
    """Red boxes and blue ellipses on noise, with boxes and polygons, as one COCO file."""
    rng = np.random.default_rng(0)
    (root / "images").mkdir(parents=True)
    (root / "annotations").mkdir()
    doc: dict[str, Any] = {"images": [], "annotations": [], "categories": [{"id": 1, "name": "box"}, {"id": 2, "name": "ellipse"}]}
    for n in range(count):
        img = Image.fromarray(rng.integers(0, 90, (size, size, 3), dtype=np.uint8))
        w, h = (int(v) for v in rng.integers(size // 4, size // 2, 2))
        x, y = int(rng.integers(0, size - w)), int(rng.integers(0, size - h))
        angles = np.linspace(0, 2 * math.pi, 16, endpoint=False)
        if n % 2:
            points = [(x + w / 2 + w / 2 * math.cos(t), y + h / 2 + h / 2 * math.sin(t)) for t in angles]
        else:
            points = [(x, y), (x + w, y), (x + w, y + h), (x, y + h)]
        ImageDraw.Draw(img).polygon(points, fill=(30, 60, 230) if n % 2 else (230, 30, 30))
        img.save(root / "images" / f"{n:04d}.png")
        doc["images"].append({"id": n + 1, "file_name": f"{n:04d}.png", "width": size, "height": size})
        polygon = [float(v) for p in points for v in p]
        doc["annotations"].append(
            {"id": n + 1, "image_id": n + 1, "category_id": n % 2 + 1, "bbox": [x, y, w, h], "segmentation": [polygon], "iscrowd": 0}
        )
    (root / "annotations" / "instances.json").write_text(json.dumps(doc))
    return root


def seed_spec(name: str) -> dict[str, Any]:
    seed = next(s for s in SEEDS if s.name == name)
    return {"name": name, "family": seed.family, "source": seed.source.model_dump()}


def session(task: cv.VisionTask, root: Path, base_model: str, work: Path, args: argparse.Namespace) -> cv.Session:
    """The trainer's own setup (data, model, optimizer) for a run that is never started."""
    config: dict[str, Any] = {"base_model": base_model, "hyperparameters": {"imgsz": args.imgsz, "batch": args.batch, "epochs": 1}}
    if not base_model.startswith("timm/"):
        config["base_model_spec"] = seed_spec(base_model)
    env = TrainerEnv(output_dir=str(work / "out"), input_uri=str(root), work_dir=str(work / "work"), config=config)
    run = Run(env, install_signal_handlers=False, stdout=open(os.devnull, "w"))
    return cv.setup(run, task)


def timed(batches: list[Any], count: Callable[[Any], int], step: Callable[[Any], object], steps: int, warmup: int) -> float:
    """Images per second of ``step`` over ``steps`` batches after ``warmup`` untimed ones."""
    for i in range(warmup):
        step(batches[i % len(batches)])
    images, start = 0, time.perf_counter()
    for i in range(steps):
        batch = batches[i % len(batches)]
        step(batch)
        images += count(batch)
    return images / (time.perf_counter() - start)


def measure(name: str, s: cv.Session, args: argparse.Namespace, work: Path) -> dict[str, float]:
    batches = list(cv.epoch_loader(s, 1))
    count: Callable[[Any], int] = lambda batch: len(batch[0])  # noqa: E731
    s.model.train()
    train = timed(batches, count, lambda b: cv.train_step(s, b, 0), args.steps, args.warmup)
    with torch.no_grad():
        s.model.eval()
        s.task.evaluate(s.model, cv.val_loader(s), s.device)  # warm-up (fills the val cache)
        start = time.perf_counter()
        s.task.evaluate(s.model, cv.val_loader(s), s.device)
        evaluate = len(s.data.val) / (time.perf_counter() - start)
    module = s.task.onnx_module(s.model.cpu()).eval()
    path = work / f"{name}.onnx"
    cv.export_onnx(module, torch.zeros(1, 3, args.imgsz, args.imgsz), path, input_name="images", output_names=s.task.onnx_outputs)
    import onnxruntime as ort

    ort_session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    pixels = torch.stack([batches[0][0][i % len(batches[0][0])] for i in range(8)]).numpy()
    onnx = timed([pixels], len, lambda b: ort_session.run(None, {"images": b}), args.steps, args.warmup)
    return {"train": train, "eval": evaluate, "onnx": onnx, "params": sum(p.numel() for p in s.model.parameters()) / 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--imgsz", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--images", type=int, default=80, help="generated images per dataset (80 %% train, 20 %% val)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory(prefix="forge-bench-") as tmp:
        base = Path(tmp)
        folders = shapes(base / "cls", per_class=args.images // 3, size=args.imgsz)
        coco = coco_shapes(base / "coco", args.images, args.imgsz)
        cases: list[tuple[str, cv.VisionTask, Path, str]] = [
            ("classification  timm/test_vit", classification.ClassificationTask(), folders, "timm/test_vit"),
            ("detection       rt-detr-tiny", detection.DetectionTask(), coco, "rt-detr-tiny"),
            ("detection       rt-detr-v2-tiny", detection.DetectionTask(), coco, "rt-detr-v2-tiny"),
            ("segmentation    segformer-tiny", segmentation.SegmentationTask(), coco, "segformer-tiny"),
        ]
        print(f"CV throughput, images/s at {args.imgsz} px, batch {args.batch} ({os.cpu_count()} CPUs, torch {torch.__version__})")
        print(f"{'task / model':34} {'params':>8} {'train':>9} {'eval':>9} {'onnx':>9}")
        for i, (name, task, root, base_model) in enumerate(cases):
            work = base / f"case{i}"
            figures = measure(f"case{i}", session(task, root, base_model, work, args), args, work)
            print(f"{name:34} {figures['params']:7.2f}M {figures['train']:9.1f} {figures['eval']:9.1f} {figures['onnx']:9.1f}")


if __name__ == "__main__":
    main()
