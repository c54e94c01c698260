"""The train/val split: the same inputs give the same split on any machine, in any Python.

``random.Random(seed)`` is specified to produce the same sequence everywhere, and ``shuffle`` on it
is deterministic, so a job re-run (or resumed on another machine) trains and validates on exactly
the same items. Explicit splits in the data always win over a ratio.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

Label = int | str


@dataclass(frozen=True)
class Split:
    train: list[int]
    val: list[int]
    explicit: bool
    """True when the data's own splits were used, False when the ratio cut them."""


def _cut(size: int, ratio: float) -> int:
    """How many of ``size`` items train: ``round(size * ratio)``, leaving one on each side when it
    can; a lone item trains (a class seen only in validation cannot be learnt)."""
    return min(max(round(size * ratio), 1), size - 1) if size >= 2 else size


def _label_key(label: Label) -> tuple[int, int, str]:
    """Sort labels of either type in a fixed order (ints numerically, then strings)."""
    return (0, label, "") if isinstance(label, int) else (1, 0, label)


def _random_split(indices: Sequence[int], ratio: float, seed: int, labels: Sequence[Label] | None) -> tuple[list[int], list[int]]:
    rng = random.Random(seed)
    groups: dict[Label, list[int]] = {}
    if labels is None:
        groups[0] = list(indices)
    else:
        for i in indices:
            groups.setdefault(labels[i], []).append(i)
    train: list[int] = []
    val: list[int] = []
    for label in sorted(groups, key=_label_key):
        items = groups[label]
        rng.shuffle(items)
        cut = _cut(len(items), ratio)
        train.extend(items[:cut])
        val.extend(items[cut:])
    return sorted(train), sorted(val)


def split_indices(
    n: int,
    ratio: float,
    seed: int,
    *,
    explicit: Mapping[str, Sequence[int]] | None = None,
    stratify: Sequence[Label] | None = None,
) -> Split:
    """Split ``range(n)`` into train and val.

    * ``explicit`` (a loader's ``explicit_split``): its ``train`` and ``val`` are used as they are;
      without ``val``, ``test`` validates. With ``train`` alone, ``train`` is cut by ``ratio``.
    * otherwise ``ratio`` of the items train (``0 < ratio < 1``), shuffled with ``seed``.
    * ``stratify`` (one label per item) cuts each class on its own, so every class with at least
      two items has at least one on each side.
    """
    if not 0 < ratio < 1:
        raise ValueError(f"ratio must be between 0 and 1 (exclusive), got {ratio}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if stratify is not None and len(stratify) != n:
        raise ValueError(f"stratify has {len(stratify)} labels for {n} items")
    if explicit:
        if "train" not in explicit:
            raise ValueError("explicit splits need 'train'")
        _check_range(explicit, n)
        held_out = explicit.get("val") or explicit.get("test")
        if held_out:
            return Split(list(explicit["train"]), list(held_out), explicit=True)
        train, val = _random_split(explicit["train"], ratio, seed, stratify)
        return Split(train, val, explicit=False)
    train, val = _random_split(range(n), ratio, seed, stratify)
    return Split(train, val, explicit=False)


def _check_range(explicit: Mapping[str, Sequence[int]], n: int) -> None:
    for name, indices in explicit.items():
        if any(not 0 <= i < n for i in indices):
            raise ValueError(f"explicit split {name!r} has indices outside 0..{n - 1}")
