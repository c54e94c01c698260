"""The SFT hyperparameters and their defaults, as the trainer reads them from ``CONFIG_JSON``.

The platform sends them resolved by ``forge_common.jobspec.SFTHyperparameters``; this copy lets the
trainer run on a laptop with no platform (and without importing the services' library). A test
holds the two equal, as for the classification trainer.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from forge_sdk import TrainerError

METHODS = ("full", "lora", "qlora")
SCHEDULERS = ("cosine", "linear", "constant")
QUANT_TYPES = ("nf4", "fp4")
PRECISIONS = ("auto", "no", "bf16", "fp16")


@dataclass(frozen=True)
class Params:
    """Every hyperparameter of an llm-sft / vlm-sft job (names and defaults as the api's)."""

    method: str = "lora"
    epochs: int = 3
    batch: int = 4
    gradient_accumulation: int = 1
    lr: float = 0.0002
    lr_scheduler: str = "cosine"
    warmup_ratio: float = 0.03
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    max_seq_length: int = 2048
    packing: bool = False
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    target_modules: list[str] | None = None
    qlora_quant_type: str = "nf4"
    gradient_checkpointing: bool = False
    mixed_precision: str = "auto"
    eval_steps: int | None = None
    save_steps: int | None = None
    merge: bool = False
    chat_template: str | None = None
    train_val_ratio: float = 0.8
    seed: int = 0

    @property
    def uses_lora(self) -> bool:
        return self.method in ("lora", "qlora")

    @classmethod
    def from_config(cls, given: dict[str, Any]) -> Params:
        """Unknown names and out-of-range values fail as bad_config, naming the field."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(given) - known)
        if unknown:
            raise TrainerError("bad_config", f"unknown hyperparameter(s): {', '.join(unknown)}", f"known: {', '.join(sorted(known))}")
        try:
            params = cls(**given)
        except TypeError as exc:
            raise TrainerError("bad_config", f"hyperparameters: {exc}") from None
        params._check()
        return params

    def _check(self) -> None:
        choices = {
            "method": (self.method, METHODS),
            "lr_scheduler": (self.lr_scheduler, SCHEDULERS),
            "qlora_quant_type": (self.qlora_quant_type, QUANT_TYPES),
            "mixed_precision": (self.mixed_precision, PRECISIONS),
        }
        for name, (value, allowed) in choices.items():
            if value not in allowed:
                raise TrainerError("bad_config", f"hyperparameters.{name} must be one of {', '.join(allowed)}, got {value!r}")
        positive = {
            "epochs": self.epochs,
            "batch": self.batch,
            "gradient_accumulation": self.gradient_accumulation,
            "lora_r": self.lora_r,
            "lora_alpha": self.lora_alpha,
            "eval_steps": self.eval_steps if self.eval_steps is not None else 1,
            "save_steps": self.save_steps if self.save_steps is not None else 1,
        }
        for field_name, number in positive.items():
            if not isinstance(number, int) or isinstance(number, bool) or number < 1:
                raise TrainerError("bad_config", f"hyperparameters.{field_name} must be an integer >= 1, got {number!r}")
        if not 0 < self.lr <= 1 or self.max_grad_norm <= 0:
            raise TrainerError("bad_config", "hyperparameters out of range: 0 < lr <= 1 and max_grad_norm > 0")
        if not 0 <= self.warmup_ratio <= 0.5 or not 0 <= self.weight_decay <= 1 or not 0 <= self.lora_dropout < 1:
            raise TrainerError(
                "bad_config", "hyperparameters out of range: 0 <= warmup_ratio <= 0.5, 0 <= weight_decay <= 1, 0 <= lora_dropout < 1"
            )
        if not 0 < self.train_val_ratio < 1:
            raise TrainerError("bad_config", f"hyperparameters.train_val_ratio must be between 0 and 1, got {self.train_val_ratio}")
        if self.max_seq_length < 16:
            raise TrainerError("bad_config", f"hyperparameters.max_seq_length must be >= 16, got {self.max_seq_length}")
        if self.target_modules is not None and (
            not isinstance(self.target_modules, list)
            or not self.target_modules
            or not all(isinstance(m, str) and m for m in self.target_modules)
        ):
            raise TrainerError("bad_config", "hyperparameters.target_modules must be a non-empty list of module names, or null")
