"""One run per output: ``hold(path, what)`` takes the lock file ``path`` (an flock'ed file holding the
owner's pid) for the life of the process; preprocess (per OUT_ROOT shard) and bps-train (per
--out-dir) both use it.

The OS drops the lock when its process dies, kill -9 included, so a lock file left behind by a
dead run is free to take: the new run says so in one line (naming the dead pid) and goes on. A
live holder makes a second run refuse with a ``ConfigError`` naming the place and the holder's
pid. The file is emptied (not removed: removing would race a third run opening it) when the run
ends normally, or stops at once (``release_held``, then ``os._exit``). POSIX locks with fcntl,
Windows with msvcrt; a system with neither gets no lock, and a ``RuntimeWarning`` says so.
"""
from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

from ..errors import ConfigError, OutputWriteError


class RunLock:
    """An open, locked lock file; ``release()`` (or leaving the ``with``) lets it go."""

    def __init__(self, path: Path, f):
        self.path, self._f, self._pid = path, f, os.getpid()
        _HELD.append(self)

    def release(self) -> None:
        """Empty the file (no pid left for a stale-lock line) and drop the lock; idempotent."""
        if self._f is None:
            return
        if self in _HELD:
            _HELD.remove(self)
        try:
            self._f.seek(0)
            self._f.truncate()
        except OSError:  # a pid left in the file only reads as a stale lock, which the next hold takes over
            pass
        self._f.close()   # closing drops the lock
        self._f = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


_HELD: list[RunLock] = []   # this process's locks, for release_held


def release_held() -> None:
    """Release every lock this process holds: what a run ending with ``os._exit`` (which skips
    the ``with`` blocks and ``finally`` clauses that would) calls first, so the next run does
    not report its pid as a run that ended without releasing the lock. A forked child's copies
    of its parent's locks are left alone (the parent still runs)."""
    for lock in list(_HELD):
        if lock._pid == os.getpid():   # a forked child: the parent still holds it
            lock.release()


def hold(path, what: str, *, where=None, place: str = "folder", hint: str = "wait for it or stop it",
         log=None, stacklevel: int = 2) -> RunLock:
    """Take the lock file ``path`` for this process (``what``: the kind of run, e.g. "bps-train").
    A live holder: ``ConfigError(where or path's folder, "another {what} run (pid N) is writing
    this {place}; {hint}")``. ``log(line)`` (default: stderr) hears of a stale lock taken over."""
    path = Path(path)
    try:
        f = open(path, "a+")
    except OSError as e:
        raise OutputWriteError(path, f"cannot create the run's lock file: {e.strerror or e}") from None
    try:
        _lock_file(f)
    except OSError:
        holder = _pid_in(f)
        f.close()
        raise ConfigError(path.parent if where is None else where,
                          f"another {what} run (pid {holder or 'unknown'}) is writing this {place}; {hint}") from None
    except ImportError:
        warnings.warn(f"{path}: this system has neither fcntl nor msvcrt file locks; nothing stops a second "
                      f"{what} run into the same {place}", RuntimeWarning, stacklevel=stacklevel)
        return RunLock(path, f)
    stale = _pid_in(f)
    if stale is not None and stale != os.getpid():
        (log or (lambda s: print(s, file=sys.stderr, flush=True)))(
            f"{what}: taking over the lock {path} of pid {stale}, which ended without releasing it")
    f.seek(0)
    f.truncate()
    f.write(f"{os.getpid()}\n")
    f.flush()
    return RunLock(path, f)


def _lock_file(f) -> None:
    """Non-blocking exclusive lock on an open file: fcntl (POSIX), else msvcrt (Windows).
    OSError: someone holds it; ImportError: the system has neither."""
    try:
        import fcntl
    except ImportError:
        import msvcrt  # ImportError again: no lock at all (the caller warns)

        f.seek(0)
        msvcrt.locking(f.fileno(), msvcrt.LK_NBLCK, 1)
        return
    fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)


def _pid_in(f) -> int | None:
    try:
        f.seek(0)
        text = f.read(32).strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
