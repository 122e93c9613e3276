"""BatchNavEnv: N agents of a navigation task (PointNav, ObjectNav, ImageNav) as one batch of torch tensors, one agent in one resident scene each.

A step of a group is the fused step (``bps_runtime.step``: the task's kernels over every env):
action -> move / turn -> reward, success, metrics -> automatic reset of finished agents from
their queued next episode (habitat-baselines' behaviour: the observation returned with
``done`` is the next episode's first) -> observations -> batch render (the Warp renderer's
frame is one more launch in the step, or in its captured graph). Between steps the host reads
the ``head`` snapshot of two rounds back and keeps every env's queue of episodes filled
(``EpisodeRing``), scenes from the world's scene manager, episodes from its supply.
Double buffering: ``num_envs // batch_size`` fixed groups; ``send`` hands a group's actions to
the simulator thread and returns, ``recv`` returns the oldest group sent; ``step == send +
recv``. Tensors returned are the group's buffers (valid until its next ``send``); names in info
are ``LazyNames`` (read from the device when first looked at, within 64 episodes).
"""
from __future__ import annotations

from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import torch

from bps_assets.errors import ConfigError

from . import spaces as sp
from ..step.fused import FusedStep
from ..step.ring import EpisodeRing, LazyNames
from ..tasks import TASKS, spec_for, task_spec
from ..tasks.spec import HostContext

MAX_WAIT_REASONS = 100   # wait reasons kept in env.stats (the latest)

_INT_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


class BatchNavEnv:
    """A batched navigation task (one of ``tasks.TASKS``: the ``TaskSpec`` of ``task``, the task's
    options) over a ``world`` (scene cache + renderer + navigation + episodes).

    Build it with ``bps_runtime.make(...)``; the constructor takes the already-built parts.
    """

    ACTIONS = task_spec(TASKS[0]).actions

    def __init__(self, world, *, num_envs: int, batch_size: int | None = None, device="cpu",
                 sensors=("depth",), resolution=(64, 64), normalize_depth: bool = True,
                 task=None, capture_graph: bool = False):
        self.num_envs, self.batch_size = check_batching(num_envs, batch_size)
        self.num_groups = self.num_envs // self.batch_size
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:  # "cuda" -> "cuda:0": tensors say cuda:N
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.sensors = sp.check_sensors(sensors)
        self.resolution = sp.check_resolution(resolution)
        self.normalize_depth = bool(normalize_depth)
        self.spec = spec = task_spec(TASKS[0]) if task is None else spec_for(task)   # the task's TaskSpec
        self._task = spec.defaults if task is None else task
        self.world = world
        self.config = None   # the EnvConfig make() built this env from
        self.ACTIONS, self.num_actions = spec.actions, spec.num_actions
        self.fused = FusedStep(world.nav, self.num_envs, self.batch_size, spec, self._task, self.device,
                               capture=capture_graph, threads=world.threads, sizes=spec.sizes(self.resolution))
        # the task's host work when episodes are queued (ImageNav: the goal images), or None
        self.host_hook = spec.host_hook(HostContext(
            ring={f.name: self.fused.state[f.name] for f in spec.schema.of("state") if f.per == "ring"},
            staging=spec.staging, render=world.render, scene_id=world.scene_id, options=self._task,
            resolution=self.resolution, render_view=world.render_view, episode_record=world.episodes.episode_record))
        self.ring = EpisodeRing(world, world.episodes, self.num_envs, spec.staging, spec.goal_record)
        # a renderer that draws with one Warp launch on our device renders inside the step (and
        # inside its graph when captured); any other (Embree) renders after it
        r = world.renderer
        self._launch_frame = getattr(r, "launch_frame", None) if _same_device(
            getattr(r, "device", "cpu"), self.device) else None
        self._frames: dict = {}   # group -> the frame buffers its captured graph writes
        # every env's step state (views of the device tensors the kernels share), one per field
        self.state = self.fused.views(slice(None), "state")
        self._env_ids = [torch.arange(g * self.batch_size, (g + 1) * self.batch_size, device=self.device)
                         for g in range(self.num_groups)]
        self.last_info: dict = {}
        self._group_outputs: dict = {}      # (start, stop) of an env slice -> its output views
        self._checked_actions = False
        self._pending: deque = deque()      # (group, Future) sent, not yet received
        self._to_send: deque = deque()      # groups whose results were handed out
        self._sim = ThreadPoolExecutor(1, thread_name_prefix="bps-sim")
        self._closed = False
        self._started = False
        self._reseed = None
        # wait_reasons: why steps (or resets) waited for a load or an episode, one line each
        # episode_misses: takes the episode reservoir could not serve (drawn inline on this
        # thread instead; not a wait), with the latest reasons (a live view of the supply's)
        self.stats = {"steps": 0, "waited_steps": 0, "episodes": 0, "wait_reasons": [], "episode_misses": 0,
                      "episode_miss_reasons": world.episodes.miss_reasons}

    @property
    def task(self):
        """The task's rules (its ``TaskOptions``: step size, turn angle, success distance, episode
        length, reward); setting options of the same task takes effect from the next step (the
        step kernel reads them as parameters)."""
        return self._task

    @task.setter
    def task(self, t):
        if spec_for(t) is not self.spec:
            raise ConfigError(None, f"task: {type(t).__name__} is another task's options than this env's "
                                    f"({self.spec.name}); make() a new env for it")
        self._task = t
        self.fused.set_options(t)
        if self.host_hook is not None:
            self.host_hook.set_options(t)

    @property
    def episode_ids(self) -> list:
        """Episode id of every env's running episode (reads the device: not for the step path)."""
        return self.ring.names_of(0, self.fused.head.cpu().numpy() - 1, "episode")

    def episode_goals(self, env_ids=None) -> list[dict]:
        """The goal of each env's running episode (all envs, or ``env_ids``), from the host's
        records of the queued episodes (``EpisodeRing.goals_of``: ``goals``, ``goal_position``,
        goal objects with their view points, and the task's entries, ``TaskSpec.goal_record``:
        e.g. the goal category, the yaw a goal image was rendered at). Reads the episode counters from
        the device once: for tools and videos, not the step path."""
        self._check_open("episode_goals()")
        if not self._started:
            raise ConfigError(None, "episode_goals() before reset(): call env.reset() first")
        ids = torch.as_tensor(np.arange(self.num_envs) if env_ids is None else env_ids).reshape(-1).cpu().numpy()
        return self.ring.goals_of(ids, self.fused.head.cpu().numpy()[ids] - 1)

    @property
    def category_table(self):
        """With the "semantic" sensor: ``render.semantic.CategoryTable`` of the resident scenes,
        rows by scene index; ``env.category_table.lookup(info["scene_index"], obs["semantic"])``
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

    # ------------------------------------------------------------------ spaces (no allocation)
    @property
    def single_observation_space(self):
        """Observation space of one env (gymnasium Dict)."""
        return sp.single_observation_space(self.sensors, self.resolution, self.normalize_depth, self.spec)

    @property
    def single_action_space(self):
        """Action space of one env (Discrete(the task's actions))."""
        return sp.single_action_space(self.spec)

    @property
    def observation_space(self):
        """Observation space of one batch of ``batch_size`` envs."""
        return sp.batched_observation_space(self.batch_size, self.sensors, self.resolution,
                                            self.normalize_depth, self.spec)

    @property
    def action_space(self):
        """Action space of one batch of ``batch_size`` envs."""
        return sp.batched_action_space(self.batch_size, self.spec)

    # ------------------------------------------------------------------ front door
    def seed(self, seed: int):
        """Reseed episode sampling (per-scene streams); takes effect at the next ``reset()``."""
        from .config import check_seed

        self._reseed = check_seed(seed)

    def reset(self):
        """Start a new episode in every environment; returns the observations of all
        ``num_envs`` (``info["env_id"]`` = arange). Drains anything in flight first."""
        self._check_open("reset()")
        self._drain()
        obs, info = self._sim.submit(self._reset_all).result()
        self._to_send = deque(range(self.num_groups))
        self.last_info = info
        return obs

    def async_reset(self):
        """EnvPool-style: reset everything; then each ``recv()`` returns one group's first
        observations (reward 0, done False)."""
        self._check_open("async_reset()")
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
        results were handed out longest ago. The ``info["env_id"]`` tensor itself is recognised
        without reading it; any other ids are copied to the host and checked (on CUDA, a wait)."""
        self._check_open("send()")
        if not self._started:
            raise ConfigError(None, "send() / step() before reset(): call env.reset() (or async_reset()) first")
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

    def _group_slice(self, g: int) -> slice:
        return slice(g * self.batch_size, (g + 1) * self.batch_size)

    def _pick_group(self, env_id) -> int:
        if env_id is None:
            if not self._to_send:
                raise ConfigError(None, "send(): no group is waiting for actions (each group's "
                                        "results must be recv()'d before its next send)")
            return self._to_send.popleft()
        g = next((k for k, ids in enumerate(self._env_ids) if env_id is ids), None)
        if g is not None:   # the env's own info["env_id"] handed back: known without reading it
            return self._take_group(g)
        ids = torch.as_tensor(env_id).reshape(-1).to("cpu", torch.long)
        if ids.numel() != self.batch_size:
            raise ConfigError(None, f"send(): env_id has {ids.numel()} entries, expected one group of "
                                    f"batch_size={self.batch_size}")
        g = int(ids[0]) // self.batch_size
        if not (0 <= g < self.num_groups) or not torch.equal(
                ids, torch.arange(g * self.batch_size, (g + 1) * self.batch_size)):
            raise ConfigError(None, f"send(): env_id must be one whole group "
                                    f"[k*{self.batch_size}, (k+1)*{self.batch_size}) in order")
        return self._take_group(g)

    def _take_group(self, g: int) -> int:
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
                                        f"(expected int64 action ids 0..{self.num_actions - 1})")
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

    # ------------------------------------------------------------------ simulation (sim thread)
    def _host_between_steps(self):
        """Lagged bookkeeping + new queued episodes, uploaded for the next launch (no wait)."""
        heads = self.fused.take_snapshot()
        if heads is not None:
            before = self.ring.ended
            self.ring.learn(heads)
            self.stats["episodes"] += self.ring.ended - before
        self._queue_episodes()
        return self.ring.waited

    def _reset_all(self):
        f, ring = self.fused, self.ring
        for heads in f.drain_snapshots():
            ring.learn(heads)
        if self._started:
            ring.learn(f.head.cpu().numpy().astype(np.int64))   # reset: not the step path
        ring.release_all()
        if self._reseed is not None:
            self.world.episodes.reseed(self._reseed)
            self._reseed = None
        self._started = True
        f.head.zero_()
        self._queue_episodes()
        f.begin_all()
        ring.known[:] = 1
        self.stats["episodes"] += self.num_envs
        waited = ring.waited
        self._note_waits("reset")
        self._out = [self._render(g) for g in range(self.num_groups)]
        obs = {k: torch.cat([self._out[g][k] for g in range(self.num_groups)]) for k in self._out[0]}
        info = self._info(slice(0, self.num_envs), None, waited, reset=True)
        return obs, info

    def _queue_episodes(self):
        """Queue the episodes now due (``EpisodeRing.refill``), publish what arrived, run the task's
        host hook over them (ImageNav: goal images into their ring entries) and upload the staging rows."""
        stage_i, stage_f = self.ring.refill()
        self.world.nav.refresh()
        if self.host_hook is not None:
            self._host_hook(stage_i, stage_f)
        self.fused.upload(stage_i, stage_f)

    def _host_hook(self, stage_i: np.ndarray, stage_f: np.ndarray):
        """The task's host hook over the staged episodes (a method of its own: profilers mark it)."""
        self.host_hook.write(stage_i, stage_f, self.ring.staged_ids, self.ring.staged_headings)

    def _reset_result(self, g):
        sl = self._group_slice(g)
        obs = self._out[g]
        zeros = torch.zeros(self.batch_size, device=self.device)
        done = torch.zeros(self.batch_size, dtype=torch.bool, device=self.device)
        return obs, zeros, done, self._info(sl, g, False, reset=True)

    def _render(self, g: int) -> dict:
        """Render group g at the poses the kernel wrote (the quaternion reported in info, so
        re-rendering that pose gives the same pixels bit for bit) + the task's observations."""
        v = self._outputs(self._group_slice(g))
        frames = self.world.render(v.scene_index, v.position, v.rotation, self.sensors)
        obs = {k: frames[k] for k in self.sensors}
        obs.update(v.observations)
        return obs

    def _step_and_render(self, g: int, a: torch.Tensor) -> dict:
        """Group g's step with its frame queued right after the step kernel, as one more Warp
        launch reading the poses the kernel wrote (the same pixels as ``_render``). Captured,
        step and frame are one graph writing the group's own frame buffers (kept per group);
        otherwise each frame gets new buffers, as ``render`` gives."""
        f = self.fused
        bufs = self._frames.get(g) if f.capture else None
        if bufs is None:
            bufs = self.world.renderer.frame_buffers(self.batch_size, self.sensors)
            if f.capture:
                self._frames[g] = bufs
        v = self._outputs(self._group_slice(g))
        slot, pos, rot = v.scene_index, v.position, v.rotation

        def frame(stream):
            self._frame(slot, pos, rot, bufs, stream)

        f.step(g, a, then=frame, then_key=(self.world.renderer.table_version, bufs["depth"].data_ptr()))
        obs = {k: bufs[k] for k in self.sensors}
        obs.update(v.observations)
        return obs

    def _frame(self, scene_index, position, rotation, bufs, stream):
        """The renderer's one-launch frame of a group, queued on ``stream``."""
        self._launch_frame(scene_index, position, rotation, bufs["depth"], bufs.get("rgb"), stream=stream,
                           semantic=bufs.get("semantic"))

    def _step_group(self, g: int, a: torch.Tensor):
        waited = self._host_between_steps()
        if self._launch_frame is None:
            self.fused.step(g, a)
            obs = self._render(g)
        else:
            obs = self._step_and_render(g, a)
        sl = self._group_slice(g)
        waited = self.world.after_step(g) or waited   # a swap due now may wait for its load
        info = self._info(sl, g, waited)
        self.stats["steps"] += 1
        self.stats["waited_steps"] += int(waited)
        self._note_waits(f"step {self.stats['steps']}")
        v = self._outputs(sl)
        return obs, v.reward, v.done, info

    def _note_waits(self, when: str):
        """Keep why anything waited (``stats["wait_reasons"]``, the latest ``MAX_WAIT_REASONS``)
        and the episode reservoir's miss count."""
        self.stats["episode_misses"] = self.world.episodes.misses
        reasons = self.world.take_wait_reasons()
        if reasons:
            kept = self.stats["wait_reasons"]
            kept += [f"{when}: {r}" for r in reasons]
            del kept[:-MAX_WAIT_REASONS]

    def _outputs(self, sl):
        """The output views of envs ``sl`` (the task's observations, reward, done, info) of the
        fused step's buffers (allocated once), made on first use and kept, per group."""
        v = self._group_outputs.get((sl.start, sl.stop))
        if v is None:
            v = self._group_outputs[(sl.start, sl.stop)] = self.fused.views(sl)
            v.observations = {o.name: o.view(v, *self.resolution) for o in self.spec.observations}
        return v

    def _info(self, sl, g, waited, reset: bool = False):
        v, n, dev, task = self._outputs(sl), sl.stop - sl.start, self.device, self.spec
        ring, env0 = self.ring, sl.start
        epno = v.epno.clone()
        current = LazyNames(lambda m: ring.names_of(env0, m, "scene"), epno)
        info = {
            "env_id": self._env_ids[g] if g is not None else torch.arange(n, device=dev),
            "scene_index": v.scene_index,
            "scene_id": current,
            "position": v.position,
            "rotation": v.rotation,
            **task.info(v),
            "waited_for_load": bool(waited),
        }
        outcome = {k: getattr(v, k) for k in task.outcome + ("truncated",)}
        episode = task.episode_info(v)
        if reset:   # nothing has ended yet
            info.update({k: torch.zeros_like(t) for k, t in outcome.items()})
            info["episode"] = {**{k: torch.zeros_like(t) for k, t in episode.items()},
                               "episode_id": [""] * n, "scene_id": [""] * n}
            return info
        done = v.done.clone()
        info.update(outcome)
        info["episode"] = {
            **episode,
            "episode_id": LazyNames(lambda m, d: ring.names_of(env0, m - 1, "episode", d), epno, done),
            "scene_id": LazyNames(lambda m, d: ring.names_of(env0, m - 1, "scene", d), epno, done),
        }
        return info


def _same_device(a, b) -> bool:
    a, b = torch.device(a), torch.device(b)
    return a.type == b.type and (a.type == "cpu" or (a.index or 0) == (b.index or 0))


def check_batching(num_envs, batch_size) -> tuple[int, int]:
    """(num_envs, batch_size) checked: positive ints, batch_size divides num_envs."""
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
