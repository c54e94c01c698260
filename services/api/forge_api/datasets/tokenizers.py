"""Token-length statistics for LLM/VLM data need a tokenizer: a pool entry's ``tokenizer.json``,
loaded with the light ``tokenizers`` library (no transformers, no torch in the api)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

from forge_common.errors import InvalidInput
from forge_sdk.storage import StorageError, location_from_uri

from ..basemodels import repository as basemodels
from ..deps import Services


async def counter(services: Services, project_id: uuid.UUID, name: str | None) -> Callable[[str], int] | None:
    """``text -> number of tokens`` with the named base model's tokenizer, or None."""
    if not name:
        return None
    async with services.pool.acquire() as conn:
        entry = await basemodels.get(conn, project_id, name)
    if entry is None:
        raise InvalidInput(f"no base model named {name!r}", field="tokenizer")
    source = entry["source"]
    if source.get("kind") not in ("local", "s3"):
        raise InvalidInput(
            f"base model {name!r} has no tokenizer file to count with (its source is {source.get('kind')})", field="tokenizer"
        )

    def load() -> Callable[[str], int]:
        from tokenizers import Tokenizer

        try:
            data = location_from_uri(source["uri"], services.store.s3).get_bytes("tokenizer.json")
        except StorageError:
            raise InvalidInput(f"base model {name!r} has no tokenizer.json", field="tokenizer") from None
        try:
            tokenizer = Tokenizer.from_str(data.decode())
        except Exception as exc:
            raise InvalidInput(f"base model {name!r}: tokenizer.json does not load ({exc})", field="tokenizer") from None
        return lambda text: len(tokenizer.encode(text).ids)

    return await asyncio.to_thread(load)
