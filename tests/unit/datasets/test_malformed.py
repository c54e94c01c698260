"""Every kind of broken input is reported with the file, the line or annotation, and a clear message.

Each case starts from a valid dataset of its format and breaks one thing.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from forge_sdk.datasets import validate

from .helpers import (
    COCO_FILE,
    build_coco,
    build_imagenet,
    build_sft,
    build_vlm,
    build_yolo,
    coco_doc,
    messages,
    png,
    vlm_record,
    write,
    write_json,
    write_jsonl,
)


@dataclass(frozen=True)
class Case:
    id: str
    build: Callable[[Path], object]
    file: str
    message: str
    line: int | None = None
    severity: str = "error"
    declared: str | None = None


def coco(mutate: Callable[[dict[str, Any]], object]) -> Callable[[Path], object]:
    return lambda root: build_coco(root, mutate)


def yolo_label(text: str, name: str = "train/a.txt") -> Callable[[Path], object]:
    return lambda root: build_yolo(root, labels={name: text})


def yolo_yaml(text: str | None) -> Callable[[Path], object]:
    return lambda root: build_yolo(root, yaml=text)


def sft(*lines: Any) -> Callable[[Path], object]:
    return lambda root: build_sft(root, extra=list(lines))


def vlm(*lines: Any) -> Callable[[Path], object]:
    return lambda root: build_vlm(root, extra=list(lines))


def then(*steps: Callable[[Path], object]) -> Callable[[Path], object]:
    def run(root: Path) -> None:
        for step in steps:
            step(root)

    return run


def append(path: Path, data: bytes) -> None:
    with path.open("ab") as fh:
        fh.write(data)


def set_ann(**fields: Any) -> Callable[[dict[str, Any]], object]:
    return lambda doc: doc["annotations"][0].update(fields)


CASES = [
    # ---- imagenet-folder ------------------------------------------------------------------------
    Case(
        "imagenet-corrupt-image",
        then(build_imagenet, lambda r: write(r / "cat" / "broken.png", b"not a png at all")),
        "cat/broken.png",
        "unreadable or corrupt image (UnidentifiedImageError)",
    ),
    Case("imagenet-empty-class", then(build_imagenet, lambda r: (r / "fox").mkdir()), "fox/", "empty class folder: it holds no images"),
    Case("imagenet-one-class", lambda r: png(r / "cat" / "1.png"), ".", "only one class: classification needs at least two"),
    Case(
        "imagenet-splits-without-train",
        then(lambda r: png(r / "val" / "a" / "1.png"), lambda r: png(r / "val" / "b" / "1.png")),
        "train/",
        "explicit splits need a train/ folder",
    ),
    Case(
        "imagenet-splits-next-to-classes",
        then(build_imagenet, lambda r: png(r / "train" / "cat" / "1.png")),
        ".",
        "split folders (train/) next to class folders (cat/, dog/)",
    ),
    Case(
        "imagenet-loose-file",
        then(build_imagenet, lambda r: write(r / "notes.txt", "x")),
        "notes.txt",
        "file outside any class folder is ignored",
        severity="warning",
    ),
    # ---- coco -------------------------------------------------------------------------------------
    Case(
        "coco-invalid-json",
        lambda r: write(r / COCO_FILE, '{"images": [\n  {"id": 1,,}\n]}'),
        COCO_FILE,
        "not valid JSON: Expecting",
        line=2,
    ),
    Case("coco-not-an-object", lambda r: write_json(r / COCO_FILE, [coco_doc()]), COCO_FILE, "a COCO file must be a JSON object"),
    Case("coco-no-images", coco(lambda d: d.pop("images")), COCO_FILE, "missing 'images': a COCO file needs"),
    Case("coco-no-annotations", coco(lambda d: d.pop("annotations")), COCO_FILE, "missing 'annotations'"),
    Case("coco-no-categories", coco(lambda d: d.pop("categories")), COCO_FILE, "missing 'categories'"),
    Case("coco-categories-not-a-list", coco(lambda d: d.update(categories={})), COCO_FILE, "'categories' must be a list"),
    Case(
        "coco-missing-image",
        coco(lambda d: d["images"][1].update(file_name="missing.png")),
        COCO_FILE,
        "image 2: file 'missing.png' not found (looked for images/missing.png, missing.png)",
    ),
    Case(
        "coco-bbox-outside",
        coco(set_ann(bbox=[50, 40, 20, 10])),
        COCO_FILE,
        "annotation 10: bbox [50, 40, 20, 10] lies outside image 1 (64x48)",
    ),
    Case(
        "coco-bbox-zero-width", coco(set_ann(bbox=[1, 1, 0, 5])), COCO_FILE, "annotation 10: bbox has non-positive width or height (0 x 5)"
    ),
    Case("coco-bbox-negative-height", coco(set_ann(bbox=[1, 1, 5, -2])), COCO_FILE, "annotation 10: bbox has non-positive width or height"),
    Case(
        "coco-bbox-not-numbers", coco(set_ann(bbox=[1, "2", 3, 4])), COCO_FILE, "annotation 10: bbox must be [x, y, width, height] numbers"
    ),
    Case("coco-unknown-category", coco(set_ann(category_id=99)), COCO_FILE, "annotation 10: category id 99 is not in 'categories'"),
    Case("coco-unknown-image", coco(set_ann(image_id=42)), COCO_FILE, "annotation 10: image id 42 is not in 'images'"),
    Case(
        "coco-duplicate-image-id",
        coco(lambda d: d["images"].append({"id": 1, "file_name": "c.png", "width": 16, "height": 16})),
        COCO_FILE,
        "duplicate image id 1",
    ),
    Case(
        "coco-duplicate-category-id",
        coco(lambda d: d["categories"].append({"id": 3, "name": "lion"})),
        COCO_FILE,
        "duplicate category id 3",
    ),
    Case(
        "coco-bad-category",
        coco(lambda d: d["categories"].append({"id": "x", "name": "lion"})),
        COCO_FILE,
        "category at position 2 needs an integer 'id' and a non-empty string 'name'",
    ),
    Case(
        "coco-path-escapes",
        coco(lambda d: d["images"][0].update(file_name="../outside.png")),
        COCO_FILE,
        "image 1: path '../outside.png' escapes the dataset root",
    ),
    Case(
        "coco-polygon-too-short",
        coco(set_ann(segmentation=[[1, 1, 5, 5]])),
        COCO_FILE,
        "annotation 10: polygon with fewer than 3 points",
    ),
    Case(
        "coco-segmentation-malformed",
        coco(set_ann(segmentation="mask.png")),
        COCO_FILE,
        "annotation 10: segmentation must be a list of polygons",
    ),
    Case(
        "coco-rle-size",
        coco(set_ann(segmentation={"size": [10, 10], "counts": "x"})),
        COCO_FILE,
        "annotation 10: RLE size [10, 10] does not match image 1 (height 48, width 64)",
    ),
    Case(
        "coco-size-mismatch",
        coco(lambda d: d["images"][0].update(width=640)),
        COCO_FILE,
        "image 1: the JSON says 640x48 but images/a.png is 64x48",
    ),
    Case(
        "coco-corrupt-image",
        then(build_coco, lambda r: write(r / "images" / "b.png", b"\x89PNG broken")),
        "images/b.png",
        "unreadable or corrupt image",
    ),
    Case(
        "coco-split-file-without-split",
        then(build_coco, lambda r: write_json(r / "annotations" / "extra.json", coco_doc())),
        "annotations/extra.json",
        "cannot tell this file's split",
    ),
    Case("coco-unannotated-images", build_coco, COCO_FILE, "1 image has no annotations", severity="warning"),
    Case(
        "coco-unreferenced-images",
        then(build_coco, lambda r: png(r / "images" / "zz.png")),
        ".",
        "1 image file is not listed in any annotation file and ignored (e.g. images/zz.png)",
        severity="warning",
    ),
    # ---- yolo -------------------------------------------------------------------------------------
    Case(
        "yolo-label-without-image",
        then(build_yolo, lambda r: write(r / "labels" / "train" / "ghost.txt", "0 0.5 0.5 0.1 0.1\n")),
        "labels/train/ghost.txt",
        "label file has no image: expected images/train/ghost.jpg",
    ),
    Case(
        "yolo-class-out-of-range",
        yolo_label("0 0.5 0.5 0.1 0.1\n5 0.5 0.5 0.1 0.1\n"),
        "labels/train/a.txt",
        "class index 5 is out of range: 2 classes are named (0–1)",
        line=2,
    ),
    Case(
        "yolo-class-not-integer", yolo_label("cat 0.5 0.5 0.1 0.1\n"), "labels/train/a.txt", "class index 'cat' is not an integer", line=1
    ),
    Case("yolo-class-float", yolo_label("\n1.0 0.5 0.5 0.1 0.1\n"), "labels/train/a.txt", "class index '1.0' is not an integer", line=2),
    Case(
        "yolo-wrong-count",
        yolo_label("0 0.5 0.5 0.1\n"),
        "labels/train/a.txt",
        "wrong number of values: expected 'class cx cy w h' (5)",
        line=1,
    ),
    Case("yolo-odd-polygon", yolo_label("0 0.1 0.1 0.2 0.2 0.3\n"), "labels/train/a.txt", "wrong number of values", line=1),
    Case("yolo-not-a-number", yolo_label("0 0.5 abc 0.1 0.1\n"), "labels/train/a.txt", "value 'abc' is not a number", line=1),
    Case("yolo-nan", yolo_label("0 0.5 nan 0.1 0.1\n"), "labels/train/a.txt", "value 'nan' is not a number", line=1),
    Case(
        "yolo-not-normalised",
        yolo_label("0 0.5 0.5 0.1 0.1\n0 50 25 10 10\n"),
        "labels/train/a.txt",
        "coordinates must be normalised to [0, 1]; found 50",
        line=2,
    ),
    Case("yolo-polygon-one-point", yolo_label("0 0.5 0.5\n"), "labels/train/a.txt", "polygon with fewer than 3 points", line=1),
    Case(
        "yolo-box-outside",
        yolo_label("0 0.95 0.5 0.2 0.2\n"),
        "labels/train/a.txt",
        "bbox [85, 20, 20, 10] lies outside the image (100x50)",
        line=1,
    ),
    Case(
        "yolo-box-zero-size",
        yolo_label("0 0.5 0.5 0 0.2\n"),
        "labels/train/a.txt",
        "bbox has non-positive width or height (0 x 0.2)",
        line=1,
    ),
    Case(
        "yolo-no-class-list",
        yolo_yaml(None),
        ".",
        "no class list: add data.yaml (names: [cat, dog]) or classes.txt (one class name per line)",
    ),
    Case("yolo-yaml-invalid", yolo_yaml("nc: 2\nnames: [cat, dog]]\n"), "data.yaml", "not valid YAML", line=2),
    Case("yolo-yaml-no-names", yolo_yaml("nc: 2\n"), "data.yaml", "data.yaml has no 'names': list the class names"),
    Case(
        "yolo-yaml-names-type", yolo_yaml("names: cat\n"), "data.yaml", "'names' must be a list of class names or a mapping of index: name"
    ),
    Case("yolo-yaml-names-gap", yolo_yaml("names: {0: cat, 2: dog}\n"), "data.yaml", "'names' indices must run 0..n-1 without gaps"),
    Case("yolo-yaml-nc-mismatch", yolo_yaml("nc: 3\nnames: [cat, dog]\n"), "data.yaml", "'nc' is 3 but 'names' lists 2 classes"),
    Case(
        "yolo-classes-txt-gap",
        then(lambda r: build_yolo(r, yaml=None), lambda r: write(r / "classes.txt", "cat\n\ndog\n")),
        "classes.txt",
        "empty class name",
        line=2,
    ),
    Case(
        "yolo-corrupt-image",
        then(build_yolo, lambda r: write(r / "images" / "val" / "b.png", b"GIF89a nonsense")),
        "images/val/b.png",
        "unreadable or corrupt image",
    ),
    Case(
        "yolo-splits-without-train",
        then(build_yolo, lambda r: os.rename(r / "images" / "train", r / "images" / "test")),
        "images/train/",
        "explicit splits need an images/train/ folder",
    ),
    Case(
        "yolo-unlabelled-images",
        then(build_yolo, lambda r: png(r / "images" / "val" / "c.png"), lambda r: write(r / "labels" / "val" / "b.txt", "\n")),
        "images/",
        "2 images have no labels",
        severity="warning",
    ),
    # ---- llm-sft ----------------------------------------------------------------------------------
    Case("sft-invalid-json", sft('{"messages": [}'), "data.jsonl", "not valid JSON: Expecting value at column 15", line=3),
    Case(
        "sft-not-utf8",
        then(build_sft, lambda r: append(r / "data.jsonl", b'{"messages": "\xff"}\n')),
        "data.jsonl",
        "not valid JSON: the line is not UTF-8 text",
        line=3,
    ),
    Case("sft-not-an-object", sft("[1, 2]"), "data.jsonl", "a record must be a JSON object", line=3),
    Case("sft-no-turns-key", sft({"text": "hello"}), "data.jsonl", "record has neither 'messages' nor 'conversations' (sharegpt)", line=3),
    Case(
        "sft-both-keys", sft({"messages": [], "conversations": []}), "data.jsonl", "record has both 'messages' and 'conversations'", line=3
    ),
    Case("sft-empty-conversation", sft({"conversations": []}), "data.jsonl", "empty conversation: 'conversations' has no turns", line=3),
    Case(
        "sft-no-assistant",
        sft(messages(("system", "x"), ("user", "only a question"))),
        "data.jsonl",
        "conversation has no assistant turn: there is nothing to learn from",
        line=3,
    ),
    Case("sft-empty-content", sft(messages(("user", "q"), ("assistant", "  "))), "data.jsonl", "turn 2: empty content", line=3),
    Case(
        "sft-unknown-role",
        sft(messages(("user", "q"), ("bot", "a"))),
        "data.jsonl",
        "turn 2: unknown role 'bot'; use system, user or assistant",
        line=3,
    ),
    Case(
        "sft-unknown-sharegpt-role",
        sft({"conversations": [{"from": "person", "value": "q"}, {"from": "gpt", "value": "a"}]}),
        "data.jsonl",
        "turn 1: unknown role 'person'; use human, gpt or system",
        line=3,
    ),
    Case(
        "sft-content-not-string",
        sft({"messages": [{"role": "user", "content": ["q"]}, {"role": "assistant", "content": "a"}]}),
        "data.jsonl",
        "turn 1: 'content' must be a string",
        line=3,
    ),
    Case(
        "sft-turn-not-object",
        sft({"conversations": ["hi", {"from": "gpt", "value": "a"}]}),
        "data.jsonl",
        "turn 1 must be an object with 'from' and 'value'",
        line=3,
    ),
    Case(
        "sft-split-mix",
        then(build_sft, lambda r: write_jsonl(r / "val.jsonl", [messages(("user", "q"), ("assistant", "a"))])),
        "data.jsonl",
        "cannot tell this file's split",
    ),
    # ---- vlm-sft ----------------------------------------------------------------------------------
    Case("vlm-missing-image", vlm(vlm_record(["images/nope.png"])), "data.jsonl", "image 'images/nope.png' not found", line=4),
    Case(
        "vlm-path-escapes", vlm(vlm_record(["../secret.png"])), "data.jsonl", "image path '../secret.png' escapes the dataset root", line=4
    ),
    Case("vlm-absolute-path", vlm(vlm_record(["/etc/passwd"])), "data.jsonl", "image path '/etc/passwd' escapes the dataset root", line=4),
    Case(
        "vlm-placeholder-count",
        vlm(vlm_record(["images/x.png", "images/y.png"], "<image> compare")),
        "data.jsonl",
        "1 <image> placeholder(s) in the turns but 2 image(s) in 'images'",
        line=4,
    ),
    Case(
        "vlm-placeholder-without-image",
        vlm(messages(("user", "<image> what?"), ("assistant", "no idea"))),
        "data.jsonl",
        "1 <image> placeholder(s) in the turns but 0 image(s) in 'images'",
        line=4,
    ),
    Case("vlm-images-not-a-list", vlm({**vlm_record([]), "images": "x.png"}), "data.jsonl", "'images' must be a list of paths", line=4),
    Case(
        "vlm-corrupt-image",
        then(build_vlm, lambda r: write(r / "images" / "y.png", b"broken")),
        "images/y.png",
        "unreadable or corrupt image (UnidentifiedImageError)",
    ),
    Case(
        "vlm-declared-without-images",
        build_sft,
        ".",
        "no record has images: a vlm-sft dataset needs 'images' in its records",
        declared="vlm-sft",
    ),
    Case(
        "vlm-unreferenced-image",
        then(build_vlm, lambda r: png(r / "images" / "unused.png")),
        ".",
        "1 image file is not listed in any record and ignored (e.g. images/unused.png)",
        severity="warning",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_the_problem_is_reported_exactly(tmp_path: Path, case: Case) -> None:
    case.build(tmp_path)
    report = validate(tmp_path, case.declared)
    found = report.errors if case.severity == "error" else report.warnings
    matches = [p for p in found if p.file == case.file and case.message in p.message and p.line == case.line]
    assert matches, (
        f"expected {case.severity} {case.file}:{case.line} {case.message!r}; got {[str(p) for p in report.errors + report.warnings]}"
    )
    assert all(p.severity == case.severity and p.code for p in matches)
    assert report.ok == (case.severity == "warning")


def test_the_table_is_long_enough() -> None:
    assert len(CASES) >= 30 and len({c.id for c in CASES}) == len(CASES)
