import pytest

from forge_common.errors import InvalidTransition
from forge_common.states import TERMINAL, TRANSITIONS, JobState, can_transition, check_transition, sources_of


def test_the_designed_paths_are_allowed() -> None:
    for a, b in [
        ("draft", "queued"),
        ("queued", "running"),
        ("queued", "canceled"),
        ("running", "succeeded"),
        ("running", "stopped"),
        ("running", "canceled"),
        ("running", "failed"),
    ]:
        assert can_transition(JobState(a), JobState(b)), (a, b)


def test_nothing_leaves_a_final_state() -> None:
    assert TERMINAL == {JobState.SUCCEEDED, JobState.STOPPED, JobState.CANCELED, JobState.FAILED}
    for state in TERMINAL:
        for target in JobState:
            assert not can_transition(state, target)


def test_shortcuts_are_refused_with_a_message_naming_what_is_allowed() -> None:
    with pytest.raises(InvalidTransition, match="a draft job cannot become running; allowed: queued"):
        check_transition(JobState.DRAFT, JobState.RUNNING)
    with pytest.raises(InvalidTransition, match="final"):
        check_transition(JobState.SUCCEEDED, JobState.QUEUED)
    assert not can_transition(JobState.QUEUED, JobState.STOPPED)  # stopped needs a run


def test_cas_guards_list_every_source_state() -> None:
    assert sources_of(JobState.CANCELED) == ["queued", "running"]
    assert sources_of(JobState.RUNNING) == ["queued"]
    for target in JobState:
        assert sources_of(target) == sorted(s.value for s in JobState if target in TRANSITIONS[s])
