"""Warp, initialised once per process and quietly: ``init_warp()`` -> the ``warp`` module.

No banner, no module-load chatter; and where no GPU is expected (torch sees no CUDA device) the
driver's "Could not find or load the NVIDIA CUDA driver" line, printed by Warp's C code on
stderr, is left out (anything else Warp prints there still reaches stderr).
MissingDependencyError when warp-lang is not installed. ``device_build`` / ``CudaReleased``
are the other process-wide Warp state: the lock every CUDA BVH build and release runs under.
"""
from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading

from bps_assets.errors import MissingDependencyError

NO_DRIVER = "Could not find or load the NVIDIA CUDA driver"
_lock = threading.Lock()
_wp = None
# Warp's CUDA builds of BVHs (wp.Mesh, wp.Bvh) are not safe from two threads at once, nor beside
# another thread's teardown of such objects (NVIDIA/warp#1491; seen here as "illegal memory
# access" when two loader threads built scenes on an H100): CUDA builds and releases take this
# lock; CPU builds stay concurrent. Re-entrant: a release may happen on a thread that holds it.
CUDA_BUILD_LOCK = threading.RLock()


_orphans: list = []   # what CUDA scene objects held, dropped while another thread had the lock


@contextlib.contextmanager
def _cuda_locked():
    with CUDA_BUILD_LOCK:
        free_orphans()   # what others left goes before this build's memory comes
        try:
            yield
        finally:
            free_orphans()


def device_build(device):
    """The context every build of a scene's Warp objects on ``device`` (a Warp device) runs in:
    ``CUDA_BUILD_LOCK`` on CUDA (on leaving it, what ``CudaReleased`` left is freed), nothing on
    the CPU."""
    return _cuda_locked() if device.is_cuda else contextlib.nullcontext()


def free_orphans() -> None:
    """Free what ``CudaReleased`` objects left for the next holder of ``CUDA_BUILD_LOCK``;
    the caller holds it."""
    while _orphans:
        _orphans.pop().clear()


class CudaReleased:
    """Base of the objects that own a scene's Warp arrays, meshes and BVHs: on CUDA (``_cuda``
    set first thing in ``__init__``) they are freed under ``CUDA_BUILD_LOCK`` whichever thread
    drops the last reference (the env's, a loader's, the garbage collector's). Dropping one never
    waits: while another thread holds the lock, its contents wait for that thread to free them
    (``free_orphans``), so neither a step nor a thread holding another lock can block here."""

    _cuda = False

    def __del__(self, _lock=CUDA_BUILD_LOCK, _orphans=_orphans):
        if not self._cuda:
            return
        _orphans.append(dict(self.__dict__))
        self.__dict__.clear()
        # freed now if the lock is free; else by its holder's next free_orphans(), or, when the
        # holder is already past its last one, by the next build or close()
        if _lock.acquire(blocking=False):
            try:
                free_orphans()
            finally:
                _lock.release()


def _gpu_expected() -> bool:
    try:
        import torch
    except ImportError:
        return True
    return torch.cuda.is_available()


def _init_filtering_stderr(wp) -> None:
    """``wp.init()`` with file descriptor 2 captured, then replayed without the no-driver line."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            wp.init()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        text = tmp.read().decode(errors="replace")
    kept = "".join(line for line in text.splitlines(True) if NO_DRIVER not in line)
    if kept:
        sys.stderr.write(kept)
        sys.stderr.flush()


def init_warp():
    """The ``warp`` module, ``wp.init()`` done (once; kernels compile on first launch and are
    cached on disk by Warp)."""
    global _wp
    if _wp is not None:
        return _wp
    with _lock:
        if _wp is None:
            try:
                import warp as wp
            except ImportError as e:
                raise MissingDependencyError(None, "the Warp kernels", "warp-lang") from e
            import logging
            if getattr(wp.config, "log_level", None) is not None and wp.config.log_level < logging.WARNING:
                wp.config.log_level = logging.WARNING   # no init banner / module-load chatter
            wp.config.quiet = True
            if _gpu_expected():
                wp.init()
            else:
                _init_filtering_stderr(wp)
            _wp = wp
    return _wp
