"""Walking a dataset folder and naming its files the way a user sees them.

Hidden files (``.DS_Store``, ``.git``) and the ``__MACOSX`` folders that macOS puts into archives
are never data: skipping them here means no format reports them as problems.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterator
from pathlib import Path

from .report import Report

SPLIT_NAMES = ("train", "val", "test")
JUNK_NAMES = frozenset({"__MACOSX", "Thumbs.db", "desktop.ini"})


def is_junk(name: str) -> bool:
    return name.startswith(".") or name in JUNK_NAMES


def rel(root: Path, path: Path) -> str:
    """The dataset-relative, forward-slash name of ``path`` (``.`` for the root itself)."""
    return path.relative_to(root).as_posix() or "."


def folder(root: Path, path: Path) -> str:
    """A folder's name in problems: ``cat/`` (the trailing slash says it is a folder)."""
    name = rel(root, path)
    return "." if name == "." else name + "/"


def entries(path: Path) -> list[Path]:
    """The non-hidden entries of a folder, sorted by name."""
    return sorted(p for p in path.iterdir() if not is_junk(p.name))


def subdirs(path: Path) -> list[Path]:
    return [p for p in entries(path) if p.is_dir()]


def walk(top: Path) -> Iterator[Path]:
    """Every non-hidden file under ``top``, in path order (``a/x.png`` before ``b.png``)."""
    try:
        found = sorted(os.scandir(top), key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        return
    for entry in found:
        if is_junk(entry.name):
            continue
        if entry.is_dir():
            yield from walk(Path(entry.path))
        elif entry.is_file():
            yield Path(entry.path)


def clean_relative(name: str) -> str | None:
    """A user-given relative path, normalised (``a/./b`` → ``a/b``, ``\\`` → ``/``), or None when it
    is absolute or climbs out with ``..``: paths in annotation files must never reach outside."""
    name = name.replace("\\", "/")
    if not name or name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        return None
    norm = posixpath.normpath(name)
    if norm in (".", "..") or norm.startswith("../"):
        return None
    return norm


def inside(root: Path, name: str) -> Path | None:
    """``root/name`` when it stays inside ``root`` — also after following links — else None."""
    clean = clean_relative(name)
    if clean is None:
        return None
    base = root.resolve()
    return root / clean if base in (base / clean).resolve().parents else None


def split_of_name(stem: str) -> str | None:
    """``instances_train2017`` → ``train``; ``val``/``valid``/``validation`` → ``val``; else None."""
    tokens = {t for t in "".join(c if c.isalpha() else " " for c in stem.lower()).split()}
    for split, aliases in (("train", {"train"}), ("val", {"val", "valid", "validation"}), ("test", {"test"})):
        if tokens & aliases:
            return split
    return None


def plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def warn_unused(report: Report, root: Path, used: set[str], listed_in: str) -> None:
    """One counted warning for image files nothing refers to, one for other files: both are ignored.

    ``listed_in`` names what would refer to them (``any annotation file``, ``any record``).
    """
    from .images import is_image

    images: list[str] = []
    others: list[str] = []
    for path in walk(root):
        name = rel(root, path)
        if name not in used:
            (images if is_image(path) else others).append(name)
    if images:
        what = plural(len(images), "image file is", "image files are")
        report.warn("files.unreferenced", ".", f"{what} not listed in {listed_in} and ignored (e.g. {', '.join(images[:3])})")
    if others:
        what = plural(len(others), "file is", "files are")
        report.warn("files.ignored", ".", f"{what} ignored (e.g. {', '.join(others[:3])})")
