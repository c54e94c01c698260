import pytest

from forge_common.errors import InvalidTransition
from forge_common.states import RESUMABLE, TERMINAL, TRANSITIONS, JobState, can_transition, check_transition, sources_of


def test_the_designed_paths_are_allowed() -> None:
    for a, b in [
        ("draft", "queued"),
        ("queued", "running"),
        ("queued", "canceled"),
        ("running", "succeeded"),
        ("running", "stopped"),
        ("running", "canceled"),
        ("running", "failed"),
        ("running", "queued"),
        ("failed", "queued"),
        ("stopped", "queued"),
    ]:
        assert can_transition(JobState(a), JobState(b)), (a, b)


def test_an_ended_job_moves_only_when_resumed() -> None:
    assert TERMINAL == {JobState.SUCCEEDED, JobState.STOPPED, JobState.CANCELED, JobState.FAILED}
    for state in TERMINAL:
        allowed = {t for t in JobState if can_transition(state, t)}
        assert allowed == ({JobState.QUEUED} if state in RESUMABLE else set()), state
    assert not can_transition(JobState.SUCCEEDED, JobState.QUEUED)  # nothing to resume
    assert not can_transition(JobState.CANCELED, JobState.QUEUED)  # nothing was kept


def test_shortcuts_are_refused_with_a_message_naming_what_is_allowed() -> None:
    with pytest.raises(InvalidTransition, match="a draft job cannot become running; allowed: queued"):
        check_transition(JobState.DRAFT, JobState.RUNNING)
    with pytest.raises(InvalidTransition, match="final"):
        check_transition(JobState.SUCCEEDED, JobState.RUNNING)
    assert not can_transition(JobState.QUEUED, JobState.STOPPED)  # stopped needs a run


def test_cas_guards_list_every_source_state() -> None:
    assert sources_of(JobState.CANCELED) == ["queued", "running"]
    assert sources_of(JobState.RUNNING) == ["queued"]
    assert sources_of(JobState.QUEUED) == ["draft", "failed", "running", "stopped"]
    for target in JobState:
        assert sources_of(target) == sorted(s.value for s in JobState if target in TRANSITIONS[s])
