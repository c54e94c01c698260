"""Dataset formats: detection, validation with a report a user can act on, and statistics.

Every problem names the file (and the line or annotation where there is one). Errors reject the
upload; warnings are recorded on the version and do not block it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image, UnidentifiedImageError

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff"})
SPLIT_NAMES = ("train", "val", "test")


@dataclass(frozen=True)
class Problem:
    file: str
    message: str
    line: int | None = None
    severity: str = "error"


@dataclass
class Report:
    format: str
    tasks: list[str]
    errors: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.errors

    def error(self, file: str, message: str, line: int | None = None) -> None:
        self.errors.append(Problem(file, message, line))

    def warn(self, file: str, message: str, line: int | None = None) -> None:
        self.warnings.append(Problem(file, message, line, "warning"))

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "tasks": self.tasks,
            "errors": [asdict(p) for p in self.errors],
            "warnings": [asdict(p) for p in self.warnings],
        }


def data_root(folder: Path) -> Path:
    """Step into a single top-level folder that only wraps folders (``my-data.zip`` → ``my-data/``)."""
    root = folder
    while True:
        entries = [p for p in root.iterdir() if not p.name.startswith(".")]
        if len(entries) != 1 or not entries[0].is_dir() or entries[0].name in SPLIT_NAMES:
            return root
        inside = [p for p in entries[0].iterdir() if not p.name.startswith(".")]
        if not inside or any(p.is_file() for p in inside):
            return root
        root = entries[0]


def _check_image(path: Path, rel: str, report: Report, sizes: list[tuple[int, int]]) -> bool:
    try:
        with Image.open(path) as img:
            img.verify()
        with Image.open(path) as img:
            sizes.append(img.size)
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        report.error(rel, f"unreadable or corrupt image ({type(exc).__name__})")
        return False
    return True


def validate_imagenet_folder(root: Path) -> Report:
    """One sub-folder per class (``cat/…``, ``dog/…``), or ``train/`` and ``val/`` each holding them."""
    report = Report(format="imagenet-folder", tasks=["classification"])
    subdirs = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    split_dirs = [p for p in subdirs if p.name in SPLIT_NAMES]
    if split_dirs and len(split_dirs) == len(subdirs):
        splits = {p.name: p for p in split_dirs}
        if "train" not in splits:
            report.error(f"{root.name}/", "explicit splits need a train/ folder")
    else:
        splits = {"all": root}
    for p in root.iterdir():
        if p.is_file() and not p.name.startswith("."):
            report.warn(p.name, "file outside any class folder is ignored")
    sizes: list[tuple[int, int]] = []
    counts: dict[str, Counter[str]] = {}
    class_names: set[str] = set()
    for split, folder in splits.items():
        classes = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
        if not classes:
            report.error(f"{folder.relative_to(root).as_posix() or '.'}/", "no class folders: expected one sub-folder per class")
            continue
        counts[split] = Counter()
        for cls in classes:
            class_names.add(cls.name)
            images = 0
            for path in sorted(cls.rglob("*")):
                if not path.is_file() or path.name.startswith("."):
                    continue
                rel = path.relative_to(root).as_posix()
                if path.suffix.lower() not in IMAGE_SUFFIXES:
                    report.warn(rel, "not an image file; ignored")
                    continue
                if _check_image(path, rel, report, sizes):
                    images += 1
            if images == 0:
                report.error(f"{cls.relative_to(root).as_posix()}/", "empty class folder: it holds no images")
            counts[split][cls.name] = images
    if len(class_names) == 1 and not report.errors:
        report.error(f"{root.name}/", "only one class: classification needs at least two")
    if "val" in counts and "train" in counts:
        missing = set(counts["train"]) - set(counts["val"])
        for name in sorted(missing):
            report.warn(f"val/{name}/", "class has no validation images")
    widths = [w for w, _ in sizes]
    heights = [h for _, h in sizes]
    report.stats = {
        "classes": sorted(class_names),
        "num_classes": len(class_names),
        "images": sum(sum(c.values()) for c in counts.values()),
        "splits": {split: {"images": sum(c.values()), "per_class": dict(sorted(c.items()))} for split, c in counts.items()},
        "explicit_splits": "all" not in counts,
        "image_size": ({"min": [min(widths), min(heights)], "max": [max(widths), max(heights)]} if sizes else None),
    }
    return report


VALIDATORS = {"imagenet-folder": validate_imagenet_folder}


def detect_format(root: Path) -> str:
    """The format of an unpacked dataset (only ImageNet folders are understood so far)."""
    return "imagenet-folder"


def validate(root: Path, declared: str | None = None) -> Report:
    fmt = declared or detect_format(root)
    validator = VALIDATORS.get(fmt)
    if validator is None:
        report = Report(format=fmt, tasks=[])
        report.error(".", f"unknown dataset format {fmt!r}; known: {', '.join(VALIDATORS)}")
        return report
    return validator(root)
