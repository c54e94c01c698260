"""The entry points: ``validate`` for the api (every upload), the loaders for trainers.

Both run the same reader of each format, so a dataset that validated loads, and a loader's
``DatasetError`` carries the same problems the upload would have reported. Validation decodes every
image; loaders only read what they need (the api already decoded the images of a stored version),
unless ``verify_images=True``.
"""

from __future__ import annotations

from pathlib import Path

from . import coco, imagenet, sft, yolo
from .data import ClassificationData, DetectionData, SFTData
from .detect import FORMATS, detect_format
from .report import DatasetError, Report
from .sft import Tokenizer


def _read(fmt: str, root: Path, report: Report, *, verify: bool, tokenizer: Tokenizer | None = None) -> None:
    """Run the format's reader for its problems and statistics, and say which tasks the data serves."""
    if fmt == imagenet.FORMAT:
        imagenet.read(root, report, verify_images=verify)
        report.tasks = list(imagenet.TASKS)
    elif fmt in (coco.FORMAT, yolo.FORMAT):
        data = (coco.read if fmt == coco.FORMAT else yolo.read)(root, report, verify_images=verify)
        report.tasks = ["detection", "segmentation"] if data.has_masks else ["detection"]
    else:
        sft.read(root, report, declared=fmt, tokenizer=tokenizer, verify_images=verify)
        report.tasks = [fmt]


def validate(root: Path, declared: str | None = None, *, tokenizer: Tokenizer | None = None) -> Report:
    """Check a dataset folder (its data root, see ``data_root``) and describe it.

    ``declared`` forces a format (else it is detected). ``tokenizer`` (``str -> int`` or an object
    with ``encode``) makes the llm/vlm length statistics count tokens instead of characters. Never
    raises for bad data: every problem is in the report. Raises ``PillowMissing`` (an ImportError)
    when images must be checked and Pillow is not installed.
    """
    root = Path(root)
    if declared is not None and declared not in FORMATS:
        report = Report(format=declared)
        report.error("format.unknown", ".", f"unknown dataset format {declared!r}; known: {', '.join(FORMATS)}")
        return report
    if not root.is_dir():
        report = Report(format=declared or "unknown")
        report.error("format.no_folder", ".", f"{root} is not a folder")
        return report
    try:
        fmt = declared or detect_format(root)
    except DatasetError as exc:
        report = Report(format="unknown")
        for problem in exc.problems:
            report.add(problem)
        return report
    report = Report(format=fmt)
    _read(fmt, root, report, verify=True, tokenizer=tokenizer)
    return report


def _format(root: Path, declared: str | None, accepted: tuple[str, ...], loader: str) -> str:
    fmt = declared or detect_format(root)
    if fmt not in accepted:
        raise DatasetError.single("format.wrong", ".", f"{loader} reads {' or '.join(accepted)} datasets; this one is {fmt}")
    return fmt


def _valid(report: Report) -> None:
    if not report.ok:
        raise DatasetError(report.errors, report=report)


def load_classification(root: Path, *, verify_images: bool = False) -> ClassificationData:
    """An imagenet-folder dataset's classes and (path, class index) items. Raises ``DatasetError``."""
    report = Report(format=imagenet.FORMAT)
    data = imagenet.read(Path(root), report, verify_images=verify_images)
    _valid(report)
    return data


def load_detection(root: Path, declared: str | None = None, *, verify_images: bool = False) -> DetectionData:
    """A coco or yolo dataset as images with absolute-pixel boxes (and masks). Raises ``DatasetError``."""
    root = Path(root)
    fmt = _format(root, declared, (coco.FORMAT, yolo.FORMAT), "load_detection")
    report = Report(format=fmt)
    data = (coco.read if fmt == coco.FORMAT else yolo.read)(root, report, verify_images=verify_images)
    _valid(report)
    return data


def load_sft(root: Path, declared: str | None = None, *, verify_images: bool = False) -> SFTData:
    """An llm-sft or vlm-sft dataset as normalised conversations. Raises ``DatasetError``."""
    root = Path(root)
    fmt = _format(root, declared, sft.FORMATS, "load_sft")
    report = Report(format=fmt)
    data = sft.read(root, report, declared=fmt, verify_images=verify_images)
    _valid(report)
    return data
