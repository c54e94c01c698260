"""How a trainer's exit becomes the job's final state (the scheduler's pure rule)."""

import signal

from forge_common.states import JobState
from forge_scheduler.executors.local import ExitStatus
from forge_scheduler.service import decide_outcome
from forge_sdk.protocol import Outcome

CLEAN = ExitStatus(returncode=0)


def test_the_trainers_own_outcome_wins() -> None:
    d = decide_outcome(stop_requested=False, exit_status=CLEAN, result=Outcome(state="succeeded", epochs_completed=3), epochs_completed=2)
    assert d.state is JobState.SUCCEEDED and d.epochs_completed == 3 and d.error is None


def test_stop_after_a_completed_epoch_is_stopped_and_before_is_canceled() -> None:
    for epochs, expected in [(0, JobState.CANCELED), (1, JobState.STOPPED), (4, JobState.STOPPED)]:
        d = decide_outcome(
            stop_requested=True, exit_status=CLEAN, result=Outcome(state="stopped", epochs_completed=epochs), epochs_completed=0
        )
        assert d.state is expected
    # a trainer claiming "stopped" with no completed epoch cannot keep a model
    d = decide_outcome(stop_requested=True, exit_status=CLEAN, result=Outcome(state="stopped", epochs_completed=0), epochs_completed=0)
    assert d.state is JobState.CANCELED


def test_a_trainer_without_the_sdk_is_judged_by_completed_epochs() -> None:
    killed = ExitStatus(returncode=-signal.SIGTERM, signal=signal.SIGTERM)
    assert decide_outcome(stop_requested=True, exit_status=killed, result=None, epochs_completed=0).state is JobState.CANCELED
    assert decide_outcome(stop_requested=True, exit_status=killed, result=None, epochs_completed=2).state is JobState.STOPPED
    assert decide_outcome(stop_requested=False, exit_status=CLEAN, result=None, epochs_completed=0).state is JobState.SUCCEEDED


def test_a_crash_fails_with_the_exit_code_and_the_last_error_line() -> None:
    d = decide_outcome(
        stop_requested=False, exit_status=ExitStatus(returncode=3), result=None, epochs_completed=1, last_error="ValueError: bad shape"
    )
    assert d.state is JobState.FAILED
    assert d.error == {
        "reason": "trainer_crash",
        "message": "the trainer exited with code 3: ValueError: bad shape",
        "hint": "see the job's logs for the traceback",
    }


def test_a_signal_names_itself() -> None:
    d = decide_outcome(stop_requested=False, exit_status=ExitStatus(returncode=-signal.SIGSEGV), result=None, epochs_completed=0)
    assert d.reason == "trainer_crash" and "SIGSEGV" in (d.message or "")


def test_sigkill_without_a_stop_is_out_of_memory_and_a_lost_run_is_interrupted() -> None:
    oom = decide_outcome(stop_requested=False, exit_status=ExitStatus(returncode=-9, signal=9), result=None, epochs_completed=1)
    assert oom.state is JobState.FAILED and oom.reason == "out_of_memory" and oom.hint
    lost = decide_outcome(stop_requested=False, exit_status=ExitStatus(returncode=None, lost=True), result=None, epochs_completed=1)
    assert lost.reason == "interrupted"


def test_a_failure_the_trainer_explains_keeps_its_reason_and_hint() -> None:
    result = Outcome(state="failed", reason="out_of_memory", message="CUDA OOM", hint="batch 16 ran out of GPU memory; try 8")
    d = decide_outcome(stop_requested=False, exit_status=ExitStatus(returncode=1), result=result, epochs_completed=0)
    assert d.error == {"reason": "out_of_memory", "message": "CUDA OOM", "hint": "batch 16 ran out of GPU memory; try 8"}


def test_a_trainer_that_could_not_start_says_so() -> None:
    d = decide_outcome(
        stop_requested=False, exit_status=ExitStatus(returncode=127, error="cannot start trainer 'x'"), result=None, epochs_completed=0
    )
    assert d.state is JobState.FAILED and d.message == "cannot start trainer 'x'"
