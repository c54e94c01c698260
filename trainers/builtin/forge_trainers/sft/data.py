"""Examples (ids + labels), truncation that is counted, optional packing, and batches.

Labels are the input ids on assistant tokens and -100 elsewhere (the model shifts them), so the
loss is on the answers only. A conversation longer than ``max_seq_length`` keeps its first
``max_seq_length`` tokens; one left with no assistant token (or, VLM, with an image cut in half)
is dropped. Both are counted and logged, because silently losing answers is how fine-tunes go
wrong.

Packing concatenates conversations into rows of at most ``max_seq_length`` tokens, with position
ids restarting at 0 for each conversation and no attention mask: transformers then builds a
block-diagonal causal mask from the position ids, so packed conversations never see each other.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from forge_sdk.datasets import Conversation

from .chat import ChatEncoder

IGNORE = -100


@dataclass
class Example:
    input_ids: list[int]
    labels: list[int]
    position_ids: list[int] | None = None
    token_extras: dict[str, list[int]] = field(default_factory=dict)
    images: Callable[[], dict[str, torch.Tensor]] | None = None
    """VLM: the processor's image tensors, computed when a batch needs them (kept for every
    example they would cost more memory than the whole text dataset: ~1 MB per image)."""

    def image_tensors(self) -> dict[str, torch.Tensor]:
        return self.images() if self.images is not None else {}

    def __len__(self) -> int:
        return len(self.input_ids)


@dataclass
class EncodeReport:
    """What truncation did to one split (logged; also in metrics.json)."""

    conversations: int = 0
    truncated: int = 0
    assistant_tokens_cut: int = 0
    dropped_no_answer: int = 0
    dropped_image_cut: int = 0
    longest: int = 0
    tokens: int = 0

    def line(self, split: str, limit: int) -> str:
        dropped = self.dropped_no_answer + self.dropped_image_cut
        text = (
            f"{split}: {self.conversations} conversation(s), {self.tokens} tokens, longest {self.longest}; "
            f"truncated {self.truncated} to max_seq_length {limit} ({self.assistant_tokens_cut} assistant token(s) cut)"
        )
        if dropped:
            text += f"; dropped {dropped} ({self.dropped_no_answer} with no answer left, {self.dropped_image_cut} with an image cut)"
        return text


def image_token_id(encoder: ChatEncoder) -> int | None:
    """The id the processor repeats for each image's features (to see whether truncation cut one)."""
    processor = encoder.processor
    if processor is None:
        return None
    token_id = getattr(processor, "image_token_id", None)
    if isinstance(token_id, int):
        return token_id
    token = getattr(processor, "image_token", None)
    return int(encoder.tokenizer.convert_tokens_to_ids(token)) if isinstance(token, str) else None


def encode_split(encoder: ChatEncoder, conversations: Sequence[Conversation], max_len: int) -> tuple[list[Example], EncodeReport]:
    report = EncodeReport()
    image_id = image_token_id(encoder)
    examples: list[Example] = []
    for conv in conversations:
        enc = encoder.encode(conv)
        report.conversations += 1
        report.longest = max(report.longest, len(enc.input_ids))
        ids, mask = enc.input_ids, enc.assistant
        if len(ids) > max_len:
            report.truncated += 1
            report.assistant_tokens_cut += sum(mask[max_len:])
            if encoder.processor is not None and (image_id is None or image_id in ids[max_len:]):
                report.dropped_image_cut += 1
                continue
            ids, mask = ids[:max_len], mask[:max_len]
            enc.token_extras = {k: v[:max_len] for k, v in enc.token_extras.items()}
        labels = [t if m else IGNORE for t, m in zip(ids, mask, strict=True)]
        if not any(label != IGNORE for label in labels[1:]):
            report.dropped_no_answer += 1
            continue
        report.tokens += len(ids)
        # the processor again when a batch needs them: the same conversation gives the same ids
        images = functools.partial(encoder.image_inputs, conv) if enc.extras else None
        examples.append(Example(ids, labels, token_extras=enc.token_extras, images=images))
    return examples, report


def pack(examples: Sequence[Example], max_len: int) -> list[Example]:
    """Greedy, order-preserving packing into rows of at most ``max_len`` tokens."""
    rows: list[Example] = []
    current = Example([], [], [])
    for ex in examples:
        if current.input_ids and len(current) + len(ex) > max_len:
            rows.append(current)
            current = Example([], [], [])
        assert current.position_ids is not None
        current.input_ids.extend(ex.input_ids)
        # the first token of a conversation is never predicted from the one before it
        current.labels.extend([IGNORE, *ex.labels[1:]])
        current.position_ids.extend(range(len(ex)))
    if current.input_ids:
        rows.append(current)
    return rows


def label_count(batch: dict[str, torch.Tensor]) -> int:
    """Tokens the (shifted) causal-LM loss averages over."""
    return int((batch["labels"][:, 1:] != IGNORE).sum())


def _stack_images(key: str, tensors: list[torch.Tensor | None]) -> torch.Tensor:
    """Per-sample image tensors → one batch tensor.

    Most processors give images flattened across the batch (LLaVA ``(images, C, H, W)``, Qwen2-VL
    patches and ``image_grid_thw``): those concatenate. Idefics3/SmolVLM give ``(1, images, …)``
    per sample: those pad the image axis and stack, with zero images for text-only samples (the
    model skips all-zero images).
    """
    present = [t for t in tensors if t is not None]
    per_sample = (key == "pixel_values" and present[0].dim() == 5) or (key == "pixel_attention_mask" and present[0].dim() == 4)
    if not per_sample:
        return torch.cat(present, dim=0)
    most = max(t.shape[1] for t in present)
    shape = present[0].shape[2:]
    out = torch.zeros((len(tensors), most, *shape), dtype=present[0].dtype)
    for i, t in enumerate(tensors):
        if t is not None:
            out[i, : t.shape[1]] = t[0]
    return out


def collate(examples: Sequence[Example], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded batch; packed rows get position ids instead of an attention mask."""
    length = max(len(ex) for ex in examples)
    input_ids = torch.full((len(examples), length), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), length), IGNORE, dtype=torch.long)
    batch: dict[str, torch.Tensor] = {}
    packed = examples[0].position_ids is not None
    if packed:
        positions = torch.zeros((len(examples), length), dtype=torch.long)
    else:
        attention = torch.zeros((len(examples), length), dtype=torch.long)
    for i, ex in enumerate(examples):
        n = len(ex)
        input_ids[i, :n] = torch.tensor(ex.input_ids)
        labels[i, :n] = torch.tensor(ex.labels)
        if packed:
            assert ex.position_ids is not None
            positions[i, :n] = torch.tensor(ex.position_ids)
            positions[i, n:] = torch.arange(length - n)  # padding forms its own (unlabelled) sequence
        else:
            attention[i, :n] = 1
    batch["input_ids"], batch["labels"] = input_ids, labels
    if packed:
        batch["position_ids"] = positions
    else:
        batch["attention_mask"] = attention
    for key in sorted({k for ex in examples for k in ex.token_extras}):
        values = torch.zeros((len(examples), length), dtype=torch.long)
        for i, ex in enumerate(examples):
            if key in ex.token_extras:
                values[i, : len(ex)] = torch.tensor(ex.token_extras[key])
        batch[key] = values
    images = [ex.image_tensors() for ex in examples]
    for key in sorted({k for tensors in images for k in tensors}):
        batch[key] = _stack_images(key, [tensors.get(key) for tensors in images])
    return batch


def to_device(batch: dict[str, torch.Tensor], device: torch.device, float_dtype: torch.dtype) -> dict[str, Any]:
    """Integer tensors as they are; image tensors in the dtype of the weights that read them."""
    return {k: v.to(device, dtype=float_dtype) if v.is_floating_point() else v.to(device) for k, v in batch.items()}


def real_tokens(batch: dict[str, torch.Tensor], pad_id: int) -> int:
    if "attention_mask" in batch:
        return int(batch["attention_mask"].sum())
    return int((batch["input_ids"] != pad_id).sum())
