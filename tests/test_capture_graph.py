"""The step and its frame captured as one graph (issue 11 item 3), checked here on Warp's CPU
device: ``capture_graph`` records on CUDA only, but Warp also records CPU graphs, so with "cpu"
added to ``fused_step.CAPTURE_DEVICES`` the same capture logic runs here. Replayed graphs must
give what the plain launches give, bit for bit, through auto-resets, both groups of a double
buffered env, and re-captures when what the graph points at moves."""
from __future__ import annotations

import pytest
import torch

from bps_runtime.step import fused as fused_step
from inmemory_scenes import make_env, room
from cli.step_profile import count_ops
from bps_runtime.tasks.pointnav import TaskOptions

N, STEPS = 16, 24


def _scenes():
    return [room("a", 3.0, 4.0, pillars=[(1.0, -2.0, 1.5, -1.5)]), room("b", 4.0, 3.5)]


def _env(capture, monkeypatch, sensors=("depth", "rgb"), noise=None):
    if capture:
        monkeypatch.setattr(fused_step, "CAPTURE_DEVICES", ("cuda", "cpu"))
    env = make_env(_scenes(), num_envs=N, batch_size=N // 2, seed=3, renderer="warp", threads=1,
                   sensors=sensors, capture_graph=capture, noise=noise)
    env.task = TaskOptions(max_episode_steps=7)   # episodes end inside the run: auto-resets replay too
    return env


def _run(env, steps=STEPS, hook=None):
    g = torch.Generator().manual_seed(0)
    env.reset()
    out = []
    for t in range(steps):
        if hook is not None:
            hook(env, t)
        obs, r, d, info = env.step(torch.randint(0, 4, (N // 2,), generator=g))
        out.append({"depth": obs["depth"].clone(), "rgb": obs["rgb"].clone(), "pointgoal": obs["pointgoal"].clone(),
                    "reward": r.clone(), "done": d.clone(), "position": info["position"].clone(),
                    "env_id": info["env_id"].clone()})
    return out


def _assert_same(a, b):
    assert len(a) == len(b)
    for t, (x, y) in enumerate(zip(a, b)):
        for k in x:
            assert torch.equal(x[k], y[k]), (t, k)


def test_captured_step_and_frame_match_plain_launches(monkeypatch):
    plain = _env(False, monkeypatch)
    try:
        ref = _run(plain)
        assert plain.capture_status == "not captured: off"
    finally:
        plain.close()
    env = _env(True, monkeypatch)
    try:
        got = _run(env)
        assert env.capture_status == "captured with the render"
        assert sorted(env.fused._graphs) == [0, 1]       # one graph per group
        assert any(bool(s["done"].any()) for s in got)    # episodes ended and were reset in the graph
        _assert_same(ref, got)
        # steady state: the replay launches nothing itself (the step kernel and the frame are in it)
        a = torch.zeros(N // 2, dtype=torch.long)
        with count_ops() as c:
            env.step(a)
        assert dict(c.warp_launches) == {"step": {"graph": 1}}, c.summary()
    finally:
        env.close()


def test_captured_step_frame_and_noise_match_plain_launches(monkeypatch):
    """Sensor and actuation noise (issue 33) inside the group's graph: the same run bit for bit,
    and still one graph launch a step."""
    noise = {"depth": "redwood", "rgb": "gaussian", "actuation": "locobot-ilqr"}
    plain = _env(False, monkeypatch, noise=noise)
    try:
        ref = _run(plain)
    finally:
        plain.close()
    env = _env(True, monkeypatch, noise=noise)
    try:
        got = _run(env)
        assert env.capture_status == "captured with the render"
        _assert_same(ref, got)
        with count_ops() as c:
            env.step(torch.zeros(N // 2, dtype=torch.long))
        assert dict(c.warp_launches) == {"step": {"graph": 1}}, c.summary()
    finally:
        env.close()


def test_a_moved_scene_table_recaptures(monkeypatch):
    """The scene table growing (more scene ids than it holds) moves it: the graph would read
    the old one, so the step re-captures, and the frames still match plain launches."""

    def grow(env, t):
        if t == 12:
            r = env.world.renderer
            r._grow_table(2 * r._table.shape[0])

    plain = _env(False, monkeypatch)
    try:
        ref = _run(plain, hook=grow)
    finally:
        plain.close()
    env = _env(True, monkeypatch)
    graphs = []
    try:
        def grow_and_note(env, t):
            graphs.append(dict(env.fused._graphs))
            grow(env, t)

        got = _run(env, hook=grow_and_note)
        _assert_same(ref, got)
        before, after = graphs[12][0][1], env.fused._graphs[0][1]
        assert before is not after and env.fused._graphs[0][0][1][0] == env.world.renderer.table_version
    finally:
        env.close()


def test_depth_only_capture(monkeypatch):
    plain = _env(False, monkeypatch, sensors=("depth",))
    cap = _env(True, monkeypatch, sensors=("depth",))
    try:
        g = torch.Generator().manual_seed(1)
        plain.reset(), cap.reset()
        for _ in range(10):
            a = torch.randint(0, 4, (N // 2,), generator=g)
            o1, r1, _, _ = plain.step(a)
            o2, r2, _, _ = cap.step(a)
            assert set(o2) == {"depth", "pointgoal"}
            assert torch.equal(o1["depth"], o2["depth"]) and torch.equal(r1, r2)
        assert cap.capture_status == "captured with the render"
    finally:
        plain.close()
        cap.close()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_capture_includes_the_render():
    env = make_env(_scenes(), num_envs=128, batch_size=64, seed=0, device="cuda", renderer="warp",
                   capture_graph=True)
    try:
        env.reset()
        a = torch.zeros(64, dtype=torch.long, device="cuda")
        for _ in range(6):
            env.step(a)
        assert env.capture_status == "captured with the render", env.capture_status
        with count_ops() as c:
            env.step(a)
        assert dict(c.warp_launches) == {"step": {"graph": 1}}, c.summary()
        assert c.num_syncs == 0, c.syncs
    finally:
        env.close()
