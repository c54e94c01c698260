"""Detection and segmentation through the platform: COCO and YOLO versions, the pool's tiny
RT-DETR and SegFormer, registered models whose ONNX runs; and the compatibility rules."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from forge_cli.client import ApiError

from ..trainers.test_cv import cv_shapes
from .conftest import Stack, upload_folder

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def cv_datasets(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> None:
    base = tmp_path_factory.mktemp("cv")
    upload_folder(stack, "boxes", cv_shapes(base / "boxes", 24, 64, "yolo"))
    upload_folder(stack, "masks", cv_shapes(base / "masks", 24, 64, "coco", masks=True))


def run_job(stack: Stack, name: str, task: str, dataset: str, base_model: str) -> dict:
    body = {
        "name": name,
        "task": task,
        "dataset": {"name": dataset, "version": 1},
        "base_model": base_model,
        "hyperparameters": {"epochs": 2, "imgsz": 64, "batch": 4, "lr": 0.001},
        "start": True,
    }
    job = stack.client.post("/v1/jobs", body)
    done = stack.wait_state(job["id"], {"succeeded", "stopped", "canceled", "failed"})
    assert done["state"] == "succeeded", done
    return stack.wait_model(job["id"])


def onnx_runs(stack: Stack, name: str, version: int, batch: int) -> list[np.ndarray]:
    response = stack.client.http.get(f"/v1/models/{name}/versions/{version}/download", params={"file": "onnx"})
    assert response.status_code == 200
    session = ort.InferenceSession(response.content, providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: np.random.rand(batch, 3, 64, 64).astype(np.float32)})


def test_a_detection_job_on_yolo_registers_an_rt_detr_whose_onnx_runs(stack: Stack) -> None:
    done = run_job(stack, "boxes-detr", "detection", "boxes", "rt-detr-tiny")
    version = stack.client.get(f"/v1/models/boxes-detr/versions/{done['model']['version']}")
    assert {"map", "map50"} <= version["metrics"].keys()
    outputs = onnx_runs(stack, "boxes-detr", done["model"]["version"], batch=3)
    assert all(o.shape[0] == 3 for o in outputs)  # the batch axis is dynamic


def test_a_segmentation_job_on_coco_registers_a_segformer_whose_onnx_runs(stack: Stack) -> None:
    done = run_job(stack, "masks-segformer", "segmentation", "masks", "segformer-tiny")
    version = stack.client.get(f"/v1/models/masks-segformer/versions/{done['model']['version']}")
    assert {"miou", "pixel_acc"} <= version["metrics"].keys()
    (logits,) = onnx_runs(stack, "masks-segformer", done["model"]["version"], batch=2)
    assert logits.shape == (2, 3, 64, 64)  # background + two classes, at the input size


def test_incompatible_pairs_are_refused_naming_what_fits(stack: Stack) -> None:
    base = {"name": "wrong", "dataset": {"name": "masks", "version": 1}, "hyperparameters": {"epochs": 1}}
    with pytest.raises(ApiError) as exc:  # a timm model cannot do detection
        stack.client.post("/v1/jobs", {**base, "task": "detection", "base_model": "timm/resnet18"})
    assert exc.value.body["field"] == "base_model" and "needs a base model of family rt-detr or rt-detr-v2" in exc.value.detail
    with pytest.raises(ApiError) as exc:  # an image classifier cannot learn from COCO boxes
        stack.client.post("/v1/jobs", {**base, "task": "classification", "base_model": "timm/resnet18"})
    assert exc.value.body["field"] == "dataset" and "needs a dataset in imagenet-folder format" in exc.value.detail
    with pytest.raises(ApiError) as exc:  # a YOLO set of boxes has no masks to segment
        stack.client.post(
            "/v1/jobs", {**base, "dataset": {"name": "boxes", "version": 1}, "task": "segmentation", "base_model": "segformer-tiny"}
        )
    assert "with masks or polygons" in exc.value.detail


def test_nothing_is_left_of_the_cv_datasets_failing(stack: Stack, tmp_path: Path) -> None:
    broken = cv_shapes(tmp_path / "broken", 6, 64, "coco")
    (broken / "images" / "img002.png").unlink()
    with pytest.raises(ApiError) as exc:
        upload_folder(stack, "broken-boxes", broken)
    assert exc.value.status == 422 and "img002.png" in exc.value.detail
