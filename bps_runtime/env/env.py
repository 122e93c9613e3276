"""BatchNavEnv: N agents of a navigation task (any of ``tasks.TASKS``) as one batch of torch
tensors, one agent in one resident scene each: the EnvPool-style front door.

The front door (this module): ``reset`` / ``async_reset`` / ``send`` / ``recv`` / ``step``, the
spaces, the action checks, the task's options, the simulator thread. The simulator
(env/simulator.py, one ``step_group`` per group step, run on that thread): the fused step
(``bps_runtime.step``: the task's kernels over every env: action -> move / turn -> reward,
success, metrics -> automatic reset of finished agents from their queued next episode
(habitat-baselines' behaviour: the observation returned with ``done`` is the next episode's
first) -> observations -> batch render), the episode ring and the task's host hook.
Double buffering: ``num_envs // batch_size`` fixed groups; ``send`` hands a group's actions to
the simulator thread and returns, ``recv`` returns the oldest group sent; ``step == send +
recv``. Frames are new tensors each step (not under capture_graph); the other tensors are the
group's buffers (valid until its next ``send``: docs/ENV.md); info's names are ``LazyNames``
(read from the device when first looked at, within 64 episodes).
"""
from __future__ import annotations

from collections import deque
from functools import cached_property
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import torch

from bps_assets.errors import ConfigError

from . import spaces as sp
from ..render.protocol import depth_clip_range
from .config import EnvConfig
from .simulator import Simulator
from ..tasks import TASKS, spec_for, task_spec

_INT_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def _int_ids(ids, what: str) -> np.ndarray:
    """``ids`` (a tensor, an array, a list) as a flat int64 array; other kinds a ConfigError."""
    if isinstance(ids, torch.Tensor):
        ids = ids.detach().cpu().numpy()
    try:
        arr = np.asarray(ids)
    except ValueError:
        arr = np.asarray(None)
    if arr.dtype.kind not in "iu" or arr.ndim > 1:
        raise ConfigError(None, f"{what}={ids!r}: expected integer env ids (one list or 1-d array)")
    return arr.reshape(-1).astype(np.int64)


class BatchNavEnv:
    """A batched navigation task (the ``TaskSpec`` of ``config.task``, the task's options) over a
    ``world`` (scene cache + renderer + navigation + episodes), as ``config`` (an ``EnvConfig``,
    checked when it was made) says.

    Build it with ``bps_runtime.make(...)``; the constructor takes the already-built world.
    """

    ACTIONS = task_spec(TASKS[0]).actions

    def __init__(self, world, config: EnvConfig):
        self.config = c = config   # the EnvConfig this env runs with
        self.num_envs, self.batch_size = c.num_envs, c.batch_size
        self.num_groups = self.num_envs // self.batch_size
        self.device = torch.device(c.device)
        if self.device.type == "cuda" and self.device.index is None:  # "cuda" -> "cuda:0": tensors say cuda:N
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.sensors, self.resolution = c.sensors.kinds, c.sensors.resolution
        self.normalize_depth = c.sensors.normalize_depth
        self.depth_range = depth_clip_range(c.sensors.camera())   # the depth sensor's clip (m; its space unnormalized)
        self.spec = spec = spec_for(c.task)   # the task's TaskSpec
        self._task = c.task
        self.world = world
        self.ACTIONS, self.num_actions = spec.actions, spec.num_actions
        self.sim = Simulator(world, c, spec, self.device)
        self.fused, self.ring, self.host_hook, self.stats = self.sim.fused, self.sim.ring, self.sim.host_hook, self.sim.stats
        # every env's step state (views of the device tensors the kernels share), one per field
        self.state = self.fused.views(slice(None), "state")
        self.last_info: dict = {}
        self._checked_actions = False
        self._pending: deque = deque()      # (group, Future) sent, not yet received
        self._to_send: deque = deque()      # groups whose results were handed out
        self._failed: dict = {}             # group -> the error its last step raised (until reset)
        self._sim = ThreadPoolExecutor(1, thread_name_prefix="bps-sim")
        self._closed = False

    @property
    def task(self):
        """The task's rules (its ``TaskOptions``: step size, turn angle, success distance, episode
        length, reward); setting options of the same task takes effect from the next step (the
        step kernel reads them as parameters)."""
        return self._task

    @task.setter
    def task(self, t):
        if isinstance(t, str):   # spec_for takes options only: its message would read as a contradiction
            raise ConfigError(None, f"task={t!r}: env.task takes this task's TaskOptions (e.g. "
                                    f"dataclasses.replace(env.task, ...)); make() a new env for another task")
        self._check_open("env.task = ...")
        if spec_for(t) is not self.spec:
            raise ConfigError(None, f"task: {type(t).__name__} is another task's options than this env's "
                                    f"({self.spec.name}); make() a new env for it")
        self._task = t
        self.sim.set_options(t)

    @property
    def episode_ids(self) -> list:
        """Episode id of every env's running episode (reads the device: not for the step path)."""
        self._check_open("episode_ids")
        if not self.sim.started:
            raise ConfigError(None, "episode_ids before reset(): call env.reset() first")
        return self.ring.names_of(0, self.fused.head.cpu().numpy() - 1, "episode")

    def episode_goals(self, env_ids=None) -> list[dict]:
        """The goal of each env's running episode (all envs, or ``env_ids``), from the host's
        records of the queued episodes (``EpisodeRing.goals_of``: ``goals``, ``goal_position``,
        goal objects with their view points, and the task's entries, ``TaskSpec.goal_record``:
        e.g. the goal category, the yaw a goal image was rendered at). Reads the episode counters from
        the device once: for tools and videos, not the step path."""
        self._check_open("episode_goals()")
        if not self.sim.started:
            raise ConfigError(None, "episode_goals() before reset(): call env.reset() first")
        ids = np.arange(self.num_envs) if env_ids is None else _int_ids(env_ids, "episode_goals(): env_ids")
        if ids.size and not (0 <= ids.min() and ids.max() < self.num_envs):
            raise ConfigError(None, f"episode_goals(): env_ids must be in 0..{self.num_envs - 1}, got "
                                    f"{ids.min()}..{ids.max()}")
        return self.ring.goals_of(ids, self.fused.head.cpu().numpy()[ids] - 1)

    @property
    def category_table(self):
        """With the "semantic" sensor: ``render.semantic.CategoryTable`` of the resident scenes,
        keyed by scene index; ``env.category_table.lookup(info["scene_index"], obs["semantic"])``
        maps a frame's instance ids to indices into ``env.categories`` on the device (-1: no
        object / unknown). None without the semantic sensor."""
        return self.world.category_table

    @property
    def categories(self) -> list | None:
        """The category names ``category_table`` indexes (mpcat40), or None."""
        t = self.world.category_table
        return None if t is None else t.vocabulary

    @property
    def capture_status(self) -> str:
        """Whether the step runs as a captured CUDA graph ("captured") or why not."""
        return self.fused.capture_status

    # ------------------------------------------------------------------ spaces (built once, on first use)
    @property
    def max_goal_id(self) -> int | None:
        """The largest goal id the episode supply can stage (ObjectNav: its dataset's largest
        task category id), the high of a goal-id observation; None where it gives none."""
        return self.world.episodes.max_goal_id

    @property
    def goal_categories(self) -> dict | None:
        """The task's category map (goal category -> goal id: the episode file's
        ``category_to_task_category_id``, or the sampled set's); None where goals are no categories."""
        return self.world.episodes.goal_categories

    @cached_property
    def single_observation_space(self):
        """Observation space of one env (gymnasium Dict)."""
        return sp.single_observation_space(self.sensors, self.resolution, self.normalize_depth, self.spec,
                                           self.max_goal_id, self.depth_range)

    @cached_property
    def single_action_space(self):
        """Action space of one env (Discrete(the task's actions))."""
        return sp.single_action_space(self.spec)

    @cached_property
    def observation_space(self):
        """Observation space of one batch of ``batch_size`` envs."""
        return sp.batched_observation_space(self.batch_size, self.sensors, self.resolution,
                                            self.normalize_depth, self.spec, self.max_goal_id, self.depth_range)

    @cached_property
    def action_space(self):
        """Action space of one batch of ``batch_size`` envs."""
        return sp.batched_action_space(self.batch_size, self.spec)

    # ------------------------------------------------------------------ front door
    def seed(self, seed: int):
        """Reseed at the next ``reset()``: the episode and noise streams restart as ``make(seed=seed)``
        starts them, in the scenes already resident (the scene cache is not reset)."""
        from .config import check_seed

        seed = check_seed(seed)   # the value first: a bad seed is named whether or not the env is open
        self._check_open("seed()")
        self.sim.reseed = seed

    def reset(self):
        """Start a new episode in every environment; returns the observations of all
        ``num_envs`` (``info["env_id"]`` = arange). Drains anything in flight first."""
        self._check_open("reset()")
        self._drain()
        obs, info = self._sim.submit(self.sim.reset_all).result()
        self._to_send = deque(range(self.num_groups))
        self._failed = {}
        self.last_info = info
        return obs

    def async_reset(self):
        """EnvPool-style: reset everything; then each ``recv()`` returns one group's first
        observations (reward 0, done False)."""
        self._check_open("async_reset()")
        self._drain()
        fut = self._sim.submit(self.sim.reset_all)
        fut.result()
        self._to_send = deque()
        self._failed = {}
        for g in range(self.num_groups):
            f: Future = Future()
            f.set_result(self.sim.reset_result(g))
            self._pending.append((g, f))

    def send(self, actions, env_id=None):
        """Queue one group's actions and return at once. ``env_id`` (optional) must be the
        env ids of a whole group, as returned in ``info["env_id"]``; by default the group whose
        results were handed out longest ago. The ``info["env_id"]`` tensor itself is recognised
        without reading it; any other ids are copied to the host and checked (on CUDA, a wait)."""
        self._check_open("send()")
        if not self.sim.started:
            raise ConfigError(None, "send() / step() before reset(): call env.reset() (or async_reset()) first")
        a = self._check_actions(actions)   # before taking the group: a bad call changes nothing
        g = self._pick_group(env_id)
        try:
            fut = self._sim.submit(self.sim.step_group, g, a)
        except RuntimeError:   # close() from another thread since the check above shut the simulator down
            self._check_open("send()")
            raise
        self._pending.append((g, fut))

    def recv(self):
        """(obs, reward, done, info) of the oldest group sent, as torch tensors on the device.
        Frames are new tensors; the rest are this group's buffers: valid until its next ``send``."""
        self._check_open("recv()")
        try:
            g, fut = self._pending.popleft()
        except IndexError:   # nothing sent, or close() from another thread drained it since the check
            self._check_open("recv()")
            raise ConfigError(None, "recv() with nothing sent: call send(actions) (or async_reset()) first") from None
        try:
            out = fut.result()
        except BaseException as e:
            if not fut.done() or fut.exception() is None:   # interrupted while waiting (Ctrl-C): recv() it again
                self._pending.appendleft((g, fut))
            else:
                self._failed[g] = e
            raise
        self._to_send.append(g)
        self.last_info = out[3]
        return out

    def step(self, actions, env_id=None):
        """``send(actions, env_id)`` then ``recv()``."""
        self.send(actions, env_id)
        return self.recv()

    def close(self):
        """Finish what is in flight, stop the threads, release the scenes. Returns from any
        thread, whatever the step in flight waits for (loads waiting for room in the cache
        budget are cancelled first); errors of the steps it drains are not raised here."""
        if not self._closed:
            self._closed = True
            self.world.cancel()
            self._drain(quiet=True)
            self._sim.shutdown(wait=True)
            self.fused.close()
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
    def _check_open(self, call: str):
        if self._closed:
            raise ConfigError(None, f"{call} on a closed environment: make() a new one")

    def _drain(self, quiet: bool = False):
        while self._pending:
            _, f = self._pending.popleft()
            if quiet:
                f.exception()   # waits; the step's error (if any) was the caller's to recv
            else:
                f.result()

    def _pick_group(self, env_id) -> int:
        if env_id is None:
            if not self._to_send:
                raise ConfigError(None, "send(): no group is waiting for actions" + self._why_none_waits())
            return self._to_send.popleft()
        g = next((k for k in range(self.num_groups) if env_id is self.sim.env_ids(k)), None)
        if g is not None:   # the env's own info["env_id"] handed back: known without reading it
            return self._take_group(g)
        ids = torch.from_numpy(_int_ids(env_id, "send(): env_id"))
        if ids.numel() != self.batch_size:
            raise ConfigError(None, f"send(): env_id has {ids.numel()} entries, expected one group of "
                                    f"batch_size={self.batch_size}")
        g = int(ids[0]) // self.batch_size
        if not (0 <= g < self.num_groups) or not torch.equal(
                ids, torch.arange(g * self.batch_size, (g + 1) * self.batch_size)):
            raise ConfigError(None, f"send(): env_id must be one whole group "
                                    f"[k*{self.batch_size}, (k+1)*{self.batch_size}) in order")
        return self._take_group(g)

    def _why_none_waits(self) -> str:
        if self._pending:   # e.g. a step interrupted (Ctrl-C) while recv() waited: it runs on
            return (f": group {self._pending[0][0]}'s step is in flight: recv() it first (each group's "
                    "results must be recv()'d before its next send)")
        if self._failed:
            return ": " + self._failed_message(next(iter(self._failed)))
        return " (each group's results must be recv()'d before its next send)"

    def _failed_message(self, g: int) -> str:
        e = self._failed[g]
        return f"group {g}'s last step raised {type(e).__name__}: {e}; reset() the env (or make() a new one)"

    def _take_group(self, g: int) -> int:
        if g in self._failed:
            raise ConfigError(None, "send(): " + self._failed_message(g))
        if g not in self._to_send:
            raise ConfigError(None, f"send(): group {g} (envs {g * self.batch_size}..) is still "
                                    "being simulated: recv() it first")
        self._to_send.remove(g)
        return g

    def _check_actions(self, actions) -> torch.Tensor:
        b = self.batch_size
        if isinstance(actions, np.ndarray) or isinstance(actions, (list, tuple)):
            try:
                arr = np.asarray(actions)
            except ValueError:   # a ragged list
                raise ConfigError(None, f"actions: not one array (rows of different lengths); expected shape "
                                        f"({b},)") from None
            if arr.dtype.kind not in "iu":
                raise ConfigError(None, f"actions: dtype {arr.dtype} is not an integer type "
                                        f"(expected int64 action ids 0..{self.num_actions - 1})")
            if arr.size and arr.dtype.kind == "u" and arr.max() >= self.num_actions:   # before int64 wraps it
                raise ConfigError(None, f"actions: values must be in 0..{self.num_actions - 1} "
                                        f"{self.ACTIONS}, got {arr.min()}..{arr.max()}")
            actions = torch.from_numpy(np.ascontiguousarray(arr.astype(np.int64))).to(self.device)
        if not isinstance(actions, torch.Tensor):
            raise ConfigError(None, f"actions: expected a torch tensor of shape [{b}], got "
                                    f"{type(actions).__name__}")
        if actions.dtype not in _INT_DTYPES:
            raise ConfigError(None, f"actions: dtype {actions.dtype} is not an integer type "
                                    f"(expected torch.int64 action ids 0..{self.num_actions - 1})")
        if actions.device != self.device:
            raise ConfigError(None, f"actions: on device {actions.device}, the environment is on "
                                    f"{self.device} (move them with .to({str(self.device)!r}))")
        if actions.dim() == 2 and actions.shape[1] == 1:
            actions = actions[:, 0]
        if tuple(actions.shape) != (b,):
            raise ConfigError(None, f"actions: shape {tuple(actions.shape)}, expected ({b},) "
                                    f"(one action per environment of the batch)")
        if self.device.type == "cpu" or not self._checked_actions:  # a GPU check syncs: once
            self._check_action_range(actions)
        self._checked_actions = True
        return actions.to(torch.long).clone()

    def _check_action_range(self, actions: torch.Tensor) -> None:
        lo, hi = int(actions.min()), int(actions.max())
        if lo < 0 or hi >= self.num_actions:
            raise ConfigError(None, f"actions: values must be in 0..{self.num_actions - 1} "
                                    f"{self.ACTIONS}, got {lo}..{hi}")
