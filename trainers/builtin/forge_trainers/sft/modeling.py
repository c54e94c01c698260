"""The base model: where it comes from, how it loads (full, LoRA, 4-bit QLoRA) and what trains.

Every start goes through ``from_pretrained`` on a folder: a checkpoint (local or fetched from
object storage), a hub id, or — for a from-config entry — the folder this module writes after a
seeded random initialisation, with the tokenizer it trained and (LLaVA) an offline processor. One
loading path, so a tiny from-config model exercises exactly what a real checkpoint goes through.

LoRA targets (``target_modules`` unset):

* qwen2, llama: every projection of the decoder (q/k/v/o, gate/up/down) — the QLoRA paper's choice;
* any other causal LM: PEFT's ``all-linear`` (every linear layer but the output head);
* vision-language families: the same projections, but by a regex anchored on the language model
  (``language_model`` / ``text_model``), so the vision tower — whose attention layers have the same
  names — never gets an adapter. A given ``target_modules`` list is anchored the same way.

With a from-config base (a vocabulary trained for this run) LoRA also trains the token embeddings
and the output head in full (PEFT ``modules_to_save``): their rows are random, and a frozen
random head bounds every logit whatever the adapters do.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from forge_sdk import Run, TrainerError
from forge_sdk.datasets import Conversation

from .. import pool
from . import chat
from .params import Params

LM_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
LLM_FAMILIES = ("qwen2", "llama")  # their projections are known by name
TEXT_FAMILIES = (*LLM_FAMILIES, "causal-lm")
VLM_FAMILIES = ("qwen2-vl", "idefics3", "llava")
# module-name parts of the vision side of VLMs: never adapted, never quantized
VISION_PARTS = ("vision_tower", "visual", "vision_model", "multi_modal_projector", "connector", "image_newline")
LANGUAGE_PARTS = ("language_model", "text_model")


@dataclass(frozen=True)
class Precision:
    """Autocast dtype (None: fp32) and whether fp16 needs a gradient scaler."""

    autocast: torch.dtype | None
    scaler: bool = False

    @property
    def name(self) -> str:
        return {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}.get(self.autocast, str(self.autocast))


def bf16_supported(device: torch.device) -> bool:
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    if device.type == "xpu":
        return bool(getattr(torch.xpu, "is_bf16_supported", lambda: True)())
    return True  # CPU autocast supports bf16, but it is only used when asked for


def resolve_precision(choice: str, device: torch.device) -> Precision:
    """``auto``: bf16 on a GPU that supports it, fp32 elsewhere (never lower precision on a CPU
    unless asked: CPU bf16 is slow without AMX and changes results)."""
    if choice == "no":
        return Precision(None)
    if choice == "auto":
        return Precision(torch.bfloat16) if device.type != "cpu" and bf16_supported(device) else Precision(None)
    if choice == "bf16":
        if not bf16_supported(device):
            raise TrainerError(
                "device_unavailable", f"mixed_precision bf16 is not supported on this {device.type} device", "use fp16 or no"
            )
        return Precision(torch.bfloat16)
    if device.type == "cpu":
        raise TrainerError("bad_config", "mixed_precision fp16 needs a GPU (loss scaling on CPU is not supported)", "use bf16 or no on CPU")
    return Precision(torch.float16, scaler=device.type == "cuda")


# ---- where the base comes from ------------------------------------------------------------------


@dataclass(frozen=True)
class Base:
    """What ``from_pretrained`` loads: a folder (or hub id), and whether this run created it."""

    source: Path | str
    from_config: bool


def is_vlm_task(config: dict[str, Any], spec: pool.BaseModelSpec) -> bool:
    task = config.get("task")
    if task in ("llm-sft", "vlm-sft"):
        if (task == "vlm-sft" and spec.family in TEXT_FAMILIES) or (task == "llm-sft" and spec.family in VLM_FAMILIES):
            raise TrainerError("bad_config", f"base model {spec.name!r} (family {spec.family}) cannot serve task {task}")
        return bool(task == "vlm-sft")
    if task is not None:
        raise TrainerError("bad_config", f"the sft trainer serves llm-sft and vlm-sft, not {task!r}")
    return spec.family in VLM_FAMILIES


def create_from_config(spec: pool.BaseModelSpec, train: list[Conversation], *, is_vlm: bool, seed: int, dest: Path, run: Run) -> None:
    """Train the tokenizer on the training split, size the model from it, initialise it with the
    seed and save everything (model, tokenizer, processor) as a checkpoint folder."""
    from transformers import AutoConfig

    from ..common import seed_everything

    wanted = (spec.tokenizer or {}).get("train")
    if not isinstance(wanted, dict):
        raise TrainerError(
            "bad_config",
            f"base model {spec.name!r} is built from config but says nothing about its tokenizer",
            "give the pool entry source.tokenizer = {'train': {'vocab_size': 1024}}",
        )
    vocab_size = int(wanted.get("vocab_size", 1024))
    tokenizer = chat.train_tokenizer(chat.corpus(train), vocab_size, with_image_token=is_vlm)
    run.log(f"trained a byte-level BPE tokenizer on the training split: {len(tokenizer)} tokens (asked for at most {vocab_size})")
    settings = copy.deepcopy(spec.config)
    model_type = settings.pop("model_type", None)
    if not model_type:
        raise TrainerError("bad_config", f"base model {spec.name!r}: source.config needs a model_type")
    ids = {"pad_token_id": tokenizer.pad_token_id, "eos_token_id": tokenizer.eos_token_id, "bos_token_id": None}
    if is_vlm:
        if model_type != "llava":
            raise TrainerError(
                "bad_config",
                f"from-config vision-language models are built for the llava family only, not {model_type!r}",
                "register a qwen2-vl or idefics3 checkpoint as a local or s3 base model",
            )
        settings["text_config"] = {**settings.get("text_config", {}), "vocab_size": len(tokenizer), **ids}
        settings["image_token_index"] = tokenizer.convert_tokens_to_ids(chat.IMAGE_PLACEHOLDER)
    else:
        settings.update(vocab_size=len(tokenizer), **ids)
    try:
        config = AutoConfig.for_model(model_type, **settings)
    except Exception as exc:
        raise TrainerError("bad_config", f"base model {spec.name!r}: invalid source.config ({exc})") from None
    seed_everything(seed)
    model = model_class(is_vlm).from_config(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = None
    model.save_pretrained(dest)
    (llava_processor(config, tokenizer) if is_vlm else tokenizer).save_pretrained(dest)
    params = sum(p.numel() for p in model.parameters())
    run.log(f"initialised {spec.name} ({model_type}, {params / 1e6:.2f}M parameters) from its config with seed {seed}")


def llava_processor(config: Any, tokenizer: Any) -> Any:
    """A LLaVA processor built offline: a CLIP-style image processor at the vision tower's size."""
    from transformers import CLIPImageProcessor, LlavaProcessor

    vision = config.vision_config
    size = int(vision.image_size)
    images = CLIPImageProcessor(size={"shortest_edge": size}, crop_size={"height": size, "width": size})
    has_cls = str(getattr(vision, "model_type", "")).startswith("clip")
    return LlavaProcessor(
        image_processor=images,
        tokenizer=tokenizer,
        patch_size=int(vision.patch_size),
        vision_feature_select_strategy=config.vision_feature_select_strategy,
        num_additional_image_tokens=1 if has_cls else 0,
        chat_template=chat.CHATML_TEMPLATE,
    )


# ---- loading -------------------------------------------------------------------------------------


def model_class(is_vlm: bool) -> Any:
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    return AutoModelForImageTextToText if is_vlm else AutoModelForCausalLM


def load_tokenizer(source: Path | str, *, is_vlm: bool) -> tuple[Any, Any | None]:
    """(tokenizer, processor or None) from the base folder; VLMs need their processor."""
    from transformers import AutoProcessor, AutoTokenizer

    try:
        if is_vlm:
            processor = AutoProcessor.from_pretrained(source)
            tokenizer = getattr(processor, "tokenizer", None)
            if tokenizer is None:
                raise TrainerError("bad_config", f"base model {source}: its processor has no tokenizer")
            return tokenizer, processor
        return AutoTokenizer.from_pretrained(source), None
    except TrainerError:
        raise
    except Exception as exc:
        what = "processor" if is_vlm else "tokenizer"
        raise TrainerError(
            "bad_config", f"cannot load the base model's {what} from {source}: {exc}", "the checkpoint folder needs its tokenizer files"
        ) from None


def check_qlora(device: torch.device, quant_type: str) -> str:
    """Prove that 4-bit layers work here (quantize, forward, backward on a tiny layer) before the
    model loads, so an unsupported device fails with a reason instead of deep in bitsandbytes."""
    try:
        import bitsandbytes as bnb
    except ImportError:
        raise TrainerError(
            "bad_config",
            "method qlora needs bitsandbytes, which this trainer's environment does not have",
            "install bitsandbytes>=0.49, or use method lora",
        ) from None
    version = str(getattr(bnb, "__version__", "0"))
    if device.type == "cpu" and _version_tuple(version) < (0, 49):
        raise TrainerError(
            "device_unavailable",
            f"qlora on CPU needs bitsandbytes >= 0.49 (4-bit CPU kernels); this is {version}",
            "upgrade bitsandbytes, use a GPU, or use method lora",
        )
    try:
        layer = bnb.nn.Linear4bit(64, 64, bias=False, compute_dtype=torch.float32, quant_type=quant_type).to(device)
        x = torch.randn(2, 64, device=device, requires_grad=True)
        layer(x).sum().backward()
    except Exception as exc:
        raise TrainerError(
            "device_unavailable",
            f"qlora cannot run on this {device.type} device: bitsandbytes {version} failed a 4-bit {quant_type} layer ({type(exc).__name__}: {exc})",
            "use method lora, or an NVIDIA GPU",
        ) from None
    return version


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version)[:3])


def _device_map(device: torch.device) -> dict[str, Any]:
    return {"": "cpu" if device.type == "cpu" else f"{device.type}:{device.index or 0}"}


def load_dtype(p: Params, precision: Precision) -> torch.dtype:
    """Weights that train stay fp32 (autocast computes in lower precision); a frozen LoRA base is
    loaded in the compute dtype to halve its memory."""
    if p.method == "lora" and precision.autocast is not None:
        return precision.autocast
    return torch.float32


def load_model(source: Path | str, p: Params, *, is_vlm: bool, precision: Precision, device: torch.device) -> Any:
    kwargs: dict[str, Any] = {"dtype": load_dtype(p, precision)}
    if p.method == "qlora":
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type=p.qlora_quant_type,
            bnb_4bit_compute_dtype=precision.autocast or torch.float32,
            bnb_4bit_use_double_quant=True,
            # patterns match from the start of a module's name: reach the vision side wherever it sits
            llm_int8_skip_modules=["lm_head", *(rf".*{part}" for part in VISION_PARTS)] if is_vlm else ["lm_head"],
        )
        kwargs["device_map"] = _device_map(device)
    try:
        model = model_class(is_vlm).from_pretrained(source, **kwargs)
    except Exception as exc:
        kind = "vision-language (image-text-to-text)" if is_vlm else "causal language"
        raise TrainerError("bad_config", f"cannot load {source} as a {kind} model: {type(exc).__name__}: {exc}") from None
    if p.method != "qlora":
        model.to(device)
    return model


def lora_targets(family: str, is_vlm: bool, given: list[str] | None) -> str | list[str]:
    """PEFT ``target_modules``: names, ``all-linear``, or a regex anchored on the language model."""
    if not is_vlm:
        if given:
            return list(given)
        return list(LM_PROJECTIONS) if family in LLM_FAMILIES else "all-linear"
    names = "|".join(re.escape(n) for n in (given or LM_PROJECTIONS))
    return rf"^(?:.*\.)?(?:{'|'.join(LANGUAGE_PARTS)})\..*\.(?:{names})$"


def embedding_names(model: Any) -> list[str]:
    """Leaf names of the input embedding and output head (PEFT matches ``modules_to_save`` by suffix)."""
    wanted = {id(m) for m in (model.get_input_embeddings(), model.get_output_embeddings()) if m is not None}
    return sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules() if id(module) in wanted})


def adapt(model: Any, p: Params, *, family: str, is_vlm: bool, new_vocabulary: bool) -> Any:
    """Make the model trainable as the method says (gradient checkpointing included).

    With a vocabulary trained for this run (a from-config base), LoRA also trains the token
    embeddings and the output head in full: their random rows mean nothing yet, and low-rank
    updates of the projections cannot make up for a frozen random head (the final norm bounds the
    hidden state, so the head bounds every logit)."""
    checkpointing = {"use_reentrant": False}
    if p.method == "full":
        if p.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=checkpointing)
        model.requires_grad_(True)
        return model
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

    if p.method == "qlora":
        model = prepare_model_for_kbit_training(
            model, use_gradient_checkpointing=p.gradient_checkpointing, gradient_checkpointing_kwargs=checkpointing
        )
    elif p.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=checkpointing)
    targets = lora_targets(family, is_vlm, p.target_modules)
    config = LoraConfig(
        r=p.lora_r,
        lora_alpha=p.lora_alpha,
        lora_dropout=p.lora_dropout,
        target_modules=targets,
        bias="none",
        task_type=None if is_vlm else "CAUSAL_LM",
        modules_to_save=embedding_names(model) if new_vocabulary else None,
    )
    try:
        model = get_peft_model(model, config)
    except ValueError as exc:
        raise TrainerError(
            "bad_config", f"LoRA target_modules {targets!r} do not fit this model: {exc}", "name modules the model has, e.g. q_proj, v_proj"
        ) from None
    if is_vlm:
        vision = [name for name in adapted_modules(model) if any(part in name.split(".") for part in VISION_PARTS)]
        if vision:
            raise TrainerError("trainer_crash", f"LoRA reached the vision side ({vision[0]}); it must adapt the language model only")
    return model


def adapted_modules(model: Any) -> list[str]:
    """Names of the modules that carry a LoRA adapter."""
    return [name for name, module in model.named_modules() if hasattr(module, "lora_A") and len(getattr(module, "lora_A", {})) > 0]


def main_weights_file(folder: Path) -> Path:
    """The file a registry points at: the adapter, the single weights file, or the shard index."""
    for name in (
        "adapter_model.safetensors",
        "model.safetensors",
        "model.safetensors.index.json",
        "adapter_model.bin",
        "pytorch_model.bin",
    ):
        if (folder / name).exists():
            return folder / name
    return pool.weights_file(folder)
