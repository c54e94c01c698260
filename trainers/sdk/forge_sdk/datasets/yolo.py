"""``yolo``: ``images/`` and ``labels/`` with mirrored paths, class names in ``data.yaml`` or
``classes.txt``.

``labels/a/x.txt`` holds the objects of ``images/a/x.jpg``, one per line: ``class cx cy w h``
(a box) or ``class x1 y1 … xn yn`` (a polygon, n ≥ 3), all normalised to [0, 1]. Folders
``images/train``, ``images/val`` and ``images/test`` (and the same under ``labels/``) are explicit
splits. An image without a label file, or with an empty one, is a background image.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from . import yamlish
from .data import DetectionData, DetectionImage, Mask
from .detection import add_box, box_problem, clipped, explicit_split, stats
from .files import SPLIT_NAMES, entries, folder, rel, walk
from .images import IMAGE_SUFFIXES, ImageReadError, SizeRange, image_size, is_image
from .report import Report

FORMAT = "yolo"
TASKS = ("detection", "segmentation")
YAML_NAMES = ("data.yaml", "data.yml")
CLASSES_TXT = ("classes.txt", "labels/classes.txt")
_INDEX = re.compile(r"\d+\Z")


def looks_like_yolo(root: Path) -> bool:
    return (root / "images").is_dir() and (root / "labels").is_dir()


def class_names(root: Path, report: Report) -> list[str] | None:
    """The class list from ``data.yaml`` (preferred) or ``classes.txt``; None after reporting why not.

    Ultralytics names the YAML after the dataset (``coco8.yaml``): a single ``.yaml`` at the root is
    read when there is no ``data.yaml``.
    """
    yamls = [p for p in entries(root) if p.is_file() and p.suffix.lower() in (".yaml", ".yml")]
    named = [p for p in yamls if p.name in YAML_NAMES] or (yamls if len(yamls) == 1 else [])
    if named:
        return _yaml_names(named[0], named[0].name, report)
    for name in CLASSES_TXT:
        if (root / name).is_file():
            return _txt_names(root / name, name, report)
    report.error("yolo.no_classes", ".", "no class list: add data.yaml (names: [cat, dog]) or classes.txt (one class name per line)")
    return None


def _yaml_names(path: Path, name: str, report: Report) -> list[str] | None:
    try:
        doc = yamlish.load(path.read_text(encoding="utf-8-sig"), ("names", "nc"))
    except UnicodeDecodeError:
        report.error("yolo.bad_yaml", name, "not valid YAML: the file is not UTF-8 text")
        return None
    except yamlish.YamlError as exc:
        report.error("yolo.bad_yaml", name, f"not valid YAML: {exc}", exc.line)
        return None
    names = _names_value(doc.get("names"), name, report)
    nc = doc.get("nc")
    if names is not None and isinstance(nc, int) and not isinstance(nc, bool) and nc != len(names):
        report.error("yolo.bad_yaml", name, f"'nc' is {nc} but 'names' lists {len(names)} classes")
        return None
    return names


def _names_value(value: Any, name: str, report: Report) -> list[str] | None:
    if value is None:
        report.error("yolo.bad_yaml", name, f"{name} has no 'names': list the class names, e.g. names: [cat, dog]")
        return None
    if isinstance(value, dict):
        keys = [int(k) if isinstance(k, str) and _INDEX.match(k) else k for k in value]
        if sorted(keys, key=str) != sorted(range(len(keys)), key=str):
            report.error("yolo.bad_yaml", name, "'names' indices must run 0..n-1 without gaps")
            return None
        value = [v for _, v in sorted(zip(keys, value.values(), strict=True))]
    if not isinstance(value, list):
        report.error("yolo.bad_yaml", name, "'names' must be a list of class names or a mapping of index: name")
        return None
    if not value:
        report.error("yolo.bad_yaml", name, "'names' is empty: list at least one class")
        return None
    if any(isinstance(v, list | dict) or v is None or str(v).strip() == "" for v in value):
        report.error("yolo.bad_yaml", name, "every class name in 'names' must be a non-empty string")
        return None
    return [str(v) for v in value]


def _txt_names(path: Path, name: str, report: Report) -> list[str] | None:
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except UnicodeDecodeError:
        report.error("yolo.bad_classes", name, "the file is not UTF-8 text")
        return None
    while lines and not lines[-1].strip():
        lines.pop()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            report.error("yolo.bad_classes", name, "empty class name: classes.txt needs one name per line, in index order", number)
            return None
    if not lines:
        report.error("yolo.bad_classes", name, "classes.txt lists no class names")
        return None
    return [line.strip() for line in lines]


class LineError(ValueError):
    """What is wrong with one label line: a problem code and the message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def parse_line(tokens: list[str], num_classes: int | None) -> tuple[int, list[float]]:
    """A label line's class and normalised values; raises ``LineError`` saying what is wrong."""
    values = len(tokens) - 1
    if values == 2:
        raise LineError("seg.few_points", "polygon with fewer than 3 points")
    if values != 4 and (values < 6 or values % 2):
        raise LineError(
            "yolo.value_count",
            f"wrong number of values: expected 'class cx cy w h' (5) or 'class x1 y1 … xn yn' (a polygon, n ≥ 3), got {len(tokens)}",
        )
    if not _INDEX.match(tokens[0]):
        raise LineError("yolo.class_not_int", f"class index {tokens[0]!r} is not an integer")
    cls = int(tokens[0])
    if num_classes is not None and cls >= num_classes:
        raise LineError("yolo.class_range", f"class index {cls} is out of range: {num_classes} classes are named (0–{num_classes - 1})")
    numbers = [_number(token) for token in tokens[1:]]
    outside = next((v for v in numbers if not 0.0 <= v <= 1.0), None)
    if outside is not None:
        raise LineError("yolo.not_normalized", f"coordinates must be normalised to [0, 1]; found {outside:g}")
    if values == 4 and (numbers[2] <= 0 or numbers[3] <= 0):
        raise LineError("bbox.non_positive", f"bbox has non-positive width or height ({numbers[2]:g} x {numbers[3]:g})")
    return cls, numbers


def _number(token: str) -> float:
    try:
        number = float(token)
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise LineError("yolo.not_number", f"value {token!r} is not a number")
    return number


def to_pixels(numbers: list[float], width: int, height: int) -> tuple[tuple[float, float, float, float], Mask | None]:
    """Normalised values → an absolute top-left box, and the polygon in pixels (None for a box)."""
    if len(numbers) == 4:
        cx, cy, w, h = numbers
        return ((cx - w / 2) * width, (cy - h / 2) * height, w * width, h * height), None
    xs = [v * width for v in numbers[0::2]]
    ys = [v * height for v in numbers[1::2]]
    polygon = [coord for point in zip(xs, ys, strict=True) for coord in point]
    return (min(xs), min(ys), max(xs) - min(xs), max(ys) - min(ys)), [polygon]


class _Reader:
    def __init__(self, root: Path, report: Report, verify: bool) -> None:
        self.root, self.report, self.verify = root, report, verify
        self.images: list[DetectionImage] = []
        self.split_of: list[str] = []
        self.sizes = SizeRange()

    def run(self) -> DetectionData:
        names = class_names(self.root, self.report)
        by_key = self._images()
        self._orphan_labels(by_key)
        unlabelled = 0
        for key, index in by_key.items():
            if not self._labels(key, self.images[index], len(names) if names is not None else None):
                unlabelled += 1
        if unlabelled:
            verb = "has" if unlabelled == 1 else "have"
            self.report.warn("yolo.unlabelled", "images/", f"{unlabelled} image{'s' if unlabelled != 1 else ''} {verb} no labels")
        data = DetectionData(
            categories=names or [],
            images=self.images,
            explicit_split=explicit_split(self.split_of, "all" not in self.split_of and bool(self.split_of)),
            has_masks=any(m is not None for img in self.images for m in img.masks),
        )
        self.report.stats = stats(data, self.split_of, self.sizes)
        return data

    def _images(self) -> dict[str, int]:
        """Label key (``a/x`` for ``images/a/x.jpg``) → index of the image in ``self.images``."""
        top = self.root / "images"
        has_splits = any((top / split).is_dir() for split in SPLIT_NAMES)
        if has_splits and not (top / "train").is_dir():
            self.report.error("split.no_train", "images/train/", "explicit splits need an images/train/ folder")
        by_key: dict[str, int] = {}
        outside: list[str] = []
        for path in walk(top):
            name = rel(self.root, path)
            if not is_image(path):
                self.report.warn("files.ignored", name, "not an image file; ignored")
                continue
            inner = path.relative_to(top).as_posix()
            split = inner.split("/", 1)[0] if has_splits else "all"
            if split not in (*SPLIT_NAMES, "all") or split == inner:
                outside.append(name)
                continue
            key = inner.rsplit(".", 1)[0]
            if key in by_key:
                self.report.error(
                    "yolo.ambiguous", name, f"{self.images[by_key[key]].path} and {name} would share the label file labels/{key}.txt"
                )
                continue
            size = self._size(path, name)
            if size is not None:
                by_key[key] = len(self.images)
                self.images.append(DetectionImage(name, size[0], size[1]))
                self.split_of.append(split)
        if outside:
            self.report.warn(
                "files.ignored",
                "images/",
                f"{len(outside)} image(s) outside images/train, images/val and images/test are ignored (e.g. {', '.join(outside[:3])})",
            )
        if not by_key and not outside:
            self.report.error("yolo.no_images", "images/", "no images found in images/")
        return by_key

    def _size(self, path: Path, name: str) -> tuple[int, int] | None:
        try:
            size = image_size(path, verify=self.verify)
        except ImageReadError as exc:
            self.report.error("image.unreadable", name, str(exc))
            return None
        self.sizes.add(*size)
        return size

    def _orphan_labels(self, by_key: dict[str, int]) -> None:
        top = self.root / "labels"
        ignored: list[str] = []
        for path in walk(top):
            name = rel(self.root, path)
            if name in CLASSES_TXT:
                continue
            if path.suffix.lower() != ".txt":
                ignored.append(name)
                continue
            key = path.relative_to(top).as_posix()[: -len(".txt")]
            if key not in by_key and not any((self.root / "images" / f"{key}{s}").exists() for s in _suffixes()):
                self.report.error("yolo.orphan_label", name, f"label file has no image: expected images/{key}.jpg (or .png, …)")
        if ignored:
            self.report.warn(
                "files.ignored",
                folder(self.root, top),
                f"{len(ignored)} file(s) in labels/ are not .txt labels and are ignored (e.g. {', '.join(ignored[:3])})",
            )

    def _labels(self, key: str, image: DetectionImage, num_classes: int | None) -> bool:
        """Read one label file into the image; False when the image has no labels (background)."""
        path = self.root / "labels" / f"{key}.txt"
        if not path.is_file():
            return False
        name = rel(self.root, path)
        try:
            lines = path.read_text(encoding="utf-8-sig").splitlines()
        except UnicodeDecodeError:
            self.report.error("yolo.bad_label", name, "the label file is not UTF-8 text")
            return True
        labelled = False
        for number, line in enumerate(lines, 1):
            tokens = line.split()
            if not tokens:
                continue
            labelled = True
            try:
                cls, numbers = parse_line(tokens, num_classes)
            except LineError as exc:
                self.report.error(exc.code, name, str(exc), number)
                continue
            (x, y, w, h), mask = to_pixels(numbers, image.width, image.height)
            problem = box_problem(x, y, w, h, image.width, image.height)
            if problem is not None:
                self.report.error(problem[0], name, problem[1], number)
                continue
            add_box(image, clipped(cls, x, y, w, h, image.width, image.height), mask)
        return labelled


def _suffixes() -> list[str]:
    return sorted(IMAGE_SUFFIXES | {s.upper() for s in IMAGE_SUFFIXES})


def read(root: Path, report: Report, *, verify_images: bool = True) -> DetectionData:
    """Check the class list, every label line (and, with ``verify_images``, every image) and build the data."""
    return _Reader(root, report, verify_images).run()
