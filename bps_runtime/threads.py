"""Background threads of the runtime (loader, field worker) run at a low CPU priority."""
from __future__ import annotations

import os
import threading

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
