"""Runs one trainer and records how it exited, so a restarted scheduler can learn the exit status
of a process that is no longer its child.

    python -m forge_scheduler.launcher RUN_DIR -- CMD [ARG...]

It is the leader of the trainer's process group: a stop sends SIGTERM to the group (the trainer
gets it; the launcher only keeps waiting) and the deadline sends SIGKILL (both die; no exit
record is left, which the scheduler reads as "killed").
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

EXIT_FILE = "exit.json"


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m forge_scheduler.launcher RUN_DIR -- CMD [ARG...]", file=sys.stderr)
        return 2
    run_dir = Path(argv[0])
    cmd = argv[2:]
    # A handler (not SIG_IGN, which exec would pass on to the trainer): the launcher outlives a
    # stop request so it can record the trainer's exit.
    signal.signal(signal.SIGTERM, lambda *_: None)
    signal.signal(signal.SIGINT, lambda *_: None)
    started = time.time()
    try:
        child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
        returncode = child.wait()
        error = None
    except OSError as exc:
        returncode, error = 127, f"cannot start trainer {cmd[0]!r}: {exc.strerror or exc}"
        print(f"forge: {error}", flush=True)
    record = {
        "returncode": returncode,
        "signal": -returncode if returncode < 0 else None,
        "started_at": started,
        "finished_at": time.time(),
        "error": error,
    }
    tmp = run_dir / (EXIT_FILE + ".tmp")
    tmp.write_text(json.dumps(record), encoding="utf-8")
    os.replace(tmp, run_dir / EXIT_FILE)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
