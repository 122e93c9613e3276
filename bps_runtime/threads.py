"""CPU threads of the runtime: how many the renderer and the step share (``available_cores``,
``check_threads``); background threads (loader, field worker) run at a low CPU priority."""
from __future__ import annotations

import operator
import os
import threading

from bps_assets.host import available_cores

BACKGROUND_NICE = 19   # loads and distance fields use the cycles the step loop leaves idle


def lower_priority(nice: int = BACKGROUND_NICE):
    """Run the calling thread at least ``nice`` below the process's priority (Linux: threads have
    their own nice value), so background preparation uses idle cycles instead of stretching
    simulator steps. Idempotent: calling it again from the same thread lowers nothing further."""
    try:
        tid = threading.get_native_id()
        target = min(19, os.getpriority(os.PRIO_PROCESS, os.getpid()) + nice)
        if os.getpriority(os.PRIO_PROCESS, tid) < target:
            os.setpriority(os.PRIO_PROCESS, tid, target)
    except (AttributeError, OSError):  # not Linux / not allowed: run at normal priority
        pass


def check_threads(threads, what: str = "threads") -> int:
    """``threads`` (None: every core this process may use) -> a positive int, or a ConfigError.
    The renderer and the step share this many CPU threads."""
    from bps_assets.errors import ConfigError

    if threads is None:
        return available_cores()
    try:
        n = None if isinstance(threads, bool) else operator.index(threads)  # ints, numpy ints; not 2.0
    except TypeError:
        n = None
    if n is None or n < 1:
        raise ConfigError(None, f"{what}={threads!r}: expected a positive int (CPU threads for the renderer "
                                f"and the step) or None (all {available_cores()} cores this process may use)")
    return n
