"""sha256 of files at disk speed: large reads into one reused buffer; ``splitmix64``, the 64-bit
mixer the synth vertex noise and the runtime's noise keys hash integers with (``mix64``: its finalizer).

hashlib releases the GIL while hashing a buffer larger than 2 KiB, so verify's thread pool
hashes files in parallel with no process overhead. Measured here (benchmarks/bench_pipeline.py,
page cache warm, 2 shared cores): 720-950 MB/s per file with 64 KiB, 1 MiB or 4 MiB reads,
the differences between read sizes within the run-to-run noise (4 MiB keeps the syscall
count low on network file systems); coreutils ``sha256sum`` on the same files: 200-240 MB/s
(hashlib uses OpenSSL's SHA-NI code path).
"""
from __future__ import annotations

import hashlib
import json
import os

import numpy as np

from .errors import InputError
from .host import available_cores

CHUNK = 4 << 20


GAMMA = np.uint64(0x9E3779B97F4A7C15)  # SplitMix64's state increment (the golden gamma)


def mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer of each uint64 of ``x`` (no gamma added), wrapping modulo 2^64."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's output function of each uint64 of ``x`` (the state advanced by the golden
    gamma, then mixed), wrapping modulo 2^64: splitmix64(0) = 0xE220A8397B1DCDAF."""
    with np.errstate(over="ignore"):
        return mix64(x + GAMMA)


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


def recorded_size_problem(path: str | os.PathLike, size: int | None) -> tuple[int | None, str | None]:
    """A file against the size a manifest recorded (None: not recorded) -> (its size, None when
    it cannot be stat'ed; the problem, without the file's name, or None). ``verify`` lists the
    problem, a scene's load raises it; a wrong size says it all (the file is not hashed)."""
    try:
        got = os.stat(path).st_size
    except FileNotFoundError:
        return None, "missing"
    except OSError as e:
        return None, f"cannot stat ({e.strerror})"
    if size is not None and got != size:
        return got, f"size {got} != recorded {size} (truncated or replaced?)"
    return got, None


def recorded_hash_problem(path: str | os.PathLike, sha256: str) -> str | None:
    """A file against the sha256 a manifest recorded: the problem (without the file's name) or
    None; a file that cannot be read raises InputError."""
    digest, _ = sha256_file(path)
    return None if digest == sha256 else "sha256 differs from the manifest (corrupt or replaced)"


def default_jobs() -> int:
    """Two threads per usable core (I/O and hashing overlap), at most 32."""
    return max(2, min(32, available_cores() * 2))


def settings_fingerprint(settings: dict) -> str:
    """sha256 of a settings dict in a canonical JSON form (key order does not matter)."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()
