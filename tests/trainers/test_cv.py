"""The computer-vision trainers (classification, detection, segmentation) on generated data.

Each trains in-process on a tiny dataset (coloured boxes and ellipses on noise, written as COCO
JSON or YOLO TXT) through the public SDK; stops are injected with ``run.request_stop()`` at a
chosen step, and one test sends a real SIGTERM to ``python -m forge_trainers.detection``.
"""

from __future__ import annotations

import io
import json
import math
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw

from forge_common.basemodels import SEEDS
from forge_common.jobspec import DetectionHyperparameters, SegmentationHyperparameters
from forge_sdk import Run, TrainerEnv, protocol
from forge_sdk.datasets import Box, DetectionImage
from forge_trainers import classification, detection, segmentation
from forge_trainers.cv import VisionTask

COLORS = {"red": (230, 30, 30), "blue": (30, 60, 230)}
POOL = {s.name: s for s in SEEDS}
Train = Callable[[Run], None]


# ---- generated data ---------------------------------------------------------------------------------


def _shape(
    n: int, size: int, rng: np.random.Generator, classes: tuple[str, ...], masks: bool
) -> tuple[Image.Image, int, list[float], list[float]]:
    """One image: noise with one big shape; (image, class, box xywh, polygon)."""
    img = Image.fromarray(rng.integers(0, 90, (size, size, 3), dtype=np.uint8))
    draw = ImageDraw.Draw(img)
    label = n % len(classes)
    w, h = (int(v) for v in rng.integers(size // 4, size // 2, 2))
    x0, y0 = int(rng.integers(0, size - w)), int(rng.integers(0, size - h))
    if masks and label == 1:  # the second class is an ellipse (a 16-gon)
        angles = np.linspace(0, 2 * math.pi, 16, endpoint=False)
        points = [(x0 + w / 2 + w / 2 * math.cos(t), y0 + h / 2 + h / 2 * math.sin(t)) for t in angles]
        draw.polygon(points, fill=COLORS[classes[label]])
    else:
        points = [(x0, y0), (x0 + w, y0), (x0 + w, y0 + h), (x0, y0 + h)]
        draw.rectangle([x0, y0, x0 + w - 1, y0 + h - 1], fill=COLORS[classes[label]])
    return img, label, [x0, y0, w, h], [float(v) for p in points for v in p]


def cv_shapes(
    root: Path, count: int, size: int, fmt: str, *, masks: bool = False, classes: tuple[str, ...] = ("red", "blue"), seed: int = 0
) -> Path:
    """A COCO (``annotations/instances.json``) or YOLO (``labels/*.txt`` + ``data.yaml``) dataset;
    with ``masks`` every object has a polygon, and in COCO the first one is a compressed RLE."""
    from pycocotools import mask as coco_mask

    rng = np.random.default_rng(seed)
    (root / "images").mkdir(parents=True)
    coco: dict[str, Any] = {"images": [], "annotations": [], "categories": [{"id": i + 1, "name": c} for i, c in enumerate(classes)]}
    for n in range(count):
        img, label, (x0, y0, w, h), polygon = _shape(n, size, rng, classes, masks)
        name = f"img{n:03d}.png"
        img.save(root / "images" / name)
        if fmt == "coco":
            coco["images"].append({"id": n + 1, "file_name": name, "width": size, "height": size})
            ann: dict[str, Any] = {"id": n + 1, "image_id": n + 1, "category_id": label + 1, "bbox": [x0, y0, w, h], "iscrowd": 0}
            if masks:
                ann["segmentation"] = [polygon]
                if n == 0:
                    rle = coco_mask.merge(coco_mask.frPyObjects([polygon], size, size))
                    ann["segmentation"] = {"size": [size, size], "counts": rle["counts"].decode()}
            coco["annotations"].append(ann)
        else:
            (root / "labels").mkdir(exist_ok=True)
            values = polygon if masks else [x0 + w / 2, y0 + h / 2, w, h]
            (root / "labels" / f"img{n:03d}.txt").write_text(f"{label} " + " ".join(f"{v / size:.6f}" for v in values) + "\n")
    if fmt == "coco":
        (root / "annotations").mkdir()
        (root / "annotations" / "instances.json").write_text(json.dumps(coco))
    else:
        (root / "data.yaml").write_text("names: [" + ", ".join(classes) + "]\n")
    return root


@pytest.fixture(scope="module")
def cv_data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from forge_cli.samples import shapes

    base = tmp_path_factory.mktemp("cv-data")
    return {
        "det-coco": cv_shapes(base / "det-coco", 60, 64, "coco"),
        "det-yolo": cv_shapes(base / "det-yolo", 20, 64, "yolo", seed=1),
        "det-one-class": cv_shapes(base / "det-one", 12, 64, "yolo", classes=("red",), seed=2),
        "seg-coco": cv_shapes(base / "seg-coco", 40, 64, "coco", masks=True),
        "seg-yolo": cv_shapes(base / "seg-yolo", 20, 64, "yolo", masks=True, seed=1),
        "seg-one-class": cv_shapes(base / "seg-one", 12, 64, "coco", masks=True, classes=("red",), seed=2),
        "cls": shapes(base / "cls", per_class=16, size=32, classes=("circle", "square")),
    }


# ---- running a trainer in-process -------------------------------------------------------------------


def spec_of(name: str) -> dict[str, Any]:
    seed = POOL[name]
    return {"name": name, "family": seed.family, "source": seed.source.model_dump()}


TASKS: dict[str, tuple[Train, str, str]] = {
    # task → (trainer, base model, dataset)
    "classification": (classification.train, "timm/test_vit", "cls"),
    "detection": (detection.train, "rt-detr-v2-tiny", "det-yolo"),
    "segmentation": (segmentation.train, "segformer-tiny", "seg-yolo"),
}
SMALL: dict[str, dict[str, Any]] = {
    "classification": {"imgsz": 32, "batch": 4, "lr": 0.003},
    "detection": {"imgsz": 64, "batch": 4, "lr": 0.001},
    "segmentation": {"imgsz": 64, "batch": 4, "lr": 0.003},
}


def env_for(
    out: Path,
    data: Path,
    base_model: str,
    *,
    resume_from: Path | None = None,
    spec: dict[str, Any] | None = None,
    accelerator: str = "cpu",
    **hyper: Any,
) -> TrainerEnv:
    config: dict[str, Any] = {"base_model": base_model, "hyperparameters": hyper, "accelerator": accelerator}
    if not base_model.startswith("timm/") or spec is not None:
        config["base_model_spec"] = spec or spec_of(base_model)
    return TrainerEnv(
        output_dir=str(out / "out"),
        input_uri=str(data),
        artifact_id="model",
        work_dir=str(out / "work"),
        result_file=str(out / "result.json"),
        resume_from=str(resume_from / "out") if resume_from else None,
        config=config,
    )


def train(trainer: Train, env: TrainerEnv, *, stop_at_step: int | None = None) -> tuple[protocol.Outcome, str]:
    """Run a trainer as ``main()`` would, asking it to stop right after step ``stop_at_step``."""
    out = io.StringIO()
    run = Run(env, install_signal_handlers=False, stdout=out)
    if stop_at_step is not None:
        report = run.report

        def report_then_stop(step: int, **kwargs: Any) -> None:
            report(step, **kwargs)
            if step == stop_at_step:
                run.request_stop("test")

        run.report = report_then_stop  # type: ignore[method-assign]
    try:
        with run:
            trainer(run)
    except SystemExit:
        pass  # a failure: the outcome says why
    assert run.outcome is not None
    return run.outcome, out.getvalue()


def history(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "out" / "history.jsonl").read_text().splitlines()]


def descriptor(out: Path) -> dict[str, Any]:
    return json.loads((out / "out" / "model.metrics.json").read_text())  # type: ignore[no-any-return]


def onnx_outputs(path: Path, batch: int, size: int) -> list[np.ndarray]:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    images = np.random.default_rng(0).random((batch, 3, size, size), dtype=np.float32)
    return list(session.run(None, {"images": images}))


def assert_outputs(out: Path, *, hf: bool, trained: bool = False) -> dict[str, Any]:
    """Weights, a checked ONNX, metrics, split and a descriptor that names the two files. Only a
    trained detector matches torch to 1e-3: an undertrained one picks its queries among near-ties
    (the trainer then compares against torch in float64 instead)."""
    files = {p.name for p in (out / "out").iterdir()}
    expected = {"model.pt", "model.safetensors", "model.onnx", "metrics.json", "model.metrics.json", "split.json", "history.jsonl"}
    assert expected <= files, files
    if hf:
        assert "config.json" in files
    desc = descriptor(out)
    assert desc["weights_uri"].endswith("/model.pt") and desc["onnx_uri"].endswith("/model.onnx")
    assert desc["onnx_max_abs_diff"] < (1e-3 if trained else 1.0)
    return desc


# ---- what each task learns ------------------------------------------------------------------------------


@pytest.mark.slow
def test_detection_learns_big_boxes_from_coco_and_exports_an_onnx_with_a_dynamic_batch(cv_data: dict[str, Path], tmp_path: Path) -> None:
    env = env_for(tmp_path, cv_data["det-coco"], "rt-detr-tiny", epochs=30, imgsz=64, batch=8, lr=0.001)
    outcome, log = train(detection.train, env)
    assert outcome.state == "succeeded", log[-3000:]
    best = outcome.best_metrics
    # chance is ~0: a box must overlap its object (IoU ≥ 0.5 for map50) with the right class
    assert best["map"] > 0.05 and best["map50"] > 0.25, best
    assert {"map", "map50", "ap/red", "ap/blue", "val_loss", "train_loss"} <= set(best)
    desc = assert_outputs(tmp_path, hf=True, trained=True)
    assert desc["metrics"]["main_metric"] == "map" and desc["metrics"]["map"] == best["map"]
    logits, boxes = onnx_outputs(tmp_path / "out" / "model.onnx", 5, 64)
    assert logits.shape == (5, 30, 2) and boxes.shape == (5, 30, 4)
    epochs = [r for r in history(tmp_path) if r["kind"] == "epoch"]
    assert [r["epoch"] for r in epochs] == list(range(1, 31))
    best_so_far = -1.0
    for record in epochs:  # is_best follows the main metric
        assert record["is_best"] == (record["metrics"]["map"] > best_so_far)
        best_so_far = max(best_so_far, record["metrics"]["map"])
    split = json.loads((tmp_path / "out" / "split.json").read_text())
    assert len(split["val"]) == 12 and not set(split["val"]) & set(split["train"])
    assert all((cv_data["det-coco"] / path).is_file() for path in split["val"])


@pytest.mark.slow
def test_segmentation_learns_polygon_and_rle_masks_from_coco(cv_data: dict[str, Path], tmp_path: Path) -> None:
    env = env_for(tmp_path, cv_data["seg-coco"], "segformer-tiny", epochs=12, imgsz=64, batch=8, lr=0.003)
    outcome, log = train(segmentation.train, env)
    assert outcome.state == "succeeded", log[-3000:]
    best = outcome.best_metrics
    # all-background scores ~0.3 here (background IoU ~0.9, the two shapes 0)
    assert best["miou"] > 0.5 and best["pixel_acc"] > 0.9, best
    assert {"iou/background", "iou/red", "iou/blue", "val_loss"} <= set(best)
    desc = assert_outputs(tmp_path, hf=True, trained=True)
    assert desc["metrics"]["main_metric"] == "miou"
    (logits,) = onnx_outputs(tmp_path / "out" / "model.onnx", 3, 64)
    assert logits.shape == (3, 3, 64, 64)  # background + two classes, at the input's size
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["id2label"] == {"0": "background", "1": "red", "2": "blue"}


def test_classification_learns_and_exports(cv_data: dict[str, Path], tmp_path: Path) -> None:
    env = env_for(tmp_path, cv_data["cls"], "timm/test_vit", epochs=4, **SMALL["classification"])
    outcome, log = train(classification.train, env)
    assert outcome.state == "succeeded", log[-3000:]
    assert outcome.best_metrics["top1"] > 0.75  # two classes, six val images: chance is 0.5
    assert_outputs(tmp_path, hf=False, trained=True)
    (logits,) = onnx_outputs(tmp_path / "out" / "model.onnx", 3, 32)
    assert logits.shape == (3, 2)


# ---- resume, stop, cancel, out of memory --------------------------------------------------------------


def _comparable(records: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(r["kind"], r.get("step"), r["epoch"], r.get("is_best"), r["metrics"]) for r in records]


def assert_same_history(ours: list[dict[str, Any]], reference: list[dict[str, Any]]) -> None:
    assert [r[:4] for r in _comparable(ours)] == [r[:4] for r in _comparable(reference)]
    for a, b in zip(ours, reference, strict=True):
        assert a["metrics"].keys() == b["metrics"].keys()
        for key, value in a["metrics"].items():
            assert value == pytest.approx(b["metrics"][key], rel=1e-6, abs=1e-6), (a, b)


@pytest.mark.slow
@pytest.mark.parametrize("task", list(TASKS))
def test_a_run_stopped_mid_epoch_resumes_from_last_and_repeats_an_uninterrupted_run(
    task: str, cv_data: dict[str, Path], tmp_path: Path
) -> None:
    trainer, base_model, data = TASKS[task]
    hyper = {"epochs": 3, **SMALL[task]}
    whole, cut, resumed = tmp_path / "whole", tmp_path / "cut", tmp_path / "resumed"

    outcome, log = train(trainer, env_for(whole, cv_data[data], base_model, **hyper))
    assert outcome.state == "succeeded", log[-3000:]
    steps_per_epoch = sum(1 for r in history(whole) if r["kind"] == "step" and r["epoch"] == 1)

    # stopped after a step of epoch 2: stopped (epoch 1 counts), the best model exported
    outcome, log = train(trainer, env_for(cut, cv_data[data], base_model, **hyper), stop_at_step=steps_per_epoch + 1)
    assert outcome.state == "stopped" and outcome.epochs_completed == 1, log[-3000:]
    assert_outputs(cut, hf=task != "classification")
    assert max(r["step"] for r in history(cut) if r["kind"] == "step") == steps_per_epoch + 1

    outcome, log = train(trainer, env_for(resumed, cv_data[data], base_model, resume_from=cut, **hyper))
    assert outcome.state == "succeeded" and outcome.epochs_completed == 3, log[-3000:]
    assert "resumed after epoch 1" in log
    steps = [r["step"] for r in history(resumed) if r["kind"] == "step"]
    assert steps == list(range(1, 3 * steps_per_epoch + 1))  # the cut epoch's step is not repeated
    assert_same_history(history(resumed), history(whole))
    final, reference = descriptor(resumed)["metrics"], descriptor(whole)["metrics"]
    assert final.keys() == reference.keys()
    for key, value in final.items():
        assert value == (pytest.approx(reference[key], rel=1e-6, abs=1e-6) if isinstance(value, float) else reference[key]), key


@pytest.mark.parametrize("task", list(TASKS))
def test_a_stop_before_the_first_epoch_cancels_and_removes_every_output(task: str, cv_data: dict[str, Path], tmp_path: Path) -> None:
    trainer, base_model, data = TASKS[task]
    outcome, log = train(trainer, env_for(tmp_path, cv_data[data], base_model, epochs=2, **SMALL[task]), stop_at_step=1)
    assert outcome.state == "canceled" and outcome.epochs_completed == 0, log[-3000:]
    assert not [p for p in (tmp_path / "out").rglob("*") if p.is_file()]


@pytest.mark.parametrize(
    ("task", "error"),
    [
        ("classification", MemoryError()),
        ("detection", torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")),
        ("segmentation", MemoryError()),
    ],
)
def test_running_out_of_memory_fails_with_a_hint_naming_a_smaller_batch(
    task: str, error: BaseException, cv_data: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trainer, base_model, data = TASKS[task]
    task_class = {"classification": classification.ClassificationTask, "detection": detection.DetectionTask}.get(
        task, segmentation.SegmentationTask
    )

    def out_of_memory(self: VisionTask, model: torch.nn.Module, batch: Any, device: torch.device) -> tuple[torch.Tensor, int]:
        raise error

    monkeypatch.setattr(task_class, "loss", out_of_memory)
    outcome, log = train(trainer, env_for(tmp_path, cv_data[data], base_model, epochs=1, **{**SMALL[task], "batch": 4}))
    assert outcome.state == "failed" and outcome.reason == "out_of_memory", log[-3000:]
    assert outcome.hint == "batch 4 ran out of CPU memory; try 2"


def test_patience_ends_a_run_early_when_the_main_metric_stops_improving(
    cv_data: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def flat(self: VisionTask, model: torch.nn.Module, loader: Any, device: torch.device) -> dict[str, float]:
        return {"top1": 0.5, "top5": 1.0, "val_loss": 1.0}

    monkeypatch.setattr(classification.ClassificationTask, "evaluate", flat)
    env = env_for(tmp_path, cv_data["cls"], "timm/test_vit", epochs=10, patience=2, **SMALL["classification"])
    outcome, log = train(classification.train, env)
    assert outcome.state == "succeeded" and outcome.epochs_completed == 3, log[-3000:]
    assert "no better top1 for 2 epoch(s): stopping early" in log
    assert descriptor(tmp_path)["metrics"]["best_epoch"] == 1


def test_a_sigterm_after_the_first_epoch_ends_the_detection_process_stopped_with_its_model(
    cv_data: dict[str, Path], tmp_path: Path
) -> None:
    env = env_for(tmp_path, cv_data["det-yolo"], "rt-detr-tiny", epochs=200, imgsz=64, batch=4, lr=0.001)
    environ = {**os.environ, **env.to_environ()}
    proc = subprocess.Popen(
        [sys.executable, "-m", "forge_trainers.detection"], env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        record = protocol.parse_line(line)
        if isinstance(record, protocol.Epoch):
            proc.send_signal(signal.SIGTERM)
            break
    rest, _ = proc.communicate(timeout=300)
    output = "".join(lines) + rest
    assert proc.returncode == 0, output[-3000:]
    result = protocol.parse_record((tmp_path / "result.json").read_text())
    assert isinstance(result, protocol.Outcome) and result.state == "stopped", output[-3000:]
    assert 1 <= result.epochs_completed < 200
    assert "stop requested (SIGTERM)" in output
    assert_outputs(tmp_path, hf=True)


# ---- fine-tuning and configuration ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("task", "family", "fine_data", "message", "head"),
    [
        ("detection", "rt-detr", "det-one-class", "for 1 classes (the checkpoint has 2)", "model.enc_score_head.weight"),
        ("segmentation", "segformer", "seg-one-class", "for 2 classes (the checkpoint has 3)", "decode_head.classifier.weight"),
    ],
)
def test_fine_tuning_from_a_local_checkpoint_keeps_the_frozen_backbone_and_reinitialises_the_class_heads(
    task: str, family: str, fine_data: str, message: str, head: str, cv_data: dict[str, Path], tmp_path: Path
) -> None:
    trainer, base_model, data = TASKS[task]
    base_model = base_model.replace("-v2", "")
    first, second = tmp_path / "first", tmp_path / "second"
    outcome, log = train(trainer, env_for(first, cv_data[data], base_model, epochs=1, **SMALL[task]))
    assert outcome.state == "succeeded", log[-3000:]
    local = {"name": "mine", "family": family, "source": {"kind": "local", "uri": str(first / "out")}}
    hyper = {**SMALL[task], "epochs": 1, "freeze_backbone_epochs": 1}
    outcome, log = train(trainer, env_for(second, cv_data[fine_data], "mine", spec=local, **hyper))
    assert outcome.state == "succeeded", log[-3000:]
    assert f"fine-tuning from mine; the class heads are re-initialised {message}" in log
    source = torch.load(first / "out" / "model.pt", weights_only=False)["model"]
    tuned = torch.load(second / "out" / "checkpoints" / "last.pt", weights_only=False)["model"]
    backbone = "model.backbone." if task == "detection" else "segformer."
    frozen = [k for k in source if k.startswith(backbone) and k.endswith(".weight")]
    assert frozen and all(torch.equal(tuned[k], source[k]) for k in frozen)  # loaded, then frozen for the one epoch
    assert tuned[head].shape[0] != source[head].shape[0]


def test_the_trainers_accept_exactly_the_api_hyperparameters_and_defaults() -> None:
    assert asdict(detection.DetectionParams()) == DetectionHyperparameters().model_dump()
    assert asdict(segmentation.SegmentationParams()) == SegmentationHyperparameters().model_dump()


def test_a_wrong_family_a_dataset_without_masks_and_a_missing_gpu_fail_with_their_reasons(cv_data: dict[str, Path], tmp_path: Path) -> None:
    outcome, _ = train(detection.train, env_for(tmp_path / "a", cv_data["det-yolo"], "segformer-tiny", epochs=1))
    assert outcome.reason == "bad_config" and "rt-detr" in (outcome.message or "")
    outcome, _ = train(segmentation.train, env_for(tmp_path / "b", cv_data["det-yolo"], "segformer-tiny", epochs=1))
    assert outcome.reason == "dataset_error" and "no masks" in (outcome.message or "")
    if not torch.cuda.is_available():
        outcome, _ = train(detection.train, env_for(tmp_path / "c", cv_data["det-yolo"], "rt-detr-tiny", accelerator="nvidia", epochs=1))
        assert outcome.reason == "device_unavailable"


# ---- the pieces ----------------------------------------------------------------------------------------


def test_detections_are_compared_whatever_the_order_of_the_queries() -> None:
    rng = np.random.default_rng(0)
    logits, boxes = rng.normal(size=(2, 30, 3)).astype(np.float32), rng.random((2, 30, 4), dtype=np.float32)
    order = rng.permutation(30)
    assert detection.compare_detections(logits[:, order], boxes[:, order], logits, boxes) < 1e-6
    moved = boxes.copy()
    best = np.argmax(1 / (1 + np.exp(-logits[0])).max(-1))
    moved[0, best] += 0.2
    assert detection.compare_detections(logits, moved, logits, boxes) > 0.1


def test_coco_metrics_score_perfect_detections_one_and_missing_ones_zero() -> None:
    images = [DetectionImage("a.png", 100, 100, [Box(0, 10, 10, 30, 40)], [None], [False])]
    gt = detection.coco_ground_truth(images, ["thing"])
    perfect = [{"image_id": 1, "category_id": 1, "bbox": [10, 10, 30, 40], "score": 0.9}]
    assert detection.coco_metrics(gt, perfect, ["thing"]) == pytest.approx({"map": 1.0, "map50": 1.0, "ap/thing": 1.0})
    wrong = [{"image_id": 1, "category_id": 1, "bbox": [60, 60, 30, 30], "score": 0.9}]
    assert detection.coco_metrics(gt, wrong, ["thing"])["map"] == 0.0
    assert detection.coco_metrics(gt, [], ["thing"]) == {"map": 0.0, "map50": 0.0}


def _uncompressed_rle(mask: np.ndarray) -> dict[str, Any]:
    """COCO's uncompressed RLE: run lengths over the column-major pixels, starting with zeros."""
    flat = mask.flatten(order="F").astype(np.uint8)
    counts, current, run = [], 0, 0
    for value in flat:
        if value == current:
            run += 1
        else:
            counts.append(run)
            current, run = value, 1
    counts.append(run)
    return {"size": list(mask.shape), "counts": counts}


def test_label_maps_have_background_zero_classes_from_one_ignored_boxes_and_small_objects_on_top() -> None:
    from pycocotools import mask as coco_mask

    small = np.zeros((20, 20), dtype=bool)
    small[5:8, 5:8] = True
    compressed = coco_mask.encode(np.asfortranarray(small.astype(np.uint8)))
    image = DetectionImage(
        "a.png",
        20,
        20,
        boxes=[Box(0, 2, 2, 12, 12), Box(1, 5, 5, 3, 3), Box(1, 15, 15, 3, 3), Box(0, 0, 16, 2, 2)],
        masks=[
            [[2, 2, 14, 2, 14, 14, 2, 14]],  # a big square (polygon), class 0 → 1
            {"size": [20, 20], "counts": compressed["counts"].decode()},  # the small one on top, class 1 → 2
            _uncompressed_rle(np.pad(np.ones((3, 3), bool), ((15, 2), (15, 2)))),  # uncompressed RLE
            None,  # a box without a mask: ignored
        ],
        iscrowd=[False] * 4,
    )
    labels = segmentation.label_map(image)
    assert labels[0, 0] == 0 and labels[10, 10] == 1 and labels[6, 6] == 2 and labels[16, 16] == 2
    assert labels[17, 1] == segmentation.IGNORE


def test_miou_counts_background_and_only_the_classes_that_occur() -> None:
    truth = torch.tensor([[0, 0, 1, 1], [0, 0, 1, 255]])
    pred = torch.tensor([[0, 0, 1, 0], [0, 0, 1, 1]])
    matrix = segmentation.confusion(pred.flatten(), truth.flatten(), 3)
    got = segmentation.scores(matrix, ["background", "a", "b"])
    assert got["iou/background"] == pytest.approx(4 / 5) and got["iou/a"] == pytest.approx(2 / 3)
    assert "iou/b" not in got and got["miou"] == pytest.approx((4 / 5 + 2 / 3) / 2)
    assert got["pixel_acc"] == pytest.approx(6 / 7)
