"""The report: capped per kind but fully counted, serialisable, and raised by loaders as DatasetError."""

import json
from pathlib import Path

import pytest

from forge_sdk.datasets import DatasetError, Problem, Report, load_sft, validate

from .helpers import build_sft, write


def test_problems_are_capped_per_kind_but_all_counted(tmp_path: Path) -> None:
    build_sft(tmp_path, extra=["{bad"] * 1500 + ['{"messages": []}'] * 3)
    report = validate(tmp_path)
    assert report.error_count == 1503 and len(report.errors) == 1003
    assert report.omitted == {"json.invalid": 500}
    assert [p.line for p in report.errors if p.code == "sft.empty_conversation"] == [1503, 1504, 1505]


def test_to_dict_is_json(tmp_path: Path) -> None:
    build_sft(tmp_path, extra=["[1]"])
    write(tmp_path / "README.md", "hello")
    report = validate(tmp_path)
    doc = json.loads(json.dumps(report.to_dict()))
    assert doc == {
        "format": "llm-sft",
        "tasks": ["llm-sft"],
        "ok": False,
        "errors": [
            {"file": "data.jsonl", "message": "a record must be a JSON object", "line": 3, "severity": "error", "code": "sft.not_object"}
        ],
        "warnings": [
            {"file": ".", "message": "1 file is ignored (e.g. README.md)", "line": None, "severity": "warning", "code": "files.ignored"}
        ],
        "error_count": 1,
        "warning_count": 1,
        "omitted": {},
    }


def test_dataset_error_says_what_and_how_many(tmp_path: Path) -> None:
    build_sft(tmp_path, extra=["{", "{"])
    with pytest.raises(DatasetError) as caught:
        load_sft(tmp_path)
    assert (
        str(caught.value)
        == "data.jsonl line 3: not valid JSON: Expecting property name enclosed in double quotes at column 2 (and 1 more problem)"
    )
    assert caught.value.report is not None and caught.value.report.error_count == 2
    assert len(caught.value.problems) == 2


def test_a_report_counts_warnings_apart_from_errors() -> None:
    report = Report("coco", limit=1)
    report.warn("w", "a", "x")
    report.warn("w", "a", "y")
    assert report.ok and report.warning_count == 2 and report.warnings == [Problem("a", "x", None, "warning", "w")]
    assert str(Problem("f.txt", "bad", 3)) == "f.txt line 3: bad"
