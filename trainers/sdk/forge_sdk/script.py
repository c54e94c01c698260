"""Run a user's training script as the trainer: ``python -m forge_sdk.script``.

The platform fetched the script when the job was submitted and stored it content-addressed;
``FORGE_SCRIPT_URI`` names that copy and ``FORGE_SCRIPT_SHA256`` its digest. The runner checks the
digest, then executes the file as ``__main__`` with the standard trainer environment, so the
script uses the SDK exactly as it would on a laptop.
"""

from __future__ import annotations

import hashlib
import os
import runpy
import sys
import tempfile
from pathlib import Path

from .run import TrainerError, init
from .storage import S3Config, location_from_uri


def fetch(uri: str, sha256: str | None) -> bytes:
    location = location_from_uri(uri, S3Config.from_env())
    data = location.store.get_bytes(location.prefix)
    digest = hashlib.sha256(data).hexdigest()
    if sha256 and digest != sha256:
        raise TrainerError("bad_config", f"the script at {uri} has sha256 {digest}, not the recorded {sha256}: it changed after submission")
    return data


def main() -> None:
    uri = os.environ.get("FORGE_SCRIPT_URI")
    try:
        if not uri:
            raise TrainerError("bad_config", "FORGE_SCRIPT_URI is not set: there is no script to run")
        data = fetch(uri, os.environ.get("FORGE_SCRIPT_SHA256"))
    except TrainerError:
        with init():  # report the failure through the SDK, as any trainer would
            raise
    folder = Path(os.environ.get("FORGE_WORK_DIR") or tempfile.mkdtemp(prefix="forge-script-"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "train.py"
    path.write_bytes(data)
    output = os.environ.get("OUTPUT_DIR", "")
    local = folder / "output"
    if "://" in output:
        # A script that knows only folders writes to a local OUTPUT_DIR, copied to the real
        # location when it exits; the SDK writes to the real one directly (FORGE_OUTPUT_URI).
        os.environ["FORGE_OUTPUT_URI"] = output
        os.environ["OUTPUT_DIR"] = str(local)
        local.mkdir(parents=True, exist_ok=True)
    sys.argv = [str(path)]
    sys.path.insert(0, str(folder))
    print(f"running {uri} (sha256 {hashlib.sha256(data).hexdigest()[:12]}…)", flush=True)
    try:
        runpy.run_path(str(path), run_name="__main__")
    finally:
        if "://" in output and local.is_dir() and any(local.rglob("*")):
            uploaded = location_from_uri(output, S3Config.from_env()).upload_tree(local)
            print(f"copied {len(uploaded)} file(s) from OUTPUT_DIR to {output}", flush=True)


if __name__ == "__main__":
    main()
