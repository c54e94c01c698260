"""Handing objects to users: a file is a redirect to a presigned URL (S3) or streamed by the api
(local store); a folder is streamed as an uncompressed tar written as its objects are read, so
memory stays bounded whatever its size (weights do not compress anyway)."""

from __future__ import annotations

import tarfile
from collections.abc import AsyncIterator, Sequence

from fastapi.responses import RedirectResponse, StreamingResponse

from forge_common.errors import NotFound
from forge_common.storage import ObjectInfo, ObjectStore

BLOCK = tarfile.BLOCKSIZE


async def respond(store: ObjectStore, key: str, name: str, *, missing: str) -> RedirectResponse | StreamingResponse:
    """``key`` as a download named ``name`` (``name.tar`` for a folder); 404 with ``missing``
    when nothing is there."""
    if await store.stat(key) is not None:
        if (url := store.presigned_url(key)) is not None:
            return RedirectResponse(url, status_code=307)
        return StreamingResponse(
            store.iter_chunks(key),
            media_type="application/octet-stream",
            headers={"Content-Disposition": f'attachment; filename="{name}"'},
        )
    objects = await store.list(key)
    if not objects:
        raise NotFound(missing)
    return StreamingResponse(
        tar_stream(store, key, objects),
        media_type="application/x-tar",
        headers={"Content-Disposition": f'attachment; filename="{name}.tar"'},
    )


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
