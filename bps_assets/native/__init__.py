"""Small C helpers compiled by pip when it installs bps, loaded with ctypes.

Why ctypes: every call through ctypes releases the GIL, which is the point of these helpers (the
step loop of ``bps_runtime`` must not stall while background threads work). They are built as
method-less Python extensions only so that setuptools compiles and installs them
(``setup.py``, ``optional=True``): without a C compiler the install still succeeds and each
caller falls back to its pure-Python path.
"""
from __future__ import annotations

import ctypes
import importlib.util
import threading

_lock = threading.Lock()
_cache: dict[str, ctypes.CDLL | None] = {}
_functions: dict[tuple[str, str], object] = {}   # (module, name) -> function or None


def load(module: str) -> ctypes.CDLL | None:
    """The compiled helper ``module`` (a dotted name) as a ctypes library, None if not built."""
    with _lock:
        if module not in _cache:
            try:
                spec = importlib.util.find_spec(module)
            except ImportError:
                spec = None
            lib = None
            if spec is not None and spec.origin and not spec.origin.endswith(".py"):
                try:
                    lib = ctypes.CDLL(spec.origin)
                except OSError:
                    lib = None
            _cache[module] = lib
        return _cache[module]


def function(module: str, name: str, argtypes: list, restype=ctypes.c_int):
    """``name`` from the compiled helper ``module`` with its ctypes signature set, or None when
    the helper was not built or was built from older sources without ``name`` (a checkout updated
    without reinstalling: the caller then takes its pure-Python path). Looked up once per process;
    later calls take no lock (callers on a per-section read path call it each time)."""
    key = (module, name)
    if key in _functions:   # a dict read is atomic: no lock on the hot path
        return _functions[key]
    lib = load(module)
    f = None if lib is None else getattr(lib, name, None)
    if f is not None:
        with _lock:
            if f.argtypes is None:
                f.restype = restype
                f.argtypes = argtypes
    _functions[key] = f
    return f
