"""The SFT trainer (``forge_trainers.sft``) on tiny models built from config: no hub, CPU only.

Most runs are in-process through ``forge_sdk.Run`` (the same object ``forge_sdk.init()`` returns,
minus signal handlers) to keep the file fast; the stop test runs ``python -m forge_trainers.sft``
as a process and sends it a real SIGTERM, as the scheduler does.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
import torch
from PIL import Image

from forge_common.basemodels import SEEDS
from forge_common.jobspec import SFTHyperparameters
from forge_sdk import Run, S3Config, TrainerEnv, protocol
from forge_sdk.datasets import Conversation, Message
from forge_sdk.storage import Location, S3Store
from forge_trainers.sft import chat, data, loop, modeling
from forge_trainers.sft import train as sft_train
from forge_trainers.sft.params import Params

CAPITALS = [("France", "Paris"), ("Japan", "Tokyo"), ("Italy", "Rome"), ("Spain", "Madrid"), ("Egypt", "Cairo"), ("Peru", "Lima")]
COLORS = {"red": (220, 30, 30), "green": (30, 200, 40), "blue": (20, 40, 220), "yellow": (230, 220, 20)}
# a plain ChatML template, as many checkpoints ship it: no {% generation %} marks
CHATML_UNMARKED = (
    "{%- for message in messages -%}{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' -}}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}"
)
FAST = {"batch": 8, "lr": 0.01, "warmup_ratio": 0.0}
TINY_TEXT = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}


# ---- data and specs ------------------------------------------------------------------------------


def seed_spec(name: str) -> dict[str, Any]:
    """A pool seed entry as the api puts it into CONFIG_JSON."""
    entry = next(s for s in SEEDS if s.name == name)
    return {"name": entry.name, "family": entry.family, "tasks": [t.value for t in entry.tasks or []], "source": entry.source.model_dump()}


def write_chats(root: Path, n: int = 72, *, long_answers: int = 0) -> Path:
    """A learnable corpus: fixed question → answer pairs, half sharegpt, half messages."""
    root.mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(n):
        country, capital = CAPITALS[i % len(CAPITALS)]
        answer = f"The capital of {country} is {capital}."
        if i < long_answers:
            answer = " ".join([answer] * 30)
        if i % 2:
            lines.append(
                {"conversations": [{"from": "human", "value": f"What is the capital of {country}?"}, {"from": "gpt", "value": answer}]}
            )
        else:
            lines.append(
                {
                    "messages": [
                        {"role": "system", "content": "Answer briefly."},
                        {"role": "user", "content": f"What is the capital of {country}?"},
                        {"role": "assistant", "content": answer},
                    ]
                }
            )
    (root / "data.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return root


def write_images(root: Path, n: int = 40, *, long_answers: int = 0) -> Path:
    """vlm-sft: tiny PNG squares and the question of their colour."""
    (root / "images").mkdir(parents=True, exist_ok=True)
    for name, rgb in COLORS.items():
        Image.new("RGB", (20, 16), rgb).save(root / "images" / f"{name}.png")
    lines = []
    for i in range(n):
        name = list(COLORS)[i % len(COLORS)]
        lines.append(
            {
                "messages": [
                    {"role": "user", "content": "<image>What color is this square?"},
                    {"role": "assistant", "content": f"It is {name}." * (12 if i < long_answers else 1)},
                ],
                "images": [f"images/{name}.png"],
            }
        )
    (root / "data.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return root


def save_checkpoint(folder: Path, *, template: str | None, model_type: str = "qwen2", family: str = "qwen2") -> dict[str, Any]:
    """A real Hugging Face checkpoint folder (save_pretrained) and its local pool entry."""
    from transformers import AutoConfig, AutoModelForCausalLM

    texts = chat.corpus(Conversation([Message("user", f"What is the capital of {c}?"), Message("assistant", a)]) for c, a in CAPITALS)
    tokenizer = chat.train_tokenizer(texts, 512, with_image_token=False)
    tokenizer.chat_template = template
    config = AutoConfig.for_model(model_type, **TINY_TEXT, vocab_size=len(tokenizer))
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return {"name": f"my-{model_type}", "family": family, "tasks": ["llm-sft"], "source": {"kind": "local", "uri": str(folder)}}


# ---- running the trainer -------------------------------------------------------------------------


class Result:
    def __init__(self, run: Run, log: str, output: Path | str) -> None:
        self.run, self.log, self.output = run, log, Path(output)
        self.outcome = run.outcome
        assert self.outcome is not None

    def records(self, kind: str) -> list[Any]:
        return [r for r in map(protocol.parse_line, self.log.splitlines()) if r is not None and r.kind == kind]

    def history(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in (self.output / "history.jsonl").read_text().splitlines()]

    def metrics(self) -> dict[str, Any]:
        return dict(json.loads((self.output / "metrics.json").read_text()))


def sft_run(
    data_dir: Path,
    output: Path | str,
    spec: dict[str, Any],
    hyperparameters: dict[str, Any],
    *,
    resume_from: Path | None = None,
    hook: Callable[[Run], None] | None = None,
    s3: S3Config | None = None,
) -> Result:
    """One in-process run; ``hook`` may patch the run (e.g. to request a stop at some step)."""
    task = "vlm-sft" if spec["family"] in modeling.VLM_FAMILIES else "llm-sft"
    config = {"task": task, "base_model": spec["name"], "base_model_spec": spec, "accelerator": "cpu", "hyperparameters": hyperparameters}
    env = TrainerEnv(
        output_dir=str(output),
        input_uri=str(data_dir),
        config=config,
        resume_from=str(resume_from) if resume_from else None,
        s3=s3,
    )
    out = io.StringIO()
    run = Run(env, install_signal_handlers=False, stdout=out)
    if hook is not None:
        hook(run)
    try:
        with run:
            sft_train(run)
    except SystemExit:
        pass  # a failed run: the outcome says why
    return Result(run, out.getvalue(), output)


def stop_after_step(step: int) -> Callable[[Run], None]:
    """As if SIGTERM arrived while ``step`` trained."""

    def hook(run: Run) -> None:
        report = run.report

        def reporting(at: int, **kwargs: Any) -> None:
            report(at, **kwargs)
            if at >= step:
                run.request_stop("test")

        run.report = reporting  # type: ignore[method-assign]

    return hook


def step_losses(history: list[dict[str, Any]]) -> dict[int, float]:
    steps = [r for r in history if r["kind"] == "step"]
    numbers = [r["step"] for r in steps]
    assert len(numbers) == len(set(numbers)), f"duplicated steps in history: {numbers}"
    return {r["step"]: r["metrics"]["loss"] for r in steps}


@pytest.fixture(scope="module")
def sft_chats(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_chats(tmp_path_factory.mktemp("chats"))


# ---- the tests -----------------------------------------------------------------------------------


def test_the_api_and_the_trainer_agree_on_every_default() -> None:
    assert SFTHyperparameters().model_dump() == asdict(Params())


@pytest.mark.slow
def test_lora_learns_the_corpus_and_the_merged_model_generates(sft_chats: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    result = sft_run(sft_chats, tmp_path / "out", seed_spec("qwen2-tiny"), {**FAST, "method": "lora", "epochs": 4, "merge": True})
    assert result.outcome.state == "succeeded", result.log
    epochs = result.records("epoch")
    assert [e.epoch for e in epochs] == [1, 2, 3, 4]
    first, last = epochs[0].metrics["eval_loss"], epochs[-1].metrics["eval_loss"]
    assert last < 0.7 * first, f"eval_loss {first:.3f} → {last:.3f}"
    steps = result.records("step")
    assert steps and all({"loss", "lr", "grad_norm"} <= set(s.metrics) for s in steps)
    metrics = result.metrics()
    assert metrics["eval_loss"] == pytest.approx(min(e.metrics["eval_loss"] for e in epochs))
    assert metrics["perplexity"] == pytest.approx(torch.tensor(metrics["eval_loss"]).exp().item(), rel=1e-4)
    out = tmp_path / "out"
    descriptor = json.loads((out / "model.metrics.json").read_text())
    assert descriptor["weights_uri"] == (out / "adapter" / "adapter_model.safetensors").as_uri()
    split = json.loads((out / "split.json").read_text())
    assert set(split) == {"explicit", "seed", "ratio", "train", "val"} and len(split["train"]) + len(split["val"]) == 72
    assert (out / "checkpoints" / "last.tar").exists() and (out / "checkpoints" / "best.tar").exists()

    model = AutoModelForCausalLM.from_pretrained(out / "merged")
    tokenizer = AutoTokenizer.from_pretrained(out / "merged")
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of Japan?"}], add_generation_prompt=True, return_dict=True, return_tensors="pt"
    )
    generated = model.generate(**prompt, max_new_tokens=12, do_sample=False)
    assert generated.shape[1] > prompt["input_ids"].shape[1]
    assert "capital" in tokenizer.decode(generated[0, prompt["input_ids"].shape[1] :])


def test_qlora_runs_on_this_machine(sft_chats: Path, tmp_path: Path) -> None:
    result = sft_run(
        sft_chats, tmp_path / "out", seed_spec("qwen2-tiny"), {**FAST, "method": "qlora", "epochs": 1, "qlora_quant_type": "fp4"}
    )
    assert result.outcome.state == "succeeded", result.log
    assert "4-bit fp4 layers on cpu" in result.log
    assert (tmp_path / "out" / "adapter" / "adapter_model.safetensors").exists()


def test_qlora_without_bitsandbytes_names_the_reason(sft_chats: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "bitsandbytes", None)  # import fails
    result = sft_run(sft_chats, tmp_path / "out", seed_spec("qwen2-tiny"), {"method": "qlora"})
    assert (result.outcome.state, result.outcome.reason) == ("failed", "bad_config")
    assert "bitsandbytes" in (result.outcome.message or "") and "lora" in (result.outcome.hint or "")


def test_full_fine_tuning_with_checkpoint_units_and_packing(sft_chats: Path, tmp_path: Path) -> None:
    hp = {
        **FAST,
        "method": "full",
        "epochs": 2,
        "batch": 4,
        "lr": 0.003,
        "packing": True,
        "max_seq_length": 128,
        "save_steps": 3,
        "eval_steps": 2,
    }
    result = sft_run(sft_chats, tmp_path / "out", seed_spec("llama-tiny"), hp)
    assert result.outcome.state == "succeeded", result.log
    packed = int(result.log.split(" conversations into ")[1].split()[0])
    steps = 2 * -(-packed // 4)
    (start,) = result.records("start")
    assert start.steps_per_epoch == 3 and start.total_epochs == result.outcome.epochs_completed == -(-steps // 3)
    assert "checkpoint units of 3 step(s)" in result.log
    units = result.records("epoch")
    assert [u.epoch for u in units] == list(range(1, start.total_epochs + 1))
    assert units[-1].metrics["epoch"] == 2.0 and max(s.step for s in result.records("step")) == steps
    evaluated = [s.step for s in result.records("step") if "eval_loss" in s.metrics]
    assert evaluated == [n for n in range(2, steps + 1, 2) if n % 3 and n != steps]  # units evaluate anyway
    assert units[-1].metrics["eval_loss"] < units[0].metrics["eval_loss"]
    assert (tmp_path / "out" / "model" / "model.safetensors").exists() and not (tmp_path / "out" / "adapter").exists()


def test_packed_conversations_do_not_see_each_other() -> None:
    """A packed row gives exactly the loss of its conversations run one by one."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(
        "qwen2", hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, vocab_size=50
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).eval()
    a = data.Example([1, 2, 3, 4, 5], [-100, -100, 3, 4, 5])
    b = data.Example([6, 7, 8, 9], [-100, -100, 8, 9])
    packed = data.collate(data.pack([a, b], 16), pad_id=0)
    separate = data.collate([a, b], pad_id=0)
    with torch.no_grad():
        loss_packed = model(**packed, use_cache=False).loss * data.label_count(packed)
        loss_separate = model(**separate, use_cache=False).loss * data.label_count(separate)
    assert data.label_count(packed) == data.label_count(separate) == 5
    assert loss_packed.item() == pytest.approx(loss_separate.item(), rel=1e-5)


def test_templates_without_generation_marks_label_the_same_tokens() -> None:
    texts = chat.corpus([Conversation([Message("user", "hello there"), Message("assistant", "general kenobi")])])
    tokenizer = chat.train_tokenizer(texts, 400, with_image_token=False)
    conv = Conversation(
        [
            Message("system", "be brief"),
            Message("user", "hello there"),
            Message("assistant", "general kenobi"),
            Message("user", "and?"),
            Message("assistant", "bold"),
        ]
    )
    marked = chat.ChatEncoder(tokenizer, None, chat.CHATML_TEMPLATE, Path(".")).encode(conv)
    unmarked = chat.ChatEncoder(tokenizer, None, CHATML_UNMARKED, Path(".")).encode(conv)
    assert marked.input_ids == unmarked.input_ids
    assert marked.assistant == unmarked.assistant
    answer = tokenizer.decode([t for t, m in zip(marked.input_ids, marked.assistant, strict=True) if m])
    assert answer == "general kenobi<|im_end|>bold<|im_end|>"


def test_a_real_checkpoint_folder_fine_tunes(sft_chats: Path, tmp_path: Path) -> None:
    spec = save_checkpoint(tmp_path / "ckpt", template=CHATML_UNMARKED)
    result = sft_run(sft_chats, tmp_path / "out", spec, {**FAST, "method": "lora", "epochs": 2, "target_modules": ["q_proj", "v_proj"]})
    assert result.outcome.state == "succeeded", result.log
    assert "rendering each assistant turn's prefix" in result.log
    adapter = json.loads((tmp_path / "out" / "adapter" / "adapter_config.json").read_text())
    assert sorted(adapter["target_modules"]) == ["q_proj", "v_proj"] and adapter["base_model_name_or_path"] == "my-qwen2"
    assert not (tmp_path / "out" / "base-model").exists()  # the checkpoint is the base


def test_any_other_causal_lm_checkpoint_fine_tunes_with_lora_on_every_linear_layer(sft_chats: Path, tmp_path: Path) -> None:
    spec = save_checkpoint(tmp_path / "ckpt", template=CHATML_UNMARKED, model_type="mistral", family="causal-lm")
    result = sft_run(sft_chats, tmp_path / "out", spec, {**FAST, "method": "lora", "epochs": 1})
    assert result.outcome.state == "succeeded", result.log
    adapter = json.loads((tmp_path / "out" / "adapter" / "adapter_config.json").read_text())
    adapted = {name.rsplit(".", 1)[-1] for name in adapter["target_modules"]}
    assert adapted >= {"q_proj", "v_proj", "gate_proj", "down_proj"} and "lm_head" not in adapted  # all-linear: found, not named


def test_a_checkpoint_under_an_s3_prefix_fine_tunes_into_s3(sft_chats: Path, tmp_path: Path, s3_server: dict[str, str]) -> None:
    s3 = S3Config(endpoint=s3_server["endpoint"], access_key=s3_server["access_key"], secret_key=s3_server["secret_key"])
    store = S3Store(s3, "sft-models", create_bucket=True)
    spec = save_checkpoint(tmp_path / "ckpt", template=CHATML_UNMARKED)
    Location(store, "pool/my-qwen2").upload_tree(tmp_path / "ckpt")
    spec["source"] = {"kind": "s3", "uri": "s3://sft-models/pool/my-qwen2"}
    result = sft_run(sft_chats, "s3://sft-models/jobs/1", spec, {**FAST, "method": "lora", "epochs": 1}, s3=s3)
    assert result.outcome.state == "succeeded", result.log
    assert "fetching base model my-qwen2 from s3://sft-models/pool/my-qwen2" in result.log
    outputs = {o.key for o in Location(store, "jobs/1").list()}
    assert {
        "adapter/adapter_model.safetensors",
        "checkpoints/last.tar",
        "checkpoints/best.tar",
        "metrics.json",
        "history.jsonl",
        "split.json",
    } <= outputs
    descriptor = json.loads(Location(store, "jobs/1").get_bytes("model.metrics.json"))
    assert descriptor["weights_uri"] == "s3://sft-models/jobs/1/adapter/adapter_model.safetensors"


def test_a_model_without_chat_template_fails_as_bad_config(sft_chats: Path, tmp_path: Path) -> None:
    spec = save_checkpoint(tmp_path / "ckpt", template=None)
    result = sft_run(sft_chats, tmp_path / "out", spec, {"method": "lora"})
    assert (result.outcome.state, result.outcome.reason) == ("failed", "bad_config")
    assert "no chat template" in (result.outcome.message or "") and "chat_template" in (result.outcome.hint or "")


@pytest.mark.slow
def test_vlm_lora_adapts_the_language_model_only(tmp_path: Path) -> None:
    from safetensors import safe_open

    images = write_images(tmp_path / "data")
    result = sft_run(images, tmp_path / "out", seed_spec("llava-tiny"), {**FAST, "method": "lora", "epochs": 2})
    assert result.outcome.state == "succeeded", result.log
    epochs = result.records("epoch")
    assert epochs[-1].metrics["eval_loss"] < epochs[0].metrics["eval_loss"]
    adapter = tmp_path / "out" / "adapter"
    with safe_open(str(adapter / "adapter_model.safetensors"), "pt") as weights:
        keys = list(weights.keys())
    lora = [k for k in keys if "lora_" in k]
    assert lora and all(".language_model." in k for k in lora)
    assert not [k for k in keys if "vision_tower" in k or "multi_modal_projector" in k]
    assert (adapter / "processor_config.json").exists() or (adapter / "preprocessor_config.json").exists()


def save_qwen2_vl_checkpoint(folder: Path) -> dict[str, Any]:
    """A tiny Qwen2-VL checkpoint folder with its own processor and a template without generation marks."""
    from transformers import AutoConfig, AutoModelForImageTextToText, Qwen2VLImageProcessor, Qwen2VLProcessor, Qwen2VLVideoProcessor

    template = (
        "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{% for part in message['content'] %}"
        "{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>{% else %}{{ part['text'] }}{% endif %}"
        "{% endfor %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    tokenizer = chat.train_tokenizer(
        chat.corpus([Conversation([Message("user", "What color is this square?"), Message("assistant", "It is red green blue yellow.")])]),
        400,
        with_image_token=False,
    )
    tokenizer.add_special_tokens(
        {"additional_special_tokens": ["<|im_start|>", "<|vision_start|>", "<|image_pad|>", "<|vision_end|>", "<|video_pad|>"]}
    )
    tokenizer.image_token, tokenizer.video_token = "<|image_pad|>", "<|video_pad|>"
    images = Qwen2VLImageProcessor(min_pixels=28 * 28 * 4, max_pixels=28 * 28 * 16, patch_size=14, merge_size=2, temporal_patch_size=2)
    Qwen2VLProcessor(
        image_processor=images, tokenizer=tokenizer, video_processor=Qwen2VLVideoProcessor(), chat_template=template
    ).save_pretrained(folder)
    ids = {
        name: tokenizer.convert_tokens_to_ids(f"<|{token}|>")
        for name, token in (("image", "image_pad"), ("video", "video_pad"), ("start", "vision_start"), ("end", "vision_end"))
    }
    config = AutoConfig.for_model(
        "qwen2_vl",
        text_config={**TINY_TEXT, "vocab_size": len(tokenizer), "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]}},
        vision_config={
            "depth": 1,
            "embed_dim": 32,
            "hidden_size": 64,
            "num_heads": 2,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
        },
        image_token_id=ids["image"],
        video_token_id=ids["video"],
        vision_start_token_id=ids["start"],
        vision_end_token_id=ids["end"],
    )
    torch.manual_seed(0)
    AutoModelForImageTextToText.from_config(config).save_pretrained(folder)
    return {"name": "my-qwen2-vl", "family": "qwen2-vl", "tasks": ["vlm-sft"], "source": {"kind": "local", "uri": str(folder)}}


@pytest.mark.slow
def test_a_qwen2_vl_checkpoint_fine_tunes_with_qlora(tmp_path: Path) -> None:
    """The processor's own template (no generation marks), per-token processor outputs and truncation."""
    spec = save_qwen2_vl_checkpoint(tmp_path / "ckpt")
    images = write_images(tmp_path / "data", long_answers=4)
    result = sft_run(images, tmp_path / "out", spec, {**FAST, "batch": 4, "method": "qlora", "epochs": 1, "max_seq_length": 40})
    assert result.outcome.state == "succeeded", result.log
    assert "rendering each assistant turn's prefix" in result.log
    metrics = result.metrics()
    assert metrics["train_truncated"] + metrics["val_truncated"] == 4
    adapter = json.loads((tmp_path / "out" / "adapter" / "adapter_config.json").read_text())
    assert "language_model" in adapter["target_modules"]


def save_idefics3_checkpoint(folder: Path) -> dict[str, Any]:
    """A tiny SmolVLM (Idefics3) checkpoint folder: 32-pixel images, no splitting, 4 tokens per image."""
    from transformers import AutoConfig, AutoModelForImageTextToText, Idefics3ImageProcessor, Idefics3Processor

    template = (
        "<|im_start|>{% for message in messages %}{{ message['role'] | capitalize }}"
        "{% if message['content'][0]['type'] == 'image' %}{{ ':' }}{% else %}{{ ': ' }}{% endif %}"
        "{% for part in message['content'] %}{% if part['type'] == 'image' %}{{ '<image>' }}{% else %}{{ part['text'] }}{% endif %}"
        "{% endfor %}<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
    )
    tokenizer = chat.train_tokenizer(
        chat.corpus([Conversation([Message("User", "What color is this square?"), Message("Assistant", "It is red green blue yellow.")])]),
        400,
        with_image_token=False,
    )
    tokenizer.add_special_tokens(
        {"additional_special_tokens": ["<|im_start|>", "<fake_token_around_image>", "<image>", "<global-img>", "<end_of_utterance>"]}
    )
    tokenizer.eos_token = "<end_of_utterance>"
    # no splitting: each image is one 32x32 square, (32 / 8) ** 2 / 2 ** 2 = 4 tokens
    images = Idefics3ImageProcessor(size={"longest_edge": 32}, max_image_size={"longest_edge": 32}, do_image_splitting=False)
    Idefics3Processor(image_processor=images, tokenizer=tokenizer, image_seq_len=4, chat_template=template).save_pretrained(folder)
    config = AutoConfig.for_model(
        "idefics3",
        text_config={"model_type": "llama", **TINY_TEXT, "vocab_size": len(tokenizer), "pad_token_id": tokenizer.pad_token_id},
        vision_config={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "image_size": 32,
            "patch_size": 8,
        },
        scale_factor=2,
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    AutoModelForImageTextToText.from_config(config).save_pretrained(folder)
    return {"name": "my-smolvlm", "family": "idefics3", "tasks": ["vlm-sft"], "source": {"kind": "local", "uri": str(folder)}}


@pytest.mark.slow
def test_an_idefics3_checkpoint_fine_tunes_with_lora(tmp_path: Path) -> None:
    """SmolVLM: per-sample image tensors, its own template (no generation marks), the text model adapted only."""
    from safetensors import safe_open

    spec = save_idefics3_checkpoint(tmp_path / "ckpt")
    result = sft_run(write_images(tmp_path / "data"), tmp_path / "out", spec, {**FAST, "batch": 4, "method": "lora", "epochs": 1})
    assert result.outcome.state == "succeeded", result.log
    adapter = tmp_path / "out" / "adapter"
    with safe_open(str(adapter / "adapter_model.safetensors"), "pt") as weights:
        keys = list(weights.keys())
    lora = [k for k in keys if "lora_" in k]
    assert lora and all(".text_model." in k for k in lora)
    assert not [k for k in keys if "vision_model" in k or "connector" in k]
    assert (adapter / "processor_config.json").exists() or (adapter / "preprocessor_config.json").exists()


@pytest.mark.slow
def test_stop_after_the_first_epoch_keeps_the_adapter(sft_chats: Path, tmp_path: Path) -> None:
    """A real process and a real SIGTERM, as the scheduler's Stop sends it."""
    out, result_file = tmp_path / "out", tmp_path / "result.json"
    config = {
        "task": "llm-sft",
        "base_model": "qwen2-tiny",
        "base_model_spec": seed_spec("qwen2-tiny"),
        "hyperparameters": {**FAST, "batch": 2, "epochs": 3},
    }
    env = {
        **os.environ,
        "INPUT_URI": str(sft_chats),
        "OUTPUT_DIR": str(out),
        "CONFIG_JSON": json.dumps(config),
        "FORGE_RESULT_FILE": str(result_file),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "forge_trainers.sft"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        record = protocol.parse_line(line)
        if record is not None and record.kind == "epoch":
            proc.send_signal(signal.SIGTERM)
            break
    lines.extend(proc.stdout)
    assert proc.wait(60) == 0, "".join(lines)
    outcome = json.loads(result_file.read_text())
    assert outcome["state"] == "stopped" and 1 <= outcome["epochs_completed"] < 3, "".join(lines)
    assert "stop requested (SIGTERM)" in "".join(lines)
    assert (out / "adapter" / "adapter_model.safetensors").exists()
    assert (out / "metrics.json").exists() and (out / "checkpoints" / "last.tar").exists()


def test_stop_before_the_first_epoch_cancels_and_leaves_nothing(sft_chats: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = sft_run(sft_chats, out, seed_spec("qwen2-tiny"), {**FAST, "batch": 2, "epochs": 2}, hook=stop_after_step(1))
    assert result.outcome.state == "canceled", result.log
    assert not out.exists() or not [p for p in out.rglob("*") if p.is_file()]


@pytest.mark.slow
def test_a_resumed_run_matches_an_uninterrupted_one(sft_chats: Path, tmp_path: Path) -> None:
    spec, hp = seed_spec("qwen2-tiny"), {**FAST, "method": "lora", "epochs": 2, "batch": 4, "gradient_accumulation": 2}
    whole = sft_run(sft_chats, tmp_path / "whole", spec, hp)
    assert whole.outcome.state == "succeeded", whole.log
    (start,) = whole.records("start")
    stop_at = start.steps_per_epoch + 3  # inside epoch 2
    first = sft_run(sft_chats, tmp_path / "first", spec, hp, hook=stop_after_step(stop_at))
    assert first.outcome.state == "stopped" and first.outcome.epochs_completed == 1, first.log
    second = sft_run(sft_chats, tmp_path / "second", spec, hp, resume_from=tmp_path / "first")
    assert second.outcome.state == "succeeded", second.log
    assert f"resumed at step {stop_at} after 1 completed unit(s)" in second.log

    expected, resumed = step_losses(whole.history()), step_losses(second.history())
    assert sorted(resumed) == sorted(expected) == list(range(1, 2 * start.steps_per_epoch + 1))
    for step, loss in expected.items():
        assert resumed[step] == pytest.approx(loss, rel=1e-4, abs=1e-5), f"step {step}"
    epochs = [r for r in second.history() if r["kind"] == "epoch"]
    assert [e["epoch"] for e in epochs] == [1, 2]
    assert second.metrics()["eval_loss"] == pytest.approx(whole.metrics()["eval_loss"], rel=1e-4)


@pytest.mark.parametrize(
    "error",
    [
        torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
        RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes"),
    ],
    ids=["device", "cpu-allocator"],
)
def test_out_of_memory_fails_with_a_hint(sft_chats: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
    def exhausted(*args: Any, **kwargs: Any) -> Any:
        raise error

    monkeypatch.setattr(loop, "train_step", exhausted)
    result = sft_run(sft_chats, tmp_path / "out", seed_spec("qwen2-tiny"), {**FAST, "epochs": 1})
    assert (result.outcome.state, result.outcome.reason) == ("failed", "out_of_memory"), result.log
    hint = result.outcome.hint or ""
    assert "batch 4 with gradient_accumulation 2" in hint and "gradient_checkpointing" in hint and "qlora" in hint


def test_truncation_is_counted_in_the_log(tmp_path: Path) -> None:
    chats = write_chats(tmp_path / "data", 40, long_answers=3)
    result = sft_run(chats, tmp_path / "out", seed_spec("qwen2-tiny"), {**FAST, "epochs": 1, "max_seq_length": 48})
    assert result.outcome.state == "succeeded", result.log
    metrics = result.metrics()
    assert metrics["train_truncated"] + metrics["val_truncated"] == 3
    lines = [line for line in result.log.splitlines() if "to max_seq_length 48" in line]
    assert len(lines) == 2 and sum(int(line.split("truncated ")[1].split()[0]) for line in lines) == 3
    assert "assistant token(s) cut" in lines[0]
