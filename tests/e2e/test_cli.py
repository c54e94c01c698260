"""The forge command against the running stack: what a user types, what they see, the exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from forge_cli.main import app

from .conftest import Stack, forge

pytestmark = pytest.mark.slow


def test_a_user_trains_a_model_from_the_command_line(stack: Stack, tmp_path: Path) -> None:
    code, out = forge(stack, "datasets", "sample", str(tmp_path / "shapes"), "--per-class", "20", "--size", "32", "--")
    assert code == 0 and "60 images" in out
    code, out = forge(stack, "datasets", "upload", "cli-shapes", str(tmp_path / "shapes"))
    assert code == 0 and "cli-shapes v1 (imagenet-folder, 60 files) — new version" in out
    code, out = forge(stack, "datasets", "upload", "cli-shapes", str(tmp_path / "shapes"))
    assert code == 0 and "identical content: existing version" in out
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "name: cli-vit\ntask: classification\ndataset: {name: cli-shapes, version: 1}\nbase_model: timm/test_vit\n"
        "hyperparameters: {epochs: 2, imgsz: 32, batch: 8, lr: 0.003}\n"
    )
    code, out = forge(stack, "jobs", "submit", str(spec), "--watch")
    assert code == 0, out
    assert "cli-vit succeeded after 2 epoch(s)" in out and "model: cli-vit v1" in out and "epoch 2:" in out
    code, out = forge(stack, "jobs", "list", "--output", "json")
    jobs = json.loads(out)
    job = next(j for j in jobs if j["name"] == "cli-vit")
    code, out = forge(stack, "jobs", "logs", job["id"])
    assert code == 0 and "epoch 2/2:" in out
    code, out = forge(stack, "jobs", "logs", job["id"], "-f")
    assert code == 0 and "epoch 2/2:" in out  # a finished job: its whole output, then it returns
    code, out = forge(stack, "models", "download", "cli-vit", "1", "--to", str(tmp_path / "m.onnx"))
    assert code == 0 and (tmp_path / "m.onnx").stat().st_size > 1000
    code, out = forge(stack, "models", "show", "cli-vit", "--version", "1", "--output", "json")
    assert code == 0 and json.loads(out)["dataset"] == {"name": "cli-shapes", "version": 1}, out
    code, out = forge(stack, "datasets", "show", "cli-shapes", "--version", "1", "--output", "json")
    assert code == 0 and json.loads(out)["format"] == "imagenet-folder", out
    code, out = forge(stack, "jobs", "duplicate", job["id"], "--name", "cli-vit-again", "--output", "json")
    copy = json.loads(out)
    assert code == 0 and copy["state"] == "draft" and copy["name"] == "cli-vit-again"
    code, out = forge(stack, "jobs", "show", copy["id"], "--output", "json")
    assert code == 0 and json.loads(out)["hyperparameters"]["epochs"] == 2
    for command in (["queue"], ["accelerators"], ["base-models", "list", "--task", "detection"], ["models", "list"], ["datasets", "list"]):
        code, out = forge(stack, *command)
        assert code == 0, (command, out)


def test_errors_are_messages_with_exit_code_2(stack: Stack, tmp_path: Path) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text("name: bad\ntask: classification\ndataset: {name: nope, version: 1}\nbase_model: timm/test_vit\n")
    code, out = forge(stack, "jobs", "submit", str(spec))
    assert code == 2 and "error: no dataset named 'nope'" in out
    code, out = forge(stack, "jobs", "show", "00000000-0000-0000-0000-000000000000")
    assert code == 2 and "error: no job" in out
    (tmp_path / "broken" / "cat").mkdir(parents=True)
    (tmp_path / "broken" / "cat" / "x.png").write_bytes(b"not a png")
    (tmp_path / "broken" / "dog").mkdir()
    code, out = forge(stack, "datasets", "upload", "broken", str(tmp_path / "broken"))
    assert code == 2 and "cat/x.png: unreadable or corrupt image" in out
    code, out = CliRunner().invoke(app, ["jobs", "list", "--api", "http://127.0.0.1:9"]).exit_code, ""
    assert code == 2


def test_watch_exits_with_how_the_job_ended(stack: Stack) -> None:
    job = stack.submit("cli-canceled", base_model="timm/resnet10t", dataset="cli-shapes", epochs=50, imgsz=128, batch=2)  # uploaded above
    stack.wait_event(job["id"], "metrics")
    code, _ = forge(stack, "jobs", "stop", job["id"])
    assert code == 0
    code, out = forge(stack, "jobs", "watch", job["id"])
    assert code == 3, out  # canceled: stopped before its first epoch


def test_an_upload_counts_tokens_with_the_tokenizer_named_on_the_command_line(stack: Stack, tmp_path: Path) -> None:
    from ..unit.datasets import helpers

    ckpt = helpers.wordy_checkpoint(tmp_path / "cli-wordy")
    code, out = forge(stack, "base-models", "add", "cli-wordy", "--family", "qwen2", "--source", str(ckpt), "--output", "json")
    assert code == 0 and len(json.loads(out)["digest"]) == 64, out
    code, out = forge(stack, "base-models", "add", "cli-wordy", "--family", "qwen2", "--source", str(ckpt))
    assert code == 2 and "already" in out
    root = helpers.build_sft(tmp_path / "chat")
    code, out = forge(stack, "datasets", "upload", "cli-chat", str(root), "--tokenizer", "cli-wordy", "--output", "json")
    assert code == 0, out
    stats = json.loads(out)["stats"]
    assert stats["length"]["unit"] == "tokens", stats
    code, out = forge(stack, "datasets", "upload", "cli-chat-2", str(root), "--tokenizer", "nobody")
    assert code == 2 and "error:" in out


def test_a_registered_trainer_is_listed_and_trains_a_job_from_the_command_line(stack: Stack, tmp_path: Path) -> None:
    from ..conftest import serving

    root = Path(__file__).resolve().parents[2]
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "mlp.py").write_bytes((root / "trainers/sdk/examples/minimal_torch.py").read_bytes())
    with serving(tmp_path / "scripts") as url:
        profile = tmp_path / "mlp.yaml"
        profile.write_text(
            "name: cli-mlp\nversion: '1.0'\ntasks: [classification]\naccelerators: {cpu: {grade: compatible}}\n"
            f"script_uri: {url}/mlp.py\nmetrics: [accuracy]\nmain_metric: accuracy\n"
            "hyperparameters:\n  type: object\n  properties:\n    epochs: {type: integer, minimum: 1, default: 2}\n"
        )
        code, out = forge(stack, "trainers", "register", str(profile))
        assert code == 0 and "cli-mlp" in out, out
        code, out = forge(stack, "trainers", "list", "--task", "classification", "--accelerator", "cpu", "--output", "json")
        listed = {t["name"]: t for t in json.loads(out)}
        assert code == 0 and {"classification", "cli-mlp"} <= set(listed) and not listed["cli-mlp"]["builtin"]
        code, out = forge(stack, "trainers", "list", "--task", "detection")
        assert code == 0 and "cli-mlp" not in out
        spec = tmp_path / "job.yaml"
        spec.write_text(
            "name: cli-mlp-job\ntask: classification\ndataset: {name: cli-shapes, version: 1}\nbase_model: timm/test_vit\n"
            "trainer: cli-mlp\nhyperparameters: {epochs: 2}\n"
        )
        code, out = forge(stack, "jobs", "submit", str(spec), "--watch")
        assert code == 0 and "cli-mlp-job succeeded after 2 epoch(s)" in out, out
        bad = tmp_path / "bad.yaml"
        bad.write_text(spec.read_text().replace("{epochs: 2}", "{epochs: 0}"))
        code, out = forge(stack, "jobs", "submit", str(bad))
        assert code == 2 and "hyperparameters.epochs" in out  # checked against the trainer's schema before it queues
