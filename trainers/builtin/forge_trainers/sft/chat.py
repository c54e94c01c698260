"""Conversations → token ids with assistant-only labels, and the tokenizer of from-config models.

Two ways to find the assistant tokens, so any chat template works:

* a template that marks assistant turns with ``{% generation %}`` (ours, and some checkpoints')
  gets them from ``apply_chat_template(..., return_assistant_tokens_mask=True)`` — on the
  tokenizer for text, on the processor for images (which shifts the marks past expanded image
  tokens);
* any other template (most checkpoints') by rendering prefixes: the tokens that rendering
  "the conversation up to this assistant turn" adds to "up to the turn before, plus the
  generation prompt" are that turn's answer. Longest common prefixes keep it robust to templates
  that rewrite earlier turns.

From-config models have no tokenizer: one is trained here (byte-level BPE with the ``tokenizers``
library, on the training split only, so validation text never shapes it) and wrapped as a
``PreTrainedTokenizerFast`` carrying the ChatML template below.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from PIL import Image

from forge_sdk import TrainerError
from forge_sdk.datasets import Conversation

IMAGE_PLACEHOLDER = "<image>"
PAD, IM_START, IM_END = "<|pad|>", "<|im_start|>", "<|im_end|>"
GENERATION_TAG = re.compile(r"\{%-?\s*generation\s*-?%\}")

# ChatML. Content is a string (text) or a list of parts ({"type": "text"|"image"}), the form
# processors use; assistant turns, their <|im_end|> included, are marked for the label mask so the
# model learns to stop.
CHATML_TEMPLATE = (
    "{%- macro render(content) -%}"
    "{%- if content is string -%}{{- content -}}"
    "{%- else -%}{%- for part in content -%}"
    "{%- if part['type'] == 'image' -%}{{- '<image>' -}}"
    "{%- elif part['type'] == 'text' -%}{{- part['text'] -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{%- endmacro -%}"
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\n' -}}"
    "{%- if message['role'] == 'assistant' -%}"
    "{%- generation -%}{{- render(message['content']) + '<|im_end|>' -}}{%- endgeneration -%}{{- '\n' -}}"
    "{%- else -%}{{- render(message['content']) + '<|im_end|>\n' -}}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}"
)


# ---- the tokenizer of from-config models ---------------------------------------------------------


def corpus(conversations: Iterable[Conversation]) -> Iterator[str]:
    """The text a trained tokenizer learns from: role and content of every turn (no placeholders)."""
    for conv in conversations:
        for message in conv.messages:
            yield f"{message.role}\n{message.content.replace(IMAGE_PLACEHOLDER, ' ')}"


def train_tokenizer(texts: Iterable[str], vocab_size: int, *, with_image_token: bool) -> Any:
    """A byte-level BPE (any text encodes, nothing is unknown) with ChatML special tokens.

    The vocabulary stops growing when the corpus has no more merges, so a small dataset gives a
    smaller vocabulary than asked; the model is sized from the tokenizer, never the other way.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials = [PAD, IM_START, IM_END] + ([IMAGE_PLACEHOLDER] if with_image_token else [])
    if vocab_size < 256 + len(specials) + 1:
        raise TrainerError(
            "bad_config",
            f"source.tokenizer.train.vocab_size must be at least {256 + len(specials) + 1} (the 256 bytes, the special tokens and one merge), got {vocab_size}",
        )
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    backend.train_from_iterator(texts, trainer)
    extra = [IM_START] + ([IMAGE_PLACEHOLDER] if with_image_token else [])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token=IM_END, pad_token=PAD, additional_special_tokens=extra, chat_template=CHATML_TEMPLATE
    )
    if with_image_token:
        tokenizer.image_token = IMAGE_PLACEHOLDER
    return tokenizer


def has_generation_marks(template: str) -> bool:
    return bool(GENERATION_TAG.search(template))


def template_of(tokenizer: Any, processor: Any | None, override: str | None) -> str | None:
    """The template to train with: the hyperparameter, else the processor's, else the tokenizer's."""
    if override:
        return override
    for owner in (processor, tokenizer):
        template = getattr(owner, "chat_template", None) if owner is not None else None
        if isinstance(template, dict):  # several named templates: the default one
            template = template.get("default")
        if isinstance(template, str) and template.strip():
            return template
    return None


# ---- encoding ----------------------------------------------------------------------------------


@dataclass
class Encoded:
    """One conversation as the model sees it: ids, which of them are the assistant's, and (VLM)
    the processor's image tensors."""

    input_ids: list[int]
    assistant: list[int]
    extras: dict[str, torch.Tensor] = field(default_factory=dict)
    token_extras: dict[str, list[int]] = field(default_factory=dict)
    """Per-token processor outputs (e.g. Qwen2-VL's ``mm_token_type_ids``): cut and padded with the ids."""


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def _split_tensors(out: dict[str, Any], length: int) -> tuple[dict[str, torch.Tensor], dict[str, list[int]]]:
    """A processor's extra outputs: image tensors, and per-token integer rows (one per input id)."""
    extras: dict[str, torch.Tensor] = {}
    token_extras: dict[str, list[int]] = {}
    for key, value in out.items():
        if not isinstance(value, torch.Tensor) or key in ("input_ids", "attention_mask", "assistant_masks"):
            continue
        if value.dim() == 2 and tuple(value.shape) == (1, length) and not value.is_floating_point():
            token_extras[key] = [int(v) for v in value[0].tolist()]
        else:
            extras[key] = value
    return extras, token_extras


class ChatEncoder:
    """Applies one chat template to conversations, with the tokenizer (text) or processor (VLM)."""

    def __init__(self, tokenizer: Any, processor: Any | None, template: str, root: Path) -> None:
        self.tokenizer = tokenizer
        self.processor = processor
        self.template = template
        self.root = root
        self.native_marks = has_generation_marks(template)

    @property
    def how(self) -> str:
        return "the template's {% generation %} marks" if self.native_marks else "rendering each assistant turn's prefix"

    def messages(self, conv: Conversation) -> list[dict[str, Any]]:
        """Plain string turns for text; for a VLM, parts with the images in placeholder order."""
        if self.processor is None:
            return [{"role": m.role, "content": m.content} for m in conv.messages]
        images = iter(conv.images)
        out: list[dict[str, Any]] = []
        for m in conv.messages:
            parts: list[dict[str, Any]] = []
            for i, chunk in enumerate(m.content.split(IMAGE_PLACEHOLDER)):
                if i > 0:
                    parts.append({"type": "image", "image": self._image(next(images))})
                if chunk:
                    parts.append({"type": "text", "text": chunk})
            out.append({"role": m.role, "content": parts})
        return out

    def _image(self, path: str) -> Image.Image:
        try:
            with Image.open(self.root / path) as img:
                return img.convert("RGB")
        except OSError as exc:
            raise TrainerError("dataset_error", f"{path}: cannot read the image ({exc})") from None

    def _apply(self, messages: list[dict[str, Any]], *, generation_prompt: bool = False, marks: bool = False) -> dict[str, Any]:
        try:
            if self.processor is not None:
                out = self.processor.apply_chat_template(
                    messages,
                    chat_template=self.template,
                    tokenize=True,
                    return_dict=True,
                    return_tensors="pt",
                    add_generation_prompt=generation_prompt,
                    return_assistant_tokens_mask=marks,
                )
                return dict(out)
            return dict(
                self.tokenizer.apply_chat_template(
                    messages,
                    chat_template=self.template,
                    tokenize=True,
                    return_dict=True,
                    add_generation_prompt=generation_prompt,
                    return_assistant_tokens_mask=marks,
                )
            )
        except TrainerError:
            raise
        except Exception as exc:
            raise TrainerError(
                "bad_config",
                f"the chat template cannot render a conversation: {type(exc).__name__}: {exc}",
                "check hyperparameters.chat_template",
            ) from None

    @staticmethod
    def _ids(out: dict[str, Any]) -> list[int]:
        ids = out["input_ids"]
        if isinstance(ids, torch.Tensor):
            return [int(i) for i in ids.reshape(-1).tolist()]
        return [int(i) for i in ids]

    def encode(self, conv: Conversation) -> Encoded:
        messages = self.messages(conv)
        out = self._apply(messages, marks=self.native_marks)
        ids = self._ids(out)
        if self.native_marks:
            mask = out["assistant_masks"]
            assistant = [int(v) for v in (mask.reshape(-1).tolist() if isinstance(mask, torch.Tensor) else mask)]
        else:
            assistant = self._prefix_marks(messages, ids)
        extras, token_extras = _split_tensors(out, len(ids))
        return Encoded(ids, assistant, extras, token_extras)

    def image_inputs(self, conv: Conversation) -> dict[str, torch.Tensor]:
        """Only the processor's image tensors (one rendering, no label work), for a batch."""
        out = self._apply(self.messages(conv))
        return _split_tensors(out, len(self._ids(out)))[0]

    def _prefix_marks(self, messages: list[dict[str, Any]], ids: list[int]) -> list[int]:
        """Assistant spans from prefix renderings, for templates without generation marks."""
        assistant = [0] * len(ids)
        for k, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            before = self._ids(self._apply(messages[:k], generation_prompt=True)) if k else []
            through = self._ids(self._apply(messages[: k + 1]))
            start, end = _common_prefix(before, ids), _common_prefix(through, ids)
            # the turn ends at its end-of-turn token; what the template puts after it is a separator
            ends = [i for i in range(start, end) if ids[i] == self.tokenizer.eos_token_id]
            end = ends[-1] + 1 if ends else end
            for i in range(start, end):
                assistant[i] = 1
        return assistant
