"""Which format a dataset folder is in, and where inside an unpacked archive the data starts."""

from __future__ import annotations

from pathlib import Path

from . import coco, imagenet, sft, yolo
from .files import SPLIT_NAMES, entries, subdirs, walk
from .images import is_image
from .report import DatasetError

FORMATS: tuple[str, ...] = ("imagenet-folder", "coco", "yolo", "llm-sft", "vlm-sft")
TASKS_BY_FORMAT: dict[str, tuple[str, ...]] = {
    "imagenet-folder": imagenet.TASKS,
    "coco": coco.TASKS,
    "yolo": yolo.TASKS,
    "llm-sft": ("llm-sft",),
    "vlm-sft": ("vlm-sft",),
}
"""The tasks a dataset of each format can serve (a detection dataset serves segmentation only when
it has masks: ``Report.tasks`` says what a given dataset serves)."""

LOOKED_FOR = (
    "images/ and labels/ folders (yolo), a COCO .json in annotations/ or at the root (coco), "
    ".jsonl files at the root (llm-sft, vlm-sft), class folders holding images (imagenet-folder)"
)
_NOT_WRAPPERS = frozenset({*SPLIT_NAMES, "images", "labels", "annotations"})


def data_root(folder: Path) -> Path:
    """Step into a single top-level folder that only wraps the data (``my-data.zip`` → ``my-data/``).

    A folder is a wrapper when it is the only entry and is not itself part of a layout: not a split
    (``train/``), not ``images/``, ``labels/`` or ``annotations/``, and not a class folder (it holds
    no images directly).
    """
    root = Path(folder)
    while True:
        top = entries(root)
        if len(top) != 1 or not top[0].is_dir() or top[0].name in _NOT_WRAPPERS:
            return root
        inner = entries(top[0])
        if not inner or any(p.is_file() and is_image(p) for p in inner):
            return root
        root = top[0]


def _has_class_folders(root: Path) -> bool:
    return any(any(is_image(p) for p in walk(d)) for d in subdirs(root))


def detect_format(root: Path) -> str:
    """The format of a dataset folder, checked in this order: yolo, coco, llm/vlm-sft, imagenet-folder.

    Raises ``DatasetError`` naming what was looked for when nothing matches.
    """
    root = Path(root)
    if yolo.looks_like_yolo(root):
        return "yolo"
    if coco.looks_like_coco(root):
        return "coco"
    if sft.jsonl_files(root):
        return sft.detect(root)
    if _has_class_folders(root):
        return "imagenet-folder"
    raise DatasetError.single("format.undetected", ".", f"could not recognise the dataset format; looked for {LOOKED_FOR}")
