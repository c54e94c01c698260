"""The services' object store: the SDK's stores (one definition of keys and URIs) behind asyncio.

A local folder (``$FORGE_HOME/objects``, the embedded default) or an S3 API bucket when
``FORGE_S3_ENDPOINT`` is set. Keys are paths under the store's root; URIs are what jobs, trainers
and the registry record (``file:///…`` or ``s3://bucket/…``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import IO

from forge_sdk.storage import LocalStore, Location, ObjectInfo, S3Config, S3Store, StorageError, Store, clean_key

from .settings import CommonSettings

__all__ = ["ObjectInfo", "ObjectStore", "StorageError", "open_store"]


class ObjectStore:
    def __init__(self, store: Store, s3: S3Config | None = None) -> None:
        self.store = store
        self.s3 = s3

    @property
    def is_local(self) -> bool:
        return isinstance(self.store, LocalStore)

    def uri(self, key: str) -> str:
        return self.store.uri(key)

    def key_of(self, uri: str) -> str | None:
        """The key of a URI inside this store, or None when it points elsewhere (including a
        URI that starts inside but climbs out with ``..``)."""
        root = self.store.uri("")
        root = root if root.endswith("/") else root + "/"
        if not uri.startswith(root):
            return None
        try:
            return clean_key(uri[len(root) :])
        except StorageError:
            return None

    def location(self, prefix: str) -> Location:
        return Location(self.store, prefix)

    async def put_file(self, key: str, path: Path) -> str:
        await asyncio.to_thread(self.store.put_file, key, path)
        return self.uri(key)

    async def put_stream(self, key: str, stream: IO[bytes], length: int) -> str:
        await asyncio.to_thread(self.store.put_stream, key, stream, length)
        return self.uri(key)

    async def put_bytes(self, key: str, data: bytes) -> str:
        await asyncio.to_thread(self.store.put_bytes, key, data)
        return self.uri(key)

    async def get_bytes(self, key: str) -> bytes:
        return await asyncio.to_thread(self.store.get_bytes, key)

    async def stat(self, key: str) -> ObjectInfo | None:
        return await asyncio.to_thread(self.store.stat, key)

    async def list(self, prefix: str) -> list[ObjectInfo]:
        return await asyncio.to_thread(lambda: list(self.store.list(prefix)))

    async def delete_prefix(self, prefix: str) -> int:
        return await asyncio.to_thread(self.location(prefix).delete_all)

    async def iter_chunks(self, key: str, chunk_size: int = 1 << 20) -> AsyncIterator[bytes]:
        stream = await asyncio.to_thread(self.store.open, key)
        try:
            while chunk := await asyncio.to_thread(stream.read, chunk_size):
                yield chunk
        finally:
            await asyncio.to_thread(stream.close)

    def presigned_url(self, key: str, expires_seconds: int = 3600) -> str | None:
        if isinstance(self.store, S3Store):
            return self.store.presigned_get(key, expires_seconds)
        return None


def open_store(settings: CommonSettings) -> ObjectStore:
    s3 = settings.s3_config()
    if s3 is not None:
        return ObjectStore(S3Store(s3, settings.s3_bucket, create_bucket=True), s3)
    root = settings.objects_dir
    root.mkdir(parents=True, exist_ok=True)
    return ObjectStore(LocalStore(root))
