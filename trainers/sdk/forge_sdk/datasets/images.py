"""Reading image headers and checking that images decode, with Pillow imported only when needed.

The SDK has no required dependencies: a text-only dataset never imports Pillow, and a trainer that
already has it pays nothing extra. Without Pillow, anything that must look inside an image says how
to get it instead of failing with a bare ImportError.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff"})


class ImageReadError(Exception):
    """An image file that cannot be read; the message is the reason shown to the user."""


class PillowMissing(ImportError):
    """Reading images needs Pillow, which is an optional extra of the SDK."""


def is_image(path: Path) -> bool:
    return path.suffix.lower() in IMAGE_SUFFIXES


def _pillow() -> Any:
    try:
        from PIL import Image
    except ImportError:
        raise PillowMissing("reading images needs Pillow: pip install 'forge-trainer-sdk[images]' (or pillow)") from None
    return Image


def image_size(path: Path, *, verify: bool = False) -> tuple[int, int]:
    """(width, height) from the header; with ``verify`` the file is also checked for corruption.

    Raises ``ImageReadError`` naming the failure (``unreadable or corrupt image (…)``).
    """
    image_module = _pillow()
    try:
        with image_module.open(path) as img:
            width, height = img.size
            if verify:
                img.verify()
    except Exception as exc:  # any decoder failure means the same thing to the user
        raise ImageReadError(f"unreadable or corrupt image ({type(exc).__name__})") from None
    return int(width), int(height)


class SizeRange:
    """The smallest and largest width and height seen, for the statistics."""

    def __init__(self) -> None:
        self.min_w = self.min_h = self.max_w = self.max_h = 0
        self.seen = 0

    def add(self, width: int, height: int) -> None:
        if self.seen == 0:
            self.min_w, self.min_h, self.max_w, self.max_h = width, height, width, height
        else:
            self.min_w, self.min_h = min(self.min_w, width), min(self.min_h, height)
            self.max_w, self.max_h = max(self.max_w, width), max(self.max_h, height)
        self.seen += 1

    def to_dict(self) -> dict[str, list[int]] | None:
        if self.seen == 0:
            return None
        return {"min": [self.min_w, self.min_h], "max": [self.max_w, self.max_h]}
