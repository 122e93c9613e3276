"""Count what one simulation step asks of the machine: torch ops, Warp launches, host syncs.

``count_ops()`` is a context manager returning a ``StepCounts`` that fills while the block runs:
torch ops (a ``TorchDispatchMode``, op -> calls), Warp launches (``warp.launch`` and graph
replays), and syncs (calls that make the host wait on CUDA: ``.item()``, ``nonzero``,
boolean-mask indexing, device-to-host copies, ``Tensor.tolist/numpy/cpu``). Counts are per
phase ("step" unless marked "render" / "input check"). The runtime imports no profiler: while a
count is open, the env's step is followed on its simulator thread and its frames and action
check are marked by wrapping those methods; the step's CPU launch pool (``bps-step`` threads)
is counted too. Used by tests/test_step_profile.py, test_step_counts.py and ``bps-assets bench``.
"""
from __future__ import annotations

import threading
from collections import Counter
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from bps_assets.errors import ConfigError

_SYNC_OPS = frozenset({
    "_local_scalar_dense", "item", "nonzero", "masked_select", "unique", "_unique", "_unique2",
    "unique_consecutive", "unique_dim", "equal", "is_nonzero", "allclose", "repeat_interleave",
})
_INDEX_OPS = frozenset({"index", "index_put", "index_put_", "_index_put_impl_"})
_COPY_OPS = frozenset({"_to_copy", "copy_", "to"})
_PY_SYNCS = ("tolist", "numpy", "cpu")


@dataclass
class StepCounts:
    """Counts per phase: ``torch_ops[phase][op]``, ``warp_launches[phase][kernel]``,
    ``syncs[phase][what]``. The properties total the ``"step"`` phase (everything not marked)."""

    torch_ops: dict = field(default_factory=dict)
    warp_launches: dict = field(default_factory=dict)
    syncs: dict = field(default_factory=dict)

    def _add(self, table: dict, phase: str, key: str):
        table.setdefault(phase, Counter())[key] += 1

    def total(self, what: str, phase: str = "step") -> int:
        """Sum of one table (``"torch_ops"``, ``"warp_launches"``, ``"syncs"``) for a phase."""
        return sum(getattr(self, what).get(phase, Counter()).values())

    @property
    def num_torch_ops(self) -> int:
        """torch ops of the ``step`` phase."""
        return self.total("torch_ops")

    @property
    def num_warp_launches(self) -> int:
        """Warp launches of the ``step`` phase."""
        return self.total("warp_launches")

    @property
    def num_syncs(self) -> int:
        """Syncing calls of the ``step`` phase."""
        return self.total("syncs")

    def phases(self) -> list[str]:
        """Phases that counted anything."""
        return sorted(set(self.torch_ops) | set(self.warp_launches) | set(self.syncs))

    def summary(self) -> str:
        """One line per phase: ops / launches / syncs (and which syncs)."""
        lines = []
        for p in self.phases():
            s = self.syncs.get(p, Counter())
            lines.append(f"{p}: {self.total('torch_ops', p)} torch ops, {self.total('warp_launches', p)} "
                         f"warp launches, {sum(s.values())} syncs" + (f" {dict(s)}" if s else ""))
        return "\n".join(lines)


class _Tracker:
    def __init__(self, counts: StepCounts):
        self.counts = counts
        self.threads: set[int] = set()
        self.local = threading.local()

    def phase(self) -> str:
        """The calling thread's current phase."""
        return getattr(self.local, "phase", "step")

    def tracked(self) -> bool:
        """Whether the calling thread is counted (a followed thread, or the step's CPU launch
        pool, whose threads are named ``bps-step``: they only launch Warp kernels)."""
        return threading.get_ident() in self.threads or threading.current_thread().name.startswith("bps-step")


def _is_bool_index(args) -> bool:
    for a in args:
        if isinstance(a, (list, tuple)):
            if any(isinstance(t, torch.Tensor) and t.dtype == torch.bool for t in a if t is not None):
                return True
    return False


def _async_copy(name, args, kwargs) -> bool:
    """A ``copy_(..., non_blocking=True)`` into pinned host memory: queued on the stream, the host
    does not wait (the fused step's head snapshot, read rounds later after its event)."""
    if name != "copy_":
        return False
    nb = kwargs.get("non_blocking", args[2] if len(args) > 2 else False)
    return bool(nb) and isinstance(args[0], torch.Tensor) and args[0].is_pinned()


def _device_of(x):
    return x.device if isinstance(x, torch.Tensor) else None


class _Mode(TorchDispatchMode):
    def __init__(self, tracker: _Tracker):
        super().__init__()
        self.tracker = tracker

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._overloadpacket.__name__
        tr = self.tracker
        ph = tr.phase()
        tr.counts._add(tr.counts.torch_ops, ph, name)
        if name in _SYNC_OPS:
            tr.counts._add(tr.counts.syncs, ph, name)
        elif name in _INDEX_OPS and _is_bool_index(args[1:]):
            tr.counts._add(tr.counts.syncs, ph, "boolean-mask index")
        elif name in _COPY_OPS:
            src = _device_of(args[1]) if name == "copy_" and len(args) > 1 else _device_of(args[0] if args else None)
            dst = _device_of(args[0]) if name == "copy_" else kwargs.get("device")
            if src is not None and dst is not None and torch.device(dst).type == "cpu" and src.type != "cpu" \
                    and not _async_copy(name, args, kwargs):
                tr.counts._add(tr.counts.syncs, ph, "device-to-host copy")
        return func(*args, **kwargs)


_state_lock = threading.Lock()
_active: list[_Tracker] = []


def _current() -> _Tracker | None:
    return _active[-1] if _active else None


def follow():
    """In another thread (the env's simulator thread): count this thread's work into the open
    ``count_ops()``; a no-op context when none is open."""
    tr = _current()
    if tr is None:
        return nullcontext()
    return _follow(tr)


@contextmanager
def _follow(tr: _Tracker):
    me = threading.get_ident()
    if me in tr.threads:
        yield
        return
    tr.threads.add(me)
    try:
        with _Mode(tr):
            yield
    finally:
        tr.threads.discard(me)


@contextmanager
def phase(name: str):
    """Count what runs inside under ``name`` (e.g. ``"render"``) instead of ``"step"``."""
    tr = _current()
    if tr is None or not tr.tracked():
        yield
        return
    old = tr.phase()
    tr.local.phase = name
    try:
        yield
    finally:
        tr.local.phase = old


def _patch_python(tr: _Tracker):
    saved = {}
    for name in _PY_SYNCS:
        orig = getattr(torch.Tensor, name)
        saved[name] = orig

        def wrapper(self, *a, _orig=orig, _name=name, **k):
            if tr.tracked():
                tr.counts._add(tr.counts.syncs, tr.phase(), f"Tensor.{_name}")
            return _orig(self, *a, **k)

        setattr(torch.Tensor, name, wrapper)
    return saved


def _patch_warp(tr: _Tracker):
    try:
        import warp
    except ImportError:  # no Warp installed: nothing can launch
        return {}
    saved = {}
    for name in ("launch", "launch_tiled", "capture_launch"):
        orig = getattr(warp, name, None)
        if orig is None:
            continue
        saved[name] = orig

        def wrapper(kernel, *a, _orig=orig, _name=name, **k):
            if tr.tracked():
                key = ("graph" if _name == "capture_launch"
                       else getattr(kernel, "key", None) or getattr(kernel, "__name__", str(kernel)))
                tr.counts._add(tr.counts.warp_launches, tr.phase(), key)
            return _orig(kernel, *a, **k)

        setattr(warp, name, wrapper)
    return saved


def _patch_env():
    """Mark the env's parts while a count is open (the runtime itself imports no profiler): its
    simulator's step is followed, its frames count as "render", the CPU check of the action
    values as "input check". -> [(class, name, original)] to restore."""
    from bps_runtime.env.env import BatchNavEnv as E
    from bps_runtime.env.simulator import Simulator as S

    saved = []

    def wrap(cls, name, ctx):
        orig = cls.__dict__[name]
        saved.append((cls, name, orig))

        def wrapper(self, *a, **k):
            with ctx():
                return orig(self, *a, **k)

        setattr(cls, name, wrapper)

    wrap(S, "step_group", follow)
    wrap(S, "_render", lambda: phase("render"))
    wrap(S, "_frame", lambda: phase("render"))
    wrap(S, "_noise", lambda: phase("noise"))      # habitat-sim's sensor noise on the frames
    wrap(S, "_host_hook", lambda: phase("render"))   # the task's host hook (ImageNav: goal images of episodes just queued)
    wrap(E, "_check_action_range", lambda: phase("input check"))
    return saved


@contextmanager
def count_ops():
    """Count torch ops, Warp launches and syncs of the block (see the module docstring)."""
    counts = StepCounts()
    tr = _Tracker(counts)
    with _state_lock:
        if _active:
            raise ConfigError(None, "count_ops() is already open (counts do not nest)")
        _active.append(tr)
        py_saved = _patch_python(tr)
        wp_saved = _patch_warp(tr)
        env_saved = _patch_env()
    try:
        with _follow(tr):
            yield counts
    finally:
        with _state_lock:
            for name, orig in py_saved.items():
                setattr(torch.Tensor, name, orig)
            for cls, name, orig in env_saved:
                setattr(cls, name, orig)
            if wp_saved:
                import warp
                for name, orig in wp_saved.items():
                    setattr(warp, name, orig)
            _active.remove(tr)
