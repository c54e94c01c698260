"""One context object per training run: report, checkpoint, stop, upload — with or without a platform.

::

    import forge_sdk

    with forge_sdk.init() as run:
        run.start(total_epochs=10, steps_per_epoch=len(loader), main_metric="top1")
        for epoch in range(run.start_epoch + 1, 11):
            for batch in loader:
                loss = ...
                run.report(step, epoch=epoch, loss=loss)
                if run.should_stop():
                    break
            if run.should_stop():
                break          # an unfinished epoch never counts
            metrics = evaluate()
            run.epoch_completed(epoch, metrics, is_best=...)

On leaving the block the run ends itself: ``succeeded`` when every epoch completed (or the trainer
said so), ``stopped`` when a stop arrived after at least one completed epoch (outputs kept),
``canceled`` when it arrived before (outputs deleted), ``failed`` on an exception (with a reason
and a hint; a traceback goes to the log, never as the only clue). The outcome is printed as a
progress line and written to ``FORGE_RESULT_FILE`` for the executor.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import traceback
from collections.abc import Iterator
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, TextIO

from . import protocol
from .env import TrainerEnv
from .storage import Location, location_from_uri

HISTORY = "history.jsonl"
METRICS = "metrics.json"
CHECKPOINTS = "checkpoints"


class TrainerError(Exception):
    """A failure the trainer understands: ends the run as failed with this reason and hint.

    Reasons used by the platform: ``bad_config``, ``dataset_error``, ``out_of_memory``,
    ``device_unavailable``, ``trainer_crash``.
    """

    def __init__(self, reason: str, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.hint = hint


def is_out_of_memory(exc: BaseException) -> bool:
    """CUDA/ROCm ``OutOfMemoryError``, XPU's equivalent, and CPU ``MemoryError``."""
    if isinstance(exc, MemoryError):
        return True
    name = type(exc).__name__
    text = str(exc).lower()
    return name == "OutOfMemoryError" or ("out of memory" in text and "RuntimeError" in name)


class Run:
    """Reports progress, keeps checkpoints and outputs, and honours stop requests."""

    def __init__(
        self,
        env: TrainerEnv,
        *,
        install_signal_handlers: bool = True,
        stdout: TextIO | None = None,
    ) -> None:
        self.env = env
        self.config: dict[str, Any] = env.config
        self.hyperparameters: dict[str, Any] = dict(env.config.get("hyperparameters", {}))
        self.output: Location = location_from_uri(env.output_dir, env.s3)
        self._own_work_dir = env.work_dir is None
        self.work_dir = Path(env.work_dir or tempfile.mkdtemp(prefix="forge-run-"))
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._out = stdout or sys.stdout
        # re-entrant: the SIGTERM handler logs from the main thread, possibly inside _emit
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._stop_reason: str | None = None
        self._finished = False
        self.total_epochs: int | None = None
        self.steps_per_epoch: int | None = None
        self.main_metric: str | None = None
        self.start_epoch = 0
        self.epochs_completed = 0
        self.best_metrics: dict[str, float] = {}
        self.oom_hint: str | None = None
        self.outcome: protocol.Outcome | None = None
        self._history_restored = False
        self._history = self.work_dir / HISTORY
        self._history_fh: TextIO | None = None
        if not self._history.exists():
            self._history.touch()
        if install_signal_handlers and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_signal)
            signal.signal(signal.SIGINT, self._on_signal)

    # -- lifecycle -----------------------------------------------------------------------------

    def __enter__(self) -> Run:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._finished:
            return
        if exc is None:
            self.finish()
            return
        if isinstance(exc, SystemExit | KeyboardInterrupt) and self._stop.is_set():
            self.finish()
            return
        if isinstance(exc, TrainerError):
            self.log(f"error: {exc.message}")
            self.fail(exc.reason, exc.message, exc.hint)
        elif is_out_of_memory(exc):
            self.log("".join(traceback.format_exception(exc_type, exc, tb)).rstrip())
            self.fail("out_of_memory", f"{type(exc).__name__}: {exc}".strip(), self.oom_hint)
        else:
            self.log("".join(traceback.format_exception(exc_type, exc, tb)).rstrip())
            self.fail("trainer_crash", f"{type(exc).__name__}: {exc}")
        raise SystemExit(1) from None

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._stop.is_set():
            return
        name = signal.Signals(signum).name
        self._stop_reason = name
        self._stop.set()
        self.log(f"stop requested ({name}): finishing the current step")

    def request_stop(self, reason: str = "requested") -> None:
        """Ask the loop to stop (what SIGTERM does); useful from callbacks and tests."""
        self._stop_reason = reason
        self._stop.set()

    def should_stop(self) -> bool:
        return self._stop.is_set()

    # -- output ----------------------------------------------------------------------------------

    def log(self, message: str) -> None:
        """A plain log line (kept by the platform, shown on the job page)."""
        with self._lock:
            self._out.write(message.rstrip("\n") + "\n")
            self._out.flush()

    def _emit(self, record: protocol.Record) -> None:
        text = protocol.to_json(record)  # serialised once for stdout and the history
        with self._lock:
            self._out.write(protocol.PREFIX + text + "\n")
            self._out.flush()  # live curves: the relay sees the line now
            if record.kind in ("step", "epoch"):
                if self._history_fh is None:
                    self._history_fh = open(self._history, "a", encoding="utf-8")
                self._history_fh.write(text + "\n")

    def _sync_history(self) -> None:
        """Flush the history file before it is read or uploaded."""
        with self._lock:
            if self._history_fh is not None:
                self._history_fh.flush()

    def _close_history(self) -> None:
        with self._lock:
            if self._history_fh is not None:
                self._history_fh.close()
                self._history_fh = None

    # -- progress --------------------------------------------------------------------------------

    def start(self, total_epochs: int, *, steps_per_epoch: int | None = None, main_metric: str | None = None) -> None:
        """Say how long the run is; call once before the first step (after ``resume()``)."""
        self.total_epochs = int(total_epochs)
        self.steps_per_epoch = int(steps_per_epoch) if steps_per_epoch else None
        self.main_metric = main_metric
        self._emit(
            protocol.Start(
                total_epochs=self.total_epochs,
                steps_per_epoch=self.steps_per_epoch,
                start_epoch=self.start_epoch,
                main_metric=main_metric,
            )
        )

    def progress_at(self, step: int) -> float | None:
        if not self.total_epochs or not self.steps_per_epoch:
            return None
        return min(1.0, step / (self.total_epochs * self.steps_per_epoch))

    def report(self, step: int, *, epoch: int, **metrics: float) -> None:
        """Step-level metrics (``loss=…, lr=…``) for live curves; ``step`` counts from the run's start."""
        self._emit(protocol.Step(step=step, epoch=epoch, metrics=protocol.clean_metrics(metrics), progress=self.progress_at(step)))

    def epoch_completed(
        self,
        epoch: int,
        metrics: dict[str, float],
        *,
        is_best: bool,
        checkpoint_uri: str | None = None,
    ) -> None:
        """One whole epoch is done (1-based). Only completed epochs decide stop versus cancel."""
        clean = protocol.clean_metrics(metrics)
        self.epochs_completed = max(self.epochs_completed, epoch)
        if is_best:
            self.best_metrics = clean
        self._emit(
            protocol.Epoch(
                epoch=epoch,
                metrics=clean,
                is_best=is_best,
                total_epochs=self.total_epochs,
                main_metric=self.main_metric,
                checkpoint_uri=checkpoint_uri,
            )
        )
        self._sync_history()
        self.output.put_file(HISTORY, self._history)

    # -- files -----------------------------------------------------------------------------------

    def input_dir(self) -> Path:
        """The dataset version as a local folder (downloaded once when it lives in S3)."""
        uri = self.env.input_uri
        if not uri:
            raise TrainerError("bad_config", "INPUT_URI is not set: the run has no dataset")
        location = location_from_uri(uri, self.env.s3)
        store = location.store
        from .storage import LocalStore

        if isinstance(store, LocalStore):
            path = store.path(location.prefix)
            if not path.is_dir():
                raise TrainerError("dataset_error", f"dataset folder {path} does not exist")
            return path
        dest = self.work_dir / "input"
        if not (dest / ".complete").exists():
            shutil.rmtree(dest, ignore_errors=True)
            location.download_to(dest)
            (dest / ".complete").touch()
        return dest

    def upload(self, path: Path, name: str | None = None) -> str:
        """Put a local file into the output location; returns its URI and announces it."""
        name = name or path.name
        uri = self.output.put_file(name, path)
        self._emit(protocol.Artifact(name=name, uri=uri))
        return uri

    def write_json(self, name: str, obj: Any) -> str:
        uri = self.output.put_bytes(name, json.dumps(obj, indent=2, sort_keys=True).encode())
        self._emit(protocol.Artifact(name=name, uri=uri))
        return uri

    @contextlib.contextmanager
    def checkpoint(self, name: str) -> Iterator[Path]:
        """Write a checkpoint atomically and upload it to ``checkpoints/<name>``::

        with run.checkpoint("last.pt") as path:
            torch.save(state, path)
        """
        folder = self.work_dir / CHECKPOINTS
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.")
        os.close(fd)
        try:
            yield Path(tmp)
            os.replace(tmp, folder / name)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self.output.put_file(f"{CHECKPOINTS}/{name}", folder / name)

    def checkpoint_path(self, name: str) -> Path:
        return self.work_dir / CHECKPOINTS / name

    def resume(self, name: str = "last.pt") -> Path | None:
        """Fetch ``checkpoints/<name>`` of ``RESUME_FROM`` (if set) and its history; returns the
        local file (None when not resuming). After loading it, call ``trim_history(epoch)`` with the
        epoch it holds, so the discarded partial epoch leaves no duplicated steps."""
        if not self.env.resume_from:
            return None
        source = location_from_uri(self.env.resume_from, self.env.s3)
        target = self.checkpoint_path(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            source.store.get_file(source.key(f"{CHECKPOINTS}/{name}"), target)
        except Exception as exc:
            raise TrainerError("bad_config", f"cannot resume: no checkpoint {source.uri_of(CHECKPOINTS + '/' + name)} ({exc})") from None
        self.output.put_file(f"{CHECKPOINTS}/{name}", target)  # the new attempt's outputs are complete
        if not self._history_restored and source.exists(HISTORY):
            self._close_history()
            self._history.write_bytes(source.get_bytes(HISTORY))
            self._history_restored = True
        return target

    def trim_history(self, completed_epoch: int) -> None:
        """Drop history records after ``completed_epoch`` (the partial epoch an interruption cut)."""
        self.start_epoch = completed_epoch
        self.epochs_completed = completed_epoch
        self._close_history()
        kept = []
        for line in self._history.read_text(encoding="utf-8").splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if int(rec.get("epoch", 0)) <= completed_epoch:
                kept.append(line)
                if rec.get("kind") == "epoch" and rec.get("is_best"):
                    self.best_metrics = protocol.clean_metrics(rec.get("metrics", {}))
        self._history.write_text("".join(k + "\n" for k in kept), encoding="utf-8")

    def write_metrics(self, metrics: dict[str, Any], *, weights_uri: str | None = None, onnx_uri: str | None = None, **extra: Any) -> None:
        """``metrics.json`` plus ``<ARTIFACT_ID>.metrics.json`` naming the files to register."""
        self.write_json(METRICS, metrics)
        descriptor = {"metrics": metrics, "weights_uri": weights_uri, "onnx_uri": onnx_uri, **extra}
        self.write_json(f"{self.env.artifact_id}.metrics.json", descriptor)

    # -- the end ---------------------------------------------------------------------------------

    def finish(self, state: protocol.OutcomeState | None = None) -> protocol.Outcome:
        """End the run. Without ``state`` the SDK decides from the stop flag and completed epochs."""
        if state is None:
            done = self.total_epochs is not None and self.epochs_completed >= self.total_epochs
            if self._stop.is_set() and not done:
                state = "stopped" if self.epochs_completed >= 1 else "canceled"
            else:
                state = "succeeded"
        if state == "canceled":
            removed = self.output.delete_all()
            self.log(f"canceled before the first completed epoch: removed {removed} output object(s)")
            return self._end(protocol.Outcome(state="canceled", epochs_completed=0))
        self._close_history()
        if self._history.exists() and state in ("succeeded", "stopped"):
            self.output.put_file(HISTORY, self._history)
        message = None
        if state == "stopped":
            message = f"stopped after {self.epochs_completed} completed epoch(s); the best model is kept"
        return self._end(
            protocol.Outcome(state=state, epochs_completed=self.epochs_completed, best_metrics=self.best_metrics, message=message)
        )

    def fail(self, reason: str, message: str, hint: str | None = None) -> protocol.Outcome:
        return self._end(
            protocol.Outcome(
                state="failed",
                epochs_completed=self.epochs_completed,
                reason=reason,
                message=message,
                hint=hint,
                best_metrics=self.best_metrics,
            )
        )

    def _end(self, outcome: protocol.Outcome) -> protocol.Outcome:
        self._finished = True
        self._close_history()
        self.outcome = outcome
        self._emit(outcome)
        if self.env.result_file:
            target = Path(self.env.result_file)
            target.parent.mkdir(parents=True, exist_ok=True)
            write_result(target, protocol.to_json(outcome))
        if self._own_work_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)
        return outcome


def write_result(target: Path, text: str) -> None:
    """Atomically where possible; in place where the file is a bind mount that cannot be replaced
    (Kubernetes' /dev/termination-log answers EBUSY to a rename)."""
    tmp = target.with_name(target.name + ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, target)
    except OSError as exc:
        if exc.errno not in (errno.EBUSY, errno.EXDEV, errno.EACCES, errno.EPERM, errno.EROFS):
            raise
        tmp.unlink(missing_ok=True)
        target.write_text(text, encoding="utf-8")


def init(env: TrainerEnv | None = None, **kwargs: Any) -> Run:
    """A run from the process environment (``TrainerEnv.from_environ()``) unless one is given."""
    return Run(env or TrainerEnv.from_environ(), **kwargs)
