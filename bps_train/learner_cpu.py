"""Host settings of the CPU learner: freed memory kept for reuse, torch's threads per phase.

A PPO update on the CPU allocates and frees ~2 GB of activations and gradients (128 envs x 32
steps; the stem's output alone is 134 MB per minibatch). glibc serves blocks over its mmap
threshold (at most 32 MB) with fresh mmaps and unmaps them on free, so every update page-faults
all of it in again: 0.6-1.0 s of kernel time per update, ~40 % of it (docs/PERFORMANCE.md,
"CPU learner"). ``keep_freed_memory()`` turns mmap off for malloc and raises the trim threshold,
so freed blocks stay in the heap and are reused: the process keeps its peak heap (about the
update's peak) instead of returning it between updates. A no-op where the C library has no
``mallopt`` (musl, macOS): returns False there. ``threads(n)``: torch's intra-op threads for
a phase (the update uses every core: the simulator idles then; the rollout one, beside it).
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import sys

M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4           # glibc's malloc.h
KEEP = {M_MMAP_MAX: 0, M_TRIM_THRESHOLD: -1}       # -1: never trim (mallopt(3))
GLIBC_DEFAULTS = {M_MMAP_MAX: 65536, M_TRIM_THRESHOLD: 128 * 1024}


def _libc():
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None)
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


def keep_freed_memory(on: bool = True) -> bool:
    """``on``: freed host memory stays in the process for reuse (no mmap per large block, no
    trim); off: glibc's default limits again and the free memory returned (``malloc_trim``; the
    benchmarks' baseline). -> whether the C library took the settings."""
    libc = _libc()
    if libc is None:
        return False
    ok = all(libc.mallopt(k, v) == 1 for k, v in (KEEP if on else GLIBC_DEFAULTS).items())
    if not on:
        libc.malloc_trim(0)
    return ok


def launcher_count(name: str) -> int:
    """torchrun's count ``name`` (WORLD_SIZE, LOCAL_WORLD_SIZE) from the environment, 1 when unset;
    a malformed value is a ConfigError naming it."""
    from bps_assets.errors import ConfigError

    v = os.environ.get(name, "1")
    try:
        n = int(v)
    except ValueError:
        n = 0
    if n < 1:
        raise ConfigError(None, f"{name}={v!r} in the environment: expected a positive int (torchrun sets it)")
    return n


def local_ranks() -> int:
    """The ranks torchrun started on this host (LOCAL_WORLD_SIZE, read only when WORLD_SIZE says
    there are several ranks), else 1."""
    return launcher_count("LOCAL_WORLD_SIZE") if launcher_count("WORLD_SIZE") > 1 else 1


def core_share() -> int:
    """The cores this process may use, shared with the other ranks on this host (``local_ranks``; >= 1)."""
    from bps_assets.host import available_cores

    return max(1, available_cores() // local_ranks())


def update_threads(n: int = 0) -> int:
    """Torch threads for the PPO update: ``n``, or (0) this rank's ``core_share``."""
    return n if n > 0 else core_share()


@contextlib.contextmanager
def threads(n: int):
    """torch's intra-op threads = ``n`` inside, the previous count after (switching costs
    microseconds: OpenMP keeps its pool)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
