"""Dataset upload with bounded memory: a generated archive of ≥1 GB goes through the api while its
peak memory is watched.

Starts the embedded stack, generates an ImageNet-style folder of incompressible PNGs (valid
images: validation decodes every one), packs it as an uncompressed .tar, uploads it as multipart
(streamed from disk by httpx), and reads the api process's peak resident memory (VmHWM) before and
after. The baseline, in the same run, is that peak before the upload (an idle api). The upload is
then repeated to show that identical content returns the existing version.

    .venv/bin/python bench/dataset_upload.py [--gigabytes 1.0]
"""

from __future__ import annotations

import argparse
import shutil
import tarfile
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
from _stack import embedded
from PIL import Image


def peak_rss(pid: int) -> int:
    """VmHWM: the highest resident set size the process has had, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise LookupError("no VmHWM")


def generate(folder: Path, target_bytes: int) -> Path:
    """Class folders of 2048×2048 noise PNGs (stored uncompressed: ~12 MiB each)."""
    rng = np.random.default_rng(0)
    written, i = 0, 0
    while written < target_bytes:
        cls = folder / ("noise-a" if i % 2 else "noise-b")
        cls.mkdir(parents=True, exist_ok=True)
        path = cls / f"{i:05d}.png"
        Image.fromarray(rng.integers(0, 256, (2048, 2048, 3), dtype=np.uint8)).save(path, compress_level=0)
        written += path.stat().st_size
        i += 1
    archive = folder.with_suffix(".tar")
    with tarfile.open(archive, "w") as tar:
        for p in sorted(folder.rglob("*.png")):
            tar.add(p, arcname=p.relative_to(folder).as_posix())
    shutil.rmtree(folder)
    return archive


def upload(api: str, archive: Path) -> tuple[float, dict[str, object]]:
    start = time.monotonic()
    with open(archive, "rb") as fh, httpx.Client(base_url=api, timeout=None) as client:
        r = client.post("/v1/datasets/big/versions", files={"file": (archive.name, fh, "application/x-tar")})
    r.raise_for_status()
    return time.monotonic() - start, r.json()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gigabytes", type=float, default=1.0)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="forge-upload-bench-"))
    try:
        archive = generate(work / "data", int(args.gigabytes * 1024**3))
        size = archive.stat().st_size
        with embedded(work / "home") as stack:
            httpx.post(f"{stack.api}/v1/datasets", json={"name": "big"}).raise_for_status()
            pid = stack.service_pid("forge_api")
            idle = peak_rss(pid)
            seconds, version = upload(stack.api, archive)
            peak = peak_rss(pid)
            again_seconds, again = upload(stack.api, archive)
        mib = 1024**2
        print(f"dataset upload, {size / mib:.0f} MiB archive ({version['file_count']} images) → version {version['version']}")
        print(f"  api peak memory before (baseline): {idle / mib:8.1f} MiB")
        print(
            f"  api peak memory after the upload:  {peak / mib:8.1f} MiB   (+{(peak - idle) / mib:.1f} MiB, {100 * (peak - idle) / size:.1f} % of the archive)"
        )
        print(f"  upload, check, unpack, hash, store: {seconds:6.1f} s ({size / mib / seconds:.0f} MiB/s)")
        print(f"  identical content again: version {again['version']}, created={again['created']} in {again_seconds:.1f} s")
        if peak - idle > size / 4:
            raise SystemExit("memory grew with the archive: the upload is not streamed")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
