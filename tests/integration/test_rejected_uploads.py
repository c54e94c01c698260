"""Every malformed dataset and every archive attack, uploaded through the api: a 422 that names
the problem exactly, and nothing stored — no version, no object, no scratch file left behind."""

from __future__ import annotations

import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from forge_common.settings import CommonSettings

from ..unit.datasets.test_malformed import CASES, Case
from ..unit.test_archive import make_tar, make_zip
from .conftest import tar_of, upload

ERRORS = [c for c in CASES if c.severity == "error"]


async def assert_nothing_stored(api: httpx.AsyncClient, settings: CommonSettings) -> None:
    assert (await api.get("/v1/datasets/broken/versions")).json() == []
    assert not [p for p in settings.objects_dir.rglob("*") if p.is_file()], "an object was written"
    scratch = settings.home / "tmp"
    assert not scratch.exists() or not [p for p in scratch.rglob("*") if p.is_file()], "an upload was left in scratch space"


def test_the_table_covers_at_least_thirty_problems() -> None:
    assert len(ERRORS) + len(ATTACKS) >= 30


@pytest.mark.parametrize("case", ERRORS, ids=[c.id for c in ERRORS])
async def test_a_malformed_dataset_is_refused_exactly_and_stores_nothing(
    api: httpx.AsyncClient, common_settings: CommonSettings, tmp_path: Path, case: Case
) -> None:
    case.build(tmp_path / "d")
    r = await upload(api, "broken", tar_of(tmp_path / "d", with_folders=True), fmt=case.declared)
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["type"] == "invalid_input"
    errors = body["report"]["errors"]
    assert any(e["file"] == case.file and e.get("line") == case.line and case.message in e["message"] for e in errors), errors
    await assert_nothing_stored(api, common_settings)


def _link(kind: bytes, target: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo("cats/link.png")
    info.type, info.linkname = kind, target
    return info


def _fifo() -> tarfile.TarInfo:
    info = tarfile.TarInfo("cats/pipe")
    info.type = tarfile.FIFOTYPE
    return info


def _zip_symlink(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        info = zipfile.ZipInfo("cats/link.png")
        info.external_attr = 0o120777 << 16
        zf.writestr(info, "/etc/passwd")
    return path


def _damaged(path: Path) -> Path:
    data = make_tar(path, [(f"cats/{i}.png", bytes(500)) for i in range(5)]).read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def _not_an_archive(path: Path) -> Path:
    path.write_bytes(b"hello, not an archive")
    return path


Build = Callable[[Path], Path]  # writes the archive at the path it is given
ATTACKS: dict[str, tuple[Build, str, str]] = {
    "tar-traversal": (lambda p: make_tar(p, [("cats/ok.png", b"x"), ("../evil.png", b"x")]), "a.tar.gz", "path traversal"),
    "zip-traversal": (lambda p: make_zip(p, [("cats/../../evil.png", b"x")]), "a.zip", "path traversal"),
    "tar-absolute": (lambda p: make_tar(p, [("/etc/passwd", b"x")]), "a.tar.gz", "absolute path"),
    "zip-absolute": (lambda p: make_zip(p, [("C:/windows/x.png", b"x")]), "a.zip", "absolute path"),
    "tar-symlink": (lambda p: make_tar(p, [_link(tarfile.SYMTYPE, "/etc/passwd")]), "a.tar.gz", "is a link"),
    "tar-hardlink": (lambda p: make_tar(p, [_link(tarfile.LNKTYPE, "cats/other.png")]), "a.tar.gz", "is a link"),
    "zip-symlink": (_zip_symlink, "a.zip", "is a link"),
    "tar-fifo": (lambda p: make_tar(p, [_fifo()]), "a.tar.gz", "not a regular file"),
    "too-many-files": (lambda p: make_tar(p, [(f"cats/{i}.png", b"x") for i in range(51)]), "a.tar.gz", "more than 50 files"),
    "too-many-bytes": (lambda p: make_zip(p, [("cats/big.bin", b"0" * 20_001)]), "a.zip", "more than 20000 bytes"),
    "not-an-archive": (_not_an_archive, "a.tar.gz", "not a .zip, .tar or .tar.gz archive"),
    "damaged": (_damaged, "a.tar.gz", "damaged"),
    "duplicate-names": (lambda p: make_tar(p, [("cats/1.png", b"x"), ("cats/1.png", b"y")]), "a.tar.gz", "twice"),
    "file-and-folder": (lambda p: make_tar(p, [("cats", b"x"), ("cats/1.png", b"x")]), "a.tar.gz", "is a file and also a folder"),
}


@pytest.mark.parametrize("attack", list(ATTACKS))
async def test_an_archive_attack_is_refused_before_anything_is_written(
    common_settings: CommonSettings, tmp_path: Path, attack: str
) -> None:
    from forge_api.app import create_app
    from forge_api.settings import ApiSettings

    build, filename, message = ATTACKS[attack]
    data = build(tmp_path / filename).read_bytes()
    app = create_app(common_settings, ApiSettings(max_archive_files=50, max_extracted_bytes=20_000))
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://forge") as api:
            r = await upload(api, "broken", data, filename)
            assert r.status_code == 422 and message in r.json()["detail"], r.text
            await assert_nothing_stored(api, common_settings)
    assert not (tmp_path.parent / "evil.png").exists()
