"""What this machine lets a process use, asked the same way everywhere: the CPU cores in its
affinity mask (what taskset, cgroup cpusets and batch schedulers such as SLURM allot), never
``os.cpu_count()`` (the whole node)."""
from __future__ import annotations

import os


def available_cores() -> int:
    """The CPU cores this process may run on (>= 1)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)
