"""A folder of object storage as one download: an uncompressed tar written as the objects are
read, so memory stays bounded whatever the folder's size (weights do not compress anyway)."""

from __future__ import annotations

import tarfile
from collections.abc import AsyncIterator, Sequence

from forge_common.storage import ObjectInfo, ObjectStore

BLOCK = tarfile.BLOCKSIZE


async def tar_stream(store: ObjectStore, prefix: str, objects: Sequence[ObjectInfo]) -> AsyncIterator[bytes]:
    root = prefix.rstrip("/") + "/"
    for obj in objects:
        info = tarfile.TarInfo(obj.key.removeprefix(root))
        info.size, info.mode, info.mtime = obj.size, 0o644, 0
        yield info.tobuf(format=tarfile.PAX_FORMAT)
        sent = 0
        async for chunk in store.iter_chunks(obj.key):
            chunk = chunk[: obj.size - sent]  # an object rewritten meanwhile must not break the archive
            sent += len(chunk)
            yield chunk
        if sent < obj.size:
            raise OSError(f"{obj.key} shrank while it was being sent ({sent} of {obj.size} bytes)")
        if pad := -obj.size % BLOCK:
            yield b"\0" * pad
    yield b"\0" * (2 * BLOCK)
