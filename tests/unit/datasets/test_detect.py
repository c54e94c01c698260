"""Format detection, the wrapping-folder rule, and the SDK's promise of no required dependencies."""

import subprocess
import sys
from pathlib import Path

import pytest

from forge_sdk.datasets import FORMATS, TASKS_BY_FORMAT, DatasetError, data_root, detect_format, load_detection, load_sft, validate

from .helpers import build_coco, build_imagenet, build_sft, build_vlm, build_yolo, png, write, write_json


@pytest.mark.parametrize(
    ("build", "expected"),
    [(build_yolo, "yolo"), (build_coco, "coco"), (build_sft, "llm-sft"), (build_vlm, "vlm-sft"), (build_imagenet, "imagenet-folder")],
)
def test_each_format_is_detected(tmp_path: Path, build: object, expected: str) -> None:
    build(tmp_path)  # type: ignore[operator]
    assert detect_format(tmp_path) == expected
    assert validate(tmp_path).format == expected


def test_yolo_wins_over_coco_and_coco_over_jsonl(tmp_path: Path) -> None:
    build_sft(tmp_path)
    write_json(tmp_path / "annotations" / "instances.json", {"images": [], "annotations": [], "categories": []})
    assert detect_format(tmp_path) == "coco"
    (tmp_path / "images").mkdir()
    (tmp_path / "labels").mkdir()
    assert detect_format(tmp_path) == "yolo"


def test_a_metadata_json_next_to_jsonl_does_not_make_it_coco(tmp_path: Path) -> None:
    build_sft(tmp_path)
    write_json(tmp_path / "dataset_info.json", {"name": "chat", "license": "mit"})
    assert detect_format(tmp_path) == "llm-sft"


def test_nothing_recognisable_names_what_was_looked_for(tmp_path: Path) -> None:
    png(tmp_path / "loose.png")
    write(tmp_path / "notes.txt", "x")
    with pytest.raises(DatasetError) as caught:
        detect_format(tmp_path)
    assert "images/ and labels/ folders (yolo)" in str(caught.value) and ".jsonl files at the root" in str(caught.value)
    report = validate(tmp_path)
    assert not report.ok and report.format == "unknown" and report.errors[0].code == "format.undetected"


def test_an_unknown_declared_format_is_an_error(tmp_path: Path) -> None:
    build_imagenet(tmp_path)
    report = validate(tmp_path, "pascal-voc")
    assert [(p.file, p.message) for p in report.errors] == [
        (".", "unknown dataset format 'pascal-voc'; known: imagenet-folder, coco, yolo, llm-sft, vlm-sft")
    ]


def test_formats_and_tasks_are_listed() -> None:
    assert FORMATS == ("imagenet-folder", "coco", "yolo", "llm-sft", "vlm-sft")
    assert TASKS_BY_FORMAT["coco"] == ("detection", "segmentation") and TASKS_BY_FORMAT["vlm-sft"] == ("vlm-sft",)


def test_a_wrapping_folder_is_stepped_into(tmp_path: Path) -> None:
    build_imagenet(tmp_path / "a" / "my-data")
    assert data_root(tmp_path / "a") == tmp_path / "a" / "my-data"
    png(tmp_path / "single" / "x" / "1.png")
    assert data_root(tmp_path / "single") == tmp_path / "single"  # one class folder is data, not a wrapper
    build_yolo(tmp_path / "b" / "wrapped")  # holds data.yaml next to folders
    write(tmp_path / "b" / ".DS_Store", "")
    (tmp_path / "b" / "__MACOSX").mkdir()
    assert data_root(tmp_path / "b") == tmp_path / "b" / "wrapped"
    build_sft(tmp_path / "c" / "outer" / "inner")
    assert data_root(tmp_path / "c") == tmp_path / "c" / "outer" / "inner"
    png(tmp_path / "d" / "images" / "x.png")
    assert data_root(tmp_path / "d") == tmp_path / "d"


NO_PILLOW = """
import sys
sys.modules["PIL"] = None  # as if Pillow were not installed
from pathlib import Path
import forge_sdk.datasets as ds
assert "yaml" not in sys.modules and "numpy" not in sys.modules
root = Path(sys.argv[1])
assert ds.validate(root / "llm").ok
assert ds.load_sft(root / "llm").records
try:
    ds.validate(root / "imagenet")
except ds.PillowMissing as exc:
    print(exc)
assert "numpy" not in sys.modules
"""


def test_text_datasets_need_no_third_party_package(tmp_path: Path) -> None:
    build_sft(tmp_path / "llm")
    build_imagenet(tmp_path / "imagenet")
    result = subprocess.run([sys.executable, "-c", NO_PILLOW, str(tmp_path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "reading images needs Pillow: pip install 'forge-trainer-sdk[images]' (or pillow)"


def test_a_loader_refuses_a_dataset_of_another_format(tmp_path: Path) -> None:
    build_sft(tmp_path)
    with pytest.raises(DatasetError, match="load_detection reads coco or yolo datasets; this one is llm-sft"):
        load_detection(tmp_path)
    with pytest.raises(DatasetError, match="load_sft reads llm-sft or vlm-sft datasets; this one is coco"):
        load_sft(tmp_path, "coco")
