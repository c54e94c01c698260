"""What COCO and YOLO share once they are read: box checks in pixels, and the statistics.

Both formats end up as absolute top-left ``x, y, w, h`` boxes, so one check decides whether a box
is usable, with the same words for both, and one function counts what a trainer will see.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from .data import Box, DetectionData, DetectionImage, Mask
from .images import SizeRange

TOLERANCE_PX = 1.0
"""Boxes may stick out of the image by this much: exporters round, and a trainer clips anyway."""


def number(value: object) -> bool:
    """A finite JSON number (``true`` is not a number here)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def fmt(value: float) -> str:
    return f"{value:g}"


def box_problem(x: float, y: float, w: float, h: float, width: int, height: int, image: str = "the image") -> tuple[str, str] | None:
    """(code, message) when the box cannot be used in an image of ``width`` x ``height``, else None."""
    if w <= 0 or h <= 0:
        return "bbox.non_positive", f"bbox has non-positive width or height ({fmt(w)} x {fmt(h)})"
    tol = TOLERANCE_PX
    if x < -tol or y < -tol or x + w > width + tol or y + h > height + tol:
        where = ", ".join(fmt(round(v, 2)) for v in (x, y, w, h))
        return "bbox.outside", f"bbox [{where}] lies outside {image} ({width}x{height})"
    return None


def clipped(label: int, x: float, y: float, w: float, h: float, width: int, height: int) -> Box:
    """The box cut to the image (it may stick out by the tolerance)."""
    x0, y0 = max(0.0, x), max(0.0, y)
    x1, y1 = min(float(width), x + w), min(float(height), y + h)
    return Box(label, x0, y0, x1 - x0, y1 - y0)


def add_box(image: DetectionImage, box: Box, mask: Mask | None = None, crowd: bool = False) -> None:
    image.boxes.append(box)
    image.masks.append(mask)
    image.iscrowd.append(crowd)


def stats(data: DetectionData, split_of: list[str], sizes: SizeRange) -> dict[str, Any]:
    """Counts per split, the class histogram (instances), image sizes and masks."""
    per_class: Counter[int] = Counter(b.label for img in data.images for b in img.boxes)
    splits: dict[str, dict[str, int]] = {}
    for image, split in zip(data.images, split_of, strict=True):
        entry = splits.setdefault(split, {"images": 0, "instances": 0})
        entry["images"] += 1
        entry["instances"] += len(image.boxes)
    return {
        "classes": list(data.categories),
        "num_classes": len(data.categories),
        "images": len(data.images),
        "instances": sum(per_class.values()),
        "per_class": {name: per_class.get(i, 0) for i, name in enumerate(data.categories)},
        "masks": sum(1 for img in data.images for m in img.masks if m is not None),
        "images_without_annotations": sum(1 for img in data.images if not img.boxes),
        "splits": splits,
        "explicit_splits": data.explicit_split is not None,
        "image_size": sizes.to_dict(),
    }


def explicit_split(split_of: list[str], explicit: bool) -> dict[str, list[int]] | None:
    """Image indices per split, or None when the data has no explicit splits."""
    if not explicit:
        return None
    out: dict[str, list[int]] = {}
    for i, split in enumerate(split_of):
        out.setdefault(split, []).append(i)
    return out
