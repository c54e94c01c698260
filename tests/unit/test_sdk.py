"""The Trainer SDK on its own: local folders, no platform."""

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from forge_sdk import Run, TrainerEnv, TrainerError, protocol


def make_run(tmp_path: Path, **env: object) -> tuple[Run, io.StringIO]:
    out = io.StringIO()
    fields = {
        "output_dir": str(tmp_path / "out"),
        "result_file": str(tmp_path / "result.json"),
        "work_dir": str(tmp_path / "work"),
        "artifact_id": "m",
    }
    fields.update(env)  # type: ignore[arg-type]
    return Run(TrainerEnv(**fields), install_signal_handlers=False, stdout=out), out  # type: ignore[arg-type]


def records(out: io.StringIO) -> list[protocol.Record]:
    return [r for r in (protocol.parse_line(line) for line in out.getvalue().splitlines()) if r is not None]


def result(tmp_path: Path) -> protocol.Outcome:
    record = protocol.parse_record((tmp_path / "result.json").read_text())
    assert isinstance(record, protocol.Outcome)
    return record


def test_a_complete_run_succeeds_and_reports_everything(tmp_path: Path) -> None:
    run, out = make_run(tmp_path)
    with run:
        run.start(2, steps_per_epoch=2, main_metric="acc")
        for epoch in (1, 2):
            for i in range(2):
                run.report((epoch - 1) * 2 + i + 1, epoch=epoch, loss=1.0 / (i + epoch))
            run.epoch_completed(epoch, {"acc": 0.5 * epoch}, is_best=True)
    kinds = [r.kind for r in records(out)]
    assert kinds == ["start", "step", "step", "epoch", "step", "step", "epoch", "outcome"]
    steps = [r for r in records(out) if isinstance(r, protocol.Step)]
    assert [s.progress for s in steps] == [0.25, 0.5, 0.75, 1.0]
    assert result(tmp_path).state == "succeeded" and result(tmp_path).best_metrics == {"acc": 1.0}
    history = [json.loads(line) for line in (tmp_path / "out" / "history.jsonl").read_text().splitlines()]
    assert len(history) == 6 and history[-1]["kind"] == "epoch"


def test_stop_before_the_first_epoch_cancels_and_removes_outputs(tmp_path: Path) -> None:
    run, _ = make_run(tmp_path)
    with run:
        run.start(3)
        with run.checkpoint("last.pt") as path:
            path.write_bytes(b"partial")
        run.report(1, epoch=1, loss=1.0)
        run.request_stop()
    assert result(tmp_path).state == "canceled"
    assert not any(p.is_file() for p in (tmp_path / "out").rglob("*"))


def test_stop_after_an_epoch_keeps_outputs(tmp_path: Path) -> None:
    run, _ = make_run(tmp_path)
    with run:
        run.start(3)
        run.epoch_completed(1, {"acc": 0.7}, is_best=True)
        with run.checkpoint("best.pt") as path:
            path.write_bytes(b"weights")
        run.request_stop()
    outcome = result(tmp_path)
    assert outcome.state == "stopped" and outcome.epochs_completed == 1 and outcome.best_metrics == {"acc": 0.7}
    assert (tmp_path / "out" / "checkpoints" / "best.pt").read_bytes() == b"weights"


def test_a_stop_after_the_last_epoch_is_still_a_success(tmp_path: Path) -> None:
    run, _ = make_run(tmp_path)
    with run:
        run.start(1)
        run.epoch_completed(1, {"acc": 1.0}, is_best=True)
        run.request_stop()
    assert result(tmp_path).state == "succeeded"


def test_an_exception_fails_the_run_with_its_type_and_message(tmp_path: Path) -> None:
    run, out = make_run(tmp_path)
    with pytest.raises(SystemExit) as exit_info, run:
        raise ValueError("shapes do not match")
    assert exit_info.value.code == 1
    outcome = result(tmp_path)
    assert (outcome.state, outcome.reason, outcome.message) == ("failed", "trainer_crash", "ValueError: shapes do not match")
    assert "Traceback" in out.getvalue()  # the traceback is in the log, not the only clue


def test_a_trainer_error_keeps_its_reason_and_hint(tmp_path: Path) -> None:
    run, _ = make_run(tmp_path)
    with pytest.raises(SystemExit), run:
        raise TrainerError("dataset_error", "val split is empty", "use more images")
    outcome = result(tmp_path)
    assert (outcome.reason, outcome.message, outcome.hint) == ("dataset_error", "val split is empty", "use more images")


def test_out_of_memory_fails_with_the_trainers_hint(tmp_path: Path) -> None:
    class OutOfMemoryError(RuntimeError):  # what torch.cuda raises, by name
        pass

    for exc in (MemoryError(), OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB")):
        run, _ = make_run(tmp_path)
        run.oom_hint = "batch 16 ran out of GPU memory; try 8"
        with pytest.raises(SystemExit), run:
            raise exc
        outcome = result(tmp_path)
        assert (outcome.reason, outcome.hint) == ("out_of_memory", "batch 16 ran out of GPU memory; try 8")


def test_metrics_descriptor_names_the_files_to_register(tmp_path: Path) -> None:
    run, _ = make_run(tmp_path)
    with run:
        weights = tmp_path / "w.pt"
        weights.write_bytes(b"w")
        uri = run.upload(weights, "model.pt")
        run.write_metrics({"acc": 0.9}, weights_uri=uri)
    desc = json.loads((tmp_path / "out" / "m.metrics.json").read_text())
    assert desc["weights_uri"] == uri and desc["metrics"] == {"acc": 0.9}
    assert json.loads((tmp_path / "out" / "metrics.json").read_text()) == {"acc": 0.9}


def test_resume_fetches_the_checkpoint_and_trims_the_partial_epoch(tmp_path: Path) -> None:
    first, _ = make_run(tmp_path / "a", output_dir=str(tmp_path / "attempt1"))
    with pytest.raises(SystemExit), first:
        first.start(3, steps_per_epoch=2)
        for step in (1, 2):
            first.report(step, epoch=1, loss=1.0)
        first.epoch_completed(1, {"acc": 0.5}, is_best=True)
        with first.checkpoint("last.pt") as path:
            path.write_bytes(b"epoch-1-state")
        first.report(3, epoch=2, loss=0.9)  # the partial epoch an interruption cuts
        raise RuntimeError("the machine went away")
    second, _ = make_run(tmp_path / "b", output_dir=str(tmp_path / "attempt2"), resume_from=str(tmp_path / "attempt1"))
    with second:
        path = second.resume("last.pt")
        assert path is not None and path.read_bytes() == b"epoch-1-state"
        second.trim_history(1)
        assert second.start_epoch == 1 and second.best_metrics == {"acc": 0.5}
        second.start(3, steps_per_epoch=2)
        for step in (3, 4):
            second.report(step, epoch=2, loss=0.8)
        second.epoch_completed(2, {"acc": 0.6}, is_best=True)
        second.request_stop()
    steps = [
        json.loads(line)["step"]
        for line in (tmp_path / "attempt2" / "history.jsonl").read_text().splitlines()
        if '"step"' in line and '"kind":"step"' in line
    ]
    assert steps == [1, 2, 3, 4]  # no duplicated steps
    assert (tmp_path / "attempt2" / "checkpoints" / "last.pt").exists()
    assert result(tmp_path / "b").state == "stopped"


def test_resuming_from_nothing_is_a_clear_error(tmp_path: Path) -> None:
    run, _ = make_run(tmp_path, resume_from=str(tmp_path / "nowhere"))
    with pytest.raises(SystemExit), run:
        run.resume("last.pt")
    assert result(tmp_path).reason == "bad_config" and "cannot resume" in (result(tmp_path).message or "")


SCRIPT = """
import time, forge_sdk
with forge_sdk.init() as run:
    run.start(100, steps_per_epoch=10)
    step = 0
    for epoch in range(1, 101):
        for i in range(10):
            step += 1
            time.sleep(0.01)
            run.report(step, epoch=epoch, loss=1.0)
            if run.should_stop():
                break
        if run.should_stop():
            break
        run.epoch_completed(epoch, {"acc": epoch / 100}, is_best=True)
        if epoch == int(__import__("os").environ.get("READY_AFTER", "0")):
            print("READY", flush=True)
    print("loop left", flush=True)
"""


@pytest.mark.parametrize(("ready_after", "expected"), [(0, "canceled"), (1, "stopped")])
def test_sigterm_finishes_the_step_and_ends_by_completed_epochs(tmp_path: Path, ready_after: int, expected: str) -> None:
    env = dict(os.environ, OUTPUT_DIR=str(tmp_path / "out"), FORGE_RESULT_FILE=str(tmp_path / "result.json"), READY_AFTER=str(ready_after))
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT], env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    deadline = time.monotonic() + 30
    for line in proc.stdout:
        if (ready_after == 0 and '"kind":"step"' in line) or line.startswith("READY"):
            break
        assert time.monotonic() < deadline
    proc.send_signal(signal.SIGTERM)
    rest = proc.stdout.read()
    assert proc.wait(30) == 0
    assert "stop requested (SIGTERM)" in rest and "loop left" in rest
    assert result(tmp_path).state == expected
