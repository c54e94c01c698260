"""``coco``: COCO "instances" JSON files (detection; segmentation when annotations have masks).

Files are ``annotations/*.json``, or ``*.json`` at the root when ``annotations/`` has none. With
several files, each name says its split (``instances_train.json``, ``instances_val2017.json``); a
single file is the whole dataset.
An image's ``file_name`` is looked up in ``images/<split>/``, ``images/``, ``<split>/`` and the
root, in that order. Category ids become contiguous labels ``0..K-1`` in id order.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .data import DetectionData, DetectionImage, Mask
from .detection import add_box, box_problem, clipped, explicit_split, number, stats
from .files import clean_relative, entries, folder, inside, plural, rel, split_of_name, warn_unused
from .images import ImageReadError, SizeRange, image_size
from .report import Report

FORMAT = "coco"
TASKS = ("detection", "segmentation")
REQUIRED = ("images", "annotations", "categories")


def annotation_files(root: Path) -> list[Path]:
    """The COCO files: ``annotations/*.json`` when there are any, else ``*.json`` at the root.

    Preferring ``annotations/`` keeps a stray root ``.json`` (a dataset card, a config) out of the
    split rules; it is reported as an ignored file instead.
    """
    for top in (root / "annotations", root):
        if top.is_dir():
            found = [p for p in entries(top) if p.is_file() and p.suffix.lower() == ".json"]
            if found:
                return found
    return []


def _mentions(path: Path, token: bytes, chunk: int = 1 << 20) -> bool:
    """Whether ``token`` occurs in the file, read in chunks (COCO files can be gigabytes)."""
    tail = b""
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            if token in tail + block:
                return True
            tail = block[-len(token) :]
    return False


def looks_like_coco(root: Path) -> bool:
    """Any ``annotations/*.json``, or a root ``.json`` that mentions ``"images"`` or ``"annotations"``.

    The key check keeps a metadata file next to ``train.jsonl`` from making a dataset COCO.
    """
    for path in annotation_files(root):
        if path.parent != root or _mentions(path, b'"images"') or _mentions(path, b'"annotations"'):
            return True
    return False


def load_json(path: Path, name: str, report: Report) -> Any:
    """The parsed document, or None after reporting where the JSON breaks."""
    try:
        return json.loads(path.read_bytes())
    except json.JSONDecodeError as exc:
        report.error("json.invalid", name, f"not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})", exc.lineno)
    except UnicodeDecodeError:
        report.error("json.invalid", name, "not valid JSON: the file is not UTF-8 text")
    return None


class _Reader:
    """One pass over every annotation file: checks and the loader's data come from the same code."""

    def __init__(self, root: Path, report: Report, verify: bool) -> None:
        self.root, self.report, self.verify = root, report, verify
        self.images: list[DetectionImage] = []
        self.split_of: list[str] = []
        self.referenced: set[str] = set()
        self.sizes = SizeRange()
        self.names: dict[int, str] = {}
        self.origin: dict[int, str] = {}
        self.explicit = False

    def run(self) -> DetectionData:
        files = annotation_files(self.root)
        if not files:
            self.report.error("coco.no_files", ".", "no COCO annotation file: expected annotations/*.json or a .json file at the root")
        self.explicit = len(files) > 1
        docs = self._documents(files)
        for name, _, doc in docs:
            self._categories(name, doc["categories"])
        if docs and not self.names:
            self.report.error("coco.no_categories", docs[0][0], "no categories: detection needs at least one in 'categories'")
        labels = {cid: i for i, cid in enumerate(sorted(self.names))}
        for name, split, doc in docs:
            ids = self._images(name, split, doc["images"])
            self._annotations(name, doc["annotations"], ids, labels)
        warn_unused(self.report, self.root, self.referenced | {rel(self.root, p) for p in files}, "any annotation file")
        data = DetectionData(
            categories=[self.names[cid] for cid in sorted(self.names)],
            images=self.images,
            explicit_split=explicit_split(self.split_of, self.explicit),
            has_masks=any(m is not None for img in self.images for m in img.masks),
        )
        self.report.stats = stats(data, self.split_of, self.sizes)
        return data

    def _documents(self, files: list[Path]) -> list[tuple[str, str | None, dict[str, Any]]]:
        """(name, split, document) of every file that parses and has the three lists."""
        docs: list[tuple[str, str | None, dict[str, Any]]] = []
        for path in files:
            name = rel(self.root, path)
            split = split_of_name(path.stem)
            if len(files) > 1 and split is None:
                self.report.error(
                    "coco.no_split",
                    name,
                    "cannot tell this file's split: with several annotation files, each name must contain train, val or test",
                )
                continue
            doc = load_json(path, name, self.report)
            if doc is not None and self._structure(name, doc):
                docs.append((name, split, doc))
        if len(files) > 1 and "train" not in {split_of_name(p.stem) for p in files}:
            self.report.error(
                "split.no_train",
                folder(self.root, files[0].parent),
                "explicit splits need a train split: name one annotation file with train in it",
            )
        return docs

    def _structure(self, name: str, doc: Any) -> bool:
        if not isinstance(doc, dict):
            self.report.error("coco.not_object", name, "a COCO file must be a JSON object with 'images', 'annotations' and 'categories'")
            return False
        ok = True
        for key in REQUIRED:
            if key not in doc:
                self.report.error(
                    "coco.missing_key", name, f"missing '{key}': a COCO file needs 'images', 'annotations' and 'categories' lists"
                )
                ok = False
            elif not isinstance(doc[key], list):
                self.report.error("coco.missing_key", name, f"'{key}' must be a list")
                ok = False
        return ok

    def _categories(self, name: str, categories: list[Any]) -> None:
        seen: set[int] = set()
        for i, cat in enumerate(categories):
            cid = cat.get("id") if isinstance(cat, dict) else None
            label = cat.get("name") if isinstance(cat, dict) else None
            if not isinstance(cid, int) or isinstance(cid, bool) or not isinstance(label, str) or not label:
                self.report.error(
                    "coco.bad_category", name, f"category at position {i} needs an integer 'id' and a non-empty string 'name'"
                )
                continue
            if cid in seen:
                self.report.error("coco.duplicate_category", name, f"duplicate category id {cid}")
                continue
            seen.add(cid)
            if cid in self.names and self.names[cid] != label:
                self.report.error(
                    "coco.category_conflict",
                    name,
                    f"category id {cid} is named {label!r} here but {self.names[cid]!r} in {self.origin[cid]}",
                )
                continue
            self.names.setdefault(cid, label)
            self.origin.setdefault(cid, name)

    def _images(self, name: str, split: str | None, images: list[Any]) -> dict[int, int]:
        """Image id → index into ``self.images`` (-1: known but unusable, already reported)."""
        if not images:
            self.report.error("coco.no_images", name, "'images' is empty: list the images this file annotates")
        ids: dict[int, int] = {}
        for i, entry in enumerate(images):
            iid = entry.get("id") if isinstance(entry, dict) else None
            file_name = entry.get("file_name") if isinstance(entry, dict) else None
            if not isinstance(iid, int) or isinstance(iid, bool) or not isinstance(file_name, str):
                self.report.error("coco.bad_image", name, f"image at position {i} needs an integer 'id' and a string 'file_name'")
                continue
            if iid in ids:
                self.report.error("coco.duplicate_image", name, f"duplicate image id {iid}")
                continue
            ids[iid] = -1
            path = self._resolve(name, split, iid, file_name)
            size = self._size(name, iid, entry, path) if path is not None else None
            if path is not None and size is not None:
                ids[iid] = len(self.images)
                self.images.append(DetectionImage(path, size[0], size[1]))
                self.split_of.append(split if self.explicit and split else "all")
        return ids

    def _resolve(self, name: str, split: str | None, iid: int, file_name: str) -> str | None:
        clean = clean_relative(file_name)
        if clean is None:
            self.report.error("path.escapes", name, f"image {iid}: path {file_name!r} escapes the dataset root")
            return None
        prefixes = [f"images/{split}/", "images/", f"{split}/", ""] if split else ["images/", ""]
        candidates = [prefix + clean for prefix in prefixes]
        for candidate in candidates:
            if (self.root / candidate).is_file():
                if inside(self.root, candidate) is None:
                    self.report.error("path.escapes", name, f"image {iid}: {candidate!r} links outside the dataset root")
                    return None
                self.referenced.add(candidate)
                return candidate
        self.report.error("coco.missing_image", name, f"image {iid}: file {file_name!r} not found (looked for {', '.join(candidates)})")
        return None

    def _size(self, name: str, iid: int, entry: dict[str, Any], path: str) -> tuple[int, int] | None:
        """The image's size: the JSON's, checked against the file when verifying (or when absent)."""
        width, height = entry.get("width"), entry.get("height")
        declared = all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (width, height))
        if not declared and (width is not None or height is not None):
            self.report.error("coco.bad_size", name, f"image {iid}: 'width' and 'height' must be positive integers")
            return None
        size: tuple[int, int] = (width, height) if declared else (0, 0)  # type: ignore[assignment]
        if self.verify or not declared:
            try:
                actual = image_size(self.root / path, verify=self.verify)
            except ImageReadError as exc:
                self.report.error("image.unreadable", path, str(exc))
                return None
            if declared and actual != size:
                self.report.error(
                    "coco.size_mismatch", name, f"image {iid}: the JSON says {width}x{height} but {path} is {actual[0]}x{actual[1]}"
                )
                return None
            size = actual
        self.sizes.add(*size)
        return size

    def _annotations(self, name: str, annotations: list[Any], ids: dict[int, int], labels: dict[int, int]) -> None:
        seen: set[int] = set()
        for i, ann in enumerate(annotations):
            if not isinstance(ann, dict):
                self.report.error("coco.bad_annotation", name, f"annotation at position {i} must be an object")
                continue
            aid = ann.get("id")
            label = f"annotation {aid}" if isinstance(aid, int) and not isinstance(aid, bool) else f"annotation at position {i}"
            if isinstance(aid, int) and not isinstance(aid, bool):
                if aid in seen:
                    self.report.warn("coco.duplicate_annotation", name, f"duplicate annotation id {aid}")
                seen.add(aid)
            self._annotation(name, label, ann, ids, labels)
        unannotated = sum(1 for index in ids.values() if index >= 0 and not self.images[index].boxes)
        if unannotated:
            verb = "has" if unannotated == 1 else "have"
            self.report.warn("coco.unannotated", name, f"{plural(unannotated, 'image', 'images')} {verb} no annotations")

    def _annotation(self, name: str, label: str, ann: dict[str, Any], ids: dict[int, int], labels: dict[int, int]) -> None:
        iid, cid, bbox = ann.get("image_id"), ann.get("category_id"), ann.get("bbox")
        if not isinstance(iid, int) or not isinstance(cid, int) or isinstance(iid, bool) or isinstance(cid, bool):
            self.report.error("coco.bad_annotation", name, f"{label}: needs integer 'image_id' and 'category_id'")
            return
        if iid not in ids:
            self.report.error("coco.unknown_image", name, f"{label}: image id {iid} is not in 'images'")
            return
        if cid not in labels:
            self.report.error("coco.unknown_category", name, f"{label}: category id {cid} is not in 'categories'")
            return
        if not isinstance(bbox, list) or len(bbox) != 4 or not all(number(v) for v in bbox):
            self.report.error("bbox.malformed", name, f"{label}: bbox must be [x, y, width, height] numbers")
            return
        if ids[iid] < 0:
            return  # the image itself is unusable and already reported
        image = self.images[ids[iid]]
        x, y, w, h = (float(v) for v in bbox)
        problem = box_problem(x, y, w, h, image.width, image.height, f"image {iid}")
        if problem is not None:
            self.report.error(problem[0], name, f"{label}: {problem[1]}")
            return
        ok, mask = self._mask(name, label, ann.get("segmentation"), image, iid)
        if ok:
            add_box(image, clipped(labels[cid], x, y, w, h, image.width, image.height), mask, ann.get("iscrowd") in (1, True))

    def _mask(self, name: str, label: str, seg: Any, image: DetectionImage, iid: int) -> tuple[bool, Mask | None]:
        """(usable, mask): polygons or RLE as given, None without a mask."""
        if seg is None or seg == []:
            return True, None
        if isinstance(seg, list) and all(isinstance(p, list) and all(number(v) for v in p) and len(p) % 2 == 0 for p in seg):
            if any(len(p) < 6 for p in seg):
                self.report.error("seg.few_points", name, f"{label}: polygon with fewer than 3 points")
                return False, None
            return True, [[float(v) for v in p] for p in seg]
        if isinstance(seg, dict) and _is_rle(seg):
            if list(seg["size"]) != [image.height, image.width]:
                self.report.error(
                    "seg.rle_size",
                    name,
                    f"{label}: RLE size {seg['size']} does not match image {iid} (height {image.height}, width {image.width})",
                )
                return False, None
            return True, {"size": list(seg["size"]), "counts": seg["counts"]}
        self.report.error(
            "seg.malformed",
            name,
            f"{label}: segmentation must be a list of polygons [x1, y1, x2, y2, …] or RLE {{'size': [height, width], 'counts': …}}",
        )
        return False, None


def _is_rle(seg: dict[str, Any]) -> bool:
    size, counts = seg.get("size"), seg.get("counts")
    size_ok = isinstance(size, list) and len(size) == 2 and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in size)
    counts_ok = isinstance(counts, str) or (
        isinstance(counts, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in counts)
    )
    return size_ok and counts_ok


def read(root: Path, report: Report, *, verify_images: bool = True) -> DetectionData:
    """Check every COCO file (and, with ``verify_images``, decode every image) and build the data."""
    return _Reader(root, report, verify_images).run()
