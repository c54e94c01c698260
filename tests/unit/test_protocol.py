import json

from forge_sdk import protocol
from forge_sdk.protocol import Epoch, Outcome, Step, format_line, parse_line


def test_records_round_trip_through_a_line() -> None:
    for record in [
        Step(step=3, epoch=1, metrics={"loss": 0.5, "lr": 1e-3}, progress=0.25),
        Epoch(epoch=2, metrics={"top1": 0.9}, is_best=True, total_epochs=5, main_metric="top1", checkpoint_uri="s3://b/k"),
        Outcome(state="stopped", epochs_completed=2, best_metrics={"top1": 0.9}),
        protocol.Start(total_epochs=5, steps_per_epoch=10, main_metric="top1"),
        protocol.Artifact(name="model.onnx", uri="file:///x/model.onnx"),
    ]:
        line = format_line(record)
        assert line.startswith("@@forge {") and "\n" not in line
        assert parse_line(line + "\n") == record


def test_plain_lines_are_not_records() -> None:
    assert parse_line("epoch 1/3: loss=0.4") is None
    assert parse_line("") is None
    assert parse_line("  @@forge {}") is None


def test_malformed_records_stay_plain_log_lines() -> None:
    for bad in [
        "@@forge not json",
        "@@forge []",
        '@@forge {"kind": "unknown"}',
        '@@forge {"kind": "step", "step": -1, "epoch": 1}',
        '@@forge {"kind": "step", "step": "3", "epoch": 1}',
        '@@forge {"kind": "epoch", "epoch": 0, "metrics": {}}',
        '@@forge {"kind": "outcome", "state": "exploded"}',
        '@@forge {"kind": "step", "step": 1, "epoch": 1, "metrics": [1, 2]}',
    ]:
        assert parse_line(bad) is None, bad


def test_non_finite_and_non_numeric_metrics_are_dropped() -> None:
    line = "@@forge " + json.dumps(
        {"kind": "step", "step": 1, "epoch": 1, "metrics": {"loss": float("nan"), "acc": 0.5, "name": "x", "inf": 1e400}}
    )
    record = parse_line(line)
    assert isinstance(record, Step)
    assert record.metrics == {"acc": 0.5}


def test_progress_is_clamped() -> None:
    record = parse_line('@@forge {"kind": "step", "step": 1, "epoch": 1, "progress": 7}')
    assert isinstance(record, Step) and record.progress == 1.0
