"""Just enough YAML for a YOLO ``data.yaml``, so that the SDK does not need PyYAML.

``data.yaml`` files are simple: top-level ``key: value`` lines where ``names`` is a list
(``[cat, dog]`` or ``- cat`` lines) or a mapping (``{0: cat}`` or ``0: cat`` lines), next to keys a
trainer does not need (``path``, ``train``, a ``download: |`` script). Only the keys asked for are
parsed; everything else is skipped, so an exotic value elsewhere cannot make a valid file fail.
When PyYAML is installed, ``load`` uses it instead, and this parser is the fallback.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterator
from typing import Any

_INT = re.compile(r"[-+]?\d+\Z")
_FLOAT = re.compile(r"[-+]?(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?\Z")
_NULLS = frozenset({"", "~", "null", "Null", "NULL"})


class YamlError(ValueError):
    """The text is not the YAML this parser understands; ``line`` is 1-based when known."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line


def load(text: str, keys: Collection[str]) -> dict[str, Any]:
    """The top-level mapping (PyYAML when importable, else ``parse``). Raises ``YamlError``."""
    try:
        import yaml
    except ImportError:
        return parse(text, keys)
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise YamlError(str(problem), mark.line + 1 if mark is not None else None) from None
    if not isinstance(doc, dict):
        raise YamlError("the document must be a mapping of keys to values", None)
    return {str(k): v for k, v in doc.items()}


def parse(text: str, keys: Collection[str]) -> dict[str, Any]:
    """Parse the top-level mapping; values of ``keys`` are decoded, the others are kept as None."""
    lines = text.splitlines()
    out: dict[str, Any] = {}
    i = 0
    while i < len(lines):
        stripped = _strip_comment(lines[i]).rstrip()
        if not stripped.strip() or stripped.strip() in ("---", "..."):
            i += 1
            continue
        if stripped[0] in " \t":
            raise YamlError("unexpected indentation", i + 1)
        key, rest = _split_key(stripped, i + 1)
        start = i
        i += 1
        depth = _depth(rest) if rest[:1] in ("[", "{") else 0
        while i < len(lines) and (depth > 0 or _belongs_to_key(lines[i])):
            depth += _depth(_strip_comment(lines[i]))
            i += 1
        if key in out:
            raise YamlError(f"duplicate key {key!r}", start + 1)
        out[key] = _value(rest, lines[start + 1 : i], start + 1) if key in keys else None
    return out


def _belongs_to_key(line: str) -> bool:
    """Indented lines, blank lines, comments and ``- item`` lines continue the key above."""
    return not line.strip() or line[0] in " \t" or line.lstrip().startswith("#") or line.startswith("-")


def _unquoted(text: str) -> Iterator[tuple[int, str]]:
    """(index, char) of the characters outside quotes (``'it''s'`` and ``"a\\"b"`` included)."""
    quote = ""
    escaped = False
    for i, ch in enumerate(text):
        if quote:
            if escaped:
                escaped = False
            elif quote == '"' and ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        else:
            yield i, ch


def _strip_comment(line: str) -> str:
    """The line without a ``#`` comment (a ``#`` inside quotes, or glued to a word, is text)."""
    for i, ch in _unquoted(line):
        if ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i]
    return line


def _depth(text: str) -> int:
    """How many ``[``/``{`` are still open at the end of ``text``."""
    depth = 0
    for _, ch in _unquoted(text):
        depth += 1 if ch in "[{" else -1 if ch in "]}" else 0
    return depth


def _split_key(line: str, number: int) -> tuple[str, str]:
    match = re.match(r"""\s*("(?:[^"\\]|\\.)*"|'(?:[^']|'')*'|[^:#'"\[\]{},]+?)\s*:(?:\s+|\Z)(.*)\Z""", line)
    if match is None:
        raise YamlError("expected 'key: value'", number)
    key = _scalar(match.group(1), number)
    return str(key), match.group(2).strip()


def _value(rest: str, children: list[str], number: int) -> Any:
    if rest[:1] in ("|", ">"):
        return "\n".join(c.strip() for c in children)
    if rest[:1] in ("[", "{"):
        text = " ".join([rest, *(_strip_comment(c).strip() for c in children)])
        value, end = _flow(text, 0, number)
        if text[end:].strip():
            raise YamlError(f"unexpected text after the {'list' if rest[0] == '[' else 'mapping'}", number)
        return value
    if rest:
        if any(_strip_comment(c).strip() for c in children):
            raise YamlError("a value on the key's line cannot be followed by indented lines", number + 1)
        return _scalar(rest, number)
    return _block(children, number)


def _block(children: list[str], number: int) -> Any:
    """An indented ``- item`` list or ``key: value`` mapping of scalars (None when empty)."""
    items = [(number + 1 + i, _strip_comment(c).rstrip()) for i, c in enumerate(children)]
    items = [(n, c) for n, c in items if c.strip()]
    if not items:
        return None
    indent = len(items[0][1]) - len(items[0][1].lstrip())
    for n, c in items:
        if len(c) - len(c.lstrip()) != indent:
            raise YamlError("nested values are not supported here; use a flat list or mapping", n)
    if all(c.strip() == "-" or c.strip().startswith("- ") for _, c in items):
        return [_scalar(c.strip()[1:].strip(), n) for n, c in items]
    mapping: dict[Any, Any] = {}
    for n, c in items:
        key_text, rest = _split_key(c, n)
        key = _scalar(key_text, n) if _INT.match(key_text) else key_text
        if key in mapping:
            raise YamlError(f"duplicate key {key!r}", n)
        mapping[key] = _scalar(rest, n)
    return mapping


def _flow(text: str, pos: int, number: int) -> tuple[Any, int]:
    """A one-level ``[a, b]`` or ``{k: v}`` starting at ``text[pos]``; returns (value, end)."""
    closing = "]" if text[pos] == "[" else "}"
    items: list[str] = []
    start = pos + 1
    for i, ch in _unquoted(text):
        if i <= pos:
            continue
        if ch in "[{":
            raise YamlError("nested lists or mappings are not supported here", number)
        if ch in ",]}":
            if ch not in (",", closing):
                raise YamlError(f"unbalanced {ch!r}", number)
            item = text[start:i].strip()
            if item or ch == ",":
                items.append(item)
            start = i + 1
            if ch == closing:
                return _collect(items, closing, number), i + 1
    raise YamlError(f"missing {closing!r}", number)


def _collect(items: list[str], closing: str, number: int) -> Any:
    if any(not item for item in items):
        raise YamlError("empty item in a list or mapping", number)
    if closing == "]":
        return [_scalar(item, number) for item in items]
    mapping: dict[Any, Any] = {}
    for item in items:
        key_text, rest = _split_key(item, number)
        mapping[_scalar(key_text, number) if _INT.match(key_text) else key_text] = _scalar(rest, number)
    return mapping


def _scalar(text: str, number: int) -> Any:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1].replace("''", "'")
    if len(text) >= 2 and text[0] == text[-1] == '"':
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            raise YamlError(f"bad escape in {text}", number) from None
    if text[:1] in ("'", '"'):
        raise YamlError(f"unterminated quote in {text}", number)
    if ": " in text or text.endswith(":"):
        raise YamlError("mapping values are not allowed here", number)
    if text in _NULLS:
        return None
    if text in ("true", "True", "TRUE", "false", "False", "FALSE"):
        return text.lower() == "true"
    if _INT.match(text):
        return int(text)
    if _FLOAT.match(text):
        return float(text)
    return text
