"""A minimal PyTorch training loop on the Forge Trainer SDK — a complete custom trainer.

It classifies the images of an ImageNet-style dataset with a small MLP on 8×8 colour pixels. Run it
on a laptop with plain folders::

    INPUT_URI=./shapes OUTPUT_DIR=./out CONFIG_JSON='{"hyperparameters": {"epochs": 5}}' \\
        python minimal_torch.py

or give it to Forge as a job's ``custom_script_uri``: the same file, the same behaviour — live
progress, Stop (after an epoch: stopped with the best model; before: canceled), resume, and
registration through ``<artifact>.metrics.json``.
"""

import random

import torch
from PIL import Image
from torch import nn

import forge_sdk
from forge_sdk import datasets


def load(root, items):
    def pixels(path):
        with Image.open(root / path) as img:
            return torch.tensor(list(img.convert("RGB").resize((8, 8)).getdata()), dtype=torch.float32).flatten() / 255.0

    return torch.stack([pixels(p) for p, _ in items]), torch.tensor([label for _, label in items])


with forge_sdk.init() as run:
    hp = {"epochs": 10, "lr": 0.01, "batch": 16, "seed": 0, "train_val_ratio": 0.8, **run.hyperparameters}
    root = run.input_dir()
    data = datasets.load_classification(root)
    split = datasets.split_indices(len(data.items), hp["train_val_ratio"], hp["seed"], explicit=data.explicit_split, stratify=data.labels)
    x_train, y_train = load(root, [data.items[i] for i in split.train])
    x_val, y_val = load(root, [data.items[i] for i in split.val])

    torch.manual_seed(hp["seed"])
    model = nn.Sequential(nn.Linear(192, 64), nn.ReLU(), nn.Linear(64, len(data.classes)))
    optimizer = torch.optim.Adam(model.parameters(), lr=hp["lr"])
    best = -1.0
    if (checkpoint := run.resume("last.pt")) is not None:  # a resumed attempt
        state = torch.load(checkpoint)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        best = state["best"]
        run.trim_history(state["epoch"])

    steps = (len(x_train) + hp["batch"] - 1) // hp["batch"]
    run.start(hp["epochs"], steps_per_epoch=steps, main_metric="accuracy")
    for epoch in range(run.start_epoch + 1, hp["epochs"] + 1):
        order = list(range(len(x_train)))
        random.Random(hp["seed"] + epoch).shuffle(order)
        for i in range(steps):
            batch = order[i * hp["batch"] : (i + 1) * hp["batch"]]
            loss = nn.functional.cross_entropy(model(x_train[batch]), y_train[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            run.report((epoch - 1) * steps + i + 1, epoch=epoch, loss=loss.item())
            if run.should_stop():
                break  # finish the step, then leave
        if run.should_stop():
            break  # an unfinished epoch never counts
        with torch.no_grad():
            accuracy = (model(x_val).argmax(1) == y_val).float().mean().item()
        is_best = accuracy > best
        if is_best:
            best = accuracy
            with run.checkpoint("best.pt") as path:
                torch.save(model.state_dict(), path)
        with run.checkpoint("last.pt") as path:
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch, "best": best}, path)
        run.epoch_completed(epoch, {"accuracy": accuracy, "loss": loss.item()}, is_best=is_best)

    if run.epochs_completed:  # completed or stopped: publish the best model
        weights = run.upload(run.checkpoint_path("best.pt"), "model.pt")
        run.write_metrics({"accuracy": best, "classes": len(data.classes)}, weights_uri=weights)
