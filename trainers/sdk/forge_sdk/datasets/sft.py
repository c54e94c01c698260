"""``llm-sft`` and ``vlm-sft``: conversations in JSON Lines files at the dataset root.

A record is sharegpt (``{"conversations": [{"from": "human", "value": …}], "system": …}``) or
messages (``{"messages": [{"role": "user", "content": …}]}``); both become system/user/assistant
messages. A vlm-sft record adds ``"images": ["images/x.png"]`` (relative to the dataset root) and
one ``<image>`` placeholder in the turns per image. ``train.jsonl``, ``val.jsonl`` and
``test.jsonl`` are explicit splits; otherwise every ``.jsonl`` file is read, in name order.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Iterator, Sized
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

from .data import Conversation, Message, Role, SFTData
from .files import SPLIT_NAMES, clean_relative, entries, inside, rel, warn_unused
from .images import ImageReadError, SizeRange, image_size
from .report import Report

FORMATS = ("llm-sft", "vlm-sft")
PLACEHOLDER = "<image>"
ROLES: dict[str, Role] = {"system": "system", "user": "user", "assistant": "assistant", "human": "user", "gpt": "assistant"}
"""Role names accepted in either style, normalised (sharegpt's human/gpt are user/assistant)."""


class SupportsEncode(Protocol):
    def encode(self, text: str, /) -> Sized: ...


Tokenizer = Callable[[str], int] | SupportsEncode
"""A function giving the number of tokens of a text, or any object with ``encode(text) -> list``."""


def jsonl_files(root: Path) -> list[Path]:
    return [p for p in entries(root) if p.is_file() and p.suffix.lower() == ".jsonl"]


def _lines(path: Path) -> Iterator[tuple[int, str | None]]:
    """(line number, text) of every non-blank line; text is None when the line is not UTF-8."""
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh, 1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                yield number, None
                continue
            text = (text.lstrip("\ufeff") if number == 1 else text).rstrip("\r\n")
            if text.strip():
                yield number, text


def detect(root: Path) -> str:
    """``vlm-sft`` as soon as one record has a non-empty ``images`` list, else ``llm-sft``."""
    for path in jsonl_files(root):
        for _, text in _lines(path):
            try:
                obj = json.loads(text) if text is not None else None
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict) and isinstance(obj.get("images"), list) and obj["images"]:
                return "vlm-sft"
    return "llm-sft"


@dataclass
class _Parsed:
    """One record as read, before the dataset-wide vlm checks."""

    file: str
    line: int
    split: str
    conversation: Conversation


def _turns(obj: dict[str, Any]) -> tuple[list[Message], list[tuple[str, str]]]:
    """The normalised messages of a record, and every (code, message) wrong with it."""
    problems: list[tuple[str, str]] = []
    if "messages" in obj and "conversations" in obj:
        return [], [("sft.both_keys", "record has both 'messages' and 'conversations'; keep one")]
    key = "messages" if "messages" in obj else "conversations" if "conversations" in obj else None
    if key is None:
        return [], [("sft.no_turns", "record has neither 'messages' nor 'conversations' (sharegpt)")]
    role_key, content_key = ("role", "content") if key == "messages" else ("from", "value")
    turns = obj[key]
    if not isinstance(turns, list):
        return [], [("sft.bad_turns", f"'{key}' must be a list of turns")]
    if not turns:
        return [], [("sft.empty_conversation", f"empty conversation: '{key}' has no turns")]
    messages: list[Message] = []
    system = obj.get("system")
    if system is not None and not isinstance(system, str):
        problems.append(("sft.bad_system", "'system' must be a string"))
    elif system and system.strip():
        messages.append(Message("system", system))
    for n, turn in enumerate(turns, 1):
        if not isinstance(turn, dict) or role_key not in turn or content_key not in turn:
            problems.append(("sft.bad_turn", f"turn {n} must be an object with '{role_key}' and '{content_key}'"))
            continue
        role, content = turn[role_key], turn[content_key]
        if not isinstance(role, str) or role not in ROLES:
            hint = "system, user or assistant" if key == "messages" else "human, gpt or system"
            problems.append(("sft.unknown_role", f"turn {n}: unknown role {role!r}; use {hint}"))
        elif not isinstance(content, str):
            problems.append(("sft.bad_content", f"turn {n}: '{content_key}' must be a string"))
        elif not content.strip():
            problems.append(("sft.empty_content", f"turn {n}: empty content"))
        else:
            messages.append(Message(ROLES[role], content))
    if not problems and not any(m.role == "assistant" for m in messages):
        problems.append(("sft.no_assistant", "conversation has no assistant turn: there is nothing to learn from"))
    return messages, problems


def _images(obj: dict[str, Any]) -> tuple[list[str], list[tuple[str, str]]]:
    images = obj.get("images")
    if images is None:
        return [], []
    if not isinstance(images, list) or not all(isinstance(p, str) for p in images):
        return [], [("vlm.bad_images", "'images' must be a list of paths relative to the dataset root")]
    return list(images), []


def parse_record(text: str | None) -> tuple[Conversation | None, list[tuple[str, str]]]:
    """One JSONL line → the conversation, or None and every (code, message) wrong with it."""
    if text is None:
        return None, [("json.invalid", "not valid JSON: the line is not UTF-8 text")]
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, [("json.invalid", f"not valid JSON: {exc.msg} at column {exc.colno}")]
    if not isinstance(obj, dict):
        return None, [("sft.not_object", "a record must be a JSON object")]
    messages, problems = _turns(obj)
    images, image_problems = _images(obj)
    problems += image_problems
    return (None, problems) if problems else (Conversation(messages, images), [])


class _Reader:
    def __init__(self, root: Path, report: Report, declared: str | None, verify: bool) -> None:
        self.root, self.report, self.declared, self.verify = root, report, declared, verify
        self.sizes = SizeRange()
        self.checked: dict[str, bool] = {}

    def files(self) -> list[tuple[Path, str]]:
        """(file, split) in reading order; explicit split files when there are any."""
        files = jsonl_files(self.root)
        if not files:
            self.report.error(
                "sft.no_files", ".", "no .jsonl files at the dataset root: put the records in train.jsonl (and val.jsonl) or data.jsonl"
            )
            return []
        named = {p.stem: p for p in files if p.stem in SPLIT_NAMES}
        if not named:
            return [(p, "all") for p in files]
        for p in files:
            if p.stem not in SPLIT_NAMES:
                self.report.error(
                    "sft.split_mix",
                    rel(self.root, p),
                    "cannot tell this file's split: next to train/val/test.jsonl, every .jsonl file must be one of them",
                )
        if "train" not in named:
            self.report.error("split.no_train", "train.jsonl", "explicit splits need train.jsonl")
        return [(named[s], s) for s in SPLIT_NAMES if s in named]

    def parse(self, files: list[tuple[Path, str]]) -> list[_Parsed]:
        parsed: list[_Parsed] = []
        for path, split in files:
            name = rel(self.root, path)
            lines = 0
            for number, text in _lines(path):
                lines += 1
                conversation, problems = parse_record(text)
                for code, message in problems:
                    self.report.error(code, name, message, number)
                if conversation is not None:
                    parsed.append(_Parsed(name, number, split, conversation))
            if lines == 0:
                self.report.warn("sft.empty_file", name, "the file holds no records")
        return parsed

    def check_images(self, record: _Parsed) -> Conversation:
        """Placeholders match the images, every path stays inside the root and is a readable image."""
        conv = record.conversation
        placeholders = sum(m.content.count(PLACEHOLDER) for m in conv.messages)
        if placeholders != len(conv.images):
            self.report.error(
                "vlm.placeholder_count",
                record.file,
                f"{placeholders} {PLACEHOLDER} placeholder(s) in the turns but {len(conv.images)} image(s) in 'images': "
                f"put one {PLACEHOLDER} in the turns for each entry of 'images'",
                record.line,
            )
        clean: list[str] = []
        for given in conv.images:
            path = clean_relative(given)
            if path is None or inside(self.root, path) is None:
                self.report.error("path.escapes", record.file, f"image path {given!r} escapes the dataset root", record.line)
            elif not (self.root / path).is_file():
                self.report.error("vlm.missing_image", record.file, f"image {given!r} not found", record.line)
            else:
                self._readable(path)
            clean.append(path or given)
        return Conversation(conv.messages, clean)

    def _readable(self, path: str) -> None:
        """Decode each image once however many records use it (only when verifying)."""
        if not self.verify or path in self.checked:
            return
        try:
            self.sizes.add(*image_size(self.root / path, verify=True))
            self.checked[path] = True
        except ImageReadError as exc:
            self.checked[path] = False
            self.report.error("image.unreadable", path, str(exc))

    def run(self, tokenizer: Tokenizer | None) -> SFTData:
        files = self.files()
        parsed = self.parse(files)
        if files and not parsed and self.report.ok:
            self.report.error("sft.no_records", ".", "no records: the .jsonl files hold no conversations")
        with_images = sum(1 for r in parsed if r.conversation.images)
        is_vlm = self.declared == "vlm-sft" or (self.declared is None and with_images > 0)
        used = {rel(self.root, p) for p in jsonl_files(self.root)}
        if is_vlm:
            records = [self.check_images(r) for r in parsed]
            used |= {p for c in records for p in c.images}
            if parsed and not with_images:
                self.report.error(
                    "vlm.no_images",
                    ".",
                    "no record has images: a vlm-sft dataset needs 'images' in its records (declare llm-sft for text only)",
                )
        else:
            records = [r.conversation for r in parsed]
            if with_images:
                self.report.warn(
                    "llm.images_ignored",
                    ".",
                    f"{with_images} record(s) have images, which llm-sft ignores; declare vlm-sft to train on them",
                )
        warn_unused(self.report, self.root, used, "any record")
        explicit = files and files[0][1] != "all"
        split_of = [r.split for r in parsed]
        data = SFTData(records, _explicit(split_of) if explicit else None, is_vlm)
        self.report.stats = _stats(data, split_of, tokenizer, self.sizes if self.verify and is_vlm else None)
        return data


def _explicit(split_of: list[str]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for i, split in enumerate(split_of):
        out.setdefault(split, []).append(i)
    return out


def measure(tokenizer: Tokenizer | None) -> tuple[str, Callable[[str], int]]:
    """(unit, length function): tokens with a tokenizer (``encode`` preferred), else characters."""
    if tokenizer is None:
        return "characters", len
    encode = getattr(tokenizer, "encode", None)
    if callable(encode):
        return "tokens", lambda text: len(encode(text))
    count = cast(Callable[[str], int], tokenizer)
    return "tokens", lambda text: int(count(text))


def percentiles(values: list[int]) -> dict[str, int]:
    """p50/p90/p99/max by the nearest-rank method: always a value that occurs, the same everywhere."""
    ordered = sorted(values)
    out = {f"p{p}": ordered[max(math.ceil(p / 100 * len(ordered)) - 1, 0)] for p in (50, 90, 99)}
    out["max"] = ordered[-1]
    return out


def _stats(data: SFTData, split_of: list[str], tokenizer: Tokenizer | None, sizes: SizeRange | None) -> dict[str, Any]:
    unit, length = measure(tokenizer)
    lengths = [sum(length(m.content) for m in c.messages) for c in data.records]
    roles = Counter(m.role for c in data.records for m in c.messages)
    splits = Counter(split_of)
    stats: dict[str, Any] = {
        "conversations": len(data.records),
        "turns": sum(len(c.messages) for c in data.records),
        "roles": {role: roles.get(role, 0) for role in ("system", "user", "assistant")},
        "images": sum(len(c.images) for c in data.records),
        "distinct_images": len({p for c in data.records for p in c.images}),
        "splits": {split: {"conversations": n} for split, n in splits.items()},
        "explicit_splits": data.explicit_split is not None,
        "length": {"unit": unit, **percentiles(lengths)} if lengths else None,
    }
    if sizes is not None:
        stats["image_size"] = sizes.to_dict()
    return stats


def read(
    root: Path, report: Report, *, declared: str | None = None, tokenizer: Tokenizer | None = None, verify_images: bool = True
) -> SFTData:
    """Check every record (vlm: every image too) and build the conversations."""
    return _Reader(root, report, declared, verify_images).run(tokenizer)
