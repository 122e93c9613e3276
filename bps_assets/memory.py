"""How much memory this process may still take, and whether a planned allocation fits.

``memory_budget()`` is ``USABLE_FRACTION`` of the smaller of the kernel's MemAvailable and what
an address-space limit (``ulimit -v``, RLIMIT_AS) leaves this process; None where neither is
known. Code that can estimate a file's cost from its header (navmesh builds and loads, a batch
of environments) compares the estimate with it before allocating and raises a typed error that
names the setting that would fit, instead of growing until the OS or numpy gives up.
``check_num_envs`` is that check for a batch of environments (the runtime's ``make``).
"""
from __future__ import annotations

import resource

from .errors import ConfigError

USABLE_FRACTION = 0.8  # leave the rest to the page cache, the parent and other processes


def available_memory() -> int | None:
    """MemAvailable from /proc/meminfo (bytes); None where the kernel does not say."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def address_space_left() -> int | None:
    """What RLIMIT_AS still allows this process to map (bytes); None when unlimited."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            used = next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("VmSize:"))
    except (OSError, ValueError, StopIteration):
        used = 0
    return max(0, soft - used)


def memory_budget() -> int | None:
    """Bytes a new allocation may take (``USABLE_FRACTION`` of what is left); None: unknown."""
    known = [x for x in (available_memory(), address_space_left()) if x is not None]
    return int(USABLE_FRACTION * min(known)) if known else None


def max_num_envs(bytes_per_env: int, fixed_bytes: int = 0, available: int | None = None) -> int | None:
    """How many environments of ``bytes_per_env`` (plus ``fixed_bytes`` shared by all) fit in
    ``available`` bytes (default: ``memory_budget()``; pass the device's free memory for a GPU
    batch); None when unknown."""
    budget = memory_budget() if available is None else available
    if budget is None:
        return None
    return max(0, (budget - fixed_bytes) // max(1, bytes_per_env))


def check_num_envs(num_envs: int, bytes_per_env: int, fixed_bytes: int = 0, available: int | None = None,
                   where: str = "host memory") -> None:
    """ConfigError naming the largest ``num_envs`` that fits when ``num_envs`` environments of
    ``bytes_per_env`` each (plus ``fixed_bytes``) do not fit in ``available`` (see above)."""
    fit = max_num_envs(bytes_per_env, fixed_bytes, available)
    if fit is not None and num_envs > fit:
        need = fixed_bytes + num_envs * bytes_per_env
        raise ConfigError(None, f"num_envs={num_envs} needs about {need / 2**30:.1f} GiB of {where} "
                                f"({bytes_per_env} bytes each); at most num_envs={fit} fits")
