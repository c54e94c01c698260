"""coco: round trip with boxes, polygons and RLE, explicit split files and where images are found."""

from pathlib import Path

import pytest

from forge_sdk.datasets import Box, DatasetError, load_detection, validate

from .helpers import COCO_FILE, build_coco, png, write_json


def test_a_coco_dataset_validates_with_stats_and_loads(tmp_path: Path) -> None:
    build_coco(tmp_path)
    report = validate(tmp_path)
    assert report.ok, report.errors
    assert report.format == "coco" and report.tasks == ["detection", "segmentation"]
    assert [(p.file, p.message) for p in report.warnings] == [(COCO_FILE, "1 image has no annotations")]
    assert report.stats == {
        "classes": ["cat", "dog"],
        "num_classes": 2,
        "images": 3,
        "instances": 3,
        "per_class": {"cat": 2, "dog": 1},
        "masks": 2,
        "images_without_annotations": 1,
        "splits": {"all": {"images": 3, "instances": 3}},
        "explicit_splits": False,
        "image_size": {"min": [16, 16], "max": [64, 48]},
    }
    data = load_detection(tmp_path)
    assert data.categories == ["cat", "dog"]  # category ids 3 and 7, in id order
    assert data.has_masks and data.explicit_split is None
    a, b, c = data.images
    assert (a.path, a.width, a.height) == ("images/a.png", 64, 48)
    assert a.boxes == [Box(1, 4.0, 6.0, 20.0, 10.0), Box(0, 30.0, 20.0, 10.0, 10.0)]
    assert a.masks == [None, [[30.0, 20.0, 40.0, 20.0, 40.0, 30.0]]]
    assert a.iscrowd == [False, False]
    assert b.masks == [{"size": [32, 32], "counts": "abc"}] and b.iscrowd == [True]
    assert c.boxes == [] and c.masks == [] and c.iscrowd == []


def test_a_coco_without_masks_is_detection_only(tmp_path: Path) -> None:
    def strip_masks(doc: dict[str, list[dict[str, object]]]) -> None:
        for ann in doc["annotations"]:
            ann.pop("segmentation", None)

    build_coco(tmp_path, strip_masks)
    report = validate(tmp_path)
    assert report.ok and report.tasks == ["detection"] and report.stats["masks"] == 0
    assert not load_detection(tmp_path).has_masks


def test_split_files_define_explicit_splits_and_images_resolve_in_order(tmp_path: Path) -> None:
    png(tmp_path / "images" / "train" / "t1.png", (10, 10))  # images/<split>/<file_name>
    png(tmp_path / "images" / "shared.png", (11, 11))  # images/<file_name>
    png(tmp_path / "val" / "v1.png", (12, 12))  # <split>/<file_name>
    png(tmp_path / "v2.png", (13, 13))  # <root>/<file_name>
    png(tmp_path / "images" / "v1.png", (99, 99))  # images/ wins over val/
    cats = [{"id": 1, "name": "thing"}]
    train = {
        "images": [
            {"id": 1, "file_name": "t1.png", "width": 10, "height": 10},
            {"id": 2, "file_name": "shared.png", "width": 11, "height": 11},
        ],
        "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, 5, 5]}],
        "categories": cats,
    }
    val = {
        "images": [
            {"id": 1, "file_name": "v1.png", "width": 99, "height": 99},
            {"id": 2, "file_name": "v2.png", "width": 13, "height": 13},
        ],
        "annotations": [{"id": 1, "image_id": 2, "category_id": 1, "bbox": [1, 1, 2, 2]}],
        "categories": cats,
    }
    write_json(tmp_path / "annotations" / "instances_train.json", train)
    write_json(tmp_path / "annotations" / "instances_val2017.json", val)
    report = validate(tmp_path)
    assert report.ok, report.errors
    assert report.stats["splits"] == {"train": {"images": 2, "instances": 1}, "val": {"images": 2, "instances": 1}}
    assert report.stats["explicit_splits"] is True
    assert [p.message for p in report.warnings if p.code == "files.unreferenced"] == [
        "1 image file is not listed in any annotation file and ignored (e.g. val/v1.png)"
    ]
    data = load_detection(tmp_path)
    assert [img.path for img in data.images] == ["images/train/t1.png", "images/shared.png", "images/v1.png", "v2.png"]
    assert data.explicit_split == {"train": [0, 1], "val": [2, 3]}


def test_a_single_split_named_file_is_the_whole_dataset(tmp_path: Path) -> None:
    png(tmp_path / "images" / "train" / "a.png", (10, 10))
    doc = {
        "images": [{"id": 1, "file_name": "a.png", "width": 10, "height": 10}],
        "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, 5, 5]}],
        "categories": [{"id": 1, "name": "x"}],
    }
    write_json(tmp_path / "instances_train.json", doc)
    report = validate(tmp_path)
    assert report.ok and report.stats["explicit_splits"] is False
    assert load_detection(tmp_path).images[0].path == "images/train/a.png"


def test_sizes_missing_from_the_json_are_read_from_the_image(tmp_path: Path) -> None:
    def drop_sizes(doc: dict[str, list[dict[str, object]]]) -> None:
        for image in doc["images"]:
            del image["width"], image["height"]

    build_coco(tmp_path, drop_sizes)
    assert validate(tmp_path).ok
    assert [(i.width, i.height) for i in load_detection(tmp_path).images] == [(64, 48), (32, 32), (16, 16)]


def test_boxes_that_stick_out_by_less_than_a_pixel_are_clipped(tmp_path: Path) -> None:
    def edge(doc: dict[str, list[dict[str, object]]]) -> None:
        doc["annotations"][0]["bbox"] = [-0.5, 0, 64.8, 48]

    build_coco(tmp_path, edge)
    assert validate(tmp_path).ok
    assert load_detection(tmp_path).images[0].boxes[0] == Box(1, 0.0, 0.0, 64.0, 48.0)


def test_the_loader_raises_with_the_problems(tmp_path: Path) -> None:
    build_coco(tmp_path, lambda doc: doc["annotations"][0].update(category_id=99))
    with pytest.raises(DatasetError) as caught:
        load_detection(tmp_path)
    assert caught.value.problems[0].message == "annotation 10: category id 99 is not in 'categories'"
    assert str(caught.value) == f"{COCO_FILE}: annotation 10: category id 99 is not in 'categories'"
    assert isinstance(caught.value, ValueError)


def test_a_root_json_next_to_annotations_is_ignored_not_a_split(tmp_path: Path) -> None:
    build_coco(tmp_path)
    write_json(tmp_path / "dataset_card.json", {"name": "boxes"})
    report = validate(tmp_path)
    assert report.ok and report.stats["explicit_splits"] is False
    assert ("files.ignored", ".", "1 file is ignored (e.g. dataset_card.json)") in [(p.code, p.file, p.message) for p in report.warnings]
