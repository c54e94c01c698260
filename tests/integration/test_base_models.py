"""The base-model pool over HTTP: seeds, checked checkpoints, and what jobs may name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from safetensors.torch import save_file

from .conftest import tar_of, upload


def checkpoint(
    folder: Path, *, model_type: str = "qwen2", tokenizer: bool = True, config: bool = True, weights: bytes | None = None
) -> Path:
    folder.mkdir(parents=True)
    if config:
        (folder / "config.json").write_text(json.dumps({"model_type": model_type, "hidden_size": 8}))
    if weights is None:
        save_file({"w": torch.zeros(2, 2)}, str(folder / "model.safetensors"))
    else:
        (folder / "model.safetensors").write_bytes(weights)
    if tokenizer:
        (folder / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE"}}))
        (folder / "tokenizer_config.json").write_text("{}")
    return folder


def torch_file(folder: Path, data: bytes | None = None) -> Path:
    """A checkpoint whose weights are a PyTorch file (``data`` replaces what torch.save wrote)."""
    checkpoint(folder)
    (folder / "model.safetensors").unlink()
    torch.save({"w": torch.zeros(2, 2)}, folder / "pytorch_model.bin")
    if data is not None:
        (folder / "pytorch_model.bin").write_bytes(data)
    return folder


def entry(name: str, uri: str, family: str = "qwen2") -> dict[str, Any]:
    return {"name": name, "family": family, "source": {"kind": "local", "uri": uri}, "license": "test"}


async def test_the_seeds_cover_every_task(api: httpx.AsyncClient) -> None:
    pool = (await api.get("/v1/base-models")).json()
    names = {m["name"] for m in pool}
    assert {"rt-detr-tiny", "segformer-tiny", "qwen2-tiny", "llava-tiny", "timm/resnet18", "timm/test_vit"} <= names
    assert all(m["builtin"] and m["source"]["kind"] == "config" for m in pool)
    for task in ("classification", "detection", "segmentation", "llm-sft", "vlm-sft"):
        served = (await api.get("/v1/base-models", params={"task": task})).json()
        assert served and all(task in m["tasks"] for m in served), task
    one = (await api.get("/v1/base-models/timm/resnet18")).json()
    assert one["family"] == "timm" and one["source"]["config"] == {"architecture": "resnet18"}


async def test_a_checked_local_checkpoint_joins_the_pool_with_its_digest(api: httpx.AsyncClient, tmp_path: Path) -> None:
    folder = checkpoint(tmp_path / "ckpt")
    created = await api.post("/v1/base-models", json=entry("my-qwen", str(folder)))
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["tasks"] == ["llm-sft"] and len(body["digest"]) == 64 and body["size_bytes"] > 0 and not body["builtin"]
    again = await api.post("/v1/base-models", json=entry("my-qwen", str(folder)))
    assert again.status_code == 409
    assert [m["name"] for m in (await api.get("/v1/base-models", params={"task": "llm-sft"})).json()].count("my-qwen") == 1
    assert (await api.delete("/v1/base-models/my-qwen")).status_code == 204
    pytorch = await api.post("/v1/base-models", json=entry("my-qwen-bin", str(torch_file(tmp_path / "bin"))))
    assert pytorch.status_code == 201, pytorch.text
    mistral = checkpoint(tmp_path / "mistral", model_type="mistral")
    refused = await api.post("/v1/base-models", json=entry("my-mistral", str(mistral)))
    assert refused.status_code == 422 and "family qwen2 needs one of qwen2" in refused.json()["detail"]
    anything = await api.post("/v1/base-models", json=entry("my-mistral", str(mistral), family="causal-lm"))
    assert anything.status_code == 201 and anything.json()["tasks"] == ["llm-sft"]  # any other causal LM
    assert (await api.delete("/v1/base-models/qwen2-tiny")).status_code == 409  # shipped entries stay


@pytest.mark.parametrize(
    ("build", "family", "field", "message"),
    [
        (lambda p: checkpoint(p, config=False), "qwen2", "source.uri", "has no config.json"),
        (lambda p: checkpoint(p, model_type="bert"), "qwen2", "family", "says model_type 'bert'; family qwen2 needs one of qwen2"),
        (lambda p: checkpoint(p, tokenizer=False), "qwen2", "source.uri", "has no tokenizer"),
        (lambda p: checkpoint(p, weights=b"\x05\x00\x00\x00\x00\x00\x00\x00{bad}"), "qwen2", "source.uri", "has a header that is not JSON"),
        (lambda p: checkpoint(p, weights=b"abc"), "qwen2", "source.uri", "shorter than a safetensors header"),
        (lambda p: checkpoint(p, model_type="llava"), "llava", "source.uri", "has no image processor"),
        (lambda p: p, "qwen2", "source.uri", "is not a folder"),
        (lambda p: torch_file(p, b"<html>404 Not Found</html>"), "qwen2", "source.uri", "pytorch_model.bin is not a PyTorch checkpoint"),
    ],
)
async def test_a_broken_checkpoint_is_refused_naming_the_problem(
    api: httpx.AsyncClient, tmp_path: Path, build: Any, family: str, field: str, message: str
) -> None:
    folder = build(tmp_path / "ckpt")
    r = await api.post("/v1/base-models", json=entry("broken", str(folder), family))
    assert r.status_code == 422, r.text
    assert r.json()["field"] == field and message in r.json()["detail"]
    assert (await api.get("/v1/base-models/broken")).status_code == 404


async def test_entries_are_validated_before_anything_is_read(api: httpx.AsyncClient) -> None:
    cases = [
        ({"name": "x", "family": "gpt9", "source": {"kind": "config"}}, "unknown family 'gpt9'"),
        (
            {"name": "x", "family": "timm", "tasks": ["detection"], "source": {"kind": "config", "config": {"architecture": "resnet18"}}},
            "family timm cannot serve detection",
        ),
        (
            {"name": "x", "family": "timm", "source": {"kind": "config", "config": {"architecture": "resnet9000"}}},
            "timm has no architecture 'resnet9000'",
        ),
        ({"name": "x", "family": "qwen2", "source": {"kind": "local"}}, "a local source needs a uri"),
        ({"name": "x", "family": "qwen2", "source": {"kind": "local", "uri": "relative/path"}}, "absolute folder path"),
        ({"name": "x", "family": "qwen2", "source": {"kind": "s3", "uri": "s3://b/p"}}, "no S3 endpoint configured"),
    ]
    for body, message in cases:
        r = await api.post("/v1/base-models", json=body)
        assert r.status_code == 422 and message in r.json()["detail"], (body, r.text)


async def test_a_job_records_the_base_model_it_starts_from(api: httpx.AsyncClient, sample_dataset: Path) -> None:
    await upload(api, "shapes", tar_of(sample_dataset))
    spec = {"name": "j", "task": "classification", "dataset": {"name": "shapes", "version": 1}, "base_model": "timm/resnet10t"}
    job = (await api.post("/v1/jobs", json=spec)).json()
    assert job["base_model"] == "timm/resnet10t"
    # any timm architecture works without a pool entry (the walking-skeleton contract)
    virtual = await api.post("/v1/jobs", json={**spec, "base_model": "timm/mobilevitv2_050"})
    assert virtual.status_code == 201, virtual.text


async def test_tasks_describe_formats_families_metrics_and_defaults(api: httpx.AsyncClient) -> None:
    tasks = {t["name"]: t for t in (await api.get("/v1/tasks")).json()}
    assert set(tasks) == {"classification", "detection", "segmentation", "llm-sft", "vlm-sft"}
    assert tasks["detection"]["dataset_formats"] == ["coco", "yolo"] and tasks["detection"]["main_metric"] == "map"
    assert tasks["detection"]["base_model_families"] == ["rt-detr", "rt-detr-v2"]
    props = tasks["classification"]["hyperparameters"]["properties"]
    assert props["epochs"]["default"] == 100 and props["imgsz"]["default"] == 640 and props["batch"]["default"] == 16
    assert tasks["llm-sft"]["hyperparameters"]["properties"]["method"]["enum"] == ["full", "lora", "qlora"]


async def test_a_checkpoint_in_object_storage_is_checked_and_pinned_by_its_etags(s3_settings: Any, tmp_path: Path) -> None:
    from forge_api.app import create_app
    from forge_api.settings import ApiSettings
    from forge_common.storage import open_store

    settings = s3_settings
    store = open_store(settings)
    good = store.location("pool/qwen")
    good.upload_tree(checkpoint(tmp_path / "good"))
    broken = store.location("pool/no-tokenizer")
    broken.upload_tree(checkpoint(tmp_path / "broken", tokenizer=False))
    app = create_app(settings, ApiSettings())
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://forge") as api:
            body = {"name": "s3-qwen", "family": "qwen2", "source": {"kind": "s3", "uri": good.uri}}
            r = await api.post("/v1/base-models", json=body)
            assert r.status_code == 201, r.text
            assert r.json()["digest"] == good.content_digest() and {f["path"] for f in r.json()["files"]} >= {
                "config.json",
                "model.safetensors",
            }
            assert all(f.get("etag") for f in r.json()["files"])  # S3 content is pinned by ETag, without reading it
            bad = await api.post("/v1/base-models", json={**body, "name": "s3-broken", "source": {"kind": "s3", "uri": broken.uri}})
            assert bad.status_code == 422 and "has no tokenizer" in bad.json()["detail"]
            missing = await api.post(
                "/v1/base-models", json={**body, "name": "s3-missing", "source": {"kind": "s3", "uri": store.uri("pool/none")}}
            )
            assert missing.status_code == 422 and "holds no files" in missing.json()["detail"]
