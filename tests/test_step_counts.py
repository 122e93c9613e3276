"""One steady-state step of the fused env, counted on CPU (cli.step_profile): the torch
ops and Warp launches do not grow with the number of envs or resident scenes, and nothing in
the step calls an op that would make the host wait for a CUDA device. On CUDA the step also
runs under ``torch.cuda.set_sync_debug_mode("error")``."""
from __future__ import annotations

import pytest
import torch

from cli.step_profile import count_ops

from inmemory_scenes import make_env, room


def _count(num_envs, num_scenes, device="cpu", steps=3, threads=2, renderer="embree"):
    scenes = [room(f"r{i}", 3.0 + 0.5 * i, 4.0, pillars=[(1.0, -2.0, 1.5, -1.5)]) for i in range(num_scenes)]
    env = make_env(scenes, num_envs=num_envs, seed=0, device=device, threads=threads, renderer=renderer)
    try:
        env.reset()
        g = torch.Generator().manual_seed(0)
        acts = [torch.randint(0, 4, (num_envs,), generator=g).to(device) for _ in range(steps + 1)]
        for a in acts[:steps]:
            env.step(a)
        with count_ops() as c:
            env.step(acts[steps])
        assert len(set(env.state.scene_index.tolist())) == num_scenes
        return c
    finally:
        env.close()


@pytest.fixture(scope="module")
def counts():
    return {(n, k, t): _count(n, k, threads=t) for n, k, t in ((64, 1, 2), (1024, 1, 2), (64, 8, 2), (64, 1, 1),
                                                                  (1024, 8, 3))}


def test_step_op_and_launch_counts_do_not_grow(counts):
    """Per step: the refill kernel once and the step kernel once per CPU thread (one env range
    each; one launch on CUDA), the same torch ops, whatever the envs or resident scenes."""
    base = counts[(64, 1, 2)]
    assert base.num_torch_ops <= 60
    for key, c in counts.items():
        threads = key[2]
        assert dict(c.warp_launches["step"]) == {"apply_refills": 1, "step_kernel": threads}, (key, c.summary())
        assert c.torch_ops["step"] == base.torch_ops["step"], (key, c.summary())


def test_step_calls_nothing_that_syncs(counts):
    for key, c in counts.items():
        assert c.num_syncs == 0, (key, c.syncs)
        # the kernels did the work: no per-env or per-scene torch op slipped in
        assert not any(op in c.torch_ops["step"] for op in ("nonzero", "index", "index_put_", "unique"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_step_is_two_launches_whatever_the_cpu_threads():
    c = _count(256, 2, device="cuda", threads=4, renderer="warp")   # Embree would read poses to the host
    assert dict(c.warp_launches["step"]) == {"apply_refills": 1, "step_kernel": 1}, c.summary()
    assert c.num_syncs == 0, c.syncs


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_step_runs_with_sync_debug_mode_error():
    scenes = [room("a", 3.0, 4.0), room("b", 4.0, 4.0)]
    env = make_env(scenes, num_envs=256, seed=0, device="cuda", renderer="warp")
    try:
        env.reset()
        a = torch.randint(0, 4, (256,), device="cuda")
        env.step(a)
        env.step(a)   # the action range is checked once (a sync), then never
        torch.cuda.set_sync_debug_mode("error")
        try:
            for _ in range(5):   # the simulation step (host bookkeeping + launches) must not sync
                env.sim._host_between_steps(0)
                env.fused.step(0, a)
        finally:
            torch.cuda.set_sync_debug_mode(0)
    finally:
        env.close()


def test_graph_capture_flag_falls_back_cleanly():
    from types import SimpleNamespace

    env = make_env([room("a", 3.0, 4.0)], num_envs=8, seed=0, capture_graph=True)
    try:
        env.reset()
        for _ in range(4):
            obs, r, d, info = env.step(torch.full((8,), 2))
        assert env.capture_status == "not captured: cpu"
        # a capture that fails (a driver or stream that cannot capture) falls back to the plain
        # launches for good and says why; the step still runs
        f = env.fused

        class Broken:
            def __init__(self, *a, **k):
                pass

            def __enter__(self):
                raise RuntimeError("stream capture unsupported")

            def __exit__(self, *a):
                return False

        real = f.wp
        f.wp = SimpleNamespace(launch=real.launch, ScopedCapture=Broken, capture_launch=None)
        f.capture, f._warm = True, 2
        yaw = f.state["yaw"].clone()
        f.actions.fill_(2)                          # TURN_LEFT for the whole group
        f._replay_or_capture(0, 0, None)
        f.wp = real
        assert f.capture is False and f.capture_status == "not captured: RuntimeError: stream capture unsupported"
        assert not torch.equal(f.state["yaw"], yaw)
    finally:
        env.close()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_graph_replay_matches_plain_launches():
    scenes = [room("a", 3.0, 4.0), room("b", 4.0, 4.0)]
    runs = []
    for capture in (False, True):
        env = make_env(scenes, num_envs=128, seed=0, device="cuda", renderer="warp", capture_graph=capture)
        env.reset()
        g = torch.Generator().manual_seed(0)
        out = []
        for _ in range(12):
            obs, r, d, info = env.step(torch.randint(0, 4, (128,), generator=g).cuda())
            out.append((r.clone(), d.clone(), info["position"].clone()))
        runs.append(out)
        if capture:
            assert env.capture_status == "captured with the render"
        env.close()
    for (r1, d1, p1), (r2, d2, p2) in zip(*runs):
        assert torch.equal(r1, r2) and torch.equal(d1, d2) and torch.equal(p1, p2)
