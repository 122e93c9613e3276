"""The device side of the fused step: ``FusedStep`` (the task's state and outputs, allocated from
its schema, shared with Warp; the launches, optionally one captured CUDA graph per group).

A step: copy the actions in, copy the staging rows in (``upload``), the task's refill kernel,
its step kernel (on the CPU as ``threads`` env ranges side by side); once per round, a
``head`` snapshot (``snapshot``). The number of torch ops and Warp launches does not depend on
the number of envs or scenes, and nothing waits for the device. The host reads the snapshot
of ``LAG`` rounds back (``take_snapshot``), so with ``QUEUE_DEPTH`` queued episodes an env
always has its next one queued. Episode m of an env is ring entry ``m % RING_SIZE``, as on the host.
Actuation noise (``noise``) rides in the task's ``Params`` (``act`` applies it), and so does the
RGB noise of a goal image (``goal_noise``, where a task's ``Params`` has it): no launch more.
Capture (``capture=True``, CUDA): after two warm-up steps a group's launches are captured once
and replayed; anything that moves what they point at (an arena growing, the window, the
renderer's scene table, the frame buffers, the task's options) re-captures.
"""
from __future__ import annotations

from collections import deque
from dataclasses import replace

import numpy as np
import torch

from . import kernels as sk
from ..nav.kernels import nav_struct, window_cells
from . import schema
from ..nav.buffers import NavBuffers
from ..noise.actuation import actuation_model
from ..noise.options import DEFAULTS as NO_NOISE
from ..noise.rng import env_keys
from ..noise.sensors import SensorNoise

LAG = 2      # rounds between a head snapshot and the host reading it
QUEUE_DEPTH = 2    # queued episodes per env beyond what the host has seen start
RING_SIZE = QUEUE_DEPTH + 1   # ring entries per env: the running episode's and the queued ones
NAMES = 64   # episode names kept per env for LazyNames (read info within 64 episodes)
# where capture_graph captures: CUDA. Warp can also record a CPU graph, but its replay is one
# serial loop while the plain CPU step runs on every render thread; tests add "cpu" to check the
# capture logic (what is recorded, when it is re-captured) against plain launches here.
CAPTURE_DEVICES: tuple = ("cuda",)


def _wp_dev(device: torch.device) -> str:
    return "cpu" if device.type == "cpu" else f"cuda:{device.index or 0}"


_STREAMS: dict = {}   # torch stream handle -> its Warp view (made once: a launch per step asks)


def warp_stream(device: torch.device):
    """Warp's view of torch's current stream (kernels and torch copies stay in one order);
    None on the CPU."""
    if device.type != "cuda":
        return None
    ts = torch.cuda.current_stream(device)
    got = _STREAMS.get(ts.cuda_stream)
    if got is None:
        got = _STREAMS[ts.cuda_stream] = sk.init_warp().stream_from_torch(ts)
    return got


class FusedStep:
    """Device side: state tensors (shared with Warp), ring, outputs, launches (optionally a
    captured CUDA graph per group)."""

    def __init__(self, nav: NavBuffers, num_envs: int, batch_size: int, spec, options, device,
                 capture: bool = False, threads: int = 1, sizes: dict | None = None, noise=NO_NOISE,
                 seed: int = 0):
        self.wp = sk.init_warp()
        # CPU: the step kernel runs as `threads` env ranges side by side (one launch on CUDA)
        self._cpu = sk.CpuLaunches(threads if torch.device(device).type == "cpu" else 1)
        self.nav = nav
        self.N, self.B = int(num_envs), int(batch_size)
        self.device = dev = torch.device(device)
        self.wdev = _wp_dev(dev)
        self.spec, self.options = spec, options   # the task's TaskSpec and options
        N = self.N
        z = lambda *s, dt=torch.float32: torch.zeros(*s, dtype=dt, device=dev)  # noqa: E731
        # the step state and outputs, made from the task's schema (``state``/``out``: name -> tensor)
        self.sizes = dict(sizes or {})
        self.state = schema.allocate(spec.schema.of("state"), N, RING_SIZE, dev, self.sizes)
        self.out = schema.allocate(spec.schema.of("out"), N, RING_SIZE, dev, self.sizes)
        self.head = self.state["head"]
        # the noise's per-env keys (from the run's seed) and step counters (``act`` counts)
        self.noise = noise
        self.reseed_noise(seed)
        self._actuation = actuation_model(noise)
        # the RGB noise of a goal image, for a task whose Params take it (ImageNav's kernels apply it)
        self._goal_noise = SensorNoise(replace(noise, depth="none"), dev) if noise.rgb_on else None
        # inputs
        self.actions = z(self.B, dt=torch.int64)
        cap = N * RING_SIZE
        ni, nf = spec.staging.ints, spec.staging.floats   # the task's staging columns (by name)
        self.stage_i, self.stage_f = z(cap, ni, dt=torch.int32), z(cap, nf)
        self.count = z(1, dt=torch.int32)
        self._count_sent = 0      # the row count the device holds (the last upload's)
        pin = dev.type == "cuda"
        self._pinned = [(torch.zeros(cap, ni, dtype=torch.int32, pin_memory=pin),
                         torch.zeros(cap, nf, dtype=torch.float32, pin_memory=pin),
                         torch.zeros(1, dtype=torch.int32, pin_memory=pin)) for _ in range(2)]
        # numpy views of the host buffers, made once (no tensor -> host call on the step path)
        self._pinned_np = [tuple(t.numpy() for t in bufs) for bufs in self._pinned]
        self._pin_events = [None, None]
        self._pin_next = 0
        self._snapshots: deque = deque()    # (host tensor, event or None), oldest first
        # one snapshot per round (every group stepped once; the simulator takes it as the next
        # round begins), so the host learns whole rounds: what it does with them then does not
        # depend on batch_size (docs/RUNTIME.md, "The fused step")
        self._free_snaps = [(t, t.numpy()) for t in (torch.zeros(N, dtype=torch.int32, pin_memory=pin)
                                                      for _ in range(LAG + 1))]
        self.scratch = None
        self.win = 0
        self._params = None
        self._window_key = None
        self._structs_key = None
        self.capture = bool(capture)
        self.capture_status = "not captured: off" if not capture else (
            f"not captured: {dev.type}" if dev.type not in CAPTURE_DEVICES else "not captured yet")
        self._graphs: dict = {}   # group -> (what its launches point at, graph)
        self._cap_stream = None
        self._warm = 0

    def reseed_noise(self, seed: int) -> None:
        """The noise streams as an env made with run seed ``seed`` starts them: its per-env keys,
        step counters at 0."""
        self.state["noise_key"].copy_(torch.from_numpy(env_keys(seed, self.N)))
        self.state["noise_t"].zero_()

    def close(self):
        """Stop the CPU launch threads."""
        self._cpu.close()

    def run_on_threads(self, key, launch, n: int) -> None:
        """``launch(start, stop)`` over ``n`` envs as the step's CPU ranges (``CpuLaunches``)."""
        self._cpu.run(key, launch, n)

    # ------------------------------------------------------------------ structs
    def set_options(self, options) -> None:
        """The task's options from the next step on (the kernels read them as parameters)."""
        self.options = options
        self._window_key = None
        self._structs_key = None

    def views(self, sl: slice, kind: str = "out"):
        """Per-env views of envs ``sl`` of the outputs (or the state), one attribute per field."""
        return schema.views(self.spec.schema.of(kind), self.out if kind == "out" else self.state, sl)

    def _window(self):
        """Scratch size for the largest try_step window of the resident scenes (grown between
        steps only) and the task's parameters with it."""
        # a noisy move reaches further (its truncated Gaussians' bound; 0 without noise)
        step = self.spec.max_move(self.options) + self.noise.actuation_reach()
        key = (self.nav.min_cell, step)
        if key == self._window_key:
            return
        self._window_key = key
        need = window_cells(step, self.nav.min_cell)
        if need > self.win:
            self.win = need
            self.scratch = torch.zeros(self.N, self.win, dtype=torch.int32, device=self.device)
            self._structs_key = None
        self._params = self.spec.params(self.options, self.win, **self.sizes)
        self._params.actuation = self._actuation
        if self._goal_noise is not None and hasattr(self._params, "goal_noise"):
            self._params.goal_noise = self._goal_noise.params

    def _structs(self):
        self._window()
        key = (self.nav.version, self.win)
        if key == self._structs_key:
            return
        wp, ft, sch = self.wp, self.wp.from_torch, self.spec.schema
        self._nav_s = nav_struct(self.nav)
        self._st_s = schema.bind(wp, self.spec.State, sch.of("state"), self.state)
        self._out_s = schema.bind(wp, self.spec.Out, sch.of("out"), self.out)
        self._w = dict(actions=ft(self.actions), scratch=ft(self.scratch), stage_i=ft(self.stage_i),
                       stage_f=ft(self.stage_f), count=ft(self.count))
        self._structs_key = key
        self._graphs.clear()
        self._warm = 0

    # ------------------------------------------------------------------ host -> device inputs
    def upload(self, stage_i: np.ndarray, stage_f: np.ndarray):
        """New ring entries (rows of the task's staging columns, ``spec.staging``) for the
        next launch; a copy from pinned memory on CUDA, no wait.
        No rows while the device already holds a count of 0: nothing to copy, no torch op (this
        relies on the copies being issued here; a captured graph that replayed them would read
        a pinned buffer not rewritten since)."""
        m = int(stage_i.shape[0])
        if m == 0 and self._count_sent == 0:
            return
        self._count_sent = m
        pi, pf, pc = self._pinned[self._pin_next]
        ni, nf, nc = self._pinned_np[self._pin_next]
        ev = self._pin_events[self._pin_next]
        if ev is not None:
            ev.synchronize()      # the copy from this buffer two uploads ago (long finished)
        ni[:m] = stage_i
        nf[:m] = stage_f
        nc[0] = m
        nb = self.device.type == "cuda"
        self.stage_i[:m].copy_(pi[:m], non_blocking=nb)
        self.stage_f[:m].copy_(pf[:m], non_blocking=nb)
        self.count.copy_(pc, non_blocking=nb)
        if nb:
            ev = torch.cuda.Event()
            ev.record()
            self._pin_events[self._pin_next] = ev
        self._pin_next ^= 1

    # ------------------------------------------------------------------ launches
    def _launch_step(self, env0: int, stream, then=None, inline: bool = False):
        """Group ``env0``'s launches on ``stream``: refill, step kernel, then ``then(stream)``."""
        wp, w, t = self.wp, self._w, self.spec
        wp.launch(t.apply_refills, dim=self.stage_i.shape[0],
                  inputs=[self._st_s, w["stage_i"], w["stage_f"], w["count"]], device=self.wdev, stream=stream)
        args = [self._nav_s, self._params, self._st_s, self._out_s, w["actions"], w["scratch"], env0]
        if inline:   # a CPU capture records this thread's launches only: one range
            wp.launch(t.step_kernel, dim=self.B, inputs=args + [0, RING_SIZE], device=self.wdev, stream=stream)
        else:
            self._cpu.run(t.step_kernel, lambda lo, hi: wp.launch(
                t.step_kernel, dim=hi - lo, inputs=args + [lo, RING_SIZE], device=self.wdev, stream=stream), self.B)
        if then is not None:
            then(stream)

    def begin_all(self):
        """Every env starts the episode at its ring's head (``reset``)."""
        self._structs()
        w, stream, t = self._w, warp_stream(self.device), self.spec
        self.wp.launch(t.apply_refills, dim=self.stage_i.shape[0],
                       inputs=[self._st_s, w["stage_i"], w["stage_f"], w["count"]], device=self.wdev, stream=stream)
        self._cpu.run(t.begin_kernel, lambda lo, hi: self.wp.launch(
            t.begin_kernel, dim=hi - lo, inputs=[self._nav_s, self._params, self._st_s, self._out_s, lo, RING_SIZE],
            device=self.wdev, stream=stream), self.N)
        while self._snapshots:         # older snapshots say nothing about the new episodes
            self._free_snaps.append(self._snapshots.popleft()[0])

    def step(self, g: int, actions: torch.Tensor, then=None, then_key=None):
        """Launch group g's step with ``actions`` [B] (after ``upload``). ``then(stream)``, when
        given, queues more Warp launches that belong to the step (the env's frame: they read
        this step's outputs) on that Warp stream; with capture they are part of the group's
        graph, which is re-captured when ``then_key`` (what their launches point at) changes."""
        self._structs()
        self.actions.copy_(actions)
        env0, stream = g * self.B, warp_stream(self.device)
        if self.capture and self.device.type in CAPTURE_DEVICES:
            self._replay_or_capture(g, env0, stream, then, then_key)
        else:
            self._launch_step(env0, stream, then)

    def _capture_stream(self):
        """A torch stream of our own to capture on (CUDA cannot capture on the legacy default
        stream, which is torch's current one unless the caller chose another); the graph is
        then replayed on the current stream, in order with everything else. None on the CPU."""
        if self.device.type != "cuda":
            return None
        if self._cap_stream is None:
            self._cap_stream = torch.cuda.Stream(self.device)
        return self.wp.stream_from_torch(self._cap_stream)

    def _replay_or_capture(self, g, env0, stream, then=None, then_key=None):
        """Replay group g's captured graph; capture it after two warm-up steps (kernels
        loaded); on any capture error fall back to plain launches for good."""
        wp = self.wp
        key = (env0, then_key)
        held = self._graphs.get(g)
        if held is not None and held[0] == key:
            wp.capture_launch(held[1], stream=stream)
            return
        if self._warm < 2:
            self._warm += 1
            self._launch_step(env0, stream, then)
            return
        try:
            cs = self._capture_stream()
            with wp.ScopedCapture(device=self.wdev, stream=cs) as cap:
                self._launch_step(env0, cs, then, inline=self.device.type == "cpu")
            self._graphs[g] = (key, cap.graph)
            self.capture_status = "captured" if then is None else "captured with the render"
            wp.capture_launch(cap.graph, stream=stream)
        except Exception as e:  # noqa: BLE001 - any capture failure falls back to plain launches
            self.capture = False
            self.capture_status = f"not captured: {type(e).__name__}: {e}"
            self._graphs.clear()
            self._launch_step(env0, stream, then)

    def snapshot(self):
        """Queue a copy of every env's ``head`` as the steps launched so far leave it (no wait);
        once per round, as the next one begins."""
        snap = self._free_snaps.pop()
        nb = self.device.type == "cuda"
        snap[0].copy_(self.head, non_blocking=nb)
        ev = None
        if nb:
            ev = torch.cuda.Event()
            ev.record()
        self._snapshots.append((snap, ev))

    def take_snapshot(self) -> np.ndarray | None:
        """The head snapshot of ``LAG`` rounds back (the oldest kept), once that many were taken."""
        if len(self._snapshots) < LAG:
            return None
        snap, ev = self._snapshots.popleft()
        if ev is not None:
            ev.synchronize()   # that step finished long ago; the next one is still queued
        out = snap[1].astype(np.int64)
        self._free_snaps.append(snap)
        return out

    def drain_snapshots(self) -> list:
        """All snapshots not yet read (oldest first) - ``reset`` / ``close`` only."""
        out = []
        while self._snapshots:
            snap, ev = self._snapshots.popleft()
            if ev is not None:
                ev.synchronize()
            out.append(snap[1].astype(np.int64))
            self._free_snaps.append(snap)
        return out
