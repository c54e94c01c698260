"""imagenet-folder: the behaviour of the api's first validator, now in the SDK, plus the loader."""

from pathlib import Path

from forge_sdk.datasets import ClassificationData, load_classification, validate

from .helpers import build_imagenet, png, write


def test_an_imagenet_folder_validates_with_stats_and_loads(tmp_path: Path) -> None:
    build_imagenet(tmp_path)
    report = validate(tmp_path)
    assert report.ok and report.format == "imagenet-folder" and report.tasks == ["classification"]
    assert report.errors == [] and report.warnings == []
    assert report.stats["num_classes"] == 2 and report.stats["images"] == 5
    assert report.stats["splits"]["all"]["per_class"] == {"cat": 3, "dog": 2}
    assert report.stats["image_size"] == {"min": [8, 6], "max": [10, 6]}
    assert report.stats["explicit_splits"] is False
    data = load_classification(tmp_path)
    assert data == ClassificationData(
        classes=["cat", "dog"],
        items=[("cat/0.png", 0), ("cat/1.png", 0), ("cat/2.png", 0), ("dog/0.png", 1), ("dog/1.png", 1)],
        explicit_split=None,
    )
    assert data.labels == [0, 0, 0, 1, 1]


def test_explicit_splits_are_kept_and_class_indices_agree_across_splits(tmp_path: Path) -> None:
    for split, classes in (("train", ("a", "b", "c")), ("val", ("a", "c"))):
        for cls in classes:
            png(tmp_path / split / cls / "1.png")
    report = validate(tmp_path)
    assert report.ok and report.stats["explicit_splits"] is True
    assert set(report.stats["splits"]) == {"train", "val"}
    assert [(p.file, p.message) for p in report.warnings] == [("val/b/", "class has no validation images")]
    data = load_classification(tmp_path)
    assert data.classes == ["a", "b", "c"]
    assert data.items == [("train/a/1.png", 0), ("train/b/1.png", 1), ("train/c/1.png", 2), ("val/a/1.png", 0), ("val/c/1.png", 2)]
    assert data.explicit_split == {"train": [0, 1, 2], "val": [3, 4]}


def test_nested_images_and_ignored_files(tmp_path: Path) -> None:
    build_imagenet(tmp_path)
    png(tmp_path / "cat" / "more" / "deep.png")
    write(tmp_path / "cat" / "notes.txt", "hello")
    report = validate(tmp_path)
    assert report.ok and report.stats["splits"]["all"]["per_class"]["cat"] == 4
    assert [(p.file, p.message, p.severity) for p in report.warnings] == [("cat/notes.txt", "not an image file; ignored", "warning")]
    assert ("cat/more/deep.png", 0) in load_classification(tmp_path).items


def test_the_loader_does_not_decode_images_unless_asked(tmp_path: Path) -> None:
    build_imagenet(tmp_path)
    write(tmp_path / "cat" / "broken.png", b"not a png")
    assert ("cat/broken.png", 0) in load_classification(tmp_path).items
    assert not validate(tmp_path).ok
