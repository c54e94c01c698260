from pathlib import Path

from PIL import Image

from forge_api.datasets.formats import data_root, validate


def image(path: Path, size: tuple[int, int] = (8, 6)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, (10, 20, 30)).save(path)


def test_an_imagenet_folder_validates_with_stats(tmp_path: Path) -> None:
    for cls, n in [("cat", 3), ("dog", 2)]:
        for i in range(n):
            image(tmp_path / cls / f"{i}.png", (8 + i, 6))
    report = validate(tmp_path)
    assert report.ok and report.format == "imagenet-folder" and report.tasks == ["classification"]
    assert report.stats["num_classes"] == 2 and report.stats["images"] == 5
    assert report.stats["splits"]["all"]["per_class"] == {"cat": 3, "dog": 2}
    assert report.stats["image_size"] == {"min": [8, 6], "max": [10, 6]}


def test_explicit_splits_are_kept(tmp_path: Path) -> None:
    for split in ("train", "val"):
        for cls in ("a", "b"):
            image(tmp_path / split / cls / "1.png")
    report = validate(tmp_path)
    assert report.ok and report.stats["explicit_splits"] is True
    assert set(report.stats["splits"]) == {"train", "val"}


def test_problems_name_the_file(tmp_path: Path) -> None:
    image(tmp_path / "cat" / "ok.png")
    (tmp_path / "cat" / "broken.png").write_bytes(b"not a png at all")
    (tmp_path / "dog").mkdir()
    (tmp_path / "cat" / "notes.txt").write_text("hello")
    report = validate(tmp_path)
    errors = {(p.file, p.message) for p in report.errors}
    assert ("cat/broken.png", "unreadable or corrupt image (UnidentifiedImageError)") in errors
    assert ("dog/", "empty class folder: it holds no images") in errors
    assert any(p.file == "cat/notes.txt" and "not an image" in p.message for p in report.warnings)


def test_no_class_folders_is_an_error(tmp_path: Path) -> None:
    image(tmp_path / "loose.png")
    report = validate(tmp_path)
    assert not report.ok and "no class folders" in report.errors[0].message


def test_one_class_is_not_enough(tmp_path: Path) -> None:
    image(tmp_path / "cat" / "1.png")
    assert "at least two" in validate(tmp_path).errors[0].message


def test_a_wrapping_folder_is_stepped_into(tmp_path: Path) -> None:
    image(tmp_path / "my-data" / "cat" / "1.png")
    image(tmp_path / "my-data" / "dog" / "1.png")
    assert data_root(tmp_path) == tmp_path / "my-data"
    image(tmp_path / "single" / "x" / "1.png")
    assert data_root(tmp_path / "single") == tmp_path / "single"  # one class folder is data, not a wrapper
