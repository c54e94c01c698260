"""What validation found: problems a user can act on, and the statistics of the data.

A problem always names the dataset-relative file, and the line (a JSONL record, a YOLO label
line) or the annotation (``annotation 12`` / ``image 7`` in the message) where there is one. Each
problem also carries a stable ``code`` so that programs (the api, a UI, tests) need not parse the
message. A broken dataset can hold millions of identical problems; only the first ``limit`` of each
code are kept, but all of them are counted, so the report stays small and still says how bad it is.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Severity = Literal["error", "warning"]
DEFAULT_LIMIT = 1000


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a dataset. Errors block an upload; warnings are recorded and do not."""

    file: str
    message: str
    line: int | None = None
    severity: Severity = "error"
    code: str = ""

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file} line {self.line}"
        return f"{where}: {self.message}"


@dataclass
class Report:
    """The outcome of ``validate``: format, tasks, problems and statistics."""

    format: str
    tasks: list[str] = field(default_factory=list)
    errors: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    limit: int = DEFAULT_LIMIT
    counts: Counter[str] = field(default_factory=Counter)
    error_count: int = 0
    warning_count: int = 0

    @property
    def ok(self) -> bool:
        return self.error_count == 0

    def add(self, problem: Problem) -> None:
        """Count every problem; keep the first ``limit`` of each code."""
        self.counts[problem.code] += 1
        if problem.severity == "error":
            self.error_count += 1
        else:
            self.warning_count += 1
        if self.counts[problem.code] <= self.limit:
            (self.errors if problem.severity == "error" else self.warnings).append(problem)

    def error(self, code: str, file: str, message: str, line: int | None = None) -> None:
        self.add(Problem(file, message, line, "error", code))

    def warn(self, code: str, file: str, message: str, line: int | None = None) -> None:
        self.add(Problem(file, message, line, "warning", code))

    @property
    def omitted(self) -> dict[str, int]:
        """Problems counted but not kept, per code."""
        return {code: n - self.limit for code, n in sorted(self.counts.items()) if n > self.limit}

    def to_dict(self) -> dict[str, Any]:
        """The JSON the api stores with a dataset version (the statistics are stored on their own)."""
        return {
            "format": self.format,
            "tasks": list(self.tasks),
            "ok": self.ok,
            "errors": [asdict(p) for p in self.errors],
            "warnings": [asdict(p) for p in self.warnings],
            "error_count": self.error_count,
            "warning_count": self.warning_count,
            "omitted": self.omitted,
        }


def summary(problems: Sequence[Problem], total: int | None = None) -> str:
    """One line for an exception message or a log: the first problem and how many follow."""
    if not problems:
        return "the dataset is invalid"
    rest = (total if total is not None else len(problems)) - 1
    more = f" (and {rest} more problem{'s' if rest != 1 else ''})" if rest > 0 else ""
    return f"{problems[0]}{more}"


class DatasetError(ValueError):
    """The data cannot be used; ``problems`` says exactly why (``report`` has everything, if known)."""

    def __init__(self, problems: Sequence[Problem], *, report: Report | None = None) -> None:
        self.problems = list(problems)
        self.report = report
        super().__init__(summary(self.problems, report.error_count if report is not None else None))

    @classmethod
    def single(cls, code: str, file: str, message: str) -> DatasetError:
        return cls([Problem(file, message, None, "error", code)])
