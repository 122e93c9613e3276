"""The host side of the queued episodes: ``EpisodeRing`` (what each env has queued and started, as
far as the host knows, and its episodes' names; builds the staging rows ``FusedStep.upload``
takes) and ``LazyNames`` (per-env names read from the device only when looked at).

Contract: ``refill`` keeps ``QUEUE_DEPTH`` episodes queued past what each env is known to have started
(the scene each runs in chosen by the world's scene manager now, so a swap is a scene index
written in the ring); ``learn(heads)`` releases ended episodes (field rows, scene references).
A step with nothing due makes no call into the world.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from bps_assets.nav.imagenav import goal_heading

from .fused import QUEUE_DEPTH, NAMES


class LazyNames(Sequence):
    """A read-only sequence of per-env strings resolved on first use (reads the step's outputs
    from the device: a wait on CUDA). ``resolve(*host arrays)`` -> list of str. Not a list
    subclass on purpose: C code that reads a list's storage directly (``str.join``,
    ``np.asarray``) would see it empty."""

    def __init__(self, resolve, *tensors):
        self._resolve, self._tensors, self._vals = resolve, tensors, None

    def _get(self) -> list:
        if self._vals is None:
            self._vals = list(self._resolve(*[t.cpu().numpy() for t in self._tensors]))
        return self._vals

    def __len__(self):
        return len(self._get())

    def __getitem__(self, i):
        return self._get()[i]

    def __iter__(self):
        return iter(self._get())

    def __eq__(self, other):
        return self._get() == (list(other) if isinstance(other, (Sequence, np.ndarray)) else other)

    def __repr__(self):
        return repr(self._get())

    __hash__ = None


class EpisodeRing:
    """Host side of the episode queue: what each env has queued, started (as far as the host
    knows), and the names of its episodes; builds the staging rows for ``FusedStep.upload``."""

    def __init__(self, world, num_envs: int, task):
        self.world, self.task = world, task   # task: its staging columns (``stage``)
        self.N = n = int(num_envs)
        H = QUEUE_DEPTH + 1
        self.filled = np.zeros(n, np.int64)      # episodes queued so far per env
        self.known = np.zeros(n, np.int64)       # episodes started, as far as the host knows
        self.scene_index = np.full((H, n), -1, np.int64)  # scene index of episode m at m % H
        self.row = np.full((H, n), -1, np.int64)
        self.goal = np.zeros((H, n, 3), np.float32)   # goal point of episode m at m % H (``goals_of``)
        self.eid = np.empty((NAMES, n), object)   # episode id of episode m at m % NAMES
        self.scene_id = np.empty((NAMES, n), object)  # its scene's name
        self.ended = 0
        self.waited = False
        self._image = bool(task.IMAGE)
        # ImageNav: the goal view's heading of episode m at m % H (NaN: goal_heading(episode id))
        self.heading = np.full((H, n), np.nan) if self._image else None
        self.staged_ids, self.staged_headings = [], []

    # -- releasing
    def _release(self, envs: np.ndarray, numbers: np.ndarray):
        if envs.size == 0:
            return
        h = numbers % (QUEUE_DEPTH + 1)
        idxs, rows = self.scene_index[h, envs], self.row[h, envs]
        self.world.episodes.release_many(idxs, rows)     # field rows first: the scene may leave next
        self.world.release_scenes(idxs)
        self.scene_index[h, envs] = -1

    def learn(self, heads: np.ndarray):
        """Heads from a snapshot: episodes before each env's newest started one have ended."""
        adv = heads - self.known
        envs = np.flatnonzero(adv > 0)
        while envs.size:
            ended = self.known[envs] - 1       # the episode that was running
            live = ended >= 0
            self._release(envs[live], ended[live])
            self.ended += int(live.sum())
            self.known[envs] += 1
            envs = envs[self.known[envs] < heads[envs]]

    def release_all(self):
        """Drop every queued and running episode (``reset``)."""
        for e in range(self.N):
            lo = max(self.known[e] - 1, 0)
            for m in range(lo, self.filled[e]):
                h = m % (QUEUE_DEPTH + 1)
                if self.scene_index[h, e] >= 0:
                    self._release(np.array([e]), np.array([m]))
        self.filled[:] = 0
        self.known[:] = 0

    # -- queueing
    def refill(self) -> tuple[np.ndarray, np.ndarray]:
        """Queue episodes until every env has ``QUEUE_DEPTH`` beyond what it is known to have started;
        -> staging rows (int [M, 2 + task.STAGE_INTS]: env, ring index, then the task's;
        float [M, task.STAGE_FLOATS]: the task's ``stage`` columns; ``staged_ids`` /
        ``staged_headings``: their episode ids and goal-view headings). Nothing due (no episode started since the
        last call): one comparison, no call into the scene cache or the episode supply."""
        si, sf = [], []
        self.waited = False
        self.staged_ids = []   # the episode id of each staging row returned
        self.staged_headings = []   # ImageNav: its goal view's heading (NaN: goal_heading(episode id))
        envs = np.flatnonzero(self.filled < self.known + QUEUE_DEPTH)
        while envs.size:
            idxs, w1 = self.world.next_scenes(envs)
            eps, w2 = self.world.episodes.take(idxs)
            self.waited |= bool(w1 or w2)
            m = self.filled[envs]
            h = m % (QUEUE_DEPTH + 1)
            self.scene_index[h, envs], self.row[h, envs] = idxs, eps.rows
            self.goal[h, envs] = eps.goal
            nm = m % NAMES
            self.eid[nm, envs] = eps.episode_ids
            self.scene_id[nm, envs] = self._scene_ids(idxs)
            rows_i = np.empty((envs.size, 2 + self.task.STAGE_INTS), np.int32)
            rows_i[:, 0], rows_i[:, 1] = envs, m % QUEUE_DEPTH
            rows_f = np.empty((envs.size, self.task.STAGE_FLOATS), np.float32)
            self.task.stage(rows_i[:, 2:], rows_f, idxs, eps)
            self.staged_ids += list(eps.episode_ids)
            if self._image:   # ImageNav: the goal view's heading (NaN: goal_heading(episode id))
                self.heading[h, envs] = np.nan if eps.heading is None else eps.heading
                self.staged_headings += self.heading[h, envs].tolist()
            si.append(rows_i)
            sf.append(rows_f)
            self.filled[envs] += 1
            envs = envs[self.filled[envs] < self.known[envs] + QUEUE_DEPTH]   # only these changed
        if not si:
            return (np.zeros((0, 2 + self.task.STAGE_INTS), np.int32),
                    np.zeros((0, self.task.STAGE_FLOATS), np.float32))
        if len(si) == 1:
            return si[0], sf[0]
        return np.concatenate(si), np.concatenate(sf)

    def _scene_ids(self, idxs: np.ndarray) -> np.ndarray:
        """Scene id per scene index in ``idxs`` (object array): one name look-up per
        distinct id, then one gather."""
        uk = np.flatnonzero(np.bincount(idxs))    # the distinct ids (small ints), cheaper than np.unique
        lut = np.empty(int(uk[-1]) + 1, object)
        lut[uk] = [self.world.scene_id(k) for k in uk.tolist()]
        return lut[idxs]

    # -- on demand (tools, videos)
    def goals_of(self, envs, numbers) -> list[dict]:
        """The goal of episode ``numbers`` of ``envs`` (each queued or running, not ended): one dict
        per env, ``env_id``, ``episode_id``, ``scene_id``, ``goal_position`` (PointNav / ImageNav:
        the goal point; ObjectNav: its first goal object's position), ``goals`` (the episode file's or the
        sampled episode's: habitat's list of goals, ObjectNav's goal objects with their
        ``view_points``), ObjectNav's ``object_category``, ImageNav's ``goal_heading``."""
        out = []
        for e, m in zip(np.asarray(envs).tolist(), np.asarray(numbers).tolist()):
            h, nm = m % (QUEUE_DEPTH + 1), m % NAMES
            key, eid = int(self.scene_index[h, e]), str(self.eid[nm, e])
            rec = self.world.episodes.episode_record(key, eid) if key >= 0 else None
            goal = self.goal[h, e].astype(np.float64).tolist()
            d = {"env_id": int(e), "episode_id": eid, "scene_id": str(self.scene_id[nm, e]), "goal_position": goal,
                 "goals": list(rec["goals"]) if rec and rec.get("goals") else [{"position": goal}]}
            if rec is not None and "object_category" in rec:
                d["object_category"] = rec["object_category"]
            if self._image:   # the yaw its goal image was rendered at
                hd = float(self.heading[h, e])
                d["goal_heading"] = hd if np.isfinite(hd) else float(goal_heading(eid))
            out.append(d)
        return out

    # -- names for info
    def names_of(self, env0: int, numbers: np.ndarray, which: str, done: np.ndarray | None = None) -> list:
        """Episode ids (which='episode') or scene names of episode ``numbers`` of envs env0.. ('' where not ``done``)."""
        tab = self.eid if which == "episode" else self.scene_id
        envs = env0 + np.arange(len(numbers))
        out = [str(tab[int(m) % NAMES, e]) for e, m in zip(envs.tolist(), numbers.tolist())]
        if done is not None:
            out = [s if d else "" for s, d in zip(out, done.tolist())]
        return out
