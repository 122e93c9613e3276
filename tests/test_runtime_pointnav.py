"""BatchNavEnv on in-memory scenes (real Embree renderer, real NavMesh): task math,
scripted trajectories, determinism, send/recv, action errors, info vs render, gym adapter."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bps_assets.errors import ConfigError
from bps_runtime.tasks.pointnav import MOVE_FORWARD, STOP, TURN_LEFT, TURN_RIGHT, TaskOptions
from pointnav_reference import apply_turns, forward_vector, pointgoal_polar, quat_to_yaw, yaw_to_quat

from inmemory_scenes import corridor, episode, make_env, room

F, L, R, S = MOVE_FORWARD, TURN_LEFT, TURN_RIGHT, STOP


# ------------------------------------------------------------------------------ task math
def test_action_order_is_habitats():
    assert (STOP, MOVE_FORWARD, TURN_LEFT, TURN_RIGHT) == (0, 1, 2, 3)


def test_pointgoal_convention_matches_habitat():
    pos = torch.zeros(4, 3)
    yaw = torch.zeros(4)
    # facing -Z: ahead, to the left (-X), to the right (+X), behind
    goal = torch.tensor([[0, 0, -2.0], [-3.0, 0, 0], [1.0, 0, 0], [0, 0, 1.0]])
    pg = pointgoal_polar(pos, yaw, goal)
    assert torch.allclose(pg[:, 0], torch.tensor([2.0, 3.0, 1.0, 1.0]))
    # habitat: [rho, -phi] with phi = atan2(right, forward): a goal on the left is positive
    assert torch.allclose(pg[:3, 1], torch.tensor([0.0, math.pi / 2, -math.pi / 2]), atol=1e-6)
    assert abs(pg[3, 1].item()) == pytest.approx(math.pi)
    # turning left by 90 degrees puts the left goal straight ahead
    yaw = apply_turns(torch.zeros(1), torch.tensor([L]), TaskOptions(turn_degrees=90.0))
    assert torch.allclose(forward_vector(yaw), torch.tensor([[-1.0, 0, 0]]), atol=1e-6)
    pg = pointgoal_polar(torch.zeros(1, 3), yaw, torch.tensor([[-3.0, 0, 0]]))
    assert torch.allclose(pg, torch.tensor([[3.0, 0.0]]), atol=1e-6)


def test_quaternion_roundtrip_is_xyzw_about_y():
    yaw = torch.tensor([0.0, 0.3, -2.0, math.pi / 2])
    q = yaw_to_quat(yaw)
    assert torch.allclose(q[:, [0, 2]], torch.zeros(4, 2))
    assert torch.allclose(q[3], torch.tensor([0, math.sin(math.pi / 4), 0, math.cos(math.pi / 4)]))
    assert torch.allclose(quat_to_yaw(q), yaw, atol=1e-6)


# ------------------------------------------------------------------------------ scripted episodes
def _corridor_env(task=None, start=(0.525, 0, -0.525), goal=(0.525, 0, -2.525), yaw=0.0, n=1):
    eps = {"corridor": [episode(0, "corridor", start, goal, yaw)]}
    env = make_env([corridor()], num_envs=n, episodes=eps)
    if task is not None:
        env.task = task
    return env


def test_straight_corridor_forward_then_stop_succeeds_with_spl_1():
    env = _corridor_env()
    env.reset()
    info = env.last_info
    assert info["distance_to_goal"][0].item() == pytest.approx(2.0, abs=1e-4)
    rewards = []
    for _ in range(8):
        obs, r, d, info = env.step(torch.tensor([F]))
        assert not d[0]
        rewards.append(r[0].item())
    assert info["distance_to_goal"][0].item() == pytest.approx(0.0, abs=1e-4)
    assert info["position"][0].tolist() == pytest.approx([0.525, 0.0, -2.525], abs=1e-5)
    np.testing.assert_allclose(rewards, -0.01 + 0.25, atol=1e-4)
    obs, r, d, info = env.step(torch.tensor([S]))
    assert d[0] and info["success"][0] and not info["truncated"][0]
    assert r[0].item() == pytest.approx(-0.01 + 2.5, abs=1e-4)
    ep = info["episode"]
    assert ep["success"][0] and ep["spl"][0].item() == pytest.approx(1.0, abs=1e-4)
    assert ep["soft_spl"][0].item() == pytest.approx(1.0, abs=1e-4)
    assert ep["length"][0].item() == 9
    assert ep["return"][0].item() == pytest.approx(8 * 0.24 + 2.49, abs=1e-3)
    assert ep["path_length"][0].item() == pytest.approx(2.0, abs=1e-5)
    # automatic reset: the observation is the next episode's first (back at the start)
    assert info["position"][0].tolist() == pytest.approx([0.525, 0.0, -0.525], abs=1e-5)
    assert info["distance_to_goal"][0].item() == pytest.approx(2.0, abs=1e-4)
    env.close()


def test_detour_lowers_spl_and_early_stop_fails():
    env = _corridor_env()
    env.reset()
    # turn around, one step back, turn back (18 turns each way), then 9 forward, STOP
    acts = [L] * 18 + [F] + [L] * 18 + [F] * 9 + [S]
    for a in acts:
        obs, r, d, info = env.step(torch.tensor([a]))
    ep = info["episode"]
    assert d[0] and ep["success"][0]
    assert ep["path_length"][0].item() == pytest.approx(2.5, abs=1e-4)
    assert ep["spl"][0].item() == pytest.approx(2.0 / 2.5, abs=1e-3)
    assert ep["soft_spl"][0].item() == pytest.approx(2.0 / 2.5, abs=1e-3)
    # early STOP: done, no success, no bonus, SPL 0; soft SPL (1 - 1.75 / 2) * 2 / max(2, 0.25)
    obs, r, d, info = env.step(torch.tensor([F]))
    assert info["soft_spl"][0].item() == pytest.approx(0.125, abs=1e-4)    # running, as habitat's measure
    obs, r, d, info = env.step(torch.tensor([S]))
    assert d[0] and not info["success"][0] and info["episode"]["spl"][0] == 0
    assert info["episode"]["soft_spl"][0].item() == pytest.approx(0.125, abs=1e-4)
    assert r[0].item() == pytest.approx(-0.01, abs=1e-6)
    env.close()


def test_step_limit_truncates():
    env = _corridor_env(task=TaskOptions(max_episode_steps=5))
    env.reset()
    for i in range(5):
        obs, r, d, info = env.step(torch.tensor([L]))
        assert bool(d[0]) == (i == 4)
    assert info["truncated"][0] and not info["success"][0] and info["episode"]["length"][0] == 5
    env.close()


def test_challenge2021_rules_report_soft_spl():
    """The challenge2021 preset's PointNav rules (its agent aside: the corridor is built for 0.1 m)
    report habitat's SoftSPL in info and info["episode"]: the preset's docs promise SPL and soft SPL."""
    from bps_runtime.noise.presets import PRESETS

    rules = {k: v for k, v in PRESETS["challenge2021"]["task"].items()
             if k not in ("name", "agent_radius", "agent_height")}
    env = _corridor_env(task=TaskOptions(**rules))
    env.reset()
    assert env.last_info["soft_spl"][0] == 0 and env.last_info["episode"]["soft_spl"][0] == 0
    for a in [F] * 4 + [S]:   # 1 m of 2: soft success 0.5, the straight path
        obs, r, d, info = env.step(torch.tensor([a]))
    assert d[0] and not info["success"][0] and info["episode"]["spl"][0] == 0
    assert info["episode"]["soft_spl"][0].item() == pytest.approx(0.5, abs=1e-4)
    assert info["soft_spl"][0].item() == pytest.approx(0.5, abs=1e-4)
    env.close()


def test_step_limit_0_is_no_limit_as_habitat():
    """habitat-lab's Env._past_limit: max_episode_steps 0 ends no episode (it used to end each one
    after one step); 1 still ends every episode after its first step."""
    env = _corridor_env(task=TaskOptions(max_episode_steps=0))
    env.reset()
    for i in range(520):   # past the default's 500
        obs, r, d, info = env.step(torch.tensor([F if i < 40 else L if i % 2 else R]))
        assert not d[0] and not info["truncated"][0]
    assert info["position"][0][2].item() < -5.8   # walked to the corridor's end
    env.task = TaskOptions(max_episode_steps=1)
    obs, r, d, info = env.step(torch.tensor([L]))
    assert d[0] and info["truncated"][0] and info["episode"]["length"][0] == 521
    env.close()


def test_negative_forward_step_moves_backwards_as_habitat():
    """habitat-sim's move_forward by a negative amount moves the agent back (along +Z here)."""
    env = _corridor_env(task=TaskOptions(forward_step=-0.25))
    env.reset()
    obs, r, d, info = env.step(torch.tensor([F]))
    assert info["position"][0].tolist() == pytest.approx([0.525, 0.0, -0.275], abs=1e-5)
    assert r[0].item() == pytest.approx(-0.01 - 0.25, abs=1e-4)
    for _ in range(2):      # towards the wall at z = 0: stops at the navmesh's edge
        obs, r, d, info = env.step(torch.tensor([F]))
    assert -0.025 < info["position"][0][2].item() <= 1e-6
    env.close()


@pytest.mark.parametrize("bad", [{"forward_step": float("nan")}, {"turn_degrees": float("inf")},
                                 {"success_distance": float("nan")}, {"slack_reward": float("-inf")},
                                 {"success_reward": float("nan")}, {"agent_radius": float("nan")},
                                 {"agent_height": float("inf")}, {"forward_step": "0.25"},
                                 {"max_episode_steps": -1}, {"max_episode_steps": 2.5},
                                 {"max_episode_steps": True}])
def test_bad_task_options_raise_config_error_naming_the_option(bad):
    """Every float option must be finite (NaN used to pass make() and fail reset() with a raw
    ValueError), max_episode_steps an int >= 0: ConfigError when the options are built, also
    through ``env.task = replace(...)``."""
    import dataclasses

    (name, value), = bad.items()
    with pytest.raises(ConfigError, match=name):
        TaskOptions(**bad)
    env = _corridor_env()
    with pytest.raises(ConfigError, match=name):
        env.task = dataclasses.replace(env.task, **bad)
    env.close()


def test_wall_slides_like_the_navmesh():
    # 45 degrees to the right of -Z, 5 cm from the +X wall: the step slides along the wall
    env = _corridor_env(start=(0.925, 0, -3.025), goal=(0.525, 0, -5.025), yaw=-math.pi / 4)
    env.reset()
    p0 = env.last_info["position"][0].clone()
    obs, r, d, info = env.step(torch.tensor([F]))
    p1 = info["position"][0]
    nm = env.world.nav.scenes[0].navmesh
    end = (p0 + 0.25 * forward_vector(torch.tensor([-math.pi / 4]))[0]).double().numpy()
    ref = nm.try_step(p0.double().numpy(), end)
    assert p1.numpy() == pytest.approx(ref, abs=1e-5)
    assert p1[0].item() < 1.0 and p1[0].item() > 0.99          # against the wall
    assert p1[2].item() == pytest.approx(p0[2].item() - 0.25 * math.sqrt(0.5), abs=1e-3)
    # reward = slack + geodesic progress (the goal is ahead-left: progress is positive, < 0.25)
    assert -0.01 < r[0].item() < 0.24
    env.close()


# ------------------------------------------------------------------------------ batch behaviour
SCENES = None


def _scenes():
    global SCENES
    if SCENES is None:
        SCENES = [room("a", 4.0, 5.0, pillars=[(1.5, -3.0, 2.5, -2.0)]), room("b", 3.0, 6.0)]
    return SCENES


def _run(env, steps, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = [env.reset()]
    for _ in range(steps):
        a = torch.randint(0, 4, (env.batch_size,), generator=g)
        out.append(env.step(a))
    return out


def _flat(x):
    if isinstance(x, dict):
        return [v for k in sorted(x) for v in _flat(x[k])]
    if isinstance(x, (list, tuple)):
        return [v for e in x for v in _flat(e)]
    return [x]


def _same(a, b):
    fa, fb = _flat(a), _flat(b)
    assert len(fa) == len(fb)
    for x, y in zip(fa, fb):
        if isinstance(x, torch.Tensor):
            assert torch.equal(x, y)
        else:
            assert x == y


def test_deterministic_for_a_seed():
    e1, e2, e3 = (make_env(_scenes(), num_envs=6, seed=s) for s in (3, 3, 4))
    r1, r2, r3 = _run(e1, 25), _run(e2, 25), _run(e3, 25)
    _same(r1, r2)
    assert not torch.equal(r1[0]["pointgoal"], r3[0]["pointgoal"])
    for e in (e1, e2, e3):
        e.close()


def test_send_recv_equals_step():
    a_env = make_env(_scenes(), num_envs=6, seed=1)
    b_env = make_env(_scenes(), num_envs=6, batch_size=3, seed=1)
    oa, ob = a_env.reset(), b_env.reset()
    _same(oa, ob)
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        a = torch.randint(0, 4, (6,), generator=g)
        ra = a_env.step(a)
        b_env.send(a[:3])
        b_env.send(a[3:], env_id=torch.arange(3, 6))
        r0, r1 = b_env.recv(), b_env.recv()
        assert r0[3]["env_id"].tolist() == [0, 1, 2] and r1[3]["env_id"].tolist() == [3, 4, 5]
        for k in ra[0]:
            assert torch.equal(ra[0][k], torch.cat([r0[0][k], r1[0][k]]))
        for j in (1, 2):
            assert torch.equal(ra[j], torch.cat([r0[j], r1[j]]))
        for k in ("position", "rotation", "distance_to_goal", "success", "spl"):
            assert torch.equal(ra[3][k], torch.cat([r0[3][k], r1[3][k]]))
    a_env.close()
    b_env.close()


def test_async_reset_then_recv_send_loop():
    env = make_env(_scenes(), num_envs=4, batch_size=2, seed=0)
    env.async_reset()
    seen = []
    for _ in range(6):
        obs, r, d, info = env.recv()
        seen.append(info["env_id"].tolist())
        with pytest.raises(ConfigError, match="dtype"):   # a bad call does not lose the group
            env.send(torch.zeros(2), info["env_id"])
        env.send(torch.full((2,), F), info["env_id"])
    assert seen == [[0, 1], [2, 3]] * 3
    with pytest.raises(ConfigError, match="still"):
        env.send(torch.full((2,), F), torch.tensor([0, 1]))
    env.close()


def test_bad_actions_raise_precise_errors():
    env = make_env(_scenes(), num_envs=4, seed=0)
    env.reset()
    with pytest.raises(ConfigError, match="dtype torch.float32"):
        env.step(torch.zeros(4))
    with pytest.raises(ConfigError, match=r"shape \(3,\), expected \(4,\)"):
        env.step(torch.zeros(3, dtype=torch.long))
    with pytest.raises(ConfigError, match="device meta"):
        env.step(torch.zeros(4, dtype=torch.long, device="meta"))
    with pytest.raises(ConfigError, match="values must be in 0..3"):
        env.step(torch.tensor([0, 1, 2, 7]))
    with pytest.raises(ConfigError, match="dtype float64"):
        env.step(np.zeros(4))
    with pytest.raises(ConfigError, match="torch tensor"):
        env.step("forward")
    # good ones still work after the errors: int32 torch, numpy int, [N,1]
    env.step(torch.ones(4, dtype=torch.int32))
    env.step(np.ones(4, np.int64))
    env.step(torch.ones(4, 1, dtype=torch.long))
    env.close()


def test_info_matches_what_was_rendered():
    env = make_env(_scenes(), num_envs=6, seed=2, sensors=("depth", "rgb"), resolution=(24, 32))
    res = _run(env, 12)
    obs, r, d, info = res[-1]
    direct = env.world.renderer.render(info["scene_index"], info["position"], info["rotation"], ("depth", "rgb"))
    assert torch.equal(direct["depth"], obs["depth"]) and torch.equal(direct["rgb"], obs["rgb"])
    assert obs["depth"].shape == (6, 24, 32, 1) and obs["rgb"].shape == (6, 24, 32, 3)
    assert obs["rgb"].dtype == torch.uint8 and float(obs["depth"].max()) <= 1.0
    assert set(info["scene_id"]) <= {"a", "b"}
    # geodesic distance in info is the NavMesh's own for that position and goal
    nav = env.world.nav
    for i in range(6):
        k = int(info["scene_index"][i])
        nm = nav.scenes[k].navmesh
        goal = env.state.goal[i].double().numpy()
        p = info["position"][i].double().numpy()
        ref = nm.distance_at(nm.distance_field(goal), p)
        assert info["distance_to_goal"][i].item() == pytest.approx(float(ref), abs=1e-4)
        # and geodesic_distance (field from the other end) agrees within its accuracy
        assert info["distance_to_goal"][i].item() == pytest.approx(float(nm.geodesic_distance(p, goal)), rel=0.02)
    env.close()


def test_spaces_need_no_environment():
    from bps_runtime import action_space, observation_space

    space = observation_space(num_envs=8, sensors=("depth", "rgb"), resolution=(32, 48), batch_size=4)
    assert space["depth"].shape == (4, 32, 48, 1) and space["rgb"].shape == (4, 32, 48, 3)
    assert space["pointgoal"].shape == (4, 2)
    assert action_space(num_envs=8).shape == (8,)
    env = make_env(_scenes(), num_envs=4, seed=0, sensors=("depth",), resolution=(16, 16))
    assert env.single_observation_space["depth"].shape == (16, 16, 1)
    assert env.single_action_space.n == 4
    obs = env.reset()
    assert env.observation_space.contains({k: v.numpy() for k, v in obs.items()})
    env.close()


def test_gym_vector_adapter_loop():
    from bps_runtime.env.gym_adapter import GymVectorEnv

    env = GymVectorEnv(make_env(_scenes(), num_envs=4, seed=0))
    obs, info = env.reset(seed=5)
    assert obs["depth"].shape == (4, 16, 16, 1) and isinstance(obs["depth"], np.ndarray)
    for _ in range(10):
        obs, rew, term, trunc, info = env.step(env.action_space.sample())
        assert rew.shape == (4,) and term.dtype == bool and trunc.dtype == bool
        assert "episode" in info and info["position"].shape == (4, 3)
    env.close()


def test_dataset_episodes_cycle_without_leaking_field_rows():
    eps = {"corridor": [episode(i, "corridor", (0.525, 0, -0.525 - 0.5 * i), (0.525, 0, -5.0)) for i in range(3)]}
    env = make_env([corridor()], num_envs=4, episodes=eps)
    env.reset()
    fields = env.world.nav.fields[0]
    for _ in range(40):  # every agent ends an episode every step: 160 episodes over 3 dataset entries
        obs, r, d, info = env.step(torch.full((4,), S))
        assert d.all()
    assert sorted(set(env.episode_ids)) <= ["0", "1", "2"]
    # duplicate preparations give their rows back when they finish, on the field worker's one
    # thread: a no-op queued behind them returns once all of them (and their callbacks) ran
    env.world.episodes.worker.run(lambda: None).result()
    live = int((fields.refs > 0).sum())
    assert live <= 3 and fields.table.shape[0] <= 96      # memo rows only; nothing grew
    # starts are the dataset's: each agent stands where its episode says
    for i in range(4):
        k = int(env.episode_ids[i])
        assert info["position"][i].tolist() == pytest.approx([0.525, 0.0, -0.525 - 0.5 * k], abs=1e-5)
    env.close()
