import pytest

from forge_common.errors import InvalidInput
from forge_common.jobspec import ClassificationHyperparameters, Task, resolve_hyperparameters
from forge_trainers.classification import Params


def test_defaults_are_the_ones_users_expect() -> None:
    resolved = resolve_hyperparameters(Task.CLASSIFICATION, {})
    assert (resolved["epochs"], resolved["imgsz"], resolved["batch"], resolved["train_val_ratio"]) == (100, 640, 16, 0.8)


def test_the_api_and_the_trainer_agree_on_every_default() -> None:
    from dataclasses import asdict

    assert ClassificationHyperparameters().model_dump() == asdict(Params())


def test_a_bad_hyperparameter_is_named() -> None:
    with pytest.raises(InvalidInput) as exc:
        resolve_hyperparameters(Task.CLASSIFICATION, {"epochs": 0})
    assert exc.value.field == "hyperparameters.epochs"
    assert "greater than or equal to 1" in exc.value.detail
    with pytest.raises(InvalidInput, match=r"hyperparameters\.momentum: Extra inputs"):
        resolve_hyperparameters(Task.CLASSIFICATION, {"momentum": 0.9})
    with pytest.raises(InvalidInput, match=r"hyperparameters\.optimizer"):
        resolve_hyperparameters(Task.CLASSIFICATION, {"optimizer": "lion"})


def test_the_shipped_architecture_list_matches_the_installed_timm() -> None:
    import timm

    from forge_common.jobspec import timm_architectures

    assert timm_architectures() == frozenset(timm.list_models()), (
        "timm changed: regenerate libs/common/forge_common/data/timm_architectures.txt from timm.list_models()"
    )
