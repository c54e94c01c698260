"""A third-party training framework on the Forge Trainer SDK: 🤗 transformers' ``Trainer``
wrapped by a ``TrainerCallback`` that forwards its logs, epochs and stop requests.

The framework keeps its own loop; the callback is the whole integration::

    INPUT_URI=./shapes OUTPUT_DIR=./out CONFIG_JSON='{"hyperparameters": {"epochs": 3}}' \\
        python hf_trainer_callback.py
"""

import tempfile

import torch
from PIL import Image
from torch import nn
from transformers import Trainer, TrainerCallback, TrainingArguments

import forge_sdk
from forge_sdk import datasets


class ForgeCallback(TrainerCallback):
    """Trainer events → the SDK: step metrics, completed epochs (ranked by eval accuracy), Stop."""

    def __init__(self, run):
        self.run = run
        self.best = -1.0

    def on_train_begin(self, args, state, control, **kwargs):
        self.run.start(int(args.num_train_epochs), steps_per_epoch=state.max_steps // int(args.num_train_epochs), main_metric="accuracy")

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.run.report(state.global_step, epoch=int(state.epoch or 0) + 1, loss=logs["loss"], lr=logs.get("learning_rate", 0.0))

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        accuracy = metrics["eval_accuracy"]
        is_best = accuracy > self.best
        self.best = max(self.best, accuracy)
        self.run.epoch_completed(round(state.epoch), {"accuracy": accuracy, "eval_loss": metrics["eval_loss"]}, is_best=is_best)
        if is_best:
            with self.run.checkpoint("best.pt") as path:
                torch.save(kwargs["model"].state_dict(), path)

    def on_step_end(self, args, state, control, **kwargs):
        if self.run.should_stop():
            control.should_training_stop = True  # the framework finishes the step and returns


class Classifier(nn.Module):
    def __init__(self, classes):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(192, 64), nn.ReLU(), nn.Linear(64, classes))

    def forward(self, pixels, labels=None):
        logits = self.net(pixels)
        return {"loss": nn.functional.cross_entropy(logits, labels), "logits": logits} if labels is not None else {"logits": logits}


def examples(root, items):
    def pixels(path):
        with Image.open(root / path) as img:
            return torch.tensor(list(img.convert("RGB").resize((8, 8)).getdata()), dtype=torch.float32).flatten() / 255.0

    return [{"pixels": pixels(p), "labels": label} for p, label in items]


def accuracy(prediction):
    return {"accuracy": float((prediction.predictions.argmax(-1) == prediction.label_ids).mean())}


with forge_sdk.init() as run:
    hp = {"epochs": 5, "lr": 0.005, "batch": 16, "seed": 0, "train_val_ratio": 0.8, **run.hyperparameters}
    root = run.input_dir()
    data = datasets.load_classification(root)
    split = datasets.split_indices(len(data.items), hp["train_val_ratio"], hp["seed"], explicit=data.explicit_split, stratify=data.labels)
    torch.manual_seed(hp["seed"])
    args = TrainingArguments(
        output_dir=tempfile.mkdtemp(),
        num_train_epochs=hp["epochs"],
        learning_rate=hp["lr"],
        per_device_train_batch_size=hp["batch"],
        eval_strategy="epoch",
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        seed=hp["seed"],
        use_cpu=True,
    )
    trainer = Trainer(
        model=Classifier(len(data.classes)),
        args=args,
        train_dataset=examples(root, [data.items[i] for i in split.train]),
        eval_dataset=examples(root, [data.items[i] for i in split.val]),
        compute_metrics=accuracy,
        callbacks=[callback := ForgeCallback(run)],
    )
    trainer.train()
    if run.epochs_completed:
        weights = run.upload(run.checkpoint_path("best.pt"), "model.pt")
        run.write_metrics({"accuracy": callback.best}, weights_uri=weights)
