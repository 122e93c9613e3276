"""The fused step (bps_runtime.step.fused / step_kernels) against the numpy reference
(``bps_assets.nav.queries``: try_step with sliding, distance_at on the goal's field) with the
task math of tests/pointnav_reference.py, transition by transition over > 10,000 env steps: wall
sliding, stairs and a step, STOP on and off the goal, truncation, automatic resets and scene swaps.
Observations are compared with Embree renders of the reported pose."""
from __future__ import annotations


import numpy as np
import pytest
import torch

from bps_runtime.tasks.pointnav import MOVE_FORWARD, STOP, TURN_LEFT, TURN_RIGHT, TaskOptions
from pointnav_reference import apply_turns, forward_vector, reward_and_success, soft_spl, spl, yaw_to_quat

from inmemory_scenes import house_scene, make_env, room

F, L, R, S = MOVE_FORWARD, TURN_LEFT, TURN_RIGHT, STOP
TASK = TaskOptions(max_episode_steps=40)


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    """The checker is many tiny torch ops: one intra-op thread is faster on a loaded 2-core
    machine."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def _policy(info, obs, gen, n):
    """Even envs head for the goal (turn toward the pointgoal, STOP inside 0.18 m); odd envs
    act at random (some STOPs far from the goal)."""
    pg = obs["pointgoal"]
    greedy = torch.where(pg[:, 1] > 0.2, torch.tensor(L), torch.where(pg[:, 1] < -0.2, torch.tensor(R), torch.tensor(F)))
    greedy = torch.where(info["distance_to_goal"] < 0.18, torch.tensor(S), greedy)
    u = torch.rand(n, generator=gen)
    rand = torch.where(u < 0.6, F, torch.where(u < 0.75, L, torch.where(u < 0.9, R, S)))
    noise = torch.rand(n, generator=gen) < 0.1      # greedy agents wander a little too
    greedy = torch.where(noise, rand, greedy)
    return torch.where(torch.arange(n) % 2 == 0, greedy, rand).long()


class _Checker:
    """Replays each env transition with the numpy reference."""

    def __init__(self, env):
        self.env = env
        self.counts = dict(steps=0, slides=0, blocked=0, climbs=0, success=0, stop_fail=0, trunc=0,
                           resets=0, swaps=0, obs_checked=0)
        self.max_err = dict(pos_np=0.0, reward_np=0.0, spl=0.0, soft_spl=0.0, episode_soft_spl=0.0)

    def pre(self):
        st = self.env.state
        out = {k: getattr(st, k).clone() for k in ("pos", "yaw", "row", "d_prev", "path_len", "steps", "d0")}
        out["scene"], out["ep_return"] = st.scene_index.clone(), st.total.clone()
        return out

    def check(self, pre, a, r, d, info):
        env, nav = self.env, self.env.world.nav
        n = a.shape[0]
        t = env.task
        target = pre["pos"] + t.forward_step * forward_vector(pre["yaw"])
        fwd = (a == F).numpy()
        ref_np = pre["pos"].numpy().copy()
        d_np = np.zeros(n, np.float64)
        keys = pre["scene"].numpy()
        for k in np.unique(keys):
            idx = np.flatnonzero(keys == k)
            scene, fields = nav.scenes[int(k)], nav.fields[int(k)]
            nm = scene.navmesh
            fi = idx[fwd[idx]]
            if fi.size:
                ref_np[fi] = nm.try_step(pre["pos"][fi].double().numpy(), target[fi].double().numpy())
            rows = pre["row"][idx].numpy()
            for row in np.unique(rows).tolist():
                j = idx[rows == row]
                d_np[j] = nm.distance_at(fields.host[int(row)], ref_np[j].astype(np.float32).astype(np.float64),
                                         goals=fields.near[int(row)][:, :3])
        ref_np = torch.from_numpy(ref_np.astype(np.float32))
        d_ref = torch.from_numpy(d_np).float()
        rew_np, succ_np = reward_and_success(a, pre["d_prev"], d_ref, t)
        path = pre["path_len"] + torch.linalg.vector_norm(ref_np - pre["pos"], dim=1)
        steps = pre["steps"] + 1
        trunc = (a != S) & (t.max_episode_steps > 0) & (steps >= t.max_episode_steps)   # 0: no limit
        done = (a == S) | trunc
        spl_ref = torch.where(done, spl(succ_np, pre["d0"], path), 0.0)
        # dones, success, truncation: exact
        assert torch.equal(d, done) and torch.equal(info["truncated"], trunc)
        assert torch.equal(info["success"], succ_np & done)
        # rewards and SPL
        self._err("reward_np", r, rew_np, 1e-5)
        self._err("spl", info["spl"], spl_ref, 1e-5)
        soft_ref = soft_spl(pre["d0"], d_ref, path)      # habitat's SoftSPL: running, and of ended episodes
        self._err("soft_spl", info["soft_spl"], soft_ref, 1e-5)
        self._err("episode_soft_spl", info["episode"]["soft_spl"], torch.where(done, soft_ref, 0.0), 1e-5)
        # positions of the envs that go on; yaw exactly as the task math
        go = ~done
        self._err("pos_np", info["position"][go], ref_np[go], 1e-5)
        assert torch.equal(env.state.yaw[go], apply_turns(pre["yaw"], a, t)[go])
        np.testing.assert_allclose(info["distance_to_goal"][go].numpy(), d_ref[go].numpy(), atol=1e-5)
        # finished episodes: their statistics, then the next episode's start distance
        ep = info["episode"]
        if done.any():
            np.testing.assert_allclose(ep["path_length"][done].numpy(), path[done].numpy(), atol=1e-5)
            np.testing.assert_allclose(ep["distance_to_goal"][done].numpy(), d_ref[done].numpy(), atol=1e-5)
            assert torch.equal(ep["length"][done], steps[done]) and torch.equal(ep["start_distance"][done], pre["d0"][done])
            np.testing.assert_allclose(ep["return"][done].numpy(), (pre["ep_return"] + rew_np)[done].numpy(), atol=1e-4)
            for i in np.flatnonzero(done.numpy()).tolist():
                k, row = int(env.state.scene_index[i]), int(env.state.row[i])
                scene = nav.scenes[k]
                d0 = float(scene.navmesh.distance_at(nav.fields[k].host[row], env.state.pos[i].double().numpy(),
                                                     goals=nav.fields[k].near[row][:, :3]))
                assert env.state.d0[i].item() == pytest.approx(d0, abs=1e-4)
                assert info["distance_to_goal"][i].item() == env.state.d0[i].item() and int(env.state.steps[i]) == 0
                assert ep["episode_id"][i] != "" and info["scene_id"][i] == env.world.scene_id(k)
                self.counts["swaps"] += int(k != int(pre["scene"][i]))
        assert all(ep["episode_id"][i] == "" for i in np.flatnonzero(~done.numpy()).tolist())
        moved = torch.linalg.vector_norm((ref_np - pre["pos"])[:, [0, 2]], dim=1)
        c = self.counts
        c["steps"] += n
        c["slides"] += int(((a == F) & (moved > 0.01) & (moved < t.forward_step - 1e-3)).sum())
        c["blocked"] += int(((a == F) & (moved < 1e-4)).sum())
        c["climbs"] += int(((a == F) & ((ref_np - pre["pos"])[:, 1].abs() > 0.1)).sum())
        c["success"] += int((succ_np & done).sum())
        c["stop_fail"] += int(((a == S) & ~succ_np).sum())
        c["trunc"] += int(trunc.sum())
        c["resets"] += int(done.sum())

    def _err(self, key, got, ref, tol):
        err = float((got.double() - ref.double()).abs().max()) if got.numel() else 0.0
        self.max_err[key] = max(self.max_err[key], err)
        assert err <= tol, f"{key}: {err} > {tol}"

    def check_obs(self, obs, info):
        """Embree: the observation is the render of the reported pose bit for bit, and the
        pose of today's env (torch quaternion of the same yaw) renders within 1e-5."""
        env = self.env
        direct = env.world.renderer.render(info["scene_index"], info["position"], info["rotation"], env.sensors)
        assert torch.equal(direct["depth"], obs["depth"])
        today = env.world.renderer.render(env.state.scene_index.long(), env.state.pos, yaw_to_quat(env.state.yaw), env.sensors)
        assert torch.allclose(today["depth"], obs["depth"], atol=1e-5)
        assert torch.allclose(info["rotation"], yaw_to_quat(env.state.yaw), atol=1e-7)
        self.counts["obs_checked"] += 1


def _run(env, steps, seed, check_every=10):
    ck = _Checker(env)
    gen = torch.Generator().manual_seed(seed)
    obs = env.reset()
    info = env.last_info
    n = env.num_envs
    for s in range(steps):
        a = _policy(info, obs, gen, n)
        pre = ck.pre()
        obs, r, d, info = env.step(a)
        ck.check(pre, a, r, d, info)
        if s % check_every == 0:
            ck.check_obs(obs, info)
    return ck


def test_fused_step_matches_the_numpy_reference():
    scenes = [room("pillars", 4.0, 5.0, pillars=[(1.5, -3.0, 2.5, -2.0), (0.5, -1.0, 1.0, -0.5)]),
              house_scene(), room("long", 2.0, 7.0)]
    env = make_env(scenes, num_envs=64, seed=3, goal_pool=6)
    env.task = TASK
    ck = _run(env, 160, seed=1)
    env.close()
    c = ck.counts
    print(c, ck.max_err)
    assert c["steps"] >= 10_000
    # the cases that matter happened
    assert c["slides"] > 50 and c["blocked"] > 20 and c["climbs"] > 3
    assert c["success"] > 10 and c["stop_fail"] > 100 and c["trunc"] > 10 and c["obs_checked"] >= 16
    assert ck.max_err["pos_np"] <= 1e-5


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    from bps_assets import synth
    from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess

    root = tmp_path_factory.mktemp("fused_swaps")
    synth.generate(root / "src", "gibson", 3, seed=0, size="small")
    res = preprocess(root / "src", root / "out", "gibson", "tiny",
                     PreprocessOptions(episodes=6, episode_seed=0, workers=1, subsets=("train",)),
                     log=lambda s: None)
    return res.manifest_path


def test_fused_step_with_scene_swaps_matches_reference(manifest):
    """One cache slot, a swap every 3 steps: episodes move to the new scene as they end; the
    references agree across the swaps (scenes leave and their ids are reused)."""
    from bps_runtime import make

    env = make(manifest, split="train", num_envs=16, resolution=(16, 16), seed=2, episodes="sample",
               cache={"slots": 1, "swap_every": 3})
    env.task = TASK
    ck = _run(env, 80, seed=4)
    env.close()
    print(ck.counts, ck.max_err)
    assert ck.counts["swaps"] >= 8 and ck.counts["resets"] > 50


def test_lazy_info_names_read_once_and_behave_like_lists():
    from bps_runtime.step.ring import LazyNames

    calls = []

    def resolve(m):
        calls.append(1)
        return [f"ep{v}" for v in m.tolist()]

    x = LazyNames(resolve, torch.tensor([3, 1, 2]))
    assert not calls                                   # nothing read until looked at
    assert list(x) == ["ep3", "ep1", "ep2"] and ",".join(x) == "ep3,ep1,ep2"
    assert np.asarray(x).tolist() == ["ep3", "ep1", "ep2"] and x == ["ep3", "ep1", "ep2"]
    assert "ep1" in x and x[1:] == ["ep1", "ep2"] and len(x) == 3 and len(calls) == 1
