"""The simulator of a ``BatchNavEnv``: everything that runs on the env's simulator thread. One
call per group step (``step_group``: the host's lagged bookkeeping and queued episodes, the
task's host hook, the fused step with its frame, the info), ``reset_all`` / ``reset_result``.
It owns the fused step (``FusedStep``), the episode ring (``EpisodeRing``, over the world's
scene and episode ports) and the task's host hook; the front door (env/env.py) owns the
EnvPool API, the action checks and the simulator thread, and calls nothing else here.
"""
from __future__ import annotations

import numpy as np
import torch

from bps_assets.errors import ConfigError

from ..noise.sensors import SensorNoise
from ..render.protocol import depth_clip_range
from ..step.fused import FusedStep, warp_stream
from ..step.ring import EpisodeRing, LazyNames
from ..tasks.spec import HostContext, TaskSpec

MAX_WAIT_REASONS = 100   # wait reasons kept in stats (the latest)


class Simulator:
    """One env's simulation over ``world`` for the checked ``config`` (an ``EnvConfig``) and the
    task's ``spec``; ``device`` is the env's torch device."""

    def __init__(self, world, config, spec: TaskSpec, device: torch.device):
        self.world, self.spec, self.device = world, spec, device
        self.num_envs, self.batch_size = config.num_envs, config.batch_size
        self.num_groups = self.num_envs // self.batch_size
        self.sensors, self.resolution = config.sensors.kinds, config.sensors.resolution
        self.fused = FusedStep(world.nav, self.num_envs, self.batch_size, spec, config.task, device,
                               capture=config.capture_graph, threads=world.threads, sizes=spec.sizes(self.resolution),
                               noise=config.noise, seed=config.seed)
        # habitat-sim's sensor noise on the frames (one more launch, ``threads`` on the CPU), or None
        # (depth through the C pass where the frames are the CPU's own, not a Warp frame's); with
        # depth noise the renderer's depth is raw (world.py) and the noise clips and scales it
        r = world.renderer
        warp_frame = r.frame_device is not None and _same_device(r.frame_device, device)
        self.sensor_noise = None
        if config.noise.sensors_on:
            lo, hi = depth_clip_range(config.sensors.camera())
            self.sensor_noise = SensorNoise(config.noise, device, normalized=config.sensors.normalize_depth,
                                            min_depth=lo, max_depth=hi, native=not warp_frame)
        depth_noise = config.noise.depth_on
        if depth_noise and not r.options.raw_depth:   # else the noise would read clipped depth
            raise ConfigError(None, "depth noise needs the renderer's raw depth: make it with "
                                    "RenderOptions(raw_depth=True), as env.world.build_world does")
        if r.options.raw_depth and not depth_noise:   # else the env would serve unclipped metres
            raise ConfigError(None, "a renderer of raw depth (RenderOptions(raw_depth=True)) needs depth noise, "
                                    "which clips its frames; without it make the renderer with raw_depth=False, "
                                    "as env.world.build_world does")
        # the sensors whose frames the noise replaces (the others are returned as rendered)
        self._noisy = () if self.sensor_noise is None else tuple(
            k for k, on in (("depth", self.sensor_noise.depth_on), ("rgb", self.sensor_noise.rgb_on)) if on)
        self._noise_inputs: dict = {}   # group -> (keys, counters): its envs' views, made once
        self._raw: dict = {}            # group -> the noiseless frame buffers the Warp frame writes
        # the task's host work when episodes are queued (ImageNav: the goal images), or None
        self.host_hook = spec.host_hook(HostContext(
            ring={f.name: self.fused.state[f.name] for f in spec.schema.of("state") if f.per == "ring"},
            staging=spec.staging, render=world.render, scene_id=world.scene_id, options=config.task,
            resolution=tuple(config.sensors.resolution), render_view=world.render_view,
            episode_record=world.episodes.episode_record))
        self.ring = EpisodeRing(world, world.episodes, self.num_envs, spec.staging, spec.goal_record,
                                spec.goal_headings)
        # a renderer that draws with one Warp launch on our device renders inside the step (and
        # inside its graph when captured); any other (Embree) renders after it
        self._launch_frame = r.launch_frame if warp_frame else None
        self._frames: dict = {}   # group -> the frame buffers its captured graph writes
        self._env_ids = [torch.arange(g * self.batch_size, (g + 1) * self.batch_size, device=device)
                         for g in range(self.num_groups)]
        self._group_outputs: dict = {}      # (start, stop) of an env slice -> its output views
        self.started = False
        self._round: set | None = None   # groups stepped in the current round (None: none since reset)
        self.reseed = None   # a seed for the episode streams at the next reset
        # wait_reasons: why steps (or resets) waited for a load or an episode, one line each
        # episode_misses: takes the episode reservoir could not serve (drawn inline on this
        # thread instead; not a wait), with the latest reasons (a live view of the supply's)
        self.stats = {"steps": 0, "waited_steps": 0, "episodes": 0, "wait_reasons": [], "episode_misses": 0,
                      "episode_miss_reasons": world.episodes.miss_reasons}

    def set_options(self, options) -> None:
        """The task's options from the next step on."""
        self.fused.set_options(options)
        if self.host_hook is not None:
            self.host_hook.set_options(options)

    def env_ids(self, g: int) -> torch.Tensor:
        """Group g's env ids (the tensor handed out as ``info["env_id"]``)."""
        return self._env_ids[g]

    def _group_slice(self, g: int) -> slice:
        return slice(g * self.batch_size, (g + 1) * self.batch_size)

    def _host_between_steps(self, g: int):
        """Lagged bookkeeping + new queued episodes, uploaded for the next launch (no wait).
        Done once per round (every group stepped once), as group ``g``'s step begins a new one:
        the ring learns every env's heads of ``LAG`` rounds back and queues every env's
        episodes, in env order, so which env gets which scene and episode (the scene cache's
        picks and swaps, the supply's draws, the releases between them) does not depend on
        ``batch_size``. A group stepped again before the others begins the next round."""
        if self._round is None or g in self._round:
            if self._round is not None:
                self.fused.snapshot()      # the heads the round just ended leaves
            self._round = set()
            heads = self.fused.take_snapshot()
            if heads is not None:
                before = self.ring.ended
                self.ring.learn(heads)
                self.stats["episodes"] += self.ring.ended - before
        self._round.add(g)
        self._queue_episodes()
        return self.ring.waited

    def reset_all(self):
        """Every env starts a new episode -> (obs of all envs, info)."""
        f, ring = self.fused, self.ring
        for heads in f.drain_snapshots():
            ring.learn(heads)
        if self.started:
            ring.learn(f.head.cpu().numpy().astype(np.int64))   # reset: not the step path
        ring.release_all()
        if self.reseed is not None:   # the episode and noise streams restart as make(seed=...) starts them
            self.world.episodes.reseed(self.reseed)
            f.reseed_noise(self.reseed)
            self.reseed = None
        self.started = True
        self._round = None
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

    def reset_result(self, g):
        """Group g's results right after ``reset_all`` (reward 0, done False)."""
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
        if self.sensor_noise is not None:   # the C pass writes depth in place (its frame is new)
            noisy = {k: frames[k] if k == "depth" and self.sensor_noise.native else torch.empty_like(frames[k])
                     for k in self._noisy if k in frames}
            self._noise(g, frames, noisy, warp_stream(self.device))
            frames = {**frames, **noisy}
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
        scene_index, pos, rot = v.scene_index, v.position, v.rotation
        raw = bufs
        if self.sensor_noise is not None:   # a noisy sensor's frame into buffers of our own, the noise into bufs
            kept = self._raw.get(g)
            if kept is None:
                kept = self._raw[g] = {k: torch.empty_like(bufs[k]) for k in self._noisy}   # only those
            # the others straight into bufs: every frame handed out is as fresh as bufs (docs/ENV.md)
            raw = {**bufs, **{k: kept[k] for k in self._noisy}}

        def frame(stream):
            self._frame(scene_index, pos, rot, raw, stream)
            if raw is not bufs:
                self._noise(g, raw, bufs, stream)

        f.step(g, a, then=frame, then_key=(self.world.renderer.table_version, bufs["depth"].data_ptr()))
        obs = {k: bufs[k] for k in self.sensors}
        obs.update(v.observations)
        return obs

    def _frame(self, scene_index, position, rotation, bufs, stream):
        """The renderer's one-launch frame of a group, queued on ``stream``."""
        self._launch_frame(scene_index, position, rotation, bufs["depth"], bufs.get("rgb"), stream=stream,
                           semantic=bufs.get("semantic"))

    def _noise(self, g: int, frames: dict, out: dict, stream):
        """habitat-sim's sensor noise from ``frames`` into ``out`` for group g: one launch (the CPU
        without capture: one per thread, env ranges side by side, bit for bit the same)."""
        got = self._noise_inputs.get(g)
        if got is None:
            sl = self._group_slice(g)
            got = self._noise_inputs[g] = (self.fused.state["noise_key"][sl], self.fused.state["noise_t"][sl])
        keys, counters = got
        d_in, c_in = frames.get("depth"), frames.get("rgb")
        d_out, c_out = out.get("depth"), out.get("rgb")

        def launch(lo, hi):
            self.sensor_noise.launch(d_in, d_out, c_in, c_out, keys, counters, lo, hi, stream=stream)

        if self.device.type == "cpu" and not self.fused.capture:
            self.fused.run_on_threads("sensor_noise", launch, self.batch_size)
        else:
            launch(0, self.batch_size)

    def step_group(self, g: int, a: torch.Tensor):
        """Group g's step with actions ``a`` [B] (checked): the host's bookkeeping, the fused
        step, the frame, the info -> (obs, reward, done, info)."""
        waited = self._host_between_steps(g)
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
        v, n, dev, spec = self._outputs(sl), sl.stop - sl.start, self.device, self.spec
        ring, env0 = self.ring, sl.start
        epno = v.epno.clone()
        current = LazyNames(lambda m: ring.names_of(env0, m, "scene"), epno)
        info = {
            "env_id": self._env_ids[g] if g is not None else torch.arange(n, device=dev),
            "scene_index": v.scene_index,
            "scene_id": current,
            "position": v.position,
            "rotation": v.rotation,
            **spec.info(v),
            "waited_for_load": bool(waited),
        }
        outcome = {k: getattr(v, k) for k in spec.outcome + ("truncated",)}
        episode = spec.episode_info(v)
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
