"""The README stays true: its configuration table is generated from the settings classes, and
every FORGE_* variable the code reads is in it.

    .venv/bin/python -m tests.unit.test_readme   # rewrite the table after changing a setting
"""

from __future__ import annotations

import re
from pathlib import Path

from forge_api.settings import ApiSettings
from forge_cli import ENVIRONMENT
from forge_common.settings import CommonSettings, reference_markdown
from forge_log_relay.settings import LogRelaySettings
from forge_registrar.settings import RegistrarSettings
from forge_scheduler.settings import SchedulerSettings

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
BEGIN, END = "<!-- config:begin -->", "<!-- config:end -->"
CLASSES = (CommonSettings, ApiSettings, SchedulerSettings, LogRelaySettings, RegistrarSettings)


def table() -> str:
    rows = reference_markdown(*CLASSES).splitlines()
    for var, default, desc in ENVIRONMENT:
        rows.append(f"| `{var}` | `{default}` | {desc} |")
    text = "\n".join(rows)
    # defaults that depend on the machine are shown by what they mean
    return re.sub(r"\| `/[^`]*python[^`]*` \|", "| the Python running the scheduler |", text)


def current_block() -> str:
    text = README.read_text()
    return text[text.index(BEGIN) + len(BEGIN) : text.index(END)].strip()


def test_the_configuration_table_matches_the_settings() -> None:
    assert current_block() == table(), "regenerate it: .venv/bin/python -m tests.unit.test_readme"


def test_every_forge_variable_in_the_code_is_documented() -> None:
    readme = README.read_text()
    sources = [p for d in ("libs", "services", "trainers", "bench") for p in (ROOT / d).rglob("*.py")] + [
        ROOT / "compose.yaml",
        ROOT / "Makefile",
    ]
    used = {m for p in sources for m in re.findall(r"\bFORGE_[A-Z0-9_]*[A-Z0-9]\b", p.read_text())}
    used -= {"FORGE_"}
    missing = sorted(v for v in used if v not in readme)
    assert not missing, f"README does not document {missing}"


def test_the_two_commands_come_first() -> None:
    text = README.read_text()
    assert text.index("make up") < text.index("make test") < text.index("## Quickstart")


if __name__ == "__main__":
    text = README.read_text()
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    README.write_text(text[:start] + "\n" + table() + "\n" + text[end:])
    print("README configuration table updated")
