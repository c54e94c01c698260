"""Tiny datasets of every format, written by the tests themselves (nothing is downloaded).

Each ``build_*`` writes a valid dataset; the malformed-input tests start from one and break one
thing, so a failing test points at exactly one check.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PIL import Image


def png(path: Path, size: tuple[int, int] = (32, 24), color: tuple[int, int, int] = (10, 20, 30)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, color).save(path)
    return path


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def write_json(path: Path, obj: Any) -> Path:
    return write(path, json.dumps(obj))


def write_jsonl(path: Path, records: list[Any]) -> Path:
    """One line per record; a ``str`` record is written as it is (to write broken lines)."""
    return write(path, "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))


# ---- imagenet-folder ---------------------------------------------------------------------------


def build_imagenet(root: Path) -> Path:
    for cls, n in (("cat", 3), ("dog", 2)):
        for i in range(n):
            png(root / cls / f"{i}.png", (8 + i, 6))
    return root


# ---- coco --------------------------------------------------------------------------------------

COCO_FILE = "annotations/instances.json"


def coco_doc() -> dict[str, Any]:
    """Two annotated images and one without annotations; category ids 7 (dog) and 3 (cat) → cat=0, dog=1."""
    return {
        "images": [
            {"id": 1, "file_name": "a.png", "width": 64, "height": 48},
            {"id": 2, "file_name": "b.png", "width": 32, "height": 32},
            {"id": 3, "file_name": "c.png", "width": 16, "height": 16},
        ],
        "annotations": [
            {"id": 10, "image_id": 1, "category_id": 7, "bbox": [4, 6, 20, 10], "iscrowd": 0},
            {
                "id": 11,
                "image_id": 1,
                "category_id": 3,
                "bbox": [30, 20, 10, 10],
                "segmentation": [[30, 20, 40, 20, 40, 30]],
                "iscrowd": 0,
            },
            {
                "id": 12,
                "image_id": 2,
                "category_id": 3,
                "bbox": [0, 0, 32, 32],
                "segmentation": {"size": [32, 32], "counts": "abc"},
                "iscrowd": 1,
            },
        ],
        "categories": [{"id": 7, "name": "dog"}, {"id": 3, "name": "cat"}],
    }


def build_coco(root: Path, mutate: Callable[[dict[str, Any]], object] | None = None) -> Path:
    png(root / "images" / "a.png", (64, 48))
    png(root / "images" / "b.png", (32, 32))
    png(root / "images" / "c.png", (16, 16))
    doc = coco_doc()
    if mutate is not None:
        mutate(doc)
    write_json(root / COCO_FILE, doc)
    return root


# ---- yolo --------------------------------------------------------------------------------------


def build_yolo(root: Path, labels: dict[str, str] | None = None, yaml: str | None = "names: [cat, dog]\n") -> Path:
    """images/train/a.png (100x50, two objects), images/val/b.png (40x40, one); ``labels`` overrides label files."""
    png(root / "images" / "train" / "a.png", (100, 50))
    png(root / "images" / "val" / "b.png", (40, 40))
    files = {
        "train/a.txt": "0 0.5 0.5 0.2 0.4\n1 0.1 0.2 0.3 0.2 0.3 0.6\n",
        "val/b.txt": "1 0.25 0.25 0.5 0.5\n",
    }
    files.update(labels or {})
    for name, text in files.items():
        write(root / "labels" / name, text)
    if yaml is not None:
        write(root / "data.yaml", yaml)
    return root


# ---- llm-sft / vlm-sft -------------------------------------------------------------------------


def sharegpt(question: str = "What is 2+2?", answer: str = "4", system: str | None = None) -> dict[str, Any]:
    record: dict[str, Any] = {"conversations": [{"from": "human", "value": question}, {"from": "gpt", "value": answer}]}
    if system is not None:
        record["system"] = system
    return record


def messages(*turns: tuple[str, str]) -> dict[str, Any]:
    return {"messages": [{"role": role, "content": content} for role, content in turns]}


def build_sft(root: Path, extra: list[Any] | None = None) -> Path:
    """data.jsonl: a sharegpt record, a messages record, then ``extra`` lines (line 3 on)."""
    records: list[Any] = [
        sharegpt(system="Be brief."),
        messages(("system", "You help."), ("user", "Hi"), ("assistant", "Hello!"), ("user", "Bye"), ("assistant", "Bye!")),
    ]
    write_jsonl(root / "data.jsonl", records + (extra or []))
    return root


def vlm_record(images: list[str], text: str = "<image> What is this?") -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}, {"role": "assistant", "content": "A square."}], "images": images}


def build_vlm(root: Path, extra: list[Any] | None = None) -> Path:
    png(root / "images" / "x.png", (20, 10))
    png(root / "images" / "y.png", (30, 40))
    records: list[Any] = [
        vlm_record(["images/x.png"]),
        vlm_record(["images/x.png", "images/y.png"], "<image> and <image>: same?"),
        messages(("user", "text only"), ("assistant", "fine")),
    ]
    write_jsonl(root / "data.jsonl", records + (extra or []))
    return root


def wordy_checkpoint(folder: Path) -> Path:
    """A tiny qwen2-family checkpoint folder with a word-level tokenizer (for token statistics)."""
    import numpy as np
    from safetensors.numpy import save_file
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "what": 1, "is": 2}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    folder.mkdir(parents=True)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "config.json").write_text('{"model_type": "qwen2"}')
    save_file({"w": np.zeros((1,), dtype=np.float32)}, str(folder / "model.safetensors"))
    return folder
