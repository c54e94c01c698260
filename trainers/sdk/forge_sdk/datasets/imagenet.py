"""``imagenet-folder``: one sub-folder per class (``cat/1.png``), optionally under ``train/``,
``val/`` and ``test/``.

The class of an image is the folder it sits in; the set of class names is the union over splits,
sorted, so a class index means the same in every split.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from .data import ClassificationData
from .files import SPLIT_NAMES, entries, folder, rel, subdirs, walk
from .images import ImageReadError, SizeRange, image_size, is_image
from .report import Report

FORMAT = "imagenet-folder"
TASKS = ("classification",)


def _splits(root: Path, report: Report) -> dict[str, Path]:
    """``{"all": root}``, or the explicit split folders when every top folder is one."""
    dirs = subdirs(root)
    split_dirs = [p for p in dirs if p.name in SPLIT_NAMES]
    if not split_dirs:
        return {"all": root}
    if len(split_dirs) != len(dirs):
        others = ", ".join(f"{p.name}/" for p in dirs if p.name not in SPLIT_NAMES)
        report.error(
            "imagenet.mixed_splits",
            ".",
            f"split folders ({', '.join(f'{p.name}/' for p in split_dirs)}) next to class folders ({others}): "
            "put every class folder under train/ and val/, or use class folders only",
        )
    splits = {p.name: p for p in split_dirs}
    if "train" not in splits:
        report.error("split.no_train", "train/", "explicit splits need a train/ folder")
    return dict(sorted(splits.items(), key=lambda kv: SPLIT_NAMES.index(kv[0])))


def _warn_loose_files(root: Path, splits: dict[str, Path], report: Report) -> None:
    """Files next to the class folders belong to no class: say they are ignored."""
    for top in dict.fromkeys([root, *splits.values()]):
        for p in entries(top):
            if p.is_file():
                report.warn("files.ignored", rel(root, p), "file outside any class folder is ignored")


def _class_images(root: Path, cls: Path, report: Report, sizes: SizeRange | None) -> list[str]:
    """The readable images of one class folder (all image files when ``sizes`` is None: no checks)."""
    found: list[str] = []
    for path in walk(cls):
        name = rel(root, path)
        if not is_image(path):
            report.warn("files.ignored", name, "not an image file; ignored")
            continue
        if sizes is not None:
            try:
                sizes.add(*image_size(path, verify=True))
            except ImageReadError as exc:
                report.error("image.unreadable", name, str(exc))
                continue
        found.append(name)
    return found


def read(root: Path, report: Report, *, verify_images: bool = True) -> ClassificationData:
    """Check the folders (and, with ``verify_images``, decode every image) and list the items."""
    splits = _splits(root, report)
    _warn_loose_files(root, splits, report)
    sizes = SizeRange() if verify_images else None
    found: dict[str, dict[str, list[str]]] = {}
    for split, top in splits.items():
        classes = subdirs(top)
        if not classes:
            report.error("imagenet.no_classes", folder(root, top), "no class folders: expected one sub-folder per class")
            continue
        found[split] = {}
        for cls in classes:
            images = _class_images(root, cls, report, sizes)
            if not images:
                report.error("imagenet.empty_class", folder(root, cls), "empty class folder: it holds no images")
            found[split][cls.name] = images
    class_names = sorted({name for per_class in found.values() for name in per_class})
    if len(class_names) == 1 and report.ok:
        report.error("imagenet.one_class", ".", "only one class: classification needs at least two")
    _warn_unbalanced_splits(found, report)
    data = _items(class_names, found, explicit="all" not in splits)
    report.stats = _stats(class_names, found, sizes)
    return data


def _warn_unbalanced_splits(found: dict[str, dict[str, list[str]]], report: Report) -> None:
    if "train" not in found:
        return
    train = set(found["train"])
    for split in ("val", "test"):
        if split not in found:
            continue
        other = set(found[split])
        for name in sorted(train - other):
            report.warn("imagenet.class_missing", f"{split}/{name}/", f"class has no {'validation' if split == 'val' else 'test'} images")
        for name in sorted(other - train):
            report.warn("imagenet.class_missing", f"train/{name}/", "class has no training images")


def _items(class_names: list[str], found: dict[str, dict[str, list[str]]], *, explicit: bool) -> ClassificationData:
    index = {name: i for i, name in enumerate(class_names)}
    items: list[tuple[str, int]] = []
    explicit_split: dict[str, list[int]] = {}
    for split, per_class in found.items():
        start = len(items)
        for name, images in per_class.items():
            items.extend((path, index[name]) for path in images)
        explicit_split[split] = list(range(start, len(items)))
    return ClassificationData(class_names, items, explicit_split if explicit else None)


def _stats(class_names: list[str], found: dict[str, dict[str, list[str]]], sizes: SizeRange | None) -> dict[str, object]:
    counts = {split: Counter({name: len(images) for name, images in per_class.items()}) for split, per_class in found.items()}
    return {
        "classes": class_names,
        "num_classes": len(class_names),
        "images": sum(sum(c.values()) for c in counts.values()),
        "splits": {split: {"images": sum(c.values()), "per_class": dict(sorted(c.items()))} for split, c in counts.items()},
        "explicit_splits": bool(counts) and "all" not in counts,
        "image_size": sizes.to_dict() if sizes is not None else None,
    }
