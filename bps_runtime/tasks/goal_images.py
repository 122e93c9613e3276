"""ImageNav's goal images for the episodes the ring queues: a byte-bounded LRU cache on the env's
device, and one batch render of what it misses.

A goal image is a function of (scene id, goal position, heading) under one env's renderer
settings, so that is the key (the heading as a float, or the episode id where the heading is
``goal_heading(episode id)``, computed on a miss only): a hit is bit for bit the render it saves.
Dataset episodes repeat every pass over a scene's episodes; sampled ones view their pool goal at
one of ``goal_views`` headings (episodes/sampled.py), so a scene visit renders at most
goal_pool x goal_views of them. Entries are rows of one uint8 tensor that grows by doubling up to
``budget_bytes // image bytes`` rows (never above the budget); the least recently used goes first.
Contract: ``GoalImages.write`` (``keys`` and ``render_rows``: what a task's own goal images
override) puts every staged episode's image in ``r_goal_image[k, e]`` with one
gather and one scatter; misses add one batch render (of the distinct ones) and one scatter into
the cache; a step whose episodes all hit renders nothing.
"""
from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np
import torch

from bps_assets.errors import ConfigError, is_int

from bps_assets.nav.imagenav import goal_heading

from ..render.camera import yaw_to_quaternion
from ..step.schema import Staging

DEFAULT_BUDGET_BYTES = 256 * 2**20   # 256 MiB: 21,845 images of 64 x 64, 5,461 of 128 x 128
MIN_ROWS = 64                        # the first allocation (rows), then doubled as needed


def check_budget(budget_bytes) -> int:
    """``budget_bytes`` as an int >= 0 (0: no cache, every goal image rendered)."""
    if not is_int(budget_bytes) or budget_bytes < 0:
        raise ConfigError(None, f"goal_cache_bytes={budget_bytes!r}: expected an int >= 0 (bytes; 0: no cache)")
    return int(budget_bytes)


class GoalImageCache:
    """key -> one row of ``pool`` ([rows, pixels] uint8 on ``device``), least recently used evicted
    first; ``hits`` / ``misses`` count look-ups, ``nbytes`` is what the pool holds allocated."""

    def __init__(self, pixels: int, budget_bytes: int = DEFAULT_BUDGET_BYTES, device="cpu"):
        self.pixels, self.device = int(pixels), torch.device(device)
        self.budget_bytes = check_budget(budget_bytes)
        self.capacity = self.budget_bytes // self.pixels
        self.pool = torch.empty((0, self.pixels), dtype=torch.uint8, device=self.device)
        self._rows: OrderedDict = OrderedDict()   # key -> row, least recently used first
        self._free: list[int] = []
        self.hits = self.misses = self.evictions = 0

    def __len__(self):
        return len(self._rows)

    @property
    def nbytes(self) -> int:
        """Bytes allocated for images (<= ``budget_bytes``)."""
        return self.pool.numel()

    def lookup(self, keys: list) -> np.ndarray:
        """The pool row of each key (-1: a miss); hits become the most recently used."""
        rows, get, touch = np.full(len(keys), -1, np.int64), self._rows.get, self._rows.move_to_end
        for i, k in enumerate(keys):
            r = get(k)
            if r is not None:
                rows[i] = r
                touch(k)
        hit = int((rows >= 0).sum())
        self.hits += hit
        self.misses += len(keys) - hit
        return rows

    def insert(self, keys: list, images: torch.Tensor) -> np.ndarray:
        """Keep ``images`` [len(keys), pixels] (distinct keys, none held, at most ``capacity``),
        evicting the least recently used; -> their rows."""
        assert len(keys) <= self.capacity, "GoalImages.write inserts no more than the cache holds"
        rows = np.array([self._row() for _ in keys], np.int64)
        self._rows.update(zip(keys, rows.tolist()))
        self.pool[torch.from_numpy(rows).to(self.device)] = images.to(self.device)
        return rows

    def _row(self) -> int:
        if not self._free and self.pool.shape[0] < self.capacity:
            n = self.pool.shape[0]
            grown = torch.empty((min(self.capacity, max(MIN_ROWS, 2 * n)), self.pixels), dtype=torch.uint8,
                                device=self.device)
            grown[:n] = self.pool
            self.pool = grown
            self._free = list(range(grown.shape[0] - 1, n - 1, -1))
        if self._free:
            return self._free.pop()
        _, r = self._rows.popitem(last=False)
        self.evictions += 1
        return r

    def set_budget(self, budget_bytes: int) -> None:
        """A new budget; a smaller one drops every entry (and the pool), a larger one keeps them."""
        b = check_budget(budget_bytes)
        if b < self.budget_bytes:
            self._rows.clear()
            self._free = []
            self.pool = self.pool[:0].clone()
        self.budget_bytes, self.capacity = b, b // self.pixels


class GoalImages:
    """ImageNav's host hook (``TaskSpec.host_hook``): the goal images of staged episodes
    (``EpisodeRing.refill``'s rows, columns by name in ``staging``) into the ring field ``target``
    ([RING_SIZE, N, pixels] uint8): from the cache, or rendered (RGB at the goal + sensor height,
    facing the heading) by ``render`` in one batch of the distinct misses; ``scene_id(scene
    index)`` names a resident scene."""

    def __init__(self, target: torch.Tensor, staging: Staging, render, scene_id,
                 budget_bytes: int = DEFAULT_BUDGET_BYTES):
        self.target, self.staging, self._render_frames, self._scene_id = target, staging, render, scene_id
        self.cache = GoalImageCache(target.shape[-1], budget_bytes, target.device)
        self.rendered = 0   # goal images rendered so far

    def set_options(self, options) -> None:
        """The task's options changed: the cache's budget follows ``goal_cache_bytes``."""
        self.cache.set_budget(options.goal_cache_bytes)

    def write(self, stage_i: np.ndarray, stage_f: np.ndarray, episode_ids: list, headings: list):
        """Staging rows, their episode ids and goal headings (NaN: ``goal_heading(episode id)``).
        -> the rows' (ring, env) index tensors on the ring's device, for a subclass that writes
        more ring fields (None for no rows)."""
        n = stage_i.shape[0]
        if n == 0:
            return None
        col = self.staging.col
        keys = self.keys(stage_i, stage_f, episode_ids, headings)
        rows = self.cache.lookup(keys)
        miss = np.flatnonzero(rows < 0)
        src = None   # the cache's pool (read after inserting: it may have grown), or the frames
        if miss.size:
            # the distinct misses, rendered in one batch and kept; a cache too small for this
            # step's distinct goals (they would evict each other) is bypassed: all rendered
            fits = len(set(keys)) <= self.cache.capacity
            first: dict = {}   # distinct key -> its index in todo (the rows rendered)
            todo, inv = [], []
            for i in (miss if fits else range(n)):
                j = first.get(keys[i])
                if j is None:
                    j = first[keys[i]] = len(todo)
                    todo.append(int(i))
                inv.append(j)
            frames = self.render_rows(todo, stage_i, stage_f, episode_ids, headings)
            if fits:
                rows[miss] = self.cache.insert(list(first), frames)[inv]
            else:
                src, rows = frames, np.array(inv, np.int64)
        dev = self.target.device
        k = torch.from_numpy(stage_i[:, col("ring")].astype(np.int64)).to(dev)
        e = torch.from_numpy(stage_i[:, col("env")].astype(np.int64)).to(dev)
        self.target[k, e] = (self.cache.pool if src is None else src)[torch.from_numpy(rows).to(dev)]
        return k, e

    def keys(self, stage_i: np.ndarray, stage_f: np.ndarray, episode_ids: list, headings: list) -> list:
        """One cache key per staged row, naming its goal image under this env's renderer: (scene
        id, goal xyz, heading, or the episode id when the heading is its ``goal_heading``)."""
        col = self.staging.col
        scene = stage_i[:, col("scene_index")].astype(np.int64)
        g = col("goal")
        gx, gy, gz = stage_f[:, g:g + 3].T.tolist()
        distinct = np.unique(scene).tolist()
        names = dict(zip(distinct, (self._scene_id(k) for k in distinct)))
        return list(zip([names[s] for s in scene.tolist()], gx, gy, gz,
                        [i if math.isnan(h) else h for i, h in zip(episode_ids, headings)]))

    def render_rows(self, todo: list, stage_i: np.ndarray, stage_f: np.ndarray, episode_ids: list,
                    headings: list) -> torch.Tensor:
        """The goal images [len(todo), pixels] uint8 of staged rows ``todo``, in one batch render."""
        scene = stage_i[todo, self.staging.col("scene_index")].astype(np.int64)
        g = self.staging.col("goal")
        return self._render(scene, stage_f[todo, g:g + 3], [headings[i] for i in todo],
                            [episode_ids[i] for i in todo])

    def _render(self, scene: np.ndarray, goal: np.ndarray, headings: list, episode_ids: list) -> torch.Tensor:
        yaw = np.array([goal_heading(i) if math.isnan(h) else h for h, i in zip(headings, episode_ids)], np.float64)
        rot = yaw_to_quaternion(yaw).astype(np.float32)
        dev = self.target.device
        frames = self._render_frames(torch.from_numpy(scene).to(dev),
                                     torch.from_numpy(np.ascontiguousarray(goal)).to(dev),
                                     torch.from_numpy(rot).to(dev), ("rgb",))
        self.rendered += len(yaw)
        return frames["rgb"].reshape(len(yaw), -1).to(torch.uint8)
