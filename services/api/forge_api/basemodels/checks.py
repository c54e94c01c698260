"""Before a checkpoint joins the pool, check that it is what it claims — without loading it
(the api has no torch): the files a family needs are there, ``config.json`` names the family's
``model_type``, every ``.safetensors`` file has a valid header, every PyTorch file
(``.bin``/``.pt``/``.pth``/``.ckpt``) starts like what ``torch.save`` writes, and a digest pins the
content."""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from forge_common.basemodels import Family
from forge_common.errors import InvalidInput
from forge_sdk.storage import Location, StorageError

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pth", ".pt", ".ckpt")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")
PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json")


@dataclass(frozen=True)
class Checked:
    files: list[dict[str, Any]]
    size_bytes: int
    digest: str
    warnings: list[str]


def _torch_file_ok(location: Location, name: str) -> str | None:
    """``torch.save`` writes a zip archive (or, before PyTorch 1.6, a pickle): anything else —
    text, an HTML error page saved by a failed download, a truncated file — cannot load."""
    head = location.read_head(name, 4)
    if head.startswith(b"PK\x03\x04") or head[:1] == b"\x80":
        return None
    return "is not a PyTorch checkpoint (neither the zip archive nor the pickle torch.save writes)"


def _safetensors_ok(location: Location, name: str) -> str | None:
    """None when the header parses; otherwise what is wrong."""
    head = location.read_head(name, 8)
    if len(head) < 8:
        return "is shorter than a safetensors header"
    (size,) = struct.unpack("<Q", head)
    if size <= 1 or size > 100_000_000:
        return f"has an implausible header size ({size})"
    try:
        header = json.loads(location.read_head(name, 8 + size)[8:])
    except ValueError:
        return "has a header that is not JSON"
    if not isinstance(header, dict) or not any(isinstance(v, dict) and "dtype" in v for v in header.values()):
        return "has no tensors in its header"
    return None


def check(location: Location, family: Family) -> Checked:
    """Blocking. Raises ``InvalidInput`` (field ``source``) naming what is missing or broken."""
    try:
        listing = location.list()
    except StorageError as exc:
        raise InvalidInput(f"cannot read {location.uri}: {exc}", field="source.uri") from None
    if not listing:
        raise InvalidInput(f"{location.uri} holds no files", field="source.uri")
    names = {o.key for o in listing}
    top = {PurePosixPath(n).name for n in names}
    weights = sorted(n for n in names if n.endswith(WEIGHT_SUFFIXES))
    warnings: list[str] = []
    if not weights:
        raise InvalidInput(f"{location.uri} has no weights (*.safetensors, *.bin, *.pth, *.pt)", field="source.uri")
    if family.hf_format:
        if "config.json" not in names:
            raise InvalidInput(f"{location.uri} has no config.json: not a Hugging Face checkpoint", field="source.uri")
        try:
            config = json.loads(location.get_bytes("config.json"))
        except ValueError:
            raise InvalidInput(f"{location.uri}/config.json is not valid JSON", field="source.uri") from None
        model_type = config.get("model_type") if isinstance(config, dict) else None
        if family.model_types and model_type not in family.model_types:
            raise InvalidInput(
                f"{location.uri}/config.json says model_type {model_type!r}; family {family.name} needs one of {', '.join(family.model_types)}",
                field="family",
            )
    if family.needs_tokenizer and not top & set(TOKENIZER_FILES):
        raise InvalidInput(f"{location.uri} has no tokenizer ({' or '.join(TOKENIZER_FILES)})", field="source.uri")
    if family.needs_tokenizer and "tokenizer_config.json" not in top:
        warnings.append("no tokenizer_config.json: the chat template must come from the job's chat_template")
    if family.needs_processor and not top & set(PROCESSOR_FILES):
        raise InvalidInput(f"{location.uri} has no image processor ({' or '.join(PROCESSOR_FILES)})", field="source.uri")
    for name in weights:
        problem = _safetensors_ok(location, name) if name.endswith(".safetensors") else _torch_file_ok(location, name)
        if problem:
            raise InvalidInput(f"{location.uri}/{name} {problem}", field="source.uri")
    objects = [{"path": o.key, "size": o.size, **({"etag": o.etag} if o.etag else {})} for o in sorted(listing, key=lambda o: o.key)]
    return Checked(files=objects, size_bytes=sum(o.size for o in listing), digest=location.content_digest(listing), warnings=warnings)
