"""LLM SFT throughput and memory: Forge's trainer next to a plain ``transformers.Trainer`` + PEFT.

For each method (full, lora, qlora) it fine-tunes the same tiny Qwen2 checkpoint (built here from
config, saved with ``save_pretrained``; no downloads) on the same generated conversations, with the
same split, batch, epochs, learning-rate schedule, per-epoch evaluation and checkpoints, twice:

* **forge**: ``python -m forge_trainers.sft`` with the trainer environment contract;
* **baseline**: this file with ``--baseline``: tokenisation with the same chat template and
  assistant mask, then ``transformers.Trainer`` (+ PEFT for lora/qlora, bitsandbytes for qlora).

Each run is its own process, so its peak RSS is its own (``os.wait4``). Throughput is the trained
tokens (every non-padding token of the training split, times epochs) over the training phase (Forge:
from the ``start`` progress line to the last ``epoch`` line; baseline: ``trainer.train()``), plus
the whole process's wall time. The ratio forge/baseline is the platform's overhead (or gain).

    .venv/bin/python bench/llm_sft.py [--epochs 2] [--conversations 800] [--repeats 2] [--threads 1] [--methods full lora qlora]

Other load on the machine slows either side at random: compare CPU seconds too, or use --repeats.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CAPITALS = [
    ("France", "Paris"),
    ("Japan", "Tokyo"),
    ("Italy", "Rome"),
    ("Spain", "Madrid"),
    ("Egypt", "Cairo"),
    ("Peru", "Lima"),
    ("Kenya", "Nairobi"),
]
RESULT = "@@baseline "
TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}


def settings(method: str, epochs: int) -> dict[str, Any]:
    """The hyperparameters both sides train with (Forge names; the baseline maps them)."""
    return {
        "method": method,
        "epochs": epochs,
        "batch": 8,
        "lr": 0.002,
        "lr_scheduler": "cosine",
        "warmup_ratio": 0.03,
        "max_seq_length": 256,
        "seed": 0,
    }


# ---- fixtures ----------------------------------------------------------------------------------


def write_data(root: Path, n: int) -> None:
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "data.jsonl", "w") as fh:
        for i in range(n):
            country, capital = CAPITALS[i % len(CAPITALS)]
            turns = [
                {"role": "system", "content": "You are a geography tutor. Answer in one sentence."},
                {"role": "user", "content": f"What is the capital of {country}? Please answer carefully."},
                {"role": "assistant", "content": f"The capital of {country} is {capital}, its largest political centre."},
            ]
            fh.write(json.dumps({"messages": turns}) + "\n")


def write_checkpoint(folder: Path, data: Path) -> None:
    """A tiny Qwen2 checkpoint with a BPE tokenizer (trained on the data) and a ChatML template."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    from forge_sdk.datasets import load_sft
    from forge_trainers.sft import chat

    hf_logging.disable_progress_bar()
    records = load_sft(data).records
    tokenizer = chat.train_tokenizer(chat.corpus(records), 1024, with_image_token=False)
    config = AutoConfig.for_model(
        "qwen2",
        **TINY,
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)


# ---- the two sides -------------------------------------------------------------------------------


def run_process(cmd: list[str], env: dict[str, str]) -> tuple[str, float, int, float]:
    """(output, wall seconds, peak RSS bytes, CPU seconds) of one child process."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    output = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{output[-4000:]}")
    return output, wall, usage.ru_maxrss * 1024, usage.ru_utime + usage.ru_stime


def forge_side(method: str, epochs: int, data: Path, checkpoint: Path, work: Path) -> dict[str, Any]:
    from forge_sdk import protocol

    out = work / f"forge-{method}"
    config = {
        "task": "llm-sft",
        "base_model": "bench-qwen2",
        "base_model_spec": {
            "name": "bench-qwen2",
            "family": "qwen2",
            "tasks": ["llm-sft"],
            "source": {"kind": "local", "uri": str(checkpoint)},
        },
        "accelerator": "cpu",
        "hyperparameters": settings(method, epochs),
    }
    env = {
        **os.environ,
        "INPUT_URI": str(data),
        "OUTPUT_DIR": str(out),
        "CONFIG_JSON": json.dumps(config),
        "FORGE_RESULT_FILE": str(work / f"{method}.json"),
    }
    output, wall, rss, cpu = run_process([sys.executable, "-m", "forge_trainers.sft"], env)
    records = [r for r in map(protocol.parse_line, output.splitlines()) if r is not None]
    start = next(r.t for r in records if r.kind == "start")
    end = max(r.t for r in records if r.kind == "epoch")
    tokens = int(next(line for line in output.splitlines() if line.startswith("train: ")).split(" conversation(s), ")[1].split()[0])
    eval_loss = json.loads((out / "metrics.json").read_text())["eval_loss"]
    return {"tokens": tokens * epochs, "train_s": end - start, "wall_s": wall, "cpu_s": cpu, "rss": rss, "eval_loss": eval_loss}


def baseline_side(method: str, epochs: int, data: Path, checkpoint: Path, work: Path) -> dict[str, Any]:
    cmd = [
        sys.executable,
        __file__,
        "--baseline",
        method,
        "--epochs",
        str(epochs),
        "--data",
        str(data),
        "--checkpoint",
        str(checkpoint),
        "--work",
        str(work),
    ]
    output, wall, rss, cpu = run_process(cmd, dict(os.environ))
    result = json.loads(next(line for line in output.splitlines() if line.startswith(RESULT))[len(RESULT) :])
    return {**result, "wall_s": wall, "cpu_s": cpu, "rss": rss}


def baseline(method: str, epochs: int, data: Path, checkpoint: Path, work: Path) -> None:
    """The plain script: what a user would write with transformers.Trainer and PEFT."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments
    from transformers.utils import logging as hf_logging

    from forge_sdk.datasets import load_sft, split_indices

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    hp = settings(method, epochs)
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    records = load_sft(data).records
    split = split_indices(len(records), 0.8, hp["seed"])

    def encode(i: int) -> dict[str, list[int]]:
        messages = [{"role": m.role, "content": m.content} for m in records[i].messages]
        enc = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
        ids = enc["input_ids"][: hp["max_seq_length"]]
        mask = enc["assistant_masks"][: hp["max_seq_length"]]
        return {"input_ids": ids, "labels": [t if m else -100 for t, m in zip(ids, mask, strict=True)]}

    train, val = [encode(i) for i in split.train], [encode(i) for i in split.val]

    def collate(batch: list[dict[str, list[int]]]) -> dict[str, torch.Tensor]:
        length = max(len(b["input_ids"]) for b in batch)
        ids = torch.full((len(batch), length), tokenizer.pad_token_id)
        labels = torch.full((len(batch), length), -100)
        mask = torch.zeros((len(batch), length), dtype=torch.long)
        for i, b in enumerate(batch):
            n = len(b["input_ids"])
            ids[i, :n], labels[i, :n], mask[i, :n] = torch.tensor(b["input_ids"]), torch.tensor(b["labels"]), 1
        return {"input_ids": ids, "labels": labels, "attention_mask": mask}

    kwargs: dict[str, Any] = {"dtype": torch.float32}
    if method == "qlora":
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.float32, bnb_4bit_use_double_quant=True
        )
        kwargs["device_map"] = {"": "cpu"}
    torch.manual_seed(hp["seed"])
    model = AutoModelForCausalLM.from_pretrained(checkpoint, **kwargs)
    if method != "full":
        from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

        if method == "qlora":
            model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
        targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
        model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, target_modules=targets, task_type="CAUSAL_LM"))
    args = TrainingArguments(
        output_dir=str(work / f"baseline-{method}"),
        per_device_train_batch_size=hp["batch"],
        per_device_eval_batch_size=hp["batch"],
        num_train_epochs=epochs,
        learning_rate=hp["lr"],
        lr_scheduler_type=hp["lr_scheduler"],
        warmup_steps=hp["warmup_ratio"],  # below 1: a share of the steps, rounded up like Forge
        max_grad_norm=1.0,
        eval_strategy="epoch",
        save_strategy="epoch",
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        seed=hp["seed"],
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    trainer = Trainer(model=model, args=args, train_dataset=train, eval_dataset=val, data_collator=collate)
    started = time.perf_counter()
    trainer.train()
    train_s = time.perf_counter() - started
    eval_loss = trainer.evaluate()["eval_loss"]
    trainer.save_model(str(work / f"baseline-{method}" / "final"))
    tokens = sum(len(b["input_ids"]) for b in train) * epochs
    print(RESULT + json.dumps({"tokens": tokens, "train_s": train_s, "eval_loss": eval_loss}))


# ---- the report ----------------------------------------------------------------------------------


def best_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The fastest repeat (other load on the machine only ever slows a run down)."""
    return min(runs, key=lambda r: r["train_s"])


def show(method: str, forge: dict[str, Any], base: dict[str, Any]) -> None:
    for name, r in (("forge", forge), ("baseline", base)):
        print(
            f"{method:<6} {name:<9} {r['tokens'] / r['train_s']:8.0f} tok/s  train {r['train_s']:5.1f} s  process {r['wall_s']:5.1f} s "
            f"({r['cpu_s']:5.1f} CPU s)  peak RSS {r['rss'] / 2**20:6.1f} MiB  eval_loss {r['eval_loss']:.3f}"
        )
    speed = (forge["tokens"] / forge["train_s"]) / (base["tokens"] / base["train_s"])
    print(
        f"{method:<6} forge/baseline: throughput {speed:.2f}x, process wall {forge['wall_s'] / base['wall_s']:.2f}x, "
        f"process CPU {forge['cpu_s'] / base['cpu_s']:.2f}x, peak RSS {forge['rss'] / base['rss']:.2f}x\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--conversations", type=int, default=800)
    parser.add_argument("--repeats", type=int, default=2, help="runs per side and method; the fastest counts")
    parser.add_argument("--threads", type=int, default=1, help="torch/OpenMP threads per run (1: robust to other load)")
    parser.add_argument("--methods", nargs="+", default=["full", "lora", "qlora"], choices=["full", "lora", "qlora"])
    parser.add_argument("--baseline", choices=["full", "lora", "qlora"], help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--checkpoint", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.baseline:
        baseline(args.baseline, args.epochs, args.data, args.checkpoint, args.work)
        return
    # both children inherit it; OpenMP threads that spin-wait slow down tenfold when the cores are shared
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    with tempfile.TemporaryDirectory(prefix="forge-bench-sft-") as tmp:
        work = Path(tmp)
        write_data(work / "data", args.conversations)
        write_checkpoint(work / "checkpoint", work / "data")
        print(f"tiny Qwen2 ({TINY}), {args.conversations} conversations, {args.epochs} epoch(s), settings {settings('*', args.epochs)}")
        print(f"{os.cpu_count()} CPUs, {args.threads} torch thread(s) per run; each run is its own process\n")
        for method in args.methods:
            forge, base = [], []
            for _ in range(args.repeats):  # interleaved, so a burst of other load hits both sides
                forge.append(forge_side(method, args.epochs, work / "data", work / "checkpoint", work))
                base.append(baseline_side(method, args.epochs, work / "data", work / "checkpoint", work))
            show(method, best_of(forge), best_of(base))


if __name__ == "__main__":
    main()
