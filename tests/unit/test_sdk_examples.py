"""The SDK's runnable examples run as documented, on a laptop with plain folders."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from forge_sdk import protocol

EXAMPLES = Path(__file__).resolve().parents[2] / "trainers" / "sdk" / "examples"


@pytest.mark.parametrize("example", ["minimal_torch.py", "hf_trainer_callback.py"])
def test_the_example_trains_and_writes_its_registration_descriptor(example: str, sample_dataset: Path, tmp_path: Path) -> None:
    env = dict(
        os.environ,
        INPUT_URI=str(sample_dataset),
        OUTPUT_DIR=str(tmp_path / "out"),
        CONFIG_JSON='{"hyperparameters": {"epochs": 3}}',
        FORGE_RESULT_FILE=str(tmp_path / "result.json"),
    )
    done = subprocess.run([sys.executable, str(EXAMPLES / example)], env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    outcome = protocol.parse_record((tmp_path / "result.json").read_text())
    assert isinstance(outcome, protocol.Outcome) and outcome.state == "succeeded" and outcome.epochs_completed == 3
    assert (tmp_path / "out" / "model.pt").exists() and (tmp_path / "out" / "model.metrics.json").exists()
    steps = [r for r in map(protocol.parse_line, done.stdout.splitlines()) if isinstance(r, protocol.Step)]
    assert steps, "no live progress"
