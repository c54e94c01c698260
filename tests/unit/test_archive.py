"""Uploaded archives are untrusted: each attack is refused with a message that names it, and
nothing is written."""

import io
import tarfile
import zipfile
from pathlib import Path

import pytest

from forge_api.datasets.archive import Limits, extract
from forge_common.errors import InvalidInput

LIMITS = Limits(max_files=100, max_bytes=10_000)


def make_tar(path: Path, members: list[tarfile.TarInfo | tuple[str, bytes]], mode: str = "w:gz") -> Path:
    with tarfile.open(path, mode) as tar:
        for m in members:
            if isinstance(m, tarfile.TarInfo):
                tar.addfile(m)
            else:
                info = tarfile.TarInfo(m[0])
                info.size = len(m[1])
                tar.addfile(info, io.BytesIO(m[1]))
    return path


def make_zip(path: Path, members: list[tuple[str, bytes]]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members:
            zf.writestr(name, data)
    return path


def refused(archive: Path, dest: Path, match: str) -> None:
    with pytest.raises(InvalidInput, match=match):
        extract(archive, dest, LIMITS)
    assert not dest.exists() or not any(p.is_file() for p in dest.rglob("*"))


def test_a_good_archive_unpacks(tmp_path: Path) -> None:
    archive = make_tar(tmp_path / "a.tar.gz", [("cats/1.png", b"x"), ("dogs/2.png", b"yy")])
    written = extract(archive, tmp_path / "out", LIMITS)
    assert sorted(m.name for m in written) == ["cats/1.png", "dogs/2.png"]
    assert (tmp_path / "out/dogs/2.png").read_bytes() == b"yy"


def test_zip_and_plain_tar_work_too(tmp_path: Path) -> None:
    extract(make_zip(tmp_path / "a.zip", [("a/1.png", b"x")]), tmp_path / "z", LIMITS)
    extract(make_tar(tmp_path / "a.tar", [("a/1.png", b"x")], mode="w"), tmp_path / "t", LIMITS)
    assert (tmp_path / "z/a/1.png").exists() and (tmp_path / "t/a/1.png").exists()


def test_archiver_litter_is_skipped(tmp_path: Path) -> None:
    archive = make_zip(tmp_path / "a.zip", [("a/1.png", b"x"), ("__MACOSX/a/._1.png", b"junk"), ("a/.DS_Store", b"junk")])
    assert [m.name for m in extract(archive, tmp_path / "o", LIMITS)] == ["a/1.png"]


def test_path_traversal_is_refused(tmp_path: Path) -> None:
    refused(make_tar(tmp_path / "a.tar.gz", [("ok.png", b"x"), ("../evil.png", b"x")]), tmp_path / "o", "path traversal")
    refused(make_zip(tmp_path / "b.zip", [("a/../../evil.png", b"x")]), tmp_path / "p", "path traversal")
    assert not (tmp_path / "evil.png").exists()


def test_absolute_paths_are_refused(tmp_path: Path) -> None:
    refused(make_tar(tmp_path / "a.tar.gz", [("/etc/passwd", b"x")]), tmp_path / "o", "absolute path")
    refused(make_zip(tmp_path / "b.zip", [("C:/windows/x.png", b"x")]), tmp_path / "p", "absolute path")


def test_links_are_refused(tmp_path: Path) -> None:
    sym = tarfile.TarInfo("a/link.png")
    sym.type = tarfile.SYMTYPE
    sym.linkname = "/etc/passwd"
    refused(make_tar(tmp_path / "a.tar.gz", [sym]), tmp_path / "o", "is a link")
    hard = tarfile.TarInfo("a/hard.png")
    hard.type = tarfile.LNKTYPE
    hard.linkname = "a/other.png"
    refused(make_tar(tmp_path / "b.tar.gz", [hard]), tmp_path / "p", "is a link")


def test_zip_symlinks_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "a.zip"
    with zipfile.ZipFile(path, "w") as zf:
        info = zipfile.ZipInfo("a/link.png")
        info.external_attr = 0o120777 << 16
        zf.writestr(info, "/etc/passwd")
    refused(path, tmp_path / "o", "is a link")


def test_devices_and_fifos_are_refused(tmp_path: Path) -> None:
    fifo = tarfile.TarInfo("a/pipe")
    fifo.type = tarfile.FIFOTYPE
    refused(make_tar(tmp_path / "a.tar.gz", [fifo]), tmp_path / "o", "not a regular file")


def test_too_many_files_and_too_many_bytes_are_refused(tmp_path: Path) -> None:
    many = [(f"a/{i}.png", b"x") for i in range(101)]
    refused(make_tar(tmp_path / "a.tar.gz", many), tmp_path / "o", "more than 100 files")
    big = [("a/big.bin", b"0" * 10_001)]
    refused(make_zip(tmp_path / "b.zip", big), tmp_path / "p", "more than 10000 bytes")


def test_a_file_that_is_not_an_archive_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.tar.gz"
    path.write_bytes(b"hello, not an archive")
    refused(path, tmp_path / "o", "not a .zip, .tar or .tar.gz archive")


def test_a_damaged_archive_is_refused(tmp_path: Path) -> None:
    good = make_tar(tmp_path / "a.tar.gz", [(f"a/{i}.png", bytes(500)) for i in range(5)])
    data = good.read_bytes()
    broken = tmp_path / "b.tar.gz"
    broken.write_bytes(data[: len(data) // 2])
    refused(broken, tmp_path / "o", "damaged")


def test_duplicate_names_are_refused(tmp_path: Path) -> None:
    refused(make_tar(tmp_path / "a.tar.gz", [("a/1.png", b"x"), ("a/1.png", b"y")]), tmp_path / "o", "twice")


@pytest.mark.parametrize("order", [["cats", "cats/1.png"], ["cats/1.png", "cats"]])
def test_a_name_that_is_both_a_file_and_a_folder_is_refused(tmp_path: Path, order: list[str]) -> None:
    archive = make_tar(tmp_path / "a.tar.gz", [(name, b"x") for name in order])
    refused(archive, tmp_path / "out", "'cats' is a file and also a folder")


def _folder(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    return info


def test_folder_entries_become_folders_so_an_empty_class_reaches_validation(tmp_path: Path) -> None:
    archive = make_tar(tmp_path / "a.tar.gz", [_folder("cats"), ("cats/1.png", b"x"), _folder("dogs")])
    assert [m.name for m in extract(archive, tmp_path / "o", LIMITS)] == ["cats/1.png"]
    assert (tmp_path / "o" / "dogs").is_dir() and not any((tmp_path / "o" / "dogs").iterdir())
    refused(make_tar(tmp_path / "b.tar.gz", [("cats", b"x"), _folder("cats")]), tmp_path / "p", "is a file and also a folder")
    refused(make_tar(tmp_path / "c.tar.gz", [_folder(f"d{i}") for i in range(101)]), tmp_path / "q", "more than 100 files")
