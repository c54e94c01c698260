"""Trainer overhead: a step through the Trainer SDK and the built-in loop versus a bare torch loop.

Both train the same timm model on the same generated images (decoded once, cached), in batches of
the same size, with AdamW: the bare loop with nothing else, the other through the built-in
trainer (``forge_trainers.classification`` on ``forge_trainers.cv``: per-step learning rate,
autocast and grad-scaler plumbing, the step's progress line to an output file and
``history.jsonl``, stop checks). Two measurements, in the same invocation:

* **whole runs** — ``--repeats`` real job runs of the trainer alternate with bare loops (which
  goes first alternates too). A step's time is the gap between consecutive steps of one epoch (the
  first epoch, which fills the image cache, and each epoch's first step, which follows evaluation
  and checkpoints, are left out). Other work on a shared machine only ever adds time, so the 10th
  percentiles (the least disturbed steps) are compared, with the medians beside them.
* **step for step** — the trainer's own step (``cv.train_step`` + ``run.report`` +
  ``run.should_stop``) and a bare step take turns on the same model and batches, in random order
  within each pair: the median of the paired differences is the overhead with
  the machine's noise cancelled. Repeated with a one-layer model, it gives the loop's and the
  SDK's fixed cost per step (what a step of any model pays).

    .venv/bin/python bench/trainer_overhead.py [--model test_vit] [--imgsz 32] [--epochs 5] [--repeats 4] [--pairs 400]
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from forge_cli.samples import shapes
from forge_sdk import Run, TrainerEnv
from forge_trainers import classification, cv
from forge_trainers.common import seed_everything


def steady_gaps(times: list[tuple[int, float]]) -> list[float]:
    """Gaps between consecutive steps of the same epoch, from epoch 2 on."""
    return [t1 - t0 for (e0, t0), (e1, t1) in itertools.pairwise(times) if e0 == e1 and e1 >= 2]


def bare(root: Path, args: argparse.Namespace) -> list[float]:
    """The same work with nothing around it: model, optimizer, batches, backward, step."""
    split = classification.make_split(root, 0.8, 0)
    seed_everything(0)
    model = classification.create_model(args.model, len(split.classes), args.imgsz)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.001, weight_decay=0.05)
    images = classification.Images(root, split.train, args.imgsz)
    times: list[tuple[int, float]] = []
    for epoch in range(1, args.epochs + 1):
        model.train()
        order = torch.randperm(len(images), generator=torch.Generator().manual_seed(epoch)).tolist()
        batches = [order[i : i + args.batch] for i in range(0, len(order), args.batch)]
        for x, y in DataLoader(images, batch_sampler=batches):
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            loss.item()
            times.append((epoch, time.time()))
    return steady_gaps(times)


def through_forge(root: Path, args: argparse.Namespace, work: Path) -> list[float]:
    """A real run of the built-in trainer; step times from the ``t`` of its history records."""
    hyper = {"epochs": args.epochs, "imgsz": args.imgsz, "batch": args.batch, "augment": False}
    env = TrainerEnv(
        output_dir=str(work / "out"),
        input_uri=str(root),
        work_dir=str(work / "work"),
        config={"base_model": f"timm/{args.model}", "hyperparameters": hyper},
    )
    work.mkdir(parents=True)
    with open(work / "output.log", "w") as output, Run(env, install_signal_handlers=False, stdout=output) as run:
        classification.train(run)
    records = [json.loads(line) for line in (work / "out" / "history.jsonl").read_text().splitlines()]
    return steady_gaps([(r["epoch"], r["t"]) for r in records if r["kind"] == "step"])


def step_for_step(
    root: Path, args: argparse.Namespace, work: Path, pairs: int, trivial: bool = False
) -> tuple[list[float], list[float], list[float]]:
    """Bare and trainer steps on the same model and batches, paired, in random order:
    (bare times, trainer times, trainer − bare per pair). ``trivial`` swaps the model for
    one linear layer, so what is left is the loop's and the SDK's own cost."""
    work.mkdir(parents=True)
    hyper = {"epochs": args.epochs, "imgsz": args.imgsz, "batch": args.batch, "augment": False}
    env = TrainerEnv(
        output_dir=str(work / "out"),
        input_uri=str(root),
        work_dir=str(work / "work"),
        config={"base_model": f"timm/{args.model}", "hyperparameters": hyper},
    )
    with open(work / "output.log", "w") as output:
        run = Run(env, install_signal_handlers=False, stdout=output)
        s = cv.setup(run, classification.ClassificationTask())
        if trivial:
            linear = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * args.imgsz * args.imgsz, len(s.data.classes)))
            s = dataclasses.replace(s, model=linear, optimizer=cv.make_optimizer(linear.parameters(), s.p))
        batches = list(cv.epoch_loader(s, 1))
        # one model for both (two copies can differ by a few % in speed through memory placement
        # alone); the bare step has its own optimizer
        model = s.model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.001, weight_decay=0.05)

        def bare_step(batch: tuple[torch.Tensor, torch.Tensor]) -> None:
            loss = F.cross_entropy(model(batch[0]), batch[1])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            loss.item()

        def forge_step(batch: tuple[torch.Tensor, torch.Tensor], step: int) -> None:
            value, _, lr = cv.train_step(s, batch, step)
            run.report(step + 1, epoch=1 + step // s.steps_per_epoch, loss=value, lr=lr)
            run.should_stop()

        order = random.Random(0)
        bare_times, forge_times = [], []
        for i in range(pairs):
            batch = batches[i % len(batches)]
            for which in order.sample(("bare", "forge"), 2):
                start = time.perf_counter()
                bare_step(batch) if which == "bare" else forge_step(batch, i)
                (bare_times if which == "bare" else forge_times).append(time.perf_counter() - start)
    warm = pairs // 10
    bare_times, forge_times = bare_times[warm:], forge_times[warm:]
    return bare_times, forge_times, [f - b for f, b in zip(forge_times, bare_times, strict=True)]


def report_cost(work: Path, calls: int = 2000) -> float:
    """Seconds per ``run.report`` (a progress line to a file plus a history.jsonl append)."""
    work.mkdir(parents=True)
    env = TrainerEnv(output_dir=str(work / "out"), work_dir=str(work / "work"))
    with open(work / "output.log", "w") as output:
        run = Run(env, install_signal_handlers=False, stdout=output)
        run.start(1, steps_per_epoch=calls)
        start = time.perf_counter()
        for step in range(1, calls + 1):
            run.report(step, epoch=1, loss=0.5, lr=0.001)
            run.should_stop()
        return (time.perf_counter() - start) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="test_vit", help="timm architecture")
    parser.add_argument("--imgsz", type=int, default=32)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--per-class", type=int, default=30, help="images per class (three classes)")
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--pairs", type=int, default=400, help="paired steps of the step-for-step measurement")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="forge-bench-") as tmp:
        base = Path(tmp)
        root = shapes(base / "data", per_class=args.per_class, size=args.imgsz)
        bare_gaps: list[float] = []
        forge_gaps: list[float] = []
        for i in range(args.repeats):
            if i % 2:
                forge_gaps += through_forge(root, args, base / f"run{i}")
                bare_gaps += bare(root, args)
            else:
                bare_gaps += bare(root, args)
                forge_gaps += through_forge(root, args, base / f"run{i}")
        bare_steps, forge_steps, differences = step_for_step(root, args, base / "pairs", args.pairs)
        _, _, fixed = step_for_step(root, args, base / "trivial", 10 * args.pairs, trivial=True)
        per_report = report_cost(base / "report")
    print(f"trainer overhead, timm {args.model} at {args.imgsz} px, batch {args.batch} ({os.cpu_count()} CPUs, torch {torch.__version__})")
    b10, f10 = quantile(bare_gaps, 0.1), quantile(forge_gaps, 0.1)
    b50, f50 = statistics.median(bare_gaps), statistics.median(forge_gaps)
    print(f"whole runs ({args.repeats} each)     {'p10':>10} {'p50':>10}   steps")
    print(f"  bare torch loop          {b10 * 1000:7.2f} ms {b50 * 1000:7.2f} ms   {len(bare_gaps)}")
    print(f"  SDK + built-in loop      {f10 * 1000:7.2f} ms {f50 * 1000:7.2f} ms   {len(forge_gaps)}")
    print(f"  ratio                    {f10 / b10:10.4f} {f50 / b50:10.4f}")
    b, f, d = statistics.median(bare_steps), statistics.median(forge_steps), statistics.median(differences)
    print(f"step for step ({len(differences)} pairs)")
    print(f"  bare torch step          {b * 1000:7.2f} ms")
    print(f"  SDK + built-in step      {f * 1000:7.2f} ms")
    print(f"  paired difference        {d * 1e6:+7.1f} µs  → ratio {(b + d) / b:.4f} ({d / b * 100:+.2f} %; target ≤ +1 %)")
    c = statistics.median(fixed)
    print(f"fixed cost per step (a one-layer model, {len(fixed)} pairs)")
    print(f"  paired difference        {c * 1e6:+7.1f} µs  ({c / b * 100:.2f} % of the bare {args.model} step)")
    print(f"  one run.report call      {per_report * 1e6:7.1f} µs  (alone, in a tight loop)")


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


if __name__ == "__main__":
    main()
