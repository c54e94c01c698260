"""Small generated datasets, so a fresh install can train something with no download."""

from __future__ import annotations

import random
from pathlib import Path

from PIL import Image, ImageDraw

SHAPES = ("circle", "square", "triangle")
COLORS = {"circle": (220, 60, 50), "square": (50, 170, 70), "triangle": (60, 90, 220)}


def _draw(shape: str, size: int, rng: random.Random) -> Image.Image:
    background = tuple(rng.randint(90, 160) for _ in range(3))
    img = Image.new("RGB", (size, size), background)  # type: ignore[arg-type]
    px = img.load()
    for _ in range(size * size // 8):  # speckle noise
        x, y = rng.randrange(size), rng.randrange(size)
        px[x, y] = tuple(max(0, min(255, c + rng.randint(-40, 40))) for c in background)  # type: ignore[index]
    draw = ImageDraw.Draw(img)
    r = rng.randint(size // 5, size // 3)
    cx, cy = rng.randint(r, size - r), rng.randint(r, size - r)
    color = tuple(max(0, min(255, c + rng.randint(-30, 30))) for c in COLORS[shape])
    if shape == "circle":
        draw.ellipse((cx - r, cy - r, cx + r, cy + r), fill=color)  # type: ignore[arg-type]
    elif shape == "square":
        draw.rectangle((cx - r, cy - r, cx + r, cy + r), fill=color)  # type: ignore[arg-type]
    else:
        draw.polygon([(cx, cy - r), (cx - r, cy + r), (cx + r, cy + r)], fill=color)  # type: ignore[arg-type]
    return img


def shapes(dest: Path, *, per_class: int = 24, size: int = 48, seed: int = 0, classes: tuple[str, ...] = SHAPES) -> Path:
    """An ImageNet-style folder: ``dest/<shape>/<n>.png`` with coloured shapes on noise."""
    rng = random.Random(seed)
    for shape in classes:
        folder = dest / shape
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            _draw(shape, size, rng).save(folder / f"{shape}_{i:04d}.png")
    return dest
