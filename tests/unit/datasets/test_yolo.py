"""yolo: normalised labels become absolute boxes; class lists from data.yaml (any style) or classes.txt."""

from pathlib import Path
from typing import Any

import pytest
import yaml

from forge_sdk.datasets import Box, load_detection, validate, yamlish

from .helpers import build_yolo, png, write


def test_a_yolo_dataset_validates_with_stats_and_loads_absolute_boxes(tmp_path: Path) -> None:
    build_yolo(tmp_path)
    report = validate(tmp_path)
    assert report.ok and report.warnings == [], report.errors
    assert report.format == "yolo" and report.tasks == ["detection", "segmentation"]
    assert report.stats == {
        "classes": ["cat", "dog"],
        "num_classes": 2,
        "images": 2,
        "instances": 3,
        "per_class": {"cat": 1, "dog": 2},
        "masks": 1,
        "images_without_annotations": 0,
        "splits": {"train": {"images": 1, "instances": 2}, "val": {"images": 1, "instances": 1}},
        "explicit_splits": True,
        "image_size": {"min": [40, 40], "max": [100, 50]},
    }
    data = load_detection(tmp_path)
    assert data.categories == ["cat", "dog"] and data.has_masks
    assert data.explicit_split == {"train": [0], "val": [1]}
    a, b = data.images
    assert (a.path, a.width, a.height) == ("images/train/a.png", 100, 50)
    # 0 0.5 0.5 0.2 0.4 in 100x50 → centre (50, 25), size 20x20 → top-left (40, 15)
    assert a.boxes[0] == Box(0, 40.0, 15.0, 20.0, 20.0)
    # polygon (0.1,0.2) (0.3,0.2) (0.3,0.6) → (10,10) (30,10) (30,30), its box (10, 10, 20, 20)
    assert a.boxes[1] == Box(1, pytest.approx(10.0), pytest.approx(10.0), pytest.approx(20.0), pytest.approx(20.0))
    assert a.masks[0] is None and a.masks[1] == [pytest.approx([10.0, 10.0, 30.0, 10.0, 30.0, 30.0])]
    assert b.boxes == [Box(1, 0.0, 0.0, 20.0, 20.0)] and b.masks == [None] and b.iscrowd == [False]


def test_boxes_only_is_detection_without_splits(tmp_path: Path) -> None:
    png(tmp_path / "images" / "a" / "x.png", (10, 20))
    png(tmp_path / "images" / "y.png", (10, 10))
    write(tmp_path / "labels" / "a" / "x.txt", "0 0.5 0.5 1 1\n\n")
    write(tmp_path / "classes.txt", "only\n\n")
    report = validate(tmp_path)
    assert report.ok and report.tasks == ["detection"]
    assert [(p.file, p.message) for p in report.warnings] == [("images/", "1 image has no labels")]
    data = load_detection(tmp_path)
    assert data.explicit_split is None and data.categories == ["only"]
    assert data.images[0].boxes == [Box(0, 0.0, 0.0, 10.0, 20.0)] and data.images[1].boxes == []


YAML_STYLES = [
    "names: [cat, dog]\n",
    "names: ['cat', \"dog\"]  # two classes\nnc: 2\n",
    "path: ../data\ntrain: images/train\nval: images/val\nnames:\n  - cat\n  - dog\n",
    "names:\n- cat\n- dog\n",
    "names:\n  0: cat\n  1: dog\n",
    "names: {0: cat, 1: dog}\n",
    "names: {1: dog, 0: cat}\n",
    "names: [\n  cat,\n  dog,\n]\n",
    "download: |\n  import os\n  names: [x]\nnames: [cat, dog]  # trailing\n",
]


@pytest.mark.parametrize("text", YAML_STYLES)
def test_every_names_style_gives_the_same_classes(tmp_path: Path, text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    build_yolo(tmp_path, yaml=text)
    assert load_detection(tmp_path).categories == ["cat", "dog"]
    monkeypatch.setattr(yamlish, "load", lambda text, keys: yamlish.parse(text, keys))  # as without PyYAML
    assert load_detection(tmp_path).categories == ["cat", "dog"]


@pytest.mark.parametrize("text", [*YAML_STYLES, "nc: 3\nnames: ['a: b', 'it''s', \"q\\\"x\", 1, -2.5, '#no']\nflag: true\n"])
def test_the_fallback_parser_agrees_with_pyyaml(text: str) -> None:
    expected: dict[str, Any] = yaml.safe_load(text)
    assert yamlish.parse(text, ("names", "nc")) == {k: (v if k in ("names", "nc") else None) for k, v in expected.items()}


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("names: [cat, dog\n", 1),
        ("names:\n  - cat\n    - dog\n", 3),
        ("  names: [a]\n", 1),
        ("names: 'cat\n", 1),
        ("names: [a]\nnames: [b]\n", 2),
    ],
)
def test_the_fallback_parser_says_where_the_yaml_breaks(text: str, line: int) -> None:
    with pytest.raises(yamlish.YamlError) as caught:
        yamlish.parse(text, ("names",))
    assert caught.value.line == line


def test_labels_classes_txt_is_a_class_list_not_a_label(tmp_path: Path) -> None:
    build_yolo(tmp_path, yaml=None)
    write(tmp_path / "labels" / "classes.txt", "cat\ndog\n")
    report = validate(tmp_path)
    assert report.ok and report.stats["classes"] == ["cat", "dog"]


def test_ignored_files_are_warnings(tmp_path: Path) -> None:
    build_yolo(tmp_path)
    write(tmp_path / "labels" / "train.cache", b"\x00")
    write(tmp_path / "images" / "train" / "notes.md", "x")
    png(tmp_path / "images" / "loose.png")
    report = validate(tmp_path)
    assert report.ok
    assert {(p.file, p.message) for p in report.warnings} == {
        ("labels/", "1 file(s) in labels/ are not .txt labels and are ignored (e.g. labels/train.cache)"),
        ("images/train/notes.md", "not an image file; ignored"),
        ("images/", "1 image(s) outside images/train, images/val and images/test are ignored (e.g. images/loose.png)"),
    }


def test_a_dataset_yaml_named_after_the_dataset_is_read(tmp_path: Path) -> None:
    build_yolo(tmp_path, yaml=None)
    write(tmp_path / "coco8.yaml", "path: ../datasets/coco8\nnames:\n  0: cat\n  1: dog\n")
    assert load_detection(tmp_path).categories == ["cat", "dog"]
