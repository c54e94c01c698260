"""Uploaded archives are untrusted: every member is checked before anything is written.

Refused: absolute paths, ``..`` components, links (symbolic or hard), devices and other special
files, more entries or more unpacked bytes than the configured limits. Only regular files are
written, one by one, to paths built from the checked names; folder entries become folders (an
empty one is something validation reports).
"""

from __future__ import annotations

import shutil
import stat
import tarfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

from forge_common.errors import InvalidInput

# Folders and files archivers add that are never data.
IGNORED_PARTS = frozenset({"__MACOSX", ".DS_Store", "Thumbs.db", "desktop.ini"})


@dataclass(frozen=True)
class Limits:
    max_files: int
    max_bytes: int


@dataclass(frozen=True)
class Member:
    name: str  # the checked, normalised relative path
    size: int


def _check_name(raw: str) -> str | None:
    """The member's safe relative path, or None for entries to skip (folders, archiver litter)."""
    name = raw.replace("\\", "/")
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise InvalidInput(f"archive member {raw!r} has an absolute path", field="file")
    parts = [p for p in PurePosixPath(name).parts if p not in ("", ".")]
    if ".." in parts:
        raise InvalidInput(f"archive member {raw!r} escapes the archive (path traversal)", field="file")
    if not parts or any(p in IGNORED_PARTS or p.startswith("._") for p in parts):
        return None
    return "/".join(parts)


def _unique(members: list[Member], declared_folders: list[str]) -> None:
    """No name twice (case-insensitively: stores and laptops differ), and no name that is both a
    file and a folder (``a`` and ``a/b``, or ``a`` and a folder entry ``a/``) — it could not be unpacked."""
    seen: set[str] = set()
    for m in members:
        key = m.name.lower()
        if key in seen:
            raise InvalidInput(f"archive has the file {m.name!r} twice", field="file")
        seen.add(key)
    folders = {"/".join(m.name.lower().split("/")[:i]) for m in members for i in range(1, m.name.count("/") + 1)}
    folders |= {f.lower() for f in declared_folders}
    for m in members:
        if m.name.lower() in folders:
            raise InvalidInput(f"archive member {m.name!r} is a file and also a folder of other members", field="file")


def _within(limits: Limits, count: int, total: int) -> None:
    if count > limits.max_files:
        raise InvalidInput(f"archive has more than {limits.max_files} files", field="file")
    if total > limits.max_bytes:
        raise InvalidInput(f"archive unpacks to more than {limits.max_bytes} bytes", field="file")


Source = Path | IO[bytes]  # an archive on disk, or an open (seekable) upload


def _rewind(src: Source) -> Source:
    if not isinstance(src, Path):
        src.seek(0)
    return src


def _open_tar(src: Source) -> tarfile.TarFile:
    if isinstance(src, Path):
        return tarfile.open(src, mode="r:*")
    return tarfile.open(fileobj=_rewind(src), mode="r:*")  # type: ignore[arg-type]


def kind_of(path: Source) -> str:
    if zipfile.is_zipfile(_rewind(path)):
        return "zip"
    try:
        if tarfile.is_tarfile(_rewind(path)):  # type: ignore[arg-type]
            return "tar"
    except (EOFError, zlib.error) as exc:
        raise InvalidInput(f"the archive is damaged: {exc}", field="file") from None
    except (OSError, tarfile.TarError):
        pass
    raise InvalidInput("the upload is not a .zip, .tar or .tar.gz archive", field="file")


def _zip_members(zf: zipfile.ZipFile, limits: Limits, folders: list[str]) -> list[tuple[Member, zipfile.ZipInfo]]:
    out: list[tuple[Member, zipfile.ZipInfo]] = []
    total = 0
    for info in zf.infolist():
        kind = stat.S_IFMT(info.external_attr >> 16)  # 0 when the archiver recorded no file type
        name = _check_name(info.filename)
        if info.is_dir():
            if name is not None:
                folders.append(name)
                _within(limits, len(out) + len(folders), total)
            continue
        if kind == stat.S_IFLNK:
            raise InvalidInput(f"archive member {info.filename!r} is a link; links are not allowed", field="file")
        if kind and kind != stat.S_IFREG:
            raise InvalidInput(f"archive member {info.filename!r} is not a regular file", field="file")
        if name is None:
            continue
        total += info.file_size
        out.append((Member(name, info.file_size), info))
        _within(limits, len(out) + len(folders), total)
    return out


def _tar_members(tf: tarfile.TarFile, limits: Limits, folders: list[str]) -> list[tuple[Member, tarfile.TarInfo]]:
    out: list[tuple[Member, tarfile.TarInfo]] = []
    total = 0
    for info in tf:
        name = _check_name(info.name)
        if info.isdir():
            if name is not None:
                folders.append(name)
                _within(limits, len(out) + len(folders), total)
            continue
        if info.issym() or info.islnk():
            raise InvalidInput(f"archive member {info.name!r} is a link; links are not allowed", field="file")
        if not info.isreg():
            raise InvalidInput(f"archive member {info.name!r} is not a regular file", field="file")
        if name is None:
            continue
        total += info.size
        out.append((Member(name, info.size), info))
        _within(limits, len(out) + len(folders), total)
    return out


def _copy(src: IO[bytes], out: IO[bytes], member: Member, budget: int) -> int:
    """Copy at most ``budget`` bytes and no more than the member declared; returns the count."""
    copied = 0
    while chunk := src.read(1 << 20):
        copied += len(chunk)
        if copied > member.size or copied > budget:
            raise InvalidInput(f"archive member {member.name!r} unpacks to more than it declares", field="file")
        out.write(chunk)
    return copied


def extract(path: Source, dest: Path, limits: Limits) -> list[Member]:
    """Check every member, then write the regular files under ``dest``; returns what was written.
    A refused or damaged archive leaves ``dest`` empty."""
    try:
        return _extract(path, dest, limits)
    except InvalidInput:
        shutil.rmtree(dest, ignore_errors=True)
        raise


def _extract(path: Source, dest: Path, limits: Limits) -> list[Member]:
    kind = kind_of(path)
    dest.mkdir(parents=True, exist_ok=True)
    written: list[Member] = []
    folders: list[str] = []  # folder entries: an empty one (a class without images) must reach validation
    total = 0

    def target(member: Member) -> Path:
        out = dest / member.name
        out.parent.mkdir(parents=True, exist_ok=True)
        return out

    try:
        if kind == "zip":
            with zipfile.ZipFile(_rewind(path)) as zf:
                members = _zip_members(zf, limits, folders)
                _unique([m for m, _ in members], folders)
                for member, info in members:
                    with zf.open(info) as src, open(target(member), "wb") as out:
                        total += _copy(src, out, member, limits.max_bytes - total)
                    written.append(member)
        else:
            with _open_tar(path) as tf:
                tar_members = _tar_members(tf, limits, folders)
                _unique([m for m, _ in tar_members], folders)
                for member, tinfo in tar_members:
                    src = tf.extractfile(tinfo)
                    if src is None:
                        continue
                    with src, open(target(member), "wb") as out:
                        total += _copy(src, out, member, limits.max_bytes - total)
                    written.append(member)
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, zlib.error) as exc:
        raise InvalidInput(f"the archive is damaged: {exc}", field="file") from None
    for folder in folders:
        (dest / folder).mkdir(parents=True, exist_ok=True)
    return written
