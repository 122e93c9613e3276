"""Every resident scene's navigation data in flat device buffers indexed by scene index, so the
step's launch count does not depend on the number of scenes.

- ``Arena``: one flat device buffer with a first-fit allocator; grows (new buffer + copy) only
  when a scene is prepared, off the step path.
- ``SceneNav``: one scene's navmesh in the arenas (span grids, neighbours, cells, islands, the
  geodesic ``seen`` lists, span centres) and its meta-table row.
- ``GoalFields``: one scene's distance fields to goals, reference-counted rows, computed by the
  ``FieldWorker`` thread; a full table moves (re-published by ``NavBuffers.refresh``). Each row
  also keeps its snapped goals (the step's reads are exact near them: ``nav.kernels.geodesic``).
- ``NavBuffers``: the arenas + the meta tables; ``publish`` / ``unpublish`` are small writes.
The Warp functions that read them: ``nav/kernels.py``. Rules: docs/NAVMESH.md section 4.
Measurements and dropped designs: docs/DECISIONS.md.
"""
from __future__ import annotations

import math
import threading
from concurrent.futures import BrokenExecutor, Future, ThreadPoolExecutor

import numpy as np
import torch

from bps_assets.errors import InterpreterExiting, NavError
from bps_assets.nav.geodesic import NEAR_EXACT

from ..grouping import SMALL
from ..threads import BACKGROUND_NICE, lower_priority

PULL_INSIDE = 1e-4    # metres: results stay strictly inside their cell (docs/NAVMESH.md)

# meta table columns (int64): dims and arena offsets of a resident scene
M_L, M_D, M_W, M_S, M_K, M_SIDX, M_NBR, M_LRC, M_ISL, M_SEEN, M_HEIGHT, M_POS, M_FIELD, M_GOALS = range(14)
NUM_META_I = 14
GOAL_WIDTH = 4        # float64 per goal in the goal arena: x, y, z (snapped), span
# int64 per field row in the goal-table arena: its goals' offset, their count, its near-goal gate
# in micrometres (the arena is int64; the kernel divides by GATE_SCALE)
TABLE_WIDTH = 3
T_OFFSET, T_COUNT, T_GATE = range(TABLE_WIDTH)   # its columns
GATE_SCALE = 1_000_000
# float64 columns: grid origin x / z, cell size, max climb
F_OX, F_OZ, F_CS, F_CLIMB = range(4)
NUM_META_F = 4


class Arena:
    """A flat 1-D device tensor with a first-fit allocator (offsets in elements).

    ``alloc`` / ``release`` / ``write`` are thread-safe; ``alloc`` grows the buffer (a new
    tensor, the old contents copied, ``version`` bumped) when nothing fits. Offsets stay valid
    across growth. Callers read ``buf`` once per step (after ``NavBuffers.refresh``)."""

    def __init__(self, dtype: torch.dtype, device, capacity: int = 1024, fill=0):
        self.dtype, self.device, self.fill = dtype, torch.device(device), fill
        self.buf = torch.full((max(int(capacity), 1),), fill, dtype=dtype, device=self.device)
        self._free: list[list[int]] = [[0, self.buf.numel()]]     # sorted [offset, size]
        self.lock = threading.RLock()
        self.version = 0
        self.used = 0

    def reserve(self, capacity: int):
        """Grow to at least ``capacity`` elements (call before the first step)."""
        with self.lock:
            if capacity > self.buf.numel():
                self._grow(capacity - self.buf.numel())

    def _grow(self, need: int):
        old = self.buf
        cap = old.numel()
        new_cap = max(2 * cap, cap + need)
        new = torch.full((new_cap,), self.fill, dtype=self.dtype, device=self.device)
        new[:cap] = old
        self.buf = new
        self.version += 1
        self._put(cap, new_cap - cap)

    def _put(self, off: int, size: int):
        fr = self._free
        fr.append([off, size])
        fr.sort()
        merged = [fr[0]]
        for o, s in fr[1:]:
            if merged[-1][0] + merged[-1][1] == o:
                merged[-1][1] += s
            else:
                merged.append([o, s])
        self._free = merged

    def alloc(self, n: int) -> int:
        """Offset of ``n`` free elements (first fit; grows the buffer when nothing fits)."""
        n = max(int(n), 1)
        with self.lock:
            for blk in self._free:
                if blk[1] >= n:
                    off = blk[0]
                    blk[0] += n
                    blk[1] -= n
                    if blk[1] == 0:
                        self._free.remove(blk)
                    self.used += n
                    return off
            self._grow(n)
            return self.alloc(n)

    def release(self, off: int, n: int):
        """Give ``n`` elements at ``off`` back (refilled with the fill value)."""
        with self.lock:
            n = max(int(n), 1)
            self.buf[off:off + n] = self.fill
            self._put(int(off), n)
            self.used -= n

    def write(self, off: int, values) -> None:
        """Copy ``values`` (flattened, converted to the arena's dtype) to ``off``."""
        v = torch.as_tensor(np.ascontiguousarray(values).reshape(-1)).to(self.dtype)
        with self.lock:
            self.buf[off:off + v.numel()].copy_(v)

    @property
    def nbytes(self) -> int:
        """Bytes of device memory held."""
        return self.buf.numel() * self.buf.element_size()


class SceneNav:
    """One scene's navmesh in the arenas of ``buffers`` (built off the step path).

    Host copies stay here for the episode sampler (``navmesh``, ``seen``)."""

    def __init__(self, navmesh, buffers: "NavBuffers"):
        from bps_assets.nav.queries import geodesic_graph

        nm = navmesh
        check_navmesh(nm)
        self.navmesh = nm
        self.buffers = buffers
        self.L, self.D, self.W = (int(x) for x in nm.shape)
        self.num_spans = S = int(nm.num_spans)
        self.cell_size = float(nm.cell_size)
        self.origin = (float(nm.origin[0]), float(nm.origin[1]))
        self.max_climb = float(nm.settings.max_climb)
        g = geodesic_graph(nm)
        self.seen = np.concatenate([np.arange(S, dtype=np.int32)[:, None], np.asarray(g.adj, np.int32)], axis=1)
        self.K = int(self.seen.shape[1])
        ints, f32, f64 = self._arrays()
        self._ints_n, self._f32_n, self._f64_n = ints.size, f32.size, f64.size
        self._ints = buffers.ints.alloc(self._ints_n)
        buffers.ints.write(self._ints, ints)
        self._f32 = buffers.f32.alloc(self._f32_n)
        buffers.f32.write(self._f32, f32)
        self._f64 = buffers.f64.alloc(self._f64_n)
        buffers.f64.write(self._f64, f64)
        self.meta_i = self._meta_row(self._ints, self._f32, self._f64)
        self.meta_f = np.array([self.origin[0], self.origin[1], self.cell_size, self.max_climb], np.float64)
        self.host_view = None   # host_arrays as Warp CPU arrays (nav.kernels.host_distance), made on first use
        self._freed = False

    def _arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The scene's arena data (host): int32 (its parts at ``self._parts_at``), float32 heights,
        float64 span centres."""
        nm, S = self.navmesh, self.num_spans
        parts = [
            np.asarray(nm.span_index, np.int32).reshape(-1),                 # [L*D*W], -1 none
            np.asarray(nm.nbr[:S], np.int32).reshape(-1),                    # [S*4], S none
            np.asarray(nm.span_lrc, np.int32).reshape(-1),                   # [S*3]
            np.asarray(nm.span_island, np.int32).reshape(-1),                # [S]
            self.seen.reshape(-1),                                           # [S*K], S none
        ]
        self._parts_at = np.r_[0, np.cumsum([p.size for p in parts])[:-1]].astype(np.int64)
        return (np.concatenate(parts), np.ascontiguousarray(np.asarray(nm.height, np.float32).reshape(-1)),
                np.ascontiguousarray(np.asarray(nm.span_pos, np.float64).reshape(-1)))

    def _meta_row(self, ints_at: int, f32_at: int, f64_at: int) -> np.ndarray:
        """The meta-table row (M_* columns) of this scene's data at those arena offsets (field row
        and goal table bases 0: ``publish`` writes the fields' own)."""
        return np.array([self.L, self.D, self.W, self.num_spans, self.K, *(ints_at + self._parts_at).tolist(),
                         f32_at, f64_at, 0, 0], np.int64)

    def host_arrays(self) -> tuple:
        """This scene alone as host arrays laid out like the arenas (offsets from 0, field row 0):
        (meta_i [1, NUM_META_I], meta_f [1, NUM_META_F], ints, f32, f64)."""
        ints, f32, f64 = self._arrays()
        return self._meta_row(0, 0, 0)[None], self.meta_f[None].copy(), ints, f32, f64

    @property
    def nbytes(self) -> int:
        """Bytes of device memory held."""
        return 4 * self._ints_n + 4 * self._f32_n + 8 * self._f64_n

    def free(self):
        """Give the arena space back (the scene left; the step thread calls this)."""
        if not self._freed:
            self._freed = True
            self.buffers.ints.release(self._ints, self._ints_n)
            self.buffers.f32.release(self._f32, self._f32_n)
            self.buffers.f64.release(self._f64, self._f64_n)


def table_row(offset: int, count: int, gate_um: int) -> np.ndarray:
    """A goal-table row: [TABLE_WIDTH] int64 with its goals' ``offset`` in the goal arena, their
    ``count`` and the near-goal gate in micrometres (``GATE_SCALE``)."""
    row = np.empty(TABLE_WIDTH, np.int64)
    row[T_OFFSET], row[T_COUNT], row[T_GATE] = offset, count, gate_um
    return row


def _goal_block(points: np.ndarray, spans: np.ndarray) -> np.ndarray:
    """[P, GOAL_WIDTH] float64: snapped goal ``points`` [P, 3] beside their ``spans`` [P]."""
    return np.ascontiguousarray(np.concatenate([points, spans[:, None].astype(np.float64)], axis=1))


class GoalFields:
    """One scene's distance fields to goals: ``capacity`` rows of S float32 in the fields arena,
    with reference counts, and per row its snapped goals: a table [capacity, TABLE_WIDTH] (offset,
    count, gate) in the goal-table arena pointing at [count, GOAL_WIDTH] float64 in the goal arena;
    ``gate`` (m, ``bps_assets.nav.geodesic.near_gate``: the task's) is where reads turn exact. Thread-safe:
    rows are added from the ``FieldWorker`` thread while the step reads other rows. A full table
    moves to twice the rows (off the step path); the new base offsets reach the step through
    ``NavBuffers.refresh``."""

    def __init__(self, scene: SceneNav, capacity: int = 16, gate: float = NEAR_EXACT):
        self.scene = scene
        self.gate = float(gate)
        self.buffers = scene.buffers
        self.S = max(scene.num_spans, 1)
        self.capacity = max(int(capacity), 1)
        self.base = self.buffers.field_arena.alloc(self.capacity * self.S)
        self.goal_base = self.buffers.goal_table.alloc(TABLE_WIDTH * self.capacity)
        self.host: dict[int, np.ndarray] = {}
        self.near: dict[int, np.ndarray] = {}      # row -> [P, GOAL_WIDTH] host copy of its goals
        self._near_at: dict[int, int] = {}         # row -> its goals' offset in the goal arena
        self._stale: list[tuple[int, int]] = []    # goal blocks of freed rows, released by the next ``add``
        self.refs = np.zeros(self.capacity, np.int64)
        self.goals: dict[int, np.ndarray] = {}
        self._free = list(range(self.capacity - 1, -1, -1))
        self._lock = threading.Lock()
        self._moved: list[tuple[int, int]] = []   # old regions to free once re-published
        self._moved_goals: list[tuple[int, int]] = []
        self.released = False

    @property
    def table(self) -> torch.Tensor:
        """[capacity, S] view of this scene's rows in the fields arena."""
        buf = self.buffers.field_arena.buf
        return buf[self.base:self.base + self.capacity * self.S].view(self.capacity, self.S)

    def field(self, goal) -> tuple[np.ndarray, np.ndarray]:
        """(flat [S] float32 field of ``goal``, its goal block [P, GOAL_WIDTH] float64: the snapped
        goals the field is attached to, with their spans). ``goal``: a point [3], or [V, 3] points
        (the distance to the nearest: ObjectNav's view points, one multi-source search); the
        goals are snapped once, by the search. The NavMesh's own Dijkstra; slow: call off the
        step path."""
        nm = self.scene.navmesh
        g = np.asarray(goal, np.float64)
        d = nm.distance_field(g.reshape(3)) if g.size == 3 else nm.distance_field_to_any(g.reshape(-1, 3))
        f = np.asarray(d, np.float32)
        lrc = nm.span_lrc
        return np.ascontiguousarray(f[lrc[:, 0], lrc[:, 1], lrc[:, 2]]), _goal_block(d.goal_points, d.goal_spans)

    def _grow(self):
        ar, gt = self.buffers.field_arena, self.buffers.goal_table
        cap, S = self.capacity, self.S
        new = ar.alloc(2 * cap * S)
        with ar.lock:
            ar.buf[new:new + cap * S].copy_(ar.buf[self.base:self.base + cap * S])
        self._moved.append((self.base, cap * S))
        self.base = new
        gnew = gt.alloc(2 * TABLE_WIDTH * cap)
        with gt.lock:
            gt.buf[gnew:gnew + TABLE_WIDTH * cap].copy_(gt.buf[self.goal_base:self.goal_base + TABLE_WIDTH * cap])
        self._moved_goals.append((self.goal_base, TABLE_WIDTH * cap))
        self.goal_base = gnew
        self.refs = np.concatenate([self.refs, np.zeros(cap, np.int64)])
        self._free = list(range(2 * cap - 1, cap - 1, -1))
        self.capacity = 2 * cap
        self.buffers.mark_dirty()

    def add(self, goal, flat: np.ndarray | None = None, near: np.ndarray | None = None) -> int:
        """Store the field of ``goal`` (``flat`` and its goal block ``near``, both as ``field``
        gives them; computed if either is not given) with this scene's near-goal ``gate``;
        returns its row (ref 1)."""
        gate_um = round(self.gate * GATE_SCALE)
        if flat is None or near is None:
            flat, near = self.field(goal)
        ga = self.buffers.goal_arena
        with self._lock:
            stale, self._stale = self._stale, []
        for off, n in stale:   # here, off the step path (a release refills the block: a device op)
            ga.release(off, n)
        at = ga.alloc(near.size)
        ga.write(at, near)
        with self._lock:
            if self.released:  # the scene left while this field was computed
                ga.release(at, near.size)
                raise NavError(None, "distance field for a scene that is no longer resident")
            if not self._free:
                self._grow()
            row = self._free.pop()
            self.buffers.field_arena.write(self.base + row * self.S, flat)
            self.host[row] = flat
            self.near[row], self._near_at[row] = near, at
            self.buffers.goal_table.write(self.goal_base + TABLE_WIDTH * row,
                                          table_row(at, len(near), gate_um))
            self.goals[row] = np.asarray(goal, np.float64).reshape(-1, 3)[0]
            self.refs[row] = 1
        return row

    def retain(self, row: int):
        """One more reference to ``row``."""
        with self._lock:
            self.refs[row] += 1

    def retain_many(self, rows) -> None:
        """One more reference per entry of ``rows`` (repeats allowed)."""
        with self._lock:
            np.add.at(self.refs, np.asarray(rows, np.int64), 1)

    def release(self, row: int):
        """One reference less; the row is free again at zero."""
        self.release_many([row])

    def release_many(self, rows) -> None:
        """One reference less per entry of ``rows``; rows at zero are free again."""
        r = rows if isinstance(rows, list) else np.asarray(rows, np.int64).reshape(-1)
        if len(r) == 0:
            return
        with self._lock:
            if len(r) <= SMALL:     # a step's few rows of one scene: numpy calls cost more
                refs, gone = self.refs, set()
                for row in (r if isinstance(r, list) else r.tolist()):
                    refs[row] -= 1
                    if refs[row] <= 0:
                        gone.add(row)
                freed = sorted(gone)
            else:
                np.subtract.at(self.refs, r, 1)
                hit = r[self.refs[r] <= 0]
                freed = np.unique(hit).tolist() if hit.size else ()
            for row in freed:
                self.refs[row] = 0
                self.host.pop(row, None)
                self.goals.pop(row, None)
                self._forget_goals(row)
                self._free.append(row)

    def _forget_goals(self, row: int) -> None:
        """Row ``row`` is free (no env reads it): its goal block goes back at the next ``add``, so
        the step thread, which releases rows, writes no device memory (its table entry stays
        until the row is reused)."""
        near, at = self.near.pop(row, None), self._near_at.pop(row, None)
        if near is not None:
            self._stale.append((at, near.size))

    def take_moved(self) -> list:
        """Old regions of a table that moved, to free once re-published (step thread):
        ([(offset, n)] in the fields arena, [(offset, n)] in the goal-table arena)."""
        with self._lock:
            out, self._moved = self._moved, []
            goals, self._moved_goals = self._moved_goals, []
        return out, goals

    def free(self):
        """Give every row back to the arena (the scene left)."""
        with self._lock:
            if not self.released:
                self.released = True
                self.buffers.field_arena.release(self.base, self.capacity * self.S)
                self.buffers.goal_table.release(self.goal_base, TABLE_WIDTH * self.capacity)
                for row in list(self.near):
                    self._forget_goals(row)
                stale, self._stale = self._stale, []
                for off, n in stale:
                    self.buffers.goal_arena.release(off, n)
                self._moved, moved = [], self._moved
                self._moved_goals, moved_goals = [], self._moved_goals
        for off, n in moved:
            self.buffers.field_arena.release(off, n)
        for off, n in moved_goals:
            self.buffers.goal_table.release(off, n)

    @property
    def nbytes(self) -> int:
        """Bytes of device memory held (the field rows, the goal table, the rows' goals and a moved
        table's old regions until they are freed)."""
        return (self.capacity * (self.S * 4 + 8 * TABLE_WIDTH) + 8 * sum(a.size for a in self.near.values())
                + 8 * sum(n for _, n in self._stale) + 4 * sum(n for _, n in self._moved)
                + 8 * sum(n for _, n in self._moved_goals))


class NavBuffers:
    """The arenas and the meta tables [capacity, ...] the fused step reads, by scene index.

    ``publish(scene_index, scene, fields)`` / ``unpublish(scene_index)`` run on the step thread between steps;
    ``refresh()`` (before every launch) re-publishes fields that moved and frees their old
    regions; ``version`` changes whenever an arena buffer or the window size changed (a
    captured CUDA graph must be re-captured)."""

    def __init__(self, device="cpu", capacity: int = 16):
        dev = torch.device(device)
        self.device = dev
        self.capacity = max(int(capacity), 1)
        self.ints = Arena(torch.int32, dev, 1 << 16, -1)
        self.f32 = Arena(torch.float32, dev, 1 << 14, math.nan)
        self.f64 = Arena(torch.float64, dev, 1 << 14, 0.0)
        self.field_arena = Arena(torch.float32, dev, 1 << 16, math.inf)
        self.goal_table = Arena(torch.int64, dev, 1 << 10, 0)           # (offset, count, gate) per field row
        self.goal_arena = Arena(torch.float64, dev, 1 << 12, math.nan)  # GOAL_WIDTH per goal
        self.meta_i = torch.zeros((self.capacity, NUM_META_I), dtype=torch.int64, device=dev)
        self.meta_f = torch.ones((self.capacity, NUM_META_F), dtype=torch.float64, device=dev)
        self.scenes: dict[int, SceneNav] = {}
        self.fields: dict[int, GoalFields] = {}
        self._dirty = threading.Event()
        self._lock = threading.Lock()
        self.min_cell = math.inf
        self._sized = False

    def mark_dirty(self):
        """A field table moved: ``refresh`` re-publishes before the next launch."""
        self._dirty.set()

    def size_for(self, scene: SceneNav, goal_rows: int):
        """Before the first scene is written: make room for ``capacity`` scenes like this one
        (and ``goal_rows`` fields each), so later swaps allocate in place."""
        with self._lock:
            if self._sized:
                return
            self._sized = True
        n = self.capacity
        self.ints.reserve(int(1.25 * n * scene._ints_n) + self.ints.buf.numel())
        self.f32.reserve(int(1.25 * n * scene._f32_n) + self.f32.buf.numel())
        self.f64.reserve(int(1.25 * n * scene._f64_n) + self.f64.buf.numel())
        self.field_arena.reserve(int(1.25 * n * goal_rows * max(scene.num_spans, 1)))
        self.goal_table.reserve(int(1.25 * n * TABLE_WIDTH * goal_rows))
        self.goal_arena.reserve(int(1.25 * n * GOAL_WIDTH * goal_rows))   # one goal a row (PointNav)

    def publish(self, scene_index: int, scene: SceneNav, fields: GoalFields):
        """Make ``scene`` / ``fields`` the navigation of scene index ``scene_index`` (one meta row)."""
        scene_index = int(scene_index)
        if not 0 <= scene_index < self.capacity:
            raise NavError(None, f"scene index {scene_index} outside the navigation table's {self.capacity} slots")
        self.scenes[scene_index] = scene
        self.fields[scene_index] = fields
        self.min_cell = min(self.min_cell, scene.cell_size)
        self._write_meta(scene_index)

    def _write_meta(self, scene_index: int):
        scene, fields = self.scenes[scene_index], self.fields[scene_index]
        mi = scene.meta_i.copy()
        mi[M_FIELD] = fields.base
        mi[M_GOALS] = fields.goal_base
        self.meta_i[scene_index] = torch.as_tensor(mi).to(self.device, non_blocking=True)
        self.meta_f[scene_index] = torch.as_tensor(scene.meta_f).to(self.device, non_blocking=True)

    def unpublish(self, scene_index: int):
        """Scene index ``scene_index`` left: free its arenas and its field table."""
        scene = self.scenes.pop(int(scene_index), None)
        fields = self.fields.pop(int(scene_index), None)
        if fields is not None:
            fields.free()
        if scene is not None:
            scene.free()
        if self.scenes:
            self.min_cell = min(s.cell_size for s in self.scenes.values())

    def refresh(self) -> bool:
        """Re-publish moved field tables (between steps). True if anything was rewritten."""
        if not self._dirty.is_set():
            return False
        self._dirty.clear()
        changed = False
        for scene_index, f in list(self.fields.items()):
            moved, moved_goals = f.take_moved()
            if moved or moved_goals:
                self._write_meta(scene_index)
                for off, n in moved:
                    self.field_arena.release(off, n)
                for off, n in moved_goals:
                    self.goal_table.release(off, n)
                changed = True
        return changed

    @property
    def version(self) -> tuple:
        """Changes whenever an arena buffer was reallocated (captured graphs re-capture)."""
        return (self.ints.version, self.f32.version, self.f64.version, self.field_arena.version,
                self.goal_table.version, self.goal_arena.version)

    @property
    def nbytes(self) -> int:
        """Bytes of device memory held."""
        return (self.ints.nbytes + self.f32.nbytes + self.f64.nbytes + self.field_arena.nbytes
                + self.goal_table.nbytes + self.goal_arena.nbytes)


class FieldWorker:
    """One background thread computing distance fields (per-episode work, off the step path).

    ``submit(fields, goal)`` returns a Future of the row; results are stored by the worker.
    """

    def __init__(self, nice: int = BACKGROUND_NICE):
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="bps-nav-fields", initializer=lower_priority,
                                        initargs=(nice,))
        self._closed = False

    def submit(self, fields: GoalFields, goal) -> Future:
        """Compute the field of ``goal`` into ``fields`` (Future of the row)."""
        return self.run(fields.add, goal)

    def run(self, fn, *args) -> Future:
        """Run ``fn(*args)`` on the worker thread (Future). A worker not closed that refuses the
        work: ``InterpreterExiting``."""
        try:
            return self._pool.submit(fn, *args)
        except BrokenExecutor:
            raise
        except RuntimeError as e:   # refused, though not closed (nor broken): the interpreter is exiting
            if self._closed:
                raise
            raise InterpreterExiting(str(e)) from e

    def close(self):
        """Stop the worker; queued work is cancelled."""
        self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)


def check_navmesh(navmesh, path=None):
    """A navmesh the runtime can use (at least one navigable span), else ``NavError``."""
    if navmesh.num_spans == 0:
        raise NavError(path, "the navmesh has no navigable span")
