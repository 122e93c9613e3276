"""sha256 of files at disk speed: large reads into one reused buffer, threads for parallelism.

hashlib releases the GIL while hashing a buffer larger than 2 KiB, so a thread pool hashes
files in parallel with no process overhead. Measured here (benchmarks/bench_pipeline.py,
page cache warm): 846 / 861 / 858 MB/s with 64 KiB / 1 MiB / 4 MiB reads (the read size does
not matter; 4 MiB keeps the syscall count low on network file systems); coreutils
``sha256sum`` on the same files: 228 MB/s.
"""
from __future__ import annotations

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..errors import InputError

CHUNK = 4 << 20


def sha256_file(path: str | os.PathLike, chunk: int = CHUNK) -> tuple[str, int]:
    """(hex sha256, bytes read) of ``path``."""
    h = hashlib.sha256()
    buf = bytearray(chunk)
    view = memoryview(buf)
    n = 0
    try:
        with open(path, "rb", buffering=0) as f:
            while True:
                k = f.readinto(buf)
                if not k:
                    break
                h.update(view[:k])
                n += k
    except FileNotFoundError:
        raise InputError(path, "no such file") from None
    except OSError as e:
        raise InputError(path, f"cannot read: {e.strerror}") from None
    return h.hexdigest(), n


def default_jobs() -> int:
    """Two threads per usable core (I/O and hashing overlap), at most 32."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(2, min(32, cores * 2))


def sha256_many(paths, jobs: int | None = None) -> dict[Path, tuple[str, int] | Exception]:
    """Hash many files in parallel, largest first (so one big file does not finish last).

    Returns ``{path: (sha256, size) or the InputError}``; never raises for one bad file.
    """
    paths = [Path(p) for p in dict.fromkeys(paths)]

    def size(p):
        try:
            return p.stat().st_size
        except OSError:
            return -1

    paths.sort(key=size, reverse=True)

    def one(p):
        try:
            return sha256_file(p)
        except InputError as e:
            return e

    jobs = default_jobs() if jobs is None else max(1, jobs)
    if jobs == 1 or len(paths) <= 1:
        return {p: one(p) for p in paths}
    with ThreadPoolExecutor(max_workers=min(jobs, len(paths))) as ex:
        return dict(zip(paths, ex.map(one, paths)))
