"""One run per output folder: ``hold(folder, name)`` takes ``folder/name`` for the life of the
process with the shared run lock (``bps_assets.pipeline.run_lock``: survives kill -9 as a stale
lock taken over with one line; a live holder is a ``ConfigError`` naming its pid)."""
from __future__ import annotations

from pathlib import Path

from bps_assets.pipeline.run_lock import RunLock, hold as hold_lock

TRAIN = ".bps-train.lock"   # bps-train's training run (its files: train.RUN_FILES and snapshots)
EVAL = ".bps-eval.lock"     # --eval's own files (videos/)


def hold(folder, name: str = TRAIN, what: str = "bps-train", log=None) -> RunLock:
    """Take ``folder/name`` for this process. ``ConfigError`` naming the folder and the holder's
    pid when a live process has it; ``log(line)`` (default: stderr) hears of a stale lock taken over."""
    return hold_lock(Path(folder) / name, what, where=folder,
                     hint="wait for it, stop it, or pass another --out-dir", log=log)
