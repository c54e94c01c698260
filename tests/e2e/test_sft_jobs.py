"""The LLM route through the platform: an llm-sft job on the pool's tiny Qwen2 trains, reports
live, and registers its adapter; a VLM job on llava-tiny does the same with images."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest
from PIL import Image

from .conftest import Stack, upload_folder

pytestmark = pytest.mark.slow

CAPITALS = [("France", "Paris"), ("Japan", "Tokyo"), ("Italy", "Rome"), ("Spain", "Madrid"), ("Egypt", "Cairo"), ("Peru", "Lima")]


def chats(root: Path, n: int = 60) -> Path:
    root.mkdir(parents=True)
    with open(root / "data.jsonl", "w") as fh:
        for i in range(n):
            country, capital = CAPITALS[i % len(CAPITALS)]
            turns = [
                {"from": "human", "value": f"What is the capital of {country}?"},
                {"from": "gpt", "value": f"The capital of {country} is {capital}."},
            ]
            fh.write(json.dumps({"conversations": turns}) + "\n")
    return root


def picture_chats(root: Path, n: int = 24) -> Path:
    (root / "images").mkdir(parents=True)
    colors = {"red": (220, 30, 30), "green": (30, 200, 40), "blue": (20, 40, 220)}
    with open(root / "data.jsonl", "w") as fh:
        for i in range(n):
            name, rgb = list(colors.items())[i % 3]
            Image.new("RGB", (32, 32), rgb).save(root / "images" / f"{i}.png")
            messages = [{"role": "user", "content": "<image> What colour is this?"}, {"role": "assistant", "content": f"It is {name}."}]
            fh.write(json.dumps({"messages": messages, "images": [f"images/{i}.png"]}) + "\n")
    return root


def test_an_llm_job_trains_live_and_registers_its_adapter(stack: Stack, tmp_path: Path) -> None:
    upload_folder(stack, "capitals", chats(tmp_path / "capitals"))
    body = {
        "name": "capitals-lora",
        "task": "llm-sft",
        "dataset": {"name": "capitals", "version": 1},
        "base_model": "qwen2-tiny",
        "hyperparameters": {"epochs": 2, "batch": 8, "lr": 0.01, "max_seq_length": 64},
        "start": True,
    }
    job = stack.client.post("/v1/jobs", body)
    stack.wait_event(job["id"], "metrics")
    done = stack.wait_state(job["id"], {"succeeded", "stopped", "canceled", "failed"})
    assert done["state"] == "succeeded", done
    assert done["epochs_completed"] == 2 and "eval_loss" in done["best_metrics"]
    done = stack.wait_model(job["id"])
    version = stack.client.get(f"/v1/models/capitals-lora/versions/{done['model']['version']}")
    assert "adapter" in version["weights_uri"] and version["base_model"] == "qwen2-tiny"
    assert {"adapter", "base_model"} <= set(version["files"])  # a from-config base travels with its adapter
    r = stack.client.http.get(f"/v1/models/capitals-lora/versions/{done['model']['version']}/download", params={"file": "adapter"})
    assert r.status_code == 200, r.text
    with tarfile.open(fileobj=io.BytesIO(r.content)) as tar:
        names = set(tar.getnames())
    assert {"adapter_config.json", "adapter_model.safetensors"} <= names, names
    metrics = stack.client.get(f"/v1/jobs/{job['id']}/metrics")
    assert metrics["epochs"][-1]["eval_loss"] < metrics["epochs"][0]["eval_loss"]


def test_a_vlm_job_trains_on_pictures(stack: Stack, tmp_path: Path) -> None:
    upload_folder(stack, "colours", picture_chats(tmp_path / "colours"))
    body = {
        "name": "colours-lora",
        "task": "vlm-sft",
        "dataset": {"name": "colours", "version": 1},
        "base_model": "llava-tiny",
        "hyperparameters": {"epochs": 1, "batch": 4, "lr": 0.005},
        "start": True,
    }
    job = stack.client.post("/v1/jobs", body)
    done = stack.wait_state(job["id"], {"succeeded", "stopped", "canceled", "failed"})
    assert done["state"] == "succeeded", done
    assert stack.wait_model(job["id"])["model"]["name"] == "colours-lora"
