"""What the loaders hand to trainers: plain, frozen dataclasses with no framework in them.

Paths are relative to the dataset root (forward slashes), so a trainer joins them with the root it
downloaded; boxes are absolute pixels, top-left ``x, y, w, h``, whatever the format on disk.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Role = Literal["system", "user", "assistant"]
Polygons = list[list[float]]
"""COCO polygons in absolute pixels: each polygon is ``[x1, y1, x2, y2, …]``."""
RLE = dict[str, Any]
"""COCO run-length encoding: ``{"size": [height, width], "counts": str | list[int]}``."""
Mask = Polygons | RLE
Splits = dict[str, list[int]]
"""Explicit splits of the data: ``{"train": [indices], "val": [...], "test": [...]}``."""


@dataclass(frozen=True)
class ClassificationData:
    classes: list[str]
    items: list[tuple[str, int]]
    """(relative image path, class index) in split, class, path order."""
    explicit_split: Splits | None = None

    @property
    def labels(self) -> list[int]:
        """The class index of every item, e.g. for ``split_indices(..., stratify=data.labels)``."""
        return [label for _, label in self.items]


@dataclass(frozen=True)
class Box:
    label: int
    """Contiguous class index into ``DetectionData.categories``."""
    x: float
    y: float
    w: float
    h: float


@dataclass(frozen=True)
class DetectionImage:
    path: str
    width: int
    height: int
    boxes: list[Box] = field(default_factory=list)
    masks: list[Mask | None] = field(default_factory=list)
    """Aligned with ``boxes``: polygons, RLE, or None for a box without a mask."""
    iscrowd: list[bool] = field(default_factory=list)
    """Aligned with ``boxes``: COCO crowd regions (trainers usually ignore them in the loss)."""


@dataclass(frozen=True)
class DetectionData:
    categories: list[str]
    images: list[DetectionImage]
    explicit_split: Splits | None = None
    has_masks: bool = False


@dataclass(frozen=True)
class Message:
    role: Role
    content: str


@dataclass(frozen=True)
class Conversation:
    messages: list[Message]
    images: list[str] = field(default_factory=list)
    """Image paths relative to the dataset root, one per ``<image>`` placeholder, in order."""


@dataclass(frozen=True)
class SFTData:
    records: list[Conversation]
    explicit_split: Splits | None = None
    is_vlm: bool = False
