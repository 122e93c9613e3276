"""One run per output folder: ``hold(folder, name)`` takes ``folder/name`` (an flock'ed file
holding the owner's pid) for the life of the process.

The OS drops an flock when its process dies, kill -9 included, so a lock file left behind by a
dead run is free to take: the new run says so in one line (naming the dead pid) and goes on. A
live holder makes a second run refuse with a ``ConfigError`` naming the folder and the holder's
pid. The file is emptied (not removed: removing would race a third run opening it) when the run
ends normally. Systems without fcntl get no lock, and a warning says so.
"""
from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

from bps_assets.errors import ConfigError, OutputWriteError

TRAIN = ".bps-train.lock"   # bps-train's training run (checkpoint.pt, log.csv, sim_only.jsonl, tb/)
EVAL = ".bps-eval.lock"     # --eval's own files (videos/)


class RunLock:
    """An open, flock'ed lock file; ``release()`` (or leaving the ``with``) lets it go."""

    def __init__(self, path: Path, f):
        self.path, self._f = path, f

    def release(self) -> None:
        if self._f is None:
            return
        try:
            self._f.seek(0)
            self._f.truncate()
        except OSError:
            pass
        self._f.close()   # closing drops the flock
        self._f = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


def hold(folder, name: str = TRAIN, what: str = "bps-train", log=None) -> RunLock:
    """Take ``folder/name`` for this process. ``ConfigError`` naming the holder's pid when a live
    process has it; ``log(line)`` (default: stderr) hears of a stale lock taken over."""
    path = Path(folder) / name
    try:
        f = open(path, "a+")
    except OSError as e:
        raise OutputWriteError(path, f"cannot create the run's lock file: {e.strerror or e}") from None
    try:
        import fcntl
    except ImportError:
        warnings.warn(f"{path}: no fcntl file locks on this system; nothing stops a second run "
                      "into the same folder", RuntimeWarning, stacklevel=2)
        return RunLock(path, f)
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = _pid_in(f)
        f.close()
        raise ConfigError(folder, f"another {what} run (pid {holder or 'unknown'}) is writing this "
                                  f"folder; wait for it, stop it, or pass another --out-dir") from None
    stale = _pid_in(f)
    if stale is not None and stale != os.getpid():
        (log or (lambda s: print(s, file=sys.stderr, flush=True)))(
            f"bps-train: taking over the lock {path} of pid {stale}, which ended without releasing it")
    f.seek(0)
    f.truncate()
    f.write(f"{os.getpid()}\n")
    f.flush()
    return RunLock(path, f)


def _pid_in(f) -> int | None:
    try:
        f.seek(0)
        text = f.read(32).strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
