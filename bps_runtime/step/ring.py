"""The host side of the queued episodes: ``EpisodeRing`` (what each env has queued and started, as
far as the host knows, and its episodes' names; builds the staging rows ``FusedStep.upload``
takes) and ``LazyNames`` (per-env names read from the device only when looked at).

Contract: ``refill`` keeps ``QUEUE_DEPTH`` episodes queued past what each env is known to have started
(the scene each runs in chosen by the scene port now, so a swap is a scene index written in the
ring); ``learn(heads)`` releases ended episodes (field rows, scene references). Episode m of an
env is entry ``m % RING_SIZE``, as on the device. The ring talks to two narrow ports, given to
it: ``ScenePort`` (scene indices for queued episodes, their release, scene ids) and
``EpisodePort`` (take, release, the dataset's record). A step with nothing due calls neither.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Callable, Protocol

import numpy as np

from .fused import NAMES, QUEUE_DEPTH, RING_SIZE
from .schema import Staging


class ScenePort(Protocol):
    """Where the ring gets the scene of each queued episode (the world over its scene manager)."""

    def next_scenes(self, env_ids: np.ndarray) -> tuple[np.ndarray, bool]:
        """Scene indices of one more queued episode per env (one reference each), whether that waited."""

    def release_scenes(self, scene_indices: np.ndarray) -> None:
        """Episodes in these scene indices have ended (one reference each)."""

    def scene_id(self, scene_index: int) -> str:
        """The scene id of a resident scene index."""


class EpisodePort(Protocol):
    """Where the ring gets its episodes (an ``episodes.supply.EpisodeSupply``)."""

    def take(self, scene_indices: np.ndarray):
        """One ``PreparedEpisodes`` row per scene index, and whether that waited."""

    def release_many(self, scene_indices: np.ndarray, rows: np.ndarray) -> None:
        """Ended episodes' field rows."""

    def episode_record(self, scene_index: int, episode_id: str) -> dict | None:
        """The dataset's dict of an episode, or None."""


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
    knows), and the names of its episodes; builds the staging rows (``staging``: the task's
    columns by name) for ``FusedStep.upload``. ``goal_record(record, episode id, heading)``: the
    task's entries of ``goals_of`` (``TaskSpec.goal_record``). ``keep_headings``: keep the goal-view
    headings (``TaskSpec.goal_headings``); else none are kept, staged or passed (NaN)."""

    def __init__(self, scenes: ScenePort, episodes: EpisodePort, num_envs: int, staging: Staging,
                 goal_record: Callable[[dict | None, str, float], dict], keep_headings: bool = True):
        self.scenes, self.episodes = scenes, episodes
        self.staging, self.goal_record = staging, goal_record
        self.N = n = int(num_envs)
        self.filled = np.zeros(n, np.int64)      # episodes queued so far per env
        self.known = np.zeros(n, np.int64)       # episodes started, as far as the host knows
        self.scene_index = np.full((RING_SIZE, n), -1, np.int64)  # scene index of episode m at m % RING_SIZE
        self.row = np.full((RING_SIZE, n), -1, np.int64)
        self.goal = np.zeros((RING_SIZE, n, 3), np.float32)   # goal point of episode m (``goals_of``)
        # its goal view's heading (NaN: none given); None: the task reads none
        self.heading = np.full((RING_SIZE, n), np.nan) if keep_headings else None
        self.eid = np.empty((NAMES, n), object)   # episode id of episode m at m % NAMES
        self.scene_id = np.empty((NAMES, n), object)  # its scene's name
        self.ended = 0
        self.waited = False
        self.staged_ids, self.staged_headings = [], []

    # -- releasing
    def _release(self, envs: np.ndarray, numbers: np.ndarray):
        if envs.size == 0:
            return
        h = numbers % RING_SIZE
        scene_indices, rows = self.scene_index[h, envs], self.row[h, envs]
        self.episodes.release_many(scene_indices, rows)     # field rows first: the scene may leave next
        self.scenes.release_scenes(scene_indices)
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
                if self.scene_index[m % RING_SIZE, e] >= 0:
                    self._release(np.array([e]), np.array([m]))
        self.filled[:] = 0
        self.known[:] = 0

    # -- queueing
    def refill(self) -> tuple[np.ndarray, np.ndarray]:
        """Queue episodes until every env has ``QUEUE_DEPTH`` beyond what it is known to have started;
        -> staging rows (int32 / float32 tables of ``staging``'s columns; ``staged_ids`` /
        ``staged_headings``: their episode ids and goal-view headings, NaN where the supply gives
        none, empty where the ring keeps none). Nothing due (no episode started since the last call): one comparison, no call
        into either port."""
        si, sf = [], []
        self.waited = False
        self.staged_ids = []
        self.staged_headings = []
        envs = np.flatnonzero(self.filled < self.known + QUEUE_DEPTH)
        while envs.size:
            scene_indices, w1 = self.scenes.next_scenes(envs)
            eps, w2 = self.episodes.take(scene_indices)
            self.waited |= bool(w1 or w2)
            m = self.filled[envs]
            h = m % RING_SIZE
            self.scene_index[h, envs], self.row[h, envs] = scene_indices, eps.rows
            self.goal[h, envs] = eps.goal
            if self.heading is not None:
                self.heading[h, envs] = np.nan if eps.heading is None else eps.heading
            nm = m % NAMES
            self.eid[nm, envs] = eps.episode_ids
            self.scene_id[nm, envs] = self._scene_ids(scene_indices)
            rows_i, rows_f = self.staging.rows(envs.size)
            self.staging.fill(rows_i, rows_f, eps, env=envs, ring=h, scene_index=scene_indices)
            self.staged_ids += list(eps.episode_ids)
            if self.heading is not None:
                self.staged_headings += self.heading[h, envs].tolist()
            si.append(rows_i)
            sf.append(rows_f)
            self.filled[envs] += 1
            envs = envs[self.filled[envs] < self.known[envs] + QUEUE_DEPTH]   # only these changed
        if not si:
            return self.staging.rows(0)
        if len(si) == 1:
            return si[0], sf[0]
        return np.concatenate(si), np.concatenate(sf)

    def _scene_ids(self, scene_indices: np.ndarray) -> np.ndarray:
        """Scene id per scene index in ``scene_indices`` (object array): one name look-up per
        distinct index, then one gather."""
        distinct = np.flatnonzero(np.bincount(scene_indices))    # small ints: cheaper than np.unique
        lut = np.empty(int(distinct[-1]) + 1, object)
        lut[distinct] = [self.scenes.scene_id(i) for i in distinct.tolist()]
        return lut[scene_indices]

    # -- on demand (tools, videos)
    def goals_of(self, envs, numbers) -> list[dict]:
        """The goal of episode ``numbers`` of ``envs`` (each queued or running, not ended): one dict
        per env, ``env_id``, ``episode_id``, ``scene_id``, ``goal_position`` (the episode's goal
        point: a point goal, or its first goal object's position), ``goals`` (the episode file's or
        the sampled episode's: habitat's list of goals, with goal objects' ``view_points``), and
        the task's own entries (``goal_record``: ObjectNav's ``object_category``, ImageNav's
        ``goal_heading``)."""
        out = []
        for e, m in zip(np.asarray(envs).tolist(), np.asarray(numbers).tolist()):
            h, nm = m % RING_SIZE, m % NAMES
            # the id as the supply gave it (an IntEpisodeId stays one: ImageNav's heading), as text in the dict
            scene_index, given_id = int(self.scene_index[h, e]), self.eid[nm, e]
            eid = str(given_id)
            rec = self.episodes.episode_record(scene_index, eid) if scene_index >= 0 else None
            goal = self.goal[h, e].astype(np.float64).tolist()
            d = {"env_id": int(e), "episode_id": eid, "scene_id": str(self.scene_id[nm, e]), "goal_position": goal,
                 "goals": list(rec["goals"]) if rec and rec.get("goals") else [{"position": goal}]}
            d.update(self.goal_record(rec, given_id, math.nan if self.heading is None else float(self.heading[h, e])))
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
