"""BatchPointNavEnv: habitat-lab's PointNav task for N agents as one batch of torch tensors.

One environment = one agent in one resident scene. ``step`` on a group of agents:
actions -> turns, batched ``try_step`` with sliding for MOVE_FORWARD (bps_runtime.nav) ->
geodesic distance to the goal from the episode's distance field -> reward / success / SPL ->
automatic reset of finished agents (same step, habitat-baselines' behaviour: the observation
returned with ``done`` is the first one of the next episode) -> batch render -> pointgoal.

Scenes come from the scene cache (bps_runtime.cache): an agent may change scene only at an
episode boundary, when the cache has one ready for it. Episodes come from an
``EpisodeSupply`` (bps_runtime.episodes), which prepares each episode's distance field in a
background thread. Task math (actions, pointgoal convention, SPL, reward): bps_runtime.task.

Double buffering (the paper's): agents are split into ``num_envs // batch_size`` fixed
groups; ``send(actions)`` hands one group's actions to the simulator thread and returns at
once, ``recv()`` returns the oldest group sent. ``step == send + recv``.
"""
from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import torch

from bps_assets.errors import ConfigError

from . import spaces as sp
from .task import (DEFAULTS as TASK_DEFAULTS, MOVE_FORWARD, NUM_ACTIONS, STOP, TaskOptions,
                   apply_turns, forward_vector, pointgoal_polar, reward_and_success, spl, yaw_to_quat)

_INT_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


class BatchPointNavEnv:
    """Batched PointNav over a ``world`` (scene cache + renderer + navigation + episodes).

    Build it with ``bps_runtime.make(...)``; the constructor takes the already-built parts.
    """

    ACTIONS = ("STOP", "MOVE_FORWARD", "TURN_LEFT", "TURN_RIGHT")

    def __init__(self, world, *, num_envs: int, batch_size: int | None = None, device="cpu",
                 sensors=("depth",), resolution=(64, 64), normalize_depth: bool = True,
                 task: TaskOptions = TASK_DEFAULTS, seed: int = 0):
        self.num_envs, self.batch_size = check_batching(num_envs, batch_size)
        self.num_groups = self.num_envs // self.batch_size
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:  # "cuda" -> "cuda:0": tensors say cuda:N
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.sensors = sp.check_sensors(sensors)
        self.resolution = sp.check_resolution(resolution)
        self.normalize_depth = bool(normalize_depth)
        self.task = task
        self.seed_value = int(seed)
        self.world = world
        n, dev = self.num_envs, self.device
        # per-agent state (device tensors)
        self.scene = torch.zeros(n, dtype=torch.long, device=dev)
        self.pos = torch.zeros(n, 3, device=dev)
        self.yaw = torch.zeros(n, device=dev)
        self.goal = torch.zeros(n, 3, device=dev)
        self.d0 = torch.zeros(n, device=dev)
        self.d_prev = torch.zeros(n, device=dev)
        self.path_len = torch.zeros(n, device=dev)
        self.ep_return = torch.zeros(n, device=dev)
        self.steps = torch.zeros(n, dtype=torch.int32, device=dev)
        self.row = torch.zeros(n, dtype=torch.long, device=dev)      # goal-field row of the episode
        self.active = np.zeros(n, bool)                               # holds a field row
        self.episode_ids: list[str] = [""] * n
        self.last_info: dict = {}
        self._checked_actions = False
        self._pending: deque = deque()      # (group, Future) sent, not yet received
        self._to_send: deque = deque()      # groups whose results were handed out
        self._sim = ThreadPoolExecutor(1, thread_name_prefix="bps-sim")
        self._lock = threading.Lock()
        self._closed = False
        self._started = False
        self._reseed = None
        self.stats = {"steps": 0, "waited_steps": 0, "episodes": 0}

    # ------------------------------------------------------------------ spaces (no allocation)
    @property
    def single_observation_space(self):
        return sp.single_observation_space(self.sensors, self.resolution, self.normalize_depth)

    @property
    def single_action_space(self):
        return sp.single_action_space()

    @property
    def observation_space(self):
        return sp.batched_observation_space(self.batch_size, self.sensors, self.resolution,
                                            self.normalize_depth)

    @property
    def action_space(self):
        return sp.batched_action_space(self.batch_size)

    # ------------------------------------------------------------------ front door
    def seed(self, seed: int):
        """Reseed episode sampling (per-scene streams); takes effect at the next ``reset()``."""
        self.seed_value = int(seed)
        self._reseed = int(seed)

    def reset(self):
        """Start a new episode in every environment; returns the observations of all
        ``num_envs`` (``info["env_id"]`` = arange). Drains anything in flight first."""
        self._drain()
        obs, info = self._sim.submit(self._reset_all).result()
        self._to_send = deque(range(self.num_groups))
        self.last_info = info
        return obs

    def async_reset(self):
        """EnvPool-style: reset everything; then each ``recv()`` returns one group's first
        observations (reward 0, done False)."""
        self._drain()
        fut = self._sim.submit(self._reset_all)
        fut.result()
        self._to_send = deque()
        for g in range(self.num_groups):
            f: Future = Future()
            f.set_result(self._reset_result(g))
            self._pending.append((g, f))

    def send(self, actions, env_id=None):
        """Queue one group's actions and return at once. ``env_id`` (optional) must be the
        env ids of a whole group, as returned in ``info["env_id"]``; by default the group whose
        results were handed out longest ago."""
        if self._closed:
            raise ConfigError(None, "send() on a closed environment")
        a = self._check_actions(actions)   # before taking the group: a bad call changes nothing
        g = self._pick_group(env_id)
        self._pending.append((g, self._sim.submit(self._step_group, g, a)))

    def recv(self):
        """(obs, reward, done, info) of the oldest group sent, as torch tensors on the device.
        Tensors are this group's buffers: valid until the group's next ``send``."""
        if not self._pending:
            raise ConfigError(None, "recv() with nothing sent: call send(actions) (or async_reset()) first")
        g, fut = self._pending.popleft()
        out = fut.result()
        self._to_send.append(g)
        self.last_info = out[3]
        return out

    def step(self, actions, env_id=None):
        """``send(actions, env_id)`` then ``recv()``."""
        self.send(actions, env_id)
        return self.recv()

    def close(self):
        if not self._closed:
            self._closed = True
            self._drain()
            self._sim.shutdown(wait=True)
            self.world.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass

    # ------------------------------------------------------------------ checks
    def _drain(self):
        while self._pending:
            _, f = self._pending.popleft()
            f.result()

    def _group_slice(self, g: int) -> slice:
        return slice(g * self.batch_size, (g + 1) * self.batch_size)

    def _pick_group(self, env_id) -> int:
        if env_id is None:
            if not self._to_send:
                if self.num_groups == 1 and not self._pending:
                    return 0
                raise ConfigError(None, "send(): no group is waiting for actions (each group's "
                                        "results must be recv()'d before its next send)")
            return self._to_send.popleft()
        ids = torch.as_tensor(env_id).reshape(-1).to("cpu", torch.long)
        if ids.numel() != self.batch_size:
            raise ConfigError(None, f"send(): env_id has {ids.numel()} entries, expected one group of "
                                    f"batch_size={self.batch_size}")
        g = int(ids[0]) // self.batch_size
        if not (0 <= g < self.num_groups) or not torch.equal(
                ids, torch.arange(g * self.batch_size, (g + 1) * self.batch_size)):
            raise ConfigError(None, f"send(): env_id must be one whole group "
                                    f"[k*{self.batch_size}, (k+1)*{self.batch_size}) in order")
        if g not in self._to_send:
            raise ConfigError(None, f"send(): group {g} (envs {g * self.batch_size}..) is still "
                                    "being simulated: recv() it first")
        self._to_send.remove(g)
        return g

    def _check_actions(self, actions) -> torch.Tensor:
        b = self.batch_size
        if isinstance(actions, np.ndarray) or isinstance(actions, (list, tuple)):
            arr = np.asarray(actions)
            if arr.dtype.kind not in "iu":
                raise ConfigError(None, f"actions: dtype {arr.dtype} is not an integer type "
                                        f"(expected int64 action ids 0..{NUM_ACTIONS - 1})")
            actions = torch.from_numpy(np.ascontiguousarray(arr.astype(np.int64))).to(self.device)
        if not isinstance(actions, torch.Tensor):
            raise ConfigError(None, f"actions: expected a torch tensor of shape [{b}], got "
                                    f"{type(actions).__name__}")
        if actions.dtype not in _INT_DTYPES:
            raise ConfigError(None, f"actions: dtype {actions.dtype} is not an integer type "
                                    f"(expected torch.int64 action ids 0..{NUM_ACTIONS - 1})")
        if actions.device != self.device:
            raise ConfigError(None, f"actions: on device {actions.device}, the environment is on "
                                    f"{self.device} (move them with .to({str(self.device)!r}))")
        if actions.dim() == 2 and actions.shape[1] == 1:
            actions = actions[:, 0]
        if tuple(actions.shape) != (b,):
            raise ConfigError(None, f"actions: shape {tuple(actions.shape)}, expected ({b},) "
                                    f"(one action per environment of the batch)")
        if self.device.type == "cpu" or not self._checked_actions:  # a GPU check syncs: once
            lo, hi = int(actions.min()), int(actions.max())
            if lo < 0 or hi >= NUM_ACTIONS:
                raise ConfigError(None, f"actions: values must be in 0..{NUM_ACTIONS - 1} "
                                        f"{self.ACTIONS}, got {lo}..{hi}")
        self._checked_actions = True
        return actions.to(torch.long).clone()

    # ------------------------------------------------------------------ simulation (sim thread)
    def _reset_all(self):
        ids = np.arange(self.num_envs)
        self._out = [None] * self.num_groups
        first = not self._started
        if first:
            self.scene.copy_(torch.as_tensor(self.world.initial_scenes(self.num_envs), device=self.device))
            self._started = True
        if self._reseed is not None:
            self.world.episodes.reseed(self._reseed)
            self._reseed = None
        waited = self._begin_episodes(ids, swap=not first)
        for g in range(self.num_groups):
            self._out[g] = self._alloc_group_outputs()
        for g in range(self.num_groups):
            self._observe(g)
        obs = {k: torch.cat([self._out[g][k] for g in range(self.num_groups)]) for k in self._out[0]
               if k in self.sensors or k == "pointgoal"}
        info = self._info(slice(0, self.num_envs), torch.zeros(self.num_envs, dtype=torch.bool,
                          device=self.device), None, waited)
        return obs, info

    def _reset_result(self, g):
        sl = self._group_slice(g)
        o = self._out[g]
        obs = {k: o[k] for k in (*self.sensors, "pointgoal")}
        zeros = torch.zeros(self.batch_size, device=self.device)
        done = torch.zeros(self.batch_size, dtype=torch.bool, device=self.device)
        return obs, zeros, done, self._info(sl, done, None, False)

    def _alloc_group_outputs(self):
        return {}

    def _begin_episodes(self, env_ids: np.ndarray, swap: bool = True) -> bool:
        """New episodes for ``env_ids`` (ascending): scene swap at the boundary, then the next
        episode of that scene. Returns whether anything waited for a load."""
        if len(env_ids) == 0:
            return False
        old_scene = self.scene[torch.as_tensor(env_ids, device=self.device)].cpu().numpy()
        old_row = self.row[torch.as_tensor(env_ids, device=self.device)].cpu().numpy()
        for j, e in enumerate(env_ids.tolist()):
            if self.active[e]:
                self.world.episodes.release(int(old_scene[j]), int(old_row[j]))
                self.active[e] = False
        if swap:
            scenes, waited = self.world.episode_boundary(env_ids, old_scene)
        else:
            scenes, waited = old_scene, False
        eps, waited2 = self.world.episodes.take(scenes)
        dev = self.device
        idx = torch.as_tensor(env_ids, device=dev)
        self.scene[idx] = torch.as_tensor(scenes, device=dev, dtype=torch.long)
        self.row[idx] = torch.as_tensor(eps.rows, device=dev, dtype=torch.long)
        self.active[env_ids] = True
        self.pos[idx] = torch.as_tensor(eps.start, device=dev, dtype=torch.float32)
        self.yaw[idx] = torch.as_tensor(eps.yaw, device=dev, dtype=torch.float32)
        self.goal[idx] = torch.as_tensor(eps.goal, device=dev, dtype=torch.float32)
        d0 = self.world.nav.geodesic(self.scene[idx], self.row[idx], self.pos[idx])
        self.d0[idx] = d0
        self.d_prev[idx] = d0
        self.path_len[idx] = 0
        self.ep_return[idx] = 0
        self.steps[idx] = 0
        for j, e in enumerate(env_ids.tolist()):
            self.episode_ids[e] = eps.episode_ids[j]
        self.stats["episodes"] += len(env_ids)
        return bool(waited or waited2)

    def _observe(self, g: int):
        """Render group g at its current poses and compute its pointgoal into its buffers."""
        sl = self._group_slice(g)
        # render from the quaternion reported in info, so a user re-rendering that pose gets
        # the same pixels bit for bit
        frames = self.world.render(self.scene[sl], self.pos[sl], yaw_to_quat(self.yaw[sl]), self.sensors)
        out = self._out[g]
        for k in self.sensors:
            out[k] = frames[k]
        out["pointgoal"] = pointgoal_polar(self.pos[sl], self.yaw[sl], self.goal[sl])

    def _step_group(self, g: int, a: torch.Tensor):
        t = self.task
        sl = self._group_slice(g)
        pos, yaw = self.pos[sl], self.yaw[sl]
        fwd = a == MOVE_FORWARD
        new_pos = pos.clone()
        if bool(fwd.any()):
            fi = torch.nonzero(fwd).reshape(-1)
            target = pos[fi] + t.forward_step * forward_vector(yaw[fi])
            new_pos[fi] = self.world.nav.try_step(self.scene[sl][fi], pos[fi], target)
        new_yaw = apply_turns(yaw, a, t)
        d_now = self.world.nav.geodesic(self.scene[sl], self.row[sl], new_pos)
        reward, success = reward_and_success(a, self.d_prev[sl], d_now, t)
        self.path_len[sl] += torch.linalg.vector_norm(new_pos - pos, dim=1)
        self.steps[sl] += 1
        stopped = a == STOP
        truncated = ~stopped & (self.steps[sl] >= t.max_episode_steps)
        done = stopped | truncated
        spl_v = spl(success, self.d0[sl], self.path_len[sl])
        self.ep_return[sl] += reward
        self.pos[sl] = new_pos
        self.yaw[sl] = new_yaw
        self.d_prev[sl] = d_now
        episode = None
        done_ids = torch.nonzero(done).reshape(-1)
        waited = False
        if done_ids.numel():
            episode = {
                "return": torch.where(done, self.ep_return[sl], 0.0),
                "length": torch.where(done, self.steps[sl], 0),
                "success": success & done,
                "spl": torch.where(done, spl_v, 0.0),
                "distance_to_goal": torch.where(done, d_now, 0.0),
                "start_distance": torch.where(done, self.d0[sl], 0.0),
                "path_length": torch.where(done, self.path_len[sl], 0.0),
                "episode_id": [""] * self.batch_size,
                "scene_id": [""] * self.batch_size,
            }
            ids = done_ids.cpu().numpy()
            old_scenes = self.scene[sl][done_ids].tolist()
            for i, k in zip(ids.tolist(), old_scenes):
                episode["episode_id"][i] = self.episode_ids[sl.start + i]
                episode["scene_id"][i] = self.world.scene_name(k)
            waited = self._begin_episodes(ids + sl.start)
        self._observe(g)
        o = self._out[g]
        obs = {k: o[k] for k in (*self.sensors, "pointgoal")}
        info = self._info(sl, done, episode, waited, success=success & done,
                          spl_v=torch.where(done, spl_v, 0.0), truncated=truncated)
        self.stats["steps"] += 1
        self.world.after_step(g)
        self.stats["waited_steps"] += int(waited)
        return obs, reward, done, info

    def _info(self, sl, done, episode, waited, success=None, spl_v=None, truncated=None):
        n = sl.stop - sl.start
        dev = self.device
        scene_idx = self.scene[sl].clone()
        return {
            "env_id": torch.arange(sl.start, sl.stop, device=dev),
            "scene_index": scene_idx,
            "scene_id": [self.world.scene_name(int(s)) for s in scene_idx.tolist()],
            "position": self.pos[sl].clone(),
            "rotation": yaw_to_quat(self.yaw[sl]),
            "distance_to_goal": self.d_prev[sl].clone(),
            "success": success if success is not None else torch.zeros(n, dtype=torch.bool, device=dev),
            "spl": spl_v if spl_v is not None else torch.zeros(n, device=dev),
            "truncated": truncated if truncated is not None else torch.zeros(n, dtype=torch.bool, device=dev),
            "episode": episode if episode is not None else _empty_episode(n, dev),
            "waited_for_load": bool(waited),
        }


def _empty_episode(n, dev):
    z = torch.zeros(n, device=dev)
    return {"return": z, "length": torch.zeros(n, dtype=torch.int32, device=dev),
            "success": torch.zeros(n, dtype=torch.bool, device=dev), "spl": z,
            "distance_to_goal": z, "start_distance": z, "path_length": z,
            "episode_id": [""] * n, "scene_id": [""] * n}


def check_batching(num_envs, batch_size) -> tuple[int, int]:
    try:
        n = int(num_envs)
    except (TypeError, ValueError):
        raise ConfigError(None, f"num_envs={num_envs!r}: expected a positive int") from None
    if n < 1 or n != num_envs:
        raise ConfigError(None, f"num_envs={num_envs!r}: expected a positive int")
    b = n if batch_size is None else batch_size
    if not isinstance(b, (int, np.integer)) or b < 1 or b > n or n % b:
        raise ConfigError(None, f"batch_size={batch_size!r}: must divide num_envs={n} "
                                f"(e.g. {n // 2} for two alternating halves, or None for all)")
    return n, int(b)
