"""Stop bps-train at once: one line on stderr and exit status 130, without unwinding.

Used for a signal that must end the run now (a second Ctrl-C, or one before training began):
``os._exit``, not an exception, because a KeyboardInterrupt raised at a random point can leave
a lock of the environment's threads held, and closing them then never returns. Every file the
trainer writes is renamed into place whole, so nothing half-written is left behind; the run's
lock files are released first (an exit this run chose, not one it "ended without releasing").
"""
from __future__ import annotations

import os
import sys

from bps_assets.pipeline.run_lock import release_held

INTERRUPTED = 130


def stop_now(why: str) -> None:
    """Release this process's run locks, print ``bps-train: WHY`` and end the process with
    status 130 without unwinding."""
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except (OSError, ValueError):
            pass
    try:
        release_held()
    except Exception:   # best effort: a pid left in a lock file only reads as a stale lock
        pass
    try:
        os.write(2, f"bps-train: {why}\n".encode())
    except OSError:
        pass
    os._exit(INTERRUPTED)
