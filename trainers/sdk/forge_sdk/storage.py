"""Object storage by URI: a local folder or an S3 API bucket, behind one small interface.

``file:///abs/dir`` (or a plain path) and ``s3://bucket/prefix`` name a *location*; a
:class:`Location` lists, reads, writes and deletes the objects under it. The S3 side uses the
``minio`` client (install ``forge-trainer-sdk[s3]``); nothing else is required. The platform's
services use the same classes (wrapped for asyncio), so a trainer and the services agree on
every key and URI.
"""

from __future__ import annotations

import builtins
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, TYPE_CHECKING, BinaryIO, Protocol, cast
from urllib.parse import unquote, urlparse

if TYPE_CHECKING:  # pragma: no cover
    from minio import Minio


class StorageError(RuntimeError):
    """A storage operation failed; the message names the object."""


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    etag: str | None = None  # S3 only


@dataclass(frozen=True)
class S3Config:
    endpoint: str
    access_key: str
    secret_key: str
    region: str | None = None
    secure: bool = False

    @classmethod
    def from_env(cls, environ: dict[str, str] | os._Environ[str] | None = None) -> S3Config | None:
        env = os.environ if environ is None else environ
        endpoint = env.get("S3_ENDPOINT")
        if not endpoint:
            return None
        return cls(
            endpoint=endpoint,
            access_key=env.get("S3_ACCESS_KEY", ""),
            secret_key=env.get("S3_SECRET_KEY", ""),
            region=env.get("S3_REGION") or None,
            secure=env.get("S3_SECURE", "false").lower() in ("1", "true", "yes"),
        )

    def client(self) -> Minio:
        try:
            from minio import Minio
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise StorageError("S3 storage needs the minio package: pip install 'forge-trainer-sdk[s3]'") from exc
        endpoint = self.endpoint
        secure = self.secure
        if "://" in endpoint:
            parsed = urlparse(endpoint)
            secure = parsed.scheme == "https"
            endpoint = parsed.netloc
        return Minio(endpoint, access_key=self.access_key, secret_key=self.secret_key, secure=secure, region=self.region)


def clean_key(key: str) -> str:
    """A key as '/'-separated parts without empty or '.' parts; StorageError when it climbs out
    with '..' (every key a user's input can reach goes through this)."""
    parts = [p for p in PurePosixPath(key.replace("\\", "/")).parts if p not in ("", "/", ".")]
    if any(p == ".." for p in parts):
        raise StorageError(f"object key {key!r} escapes its location")
    return "/".join(parts)


class Store(Protocol):
    """Keys are '/'-separated paths relative to the store's root."""

    def uri(self, key: str) -> str: ...
    def put_file(self, key: str, path: Path, content_type: str = "application/octet-stream") -> None: ...
    def put_stream(self, key: str, stream: IO[bytes], length: int, content_type: str = "application/octet-stream") -> None: ...
    def put_bytes(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> None: ...
    def get_bytes(self, key: str) -> bytes: ...
    def get_file(self, key: str, path: Path) -> None: ...
    def open(self, key: str) -> IO[bytes]: ...
    def read_head(self, key: str, length: int) -> bytes: ...
    def stat(self, key: str) -> ObjectInfo | None: ...
    def list(self, prefix: str) -> Iterator[ObjectInfo]: ...
    def delete(self, key: str) -> None: ...


class LocalStore:
    """Objects as files under a root folder (the embedded default and unit tests)."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root).resolve()

    def path(self, key: str) -> Path:
        return self.root / clean_key(key) if key else self.root

    def uri(self, key: str) -> str:
        return self.path(key).as_uri()

    def _atomic_write(self, key: str, writer: object) -> None:
        target = self.path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as out:
                writer(out)  # type: ignore[operator]
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def put_file(self, key: str, path: Path, content_type: str = "application/octet-stream") -> None:
        with open(path, "rb") as src:
            self._atomic_write(key, lambda out: shutil.copyfileobj(src, out, 1 << 20))

    def put_stream(self, key: str, stream: IO[bytes], length: int, content_type: str = "application/octet-stream") -> None:
        self._atomic_write(key, lambda out: shutil.copyfileobj(stream, out, 1 << 20))

    def put_bytes(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        self._atomic_write(key, lambda out: out.write(data))

    def get_bytes(self, key: str) -> bytes:
        try:
            return self.path(key).read_bytes()
        except FileNotFoundError:
            raise StorageError(f"no object {self.uri(key)}") from None

    def get_file(self, key: str, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copyfile(self.path(key), path)
        except FileNotFoundError:
            raise StorageError(f"no object {self.uri(key)}") from None

    def open(self, key: str) -> IO[bytes]:
        try:
            return open(self.path(key), "rb")
        except FileNotFoundError:
            raise StorageError(f"no object {self.uri(key)}") from None

    def read_head(self, key: str, length: int) -> bytes:
        """The first ``length`` bytes (a file header) without reading the rest."""
        with self.open(key) as fh:
            return fh.read(length)

    def stat(self, key: str) -> ObjectInfo | None:
        p = self.path(key)
        return ObjectInfo(key=clean_key(key), size=p.stat().st_size) if p.is_file() else None

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        base = self.path(prefix)
        if base.is_file():
            yield ObjectInfo(key=clean_key(prefix), size=base.stat().st_size)
            return
        if not base.is_dir():
            return
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames.sort()
            for name in sorted(filenames):
                if name.startswith(".tmp-"):
                    continue
                p = Path(dirpath) / name
                yield ObjectInfo(key=p.relative_to(self.root).as_posix(), size=p.stat().st_size)

    def delete(self, key: str) -> None:
        self.path(key).unlink(missing_ok=True)
        # drop folders the deletion emptied, but never the root itself
        parent = self.path(key).parent
        while parent != self.root and parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent


class S3Store:
    """Objects in one bucket of an S3 API server (MinIO, AWS S3, …) through the minio client."""

    def __init__(self, config: S3Config, bucket: str, *, create_bucket: bool = False) -> None:
        self.config = config
        self.bucket = bucket
        self.client = config.client()
        if create_bucket and not self.client.bucket_exists(bucket):
            self.client.make_bucket(bucket)

    def uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{clean_key(key)}"

    def _err(self, key: str, exc: Exception) -> StorageError:
        return StorageError(f"{self.uri(key)}: {exc}")

    def put_file(self, key: str, path: Path, content_type: str = "application/octet-stream") -> None:
        try:
            self.client.fput_object(self.bucket, clean_key(key), str(path), content_type=content_type)
        except Exception as exc:
            raise self._err(key, exc) from exc

    def put_stream(self, key: str, stream: IO[bytes], length: int, content_type: str = "application/octet-stream") -> None:
        try:
            self.client.put_object(
                self.bucket,
                clean_key(key),
                cast(BinaryIO, stream),
                length,
                content_type=content_type,
                part_size=16 * 1024 * 1024 if length < 0 else 0,
            )
        except Exception as exc:
            raise self._err(key, exc) from exc

    def put_bytes(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        import io

        self.put_stream(key, io.BytesIO(data), len(data), content_type)

    def get_bytes(self, key: str) -> bytes:
        with self.open(key) as stream:
            return stream.read()

    def get_file(self, key: str, path: Path) -> None:
        try:
            self.client.fget_object(self.bucket, clean_key(key), str(path))
        except Exception as exc:
            raise self._err(key, exc) from exc

    def open(self, key: str) -> IO[bytes]:
        try:
            response = self.client.get_object(self.bucket, clean_key(key))
        except Exception as exc:
            raise self._err(key, exc) from exc
        return _ClosingResponse(response)  # type: ignore[return-value]

    def read_head(self, key: str, length: int) -> bytes:
        try:
            response = self.client.get_object(self.bucket, clean_key(key), offset=0, length=length)
        except Exception as exc:
            raise self._err(key, exc) from exc
        try:
            return bytes(response.read())
        finally:
            response.close()
            response.release_conn()

    def stat(self, key: str) -> ObjectInfo | None:
        from minio.error import S3Error

        try:
            st = self.client.stat_object(self.bucket, clean_key(key))
        except S3Error as exc:
            if exc.code in ("NoSuchKey", "NoSuchObject", "ResourceNotFound"):
                return None
            raise self._err(key, exc) from exc
        return ObjectInfo(key=clean_key(key), size=int(st.size or 0))

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        clean = clean_key(prefix)
        folder = clean + "/" if clean else ""
        single = self.stat(clean) if clean else None
        if single is not None:
            yield single
            return
        for obj in self.client.list_objects(self.bucket, prefix=folder, recursive=True):
            if obj.object_name and not obj.is_dir:
                yield ObjectInfo(key=obj.object_name, size=int(obj.size or 0), etag=obj.etag)

    def delete(self, key: str) -> None:
        try:
            self.client.remove_object(self.bucket, clean_key(key))
        except Exception as exc:
            raise self._err(key, exc) from exc

    def presigned_get(self, key: str, expires_seconds: int = 3600) -> str:
        from datetime import timedelta

        return self.client.presigned_get_object(self.bucket, clean_key(key), expires=timedelta(seconds=expires_seconds))


class _ClosingResponse:
    """A urllib3 response that releases its connection when closed."""

    def __init__(self, response: object) -> None:
        self._r = response

    def read(self, n: int = -1) -> bytes:
        return self._r.read() if n < 0 else self._r.read(n)  # type: ignore[attr-defined,no-any-return]

    def close(self) -> None:
        self._r.close()  # type: ignore[attr-defined]
        self._r.release_conn()  # type: ignore[attr-defined]

    def __enter__(self) -> _ClosingResponse:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Location:
    """All objects under one prefix of a store (a dataset version, a job's outputs)."""

    def __init__(self, store: Store, prefix: str) -> None:
        self.store = store
        self.prefix = clean_key(prefix)

    @property
    def uri(self) -> str:
        return self.store.uri(self.prefix)

    def key(self, name: str) -> str:
        name = clean_key(name)
        return f"{self.prefix}/{name}" if self.prefix else name

    def relative(self, key: str) -> str:
        if not self.prefix:
            return key
        return key[len(self.prefix) + 1 :] if key.startswith(self.prefix + "/") else key

    def uri_of(self, name: str) -> str:
        return self.store.uri(self.key(name))

    def put_file(self, name: str, path: Path) -> str:
        self.store.put_file(self.key(name), path)
        return self.uri_of(name)

    def put_bytes(self, name: str, data: bytes) -> str:
        self.store.put_bytes(self.key(name), data)
        return self.uri_of(name)

    def get_bytes(self, name: str) -> bytes:
        return self.store.get_bytes(self.key(name))

    def read_head(self, name: str, length: int) -> bytes:
        return self.store.read_head(self.key(name), length)

    def exists(self, name: str) -> bool:
        return self.store.stat(self.key(name)) is not None

    def list(self) -> list[ObjectInfo]:
        """Objects under the prefix, keys relative to it."""
        return [ObjectInfo(key=self.relative(o.key), size=o.size, etag=o.etag) for o in self.store.list(self.prefix)]

    def content_digest(self, listing: builtins.list[ObjectInfo] | None = None) -> str:
        """sha256 over (path, size, content) of every object, by path: the content is the file's
        sha256 on a local store and the object's ETag in S3. A base model's registration records
        it; a trainer compares before it trusts the checkpoint (a rerun sees the same bytes)."""
        total = hashlib.sha256()
        for obj in sorted(self.list() if listing is None else listing, key=lambda o: o.key):
            if isinstance(self.store, LocalStore):
                h = hashlib.sha256()
                with self.store.open(self.key(obj.key)) as fh:
                    while chunk := fh.read(1 << 20):
                        h.update(chunk)
                content = h.hexdigest()
            else:
                content = obj.etag or ""
            total.update(f"{obj.key}\t{obj.size}\t{content}\n".encode())
        return total.hexdigest()

    def download_to(self, dest: Path) -> Path:
        """Copy every object to a local folder, keeping the relative paths; returns the folder."""
        dest.mkdir(parents=True, exist_ok=True)
        for obj in self.store.list(self.prefix):
            rel = self.relative(obj.key)
            self.store.get_file(obj.key, dest / clean_key(rel))
        return dest

    def upload_tree(self, src: Path) -> builtins.list[str]:
        uris = []
        for path in sorted(p for p in src.rglob("*") if p.is_file()):
            uris.append(self.put_file(path.relative_to(src).as_posix(), path))
        return uris

    def delete_all(self) -> int:
        objects = list(self.store.list(self.prefix))
        for obj in objects:
            self.store.delete(obj.key)
        if isinstance(self.store, LocalStore):
            root = self.store.path(self.prefix)
            if root.is_dir() and root != self.store.root and not any(root.rglob("*")):
                shutil.rmtree(root, ignore_errors=True)
        return len(objects)


def location_from_uri(uri: str, s3: S3Config | None = None) -> Location:
    """``s3://bucket/prefix`` → an S3 location (needs ``s3``); ``file:///dir`` or a path → a folder."""
    if uri.startswith("s3://"):
        parsed = urlparse(uri)
        if s3 is None:
            raise StorageError(f"{uri} is in S3 but no S3 endpoint is configured (S3_ENDPOINT)")
        return Location(S3Store(s3, parsed.netloc), unquote(parsed.path).lstrip("/"))
    if uri.startswith("file://"):
        path = Path(unquote(urlparse(uri).path))
    elif "://" in uri:
        raise StorageError(f"unsupported storage URI {uri!r}: use s3://bucket/prefix or a local path")
    else:
        path = Path(uri)
    return Location(LocalStore(path), "")
