"""The base-model pool: what a job starts from.

An entry has a ``name`` (what jobs name in ``base_model``), a ``family`` (which decides the
trainer code that builds it), the ``tasks`` it serves, and a ``source``:

* ``config``  — random initialisation from a configuration (full training, and tests): the
  ``config`` dict is the model's configuration (for timm, ``{"architecture": …}``);
* ``local``   — a folder on the scheduler's machine holding a Hugging Face-format checkpoint (or a
  timm checkpoint file);
* ``s3``      — the same under an object-storage prefix;
* ``hub``     — a Hugging Face hub id, for installations that have internet.

The pool ships seed entries that work with no internet, so a fresh install can train every task.
``timm/<architecture>`` names any timm architecture without a pool entry (the walking-skeleton
contract).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .jobspec import Task, timm_architectures

SourceKind = Literal["config", "local", "s3", "hub"]
BASE_MODEL_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,149}$"


@dataclass(frozen=True)
class Family:
    name: str
    tasks: tuple[Task, ...]
    description: str
    # model_type values a Hugging Face config.json of this family may carry
    model_types: tuple[str, ...] = ()
    needs_tokenizer: bool = False
    needs_processor: bool = False
    hf_format: bool = True  # False: a timm checkpoint file


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("timm", (Task.CLASSIFICATION,), "any timm image classifier", hf_format=False),
        Family("rt-detr", (Task.DETECTION,), "RT-DETR (transformers RTDetrForObjectDetection)", ("rt_detr",)),
        Family("rt-detr-v2", (Task.DETECTION,), "RT-DETRv2 (transformers RTDetrV2ForObjectDetection)", ("rt_detr_v2",)),
        Family("segformer", (Task.SEGMENTATION,), "SegFormer semantic segmentation", ("segformer",)),
        Family("qwen2", (Task.LLM_SFT,), "Qwen2 / Qwen2.5 causal language models", ("qwen2",), needs_tokenizer=True),
        Family("llama", (Task.LLM_SFT,), "LLaMA-family causal language models", ("llama",), needs_tokenizer=True),
        # any other AutoModelForCausalLM checkpoint: LoRA then targets every linear layer but the head
        Family("causal-lm", (Task.LLM_SFT,), "any other causal language model (Mistral, Gemma, Phi, Qwen3, …)", needs_tokenizer=True),
        Family(
            "qwen2-vl",
            (Task.VLM_SFT,),
            "Qwen2-VL / Qwen2.5-VL vision-language models",
            ("qwen2_vl", "qwen2_5_vl"),
            needs_tokenizer=True,
            needs_processor=True,
        ),
        Family(
            "idefics3",
            (Task.VLM_SFT,),
            "SmolVLM / Idefics3 vision-language models",
            ("idefics3", "smolvlm"),
            needs_tokenizer=True,
            needs_processor=True,
        ),
        Family("llava", (Task.VLM_SFT,), "LLaVA vision-language models", ("llava",), needs_tokenizer=True, needs_processor=True),
    )
}


class Source(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: SourceKind
    uri: str | None = Field(None, description="local: a folder path; s3: s3://bucket/prefix; hub: an id such as Qwen/Qwen2.5-0.5B")
    config: dict[str, Any] = Field(default_factory=dict, description="config: the model configuration to initialise from")
    tokenizer: dict[str, Any] | None = Field(
        None, description="config-sourced language models: how to get a tokenizer, e.g. {'train': {'vocab_size': 1024}}"
    )

    @model_validator(mode="after")
    def _consistent(self) -> Source:
        if self.kind == "config":
            if self.uri:
                raise ValueError("a config source has no uri")
        elif not self.uri:
            raise ValueError(f"a {self.kind} source needs a uri")
        elif self.kind == "s3" and not self.uri.startswith("s3://"):
            raise ValueError("an s3 source's uri starts with s3://")
        elif self.kind == "local" and not self.uri.startswith("/"):
            raise ValueError("a local source's uri is an absolute folder path")
        return self


class BaseModelIn(BaseModel):
    """What ``POST /v1/base-models`` accepts."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=BASE_MODEL_NAME_PATTERN, description="What jobs name in base_model")
    family: str
    tasks: list[Task] | None = Field(None, description="Default: every task the family serves")
    source: Source
    license: str = Field("", max_length=500, description="License note")
    description: str = Field("", max_length=2000)

    @model_validator(mode="after")
    def _known_family(self) -> BaseModelIn:
        family = FAMILIES.get(self.family)
        if family is None:
            raise ValueError(f"unknown family {self.family!r}; known: {', '.join(FAMILIES)}")
        tasks = self.tasks or list(family.tasks)
        wrong = [t.value for t in tasks if t not in family.tasks]
        if wrong:
            raise ValueError(f"family {self.family} cannot serve {', '.join(wrong)}; it serves {', '.join(t.value for t in family.tasks)}")
        self.tasks = tasks
        if self.family == "timm":
            arch = self.source.config.get("architecture")
            if arch not in timm_architectures():
                raise ValueError(f"timm has no architecture {arch!r} (source.config.architecture names it)")
        return self


def _tiny_rtdetr(num_queries: int = 30) -> dict[str, Any]:
    return {
        "backbone_config": {
            "model_type": "rt_detr_resnet",
            "embedding_size": 16,
            "hidden_sizes": [16, 32, 64, 128],
            "depths": [1, 1, 1, 1],
            "layer_type": "basic",
            "out_indices": [2, 3, 4],
        },
        "encoder_in_channels": [32, 64, 128],
        "feat_strides": [8, 16, 32],
        "encoder_hidden_dim": 32,
        "encoder_ffn_dim": 64,
        "encoder_attention_heads": 2,
        "encoder_layers": 1,
        "d_model": 32,
        "decoder_in_channels": [32, 32, 32],
        "decoder_ffn_dim": 64,
        "decoder_layers": 2,
        "decoder_attention_heads": 2,
        "decoder_n_points": 2,
        "num_queries": num_queries,
        "num_denoising": 10,
        "freeze_backbone_batch_norms": False,
    }


TINY_LM = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}

# Seed entries: from config, so they work with no internet. Names are stable: jobs refer to them.
SEEDS: tuple[BaseModelIn, ...] = (
    *(
        BaseModelIn(
            name=f"timm/{arch}",
            family="timm",
            source=Source(kind="config", config={"architecture": arch}),
            license="Apache-2.0 (timm); architecture only, random initialisation",
            description=f"timm {arch}, trained from scratch",
        )
        for arch in (
            "resnet18",
            "resnet10t",
            "efficientnet_b0",
            "mobilenetv3_small_100",
            "convnext_atto",
            "vit_tiny_patch16_224",
            "test_vit",
        )
    ),
    BaseModelIn(
        name="rt-detr-tiny",
        family="rt-detr",
        source=Source(kind="config", config=_tiny_rtdetr()),
        license="Apache-2.0 (transformers); random initialisation",
        description="A 0.5M-parameter RT-DETR with a ResNet backbone, for full training on small sets and for tests",
    ),
    BaseModelIn(
        name="rt-detr-v2-tiny",
        family="rt-detr-v2",
        source=Source(kind="config", config={**_tiny_rtdetr(), "decoder_n_levels": 3, "decoder_offset_scale": 0.5}),
        license="Apache-2.0 (transformers); random initialisation",
        description="The RT-DETRv2 decoder on the same tiny backbone",
    ),
    BaseModelIn(
        name="segformer-tiny",
        family="segformer",
        source=Source(
            kind="config",
            config={
                "num_encoder_blocks": 4,
                "depths": [1, 1, 1, 1],
                "sr_ratios": [8, 4, 2, 1],
                "hidden_sizes": [16, 32, 64, 128],
                "num_attention_heads": [1, 2, 4, 8],
                "decoder_hidden_size": 64,
            },
        ),
        license="NVIDIA Source Code License for SegFormer weights; architecture only here (transformers, Apache-2.0)",
        description="A tiny SegFormer (MiT-style encoder, all-MLP decoder) from config",
    ),
    BaseModelIn(
        name="qwen2-tiny",
        family="qwen2",
        source=Source(kind="config", config={"model_type": "qwen2", **TINY_LM}, tokenizer={"train": {"vocab_size": 1024}}),
        license="Apache-2.0 (architecture); random initialisation",
        description="A ~0.2M-parameter Qwen2 with a byte-level BPE tokenizer trained on the job's data",
    ),
    BaseModelIn(
        name="llama-tiny",
        family="llama",
        source=Source(kind="config", config={"model_type": "llama", **TINY_LM}, tokenizer={"train": {"vocab_size": 1024}}),
        license="LLaMA architecture; random initialisation",
        description="A ~0.2M-parameter LLaMA with a byte-level BPE tokenizer trained on the job's data",
    ),
    BaseModelIn(
        name="llava-tiny",
        family="llava",
        source=Source(
            kind="config",
            config={
                "model_type": "llava",
                "text_config": {"model_type": "llama", **TINY_LM},
                "vision_config": {
                    "model_type": "clip_vision_model",
                    "hidden_size": 32,
                    "intermediate_size": 64,
                    "num_hidden_layers": 2,
                    "num_attention_heads": 2,
                    "image_size": 32,
                    "patch_size": 8,
                },
            },
            tokenizer={"train": {"vocab_size": 1024}},
        ),
        license="LLaVA architecture; random initialisation",
        description="A tiny LLaVA (CLIP vision tower + LLaMA) for tests and full training on small sets",
    ),
)


def seed_names() -> frozenset[str]:
    return frozenset(s.name for s in SEEDS)


_TIMM_RE = re.compile(r"^timm/([a-z0-9_.]+)$")


def virtual_timm(name: str) -> BaseModelIn | None:
    """``timm/<architecture>`` without a pool entry: a from-config timm model."""
    m = _TIMM_RE.match(name)
    if not m or m.group(1) not in timm_architectures():
        return None
    arch = m.group(1)
    return BaseModelIn(name=name, family="timm", source=Source(kind="config", config={"architecture": arch}), description=f"timm {arch}")
