"""One object-store interface, two implementations that behave the same: a local folder and an
S3 API server (moto here; MinIO in compose and Kubernetes)."""

from __future__ import annotations

import io
import urllib.request
from pathlib import Path

import pytest

from forge_common.settings import CommonSettings
from forge_common.storage import ObjectStore, open_store
from forge_sdk.storage import S3Config, StorageError, location_from_uri


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    if request.param == "local":
        return open_store(CommonSettings(home=tmp_path))
    s3: dict[str, str] = request.getfixturevalue("s3_server")
    bucket = f"b{abs(hash(request.node.name)) % 10**8}"
    return open_store(
        CommonSettings(
            home=tmp_path, s3_endpoint=s3["endpoint"], s3_access_key=s3["access_key"], s3_secret_key=s3["secret_key"], s3_bucket=bucket
        )
    )


async def test_put_get_stat_list_delete(store: ObjectStore, tmp_path: Path) -> None:
    uri = await store.put_bytes("jobs/1/a.txt", b"hello")
    assert store.key_of(uri) == "jobs/1/a.txt"
    source = tmp_path / "w.bin"
    source.write_bytes(b"x" * 1000)
    await store.put_file("jobs/1/sub/w.bin", source)
    await store.put_bytes("jobs/10/other.txt", b"not a sibling of jobs/1")
    assert await store.get_bytes("jobs/1/a.txt") == b"hello"
    stat = await store.stat("jobs/1/sub/w.bin")
    assert stat is not None and stat.size == 1000
    assert await store.stat("jobs/1/missing") is None
    assert sorted(o.key for o in await store.list("jobs/1")) == ["jobs/1/a.txt", "jobs/1/sub/w.bin"]
    chunks = [c async for c in store.iter_chunks("jobs/1/sub/w.bin", chunk_size=300)]
    assert b"".join(chunks) == b"x" * 1000 and len(chunks) == 4
    assert await store.delete_prefix("jobs/1") == 2
    assert await store.list("jobs/1") == []
    assert [o.key for o in await store.list("jobs/10")] == ["jobs/10/other.txt"]


async def test_a_location_round_trips_a_folder(store: ObjectStore, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "a" / "b").mkdir(parents=True)
    (src / "a" / "b" / "f.txt").write_text("deep")
    (src / "top.txt").write_text("top")
    location = store.location("datasets/x/v1")
    location.upload_tree(src)
    again = location_from_uri(location.uri, store.s3)
    assert sorted(o.key for o in again.list()) == ["a/b/f.txt", "top.txt"]
    dest = again.download_to(tmp_path / "dest")
    assert (dest / "a" / "b" / "f.txt").read_text() == "deep"


async def test_streams_of_unknown_length_upload(store: ObjectStore) -> None:
    data = b"y" * (6 * 1024 * 1024)
    await store.put_stream("big/blob", io.BytesIO(data), len(data))
    assert (await store.stat("big/blob")).size == len(data)  # type: ignore[union-attr]


async def test_missing_objects_are_named(store: ObjectStore) -> None:
    with pytest.raises(StorageError, match="nope"):
        await store.get_bytes("nope/nothing.txt")


def test_keys_cannot_escape_the_store(tmp_path: Path) -> None:
    store = open_store(CommonSettings(home=tmp_path))
    with pytest.raises(StorageError, match="escapes"):
        store.store.put_bytes("../outside.txt", b"x")
    # a URI that starts inside the store but climbs out is not one of its keys (a model's file
    # named by a trainer's descriptor is served only when it really is inside)
    assert store.key_of(store.uri("") + "/jobs/../../etc/passwd") is None
    assert store.key_of(store.uri("jobs/1/model.onnx")) == "jobs/1/model.onnx"


def test_s3_downloads_use_presigned_urls(s3_server: dict[str, str], tmp_path: Path) -> None:
    store = open_store(
        CommonSettings(
            home=tmp_path,
            s3_endpoint=s3_server["endpoint"],
            s3_access_key=s3_server["access_key"],
            s3_secret_key=s3_server["secret_key"],
            s3_bucket="presign",
        )
    )
    store.store.put_bytes("m/model.onnx", b"onnx-bytes")
    url = store.presigned_url("m/model.onnx")
    assert url is not None
    with urllib.request.urlopen(url) as r:
        assert r.read() == b"onnx-bytes"
    assert open_store(CommonSettings(home=tmp_path)).presigned_url("x") is None


def test_s3_needs_credentials_and_says_which() -> None:
    with pytest.raises(ValueError, match="FORGE_S3_ACCESS_KEY and FORGE_S3_SECRET_KEY are required"):
        CommonSettings(s3_endpoint="minio:9000")


def test_an_s3_uri_without_an_endpoint_is_a_clear_error() -> None:
    with pytest.raises(StorageError, match="no S3 endpoint is configured"):
        location_from_uri("s3://bucket/prefix", None)
    with pytest.raises(StorageError, match="unsupported storage URI"):
        location_from_uri("ftp://host/x", S3Config("e", "a", "b"))
