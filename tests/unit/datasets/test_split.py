"""split_indices: deterministic, stratified, and explicit splits used as they are."""

import subprocess
import sys

import pytest

from forge_sdk.datasets import Split, split_indices


def test_the_same_inputs_give_the_same_split() -> None:
    first = split_indices(100, 0.8, seed=7)
    assert first == split_indices(100, 0.8, seed=7)
    assert len(first.train) == 80 and len(first.val) == 20 and not first.explicit
    assert sorted(first.train + first.val) == list(range(100))
    assert first.train == sorted(first.train) and first.val == sorted(first.val)
    assert first != split_indices(100, 0.8, seed=8)


def test_the_split_is_the_same_in_another_process_with_another_hash_seed() -> None:
    code = "from forge_sdk.datasets import split_indices; s = split_indices(50, 0.7, 3, stratify=['b', 'a'] * 25); print(s.val)"
    outputs = {
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={"PYTHONHASHSEED": seed}, check=True).stdout
        for seed in ("1", "2")
    }
    assert outputs == {str(split_indices(50, 0.7, 3, stratify=["b", "a"] * 25).val) + "\n"}


def test_a_known_split_never_changes() -> None:
    """Pinned: a change here would silently move items between train and val in re-runs."""
    assert split_indices(10, 0.7, seed=0) == Split(train=[1, 2, 3, 4, 5, 7, 8], val=[0, 6, 9], explicit=False)


def test_stratification_keeps_every_class_on_both_sides() -> None:
    labels = [0] * 90 + [1] * 2 + [2] * 3 + [3]
    split = split_indices(len(labels), 0.9, seed=1, stratify=labels)
    for cls in (0, 1, 2):
        assert any(labels[i] == cls for i in split.train) and any(labels[i] == cls for i in split.val)
    assert [i for i in split.train if labels[i] == 3] == [95]  # a single item trains
    assert sum(1 for i in split.val if labels[i] == 0) == 9


def test_small_sets_keep_one_item_on_each_side() -> None:
    assert split_indices(2, 0.99, seed=0) in (Split([0], [1], False), Split([1], [0], False))
    assert split_indices(1, 0.5, seed=0) == Split([0], [], False)
    assert split_indices(0, 0.5, seed=0) == Split([], [], False)


def test_explicit_splits_are_used_as_they_are() -> None:
    assert split_indices(5, 0.5, 0, explicit={"train": [0, 1, 2], "val": [3], "test": [4]}) == Split([0, 1, 2], [3], True)
    assert split_indices(5, 0.5, 0, explicit={"train": [0, 1, 2], "test": [3, 4]}) == Split([0, 1, 2], [3, 4], True)


def test_train_alone_is_cut_by_the_ratio() -> None:
    split = split_indices(6, 0.5, 0, explicit={"train": [1, 2, 3, 4]}, stratify=[0, 0, 0, 1, 1, 9])
    assert not split.explicit and sorted(split.train + split.val) == [1, 2, 3, 4]
    assert {0, 1} == {[0, 0, 0, 1, 1, 9][i] for i in split.val}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n": 3, "ratio": 1.0}, "ratio"),
        ({"n": 3, "ratio": 0.0}, "ratio"),
        ({"n": 3, "ratio": 0.5, "stratify": [0]}, "stratify has 1 labels for 3 items"),
        ({"n": 3, "ratio": 0.5, "explicit": {"val": [0]}}, "need 'train'"),
        ({"n": 3, "ratio": 0.5, "explicit": {"train": [0], "val": [3]}}, "outside 0..2"),
    ],
)
def test_bad_arguments_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        split_indices(seed=0, **kwargs)
