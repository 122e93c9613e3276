"""The fused ObjectNav and ImageNav steps (bps_runtime.tasks.goalnav) against the numpy reference of
their rules (tests/nav_task_reference.py), env by env, over > 10,000 env steps each: LOOK_UP /
LOOK_DOWN (pitch clamped), sliding off at walls and pillars (ObjectNav) and on (ImageNav),
STOP on and off a view point, truncation and automatic resets in two scenes (a room with a
pillar, a house with stairs). Distances are the step's geodesic rule on the same field rows
(``nav_task_reference.geodesic``); moves are ``NavMesh.try_step`` (sliding off / on). Also: the observations
(compass, gps, objectgoal, the camera pitch in ``rotation``, ImageNav's goal image)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import nav_task_reference as ref
from bps_assets.nav.imagenav import goal_heading
from bps_runtime.tasks import imagenav, objectnav
from bps_runtime.episodes.dataset import EpisodeGoal
from inmemory_scenes import episode, house_scene, make_env, room

TOL = 1e-5
STEPS_PER_ENV = 40


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def _scenes():
    return [room("r0", 4.0, 6.0, pillars=[(1.0, -3.0, 2.5, -2.0)]), house_scene("house")]


def _episodes(scenes, objectnav_task: bool, per_scene=12, seed=0):
    """Per scene: two categories of three view points each; starts one MOVE_FORWARD (0.25 m)
    behind a view point, facing it, or 1-3 m away at random."""
    rng = np.random.default_rng(seed)
    out, goals = {}, {}
    for name, _, _, _, nm in scenes:
        vps = np.asarray(nm.sample_navigable_point(6, seed=seed + len(name)), np.float64)
        eps = []
        for i in range(per_scene):
            cat = i % 2
            pts = vps[3 * cat:3 * cat + 3]
            v = pts[i % 3]
            yaw = float(rng.uniform(-math.pi, math.pi))
            if i % 3 == 2:
                start = np.asarray(nm.sample_navigable_point(1, seed=seed + 100 + i), np.float64)[0]
            else:
                start = v + 0.25 * np.array([math.sin(yaw), 0.0, math.cos(yaw)])
            e = episode(f"{name}-{i}", name, start, v, yaw)
            if objectnav_task:
                goals.setdefault(name, {})[e["episode_id"]] = EpisodeGoal(pts, f"{name}_{cat}", 4 + cat)
            eps.append(e)
        out[name] = eps
    return out, goals


def _rules(o) -> ref.Rules:
    look = o.tilt_degrees > 0
    return ref.Rules(forward_step=o.forward_step, turn_deg=o.turn_degrees, tilt_deg=o.tilt_degrees,
                     max_pitch_deg=o.max_pitch_degrees, sliding=o.sliding, success_distance=o.success_distance,
                     max_steps=o.max_episode_steps, look_actions=look)


class Agent:
    """One env's reference, re-synchronized to the kernel's float32 pose after each step."""

    def __init__(self, env, e, rules):
        self.env, self.e, self.rules = env, e, rules

    def start(self, kernel_distance):
        st, e = self.env.state, self.e
        si, row = int(st.scene_index[e]), int(st.row[e])
        nav = self.env.world.nav
        scene, field, goals = nav.scenes[si], nav.fields[si].host[row], nav.fields[si].near[row]
        nm = scene.navmesh
        near = ref.gate(self.rules.success_distance)
        dist = lambda p: float(ref.geodesic(scene, field, p[None], goals, near)[0])  # noqa: E731
        mv = lambda a, b: np.asarray(nm.try_step(a[None], b[None], sliding=self.rules.sliding), np.float64)[0]  # noqa: E731
        self.t = ref.TaskReference(self.rules, dist, mv)
        m = self.t.reset(st.pos[e].double().numpy(), float(st.yaw[e]))
        assert m["distance_to_goal"] == pytest.approx(float(kernel_distance), abs=TOL)
        self.steps = 0

    def sync(self):
        st, e = self.env.state, self.e
        kpos = st.pos[e].double().numpy()
        assert np.abs(self.t.pos - kpos).max() < TOL, (self.t.pos, kpos)
        if np.array_equal(self.t.measured_at, self.t.pos):
            self.t.measured_at = kpos.copy()
        self.t.pos = kpos
        self.t.yaw = float(st.yaw[e])


def _policy(agents, gen, n, look):
    """Even envs: MOVE_FORWARD then STOP at an episode's start (onto / off a view point); the
    rest at random with few STOPs."""
    k = 6 if look else 4
    a = torch.randint(1, k, (n,), generator=gen)
    a[torch.rand(n, generator=gen) < 0.03] = 0
    for i, ag in enumerate(agents):
        if i % 2 == 0 and ag.steps < 2:
            a[i] = (ref.MOVE_FORWARD, ref.STOP)[ag.steps]
    return a


def _run(task_options, sensors=("depth",), num_envs=16, check=None, episodes=None):
    """``episodes(scenes)`` -> (episodes, goals): a task's own (default: ``_episodes``)."""
    scenes = _scenes()
    is_obj = task_options.tilt_degrees > 0
    eps, goals = _episodes(scenes, is_obj) if episodes is None else episodes(scenes)
    env = make_env(scenes, num_envs=num_envs, episodes=eps, goals=goals, task=task_options,
                   sensors=sensors, goal_pool=8)
    rules = _rules(task_options)
    gen = torch.Generator().manual_seed(0)
    counts = {"steps": 0, "success": 0, "stop_off": 0, "truncated": 0, "blocked": 0, "look": 0}
    try:
        env.reset()
        agents = [Agent(env, e, rules) for e in range(num_envs)]
        for ag in agents:
            ag.start(env.last_info["distance_to_goal"][ag.e])
        for _ in range(STEPS_PER_ENV * 16):
            a = _policy(agents, gen, num_envs, is_obj)
            before = env.state.pos.clone()
            obs, r, done, info = env.step(a)
            for ag in agents:
                e, act = ag.e, int(a[ag.e])
                m = ag.t.step(act)
                ag.steps += 1
                counts["steps"] += 1
                counts["look"] += act in (ref.LOOK_UP, ref.LOOK_DOWN)
                assert float(r[e]) == pytest.approx(m["reward"], abs=TOL)
                assert bool(done[e]) == m["done"]
                if m["done"]:
                    epi = info["episode"]
                    assert float(epi["success"][e]) == m["success"]
                    assert float(epi["spl"][e]) == pytest.approx(m["spl"], abs=TOL)
                    assert float(epi["soft_spl"][e]) == pytest.approx(m["soft_spl"], abs=TOL)
                    assert float(epi["distance_to_goal"][e]) == pytest.approx(m["distance_to_goal"], abs=TOL)
                    counts["success"] += int(m["success"])
                    counts["stop_off"] += int(act == ref.STOP and not m["success"])
                    counts["truncated"] += int(bool(info["truncated"][e]))
                    ag.start(info["distance_to_goal"][e])
                else:
                    assert float(info["soft_spl"][e]) == pytest.approx(m["soft_spl"], abs=TOL)
                    assert float(info["distance_to_goal"][e]) == pytest.approx(m["distance_to_goal"], abs=TOL)
                    assert float(env.state.pitch[e]) == pytest.approx(ag.t.pitch, abs=TOL)
                    moved = float(torch.linalg.vector_norm(env.state.pos[e] - before[e]))
                    counts["blocked"] += int(act == ref.MOVE_FORWARD and moved < 0.2)
                    ag.sync()
                    if check is not None:
                        check(env, obs, info, ag)
    finally:
        env.close()
    return counts


def _check_objectnav_obs(env, obs, info, ag):
    e, st = ag.e, env.state
    dy = float(st.yaw[e]) - float(st.start_yaw[e]) - float(obs["compass"][e, 0])
    assert abs(math.remainder(dy, 2 * math.pi)) < 1e-4 and abs(float(obs["compass"][e, 0])) <= math.pi + 1e-6
    d = (st.pos[e] - st.start_pos[e]).double().numpy()
    c, s = math.cos(float(st.start_yaw[e])), math.sin(float(st.start_yaw[e]))
    # habitat's EpisodicGPSSensor: the position in the start frame, as [-z, x]
    assert obs["gps"][e].double().numpy() == pytest.approx([-(s * d[0] + c * d[2]), c * d[0] - s * d[2]], abs=1e-4)
    assert int(obs["objectgoal"][e, 0]) in (4, 5)
    p = float(st.pitch[e])
    q = info["rotation"][e].double().numpy()
    fwd = np.array([-2 * (q[0] * q[2] + q[1] * q[3]), -2 * (q[1] * q[2] - q[0] * q[3]), -(1 - 2 * (q[0] ** 2 + q[1] ** 2))])
    assert math.asin(np.clip(fwd[1], -1, 1)) == pytest.approx(p, abs=1e-4)   # the camera looks up by the pitch


def test_objectnav_equals_reference():
    o = objectnav.TaskOptions(max_episode_steps=STEPS_PER_ENV)
    c = _run(o, check=_check_objectnav_obs)
    assert c["steps"] >= 10_000
    assert c["success"] >= 20 and c["stop_off"] >= 20 and c["truncated"] >= 20
    assert c["blocked"] >= 20 and c["look"] >= 1000


@pytest.mark.parametrize("success_distance", [0.2, imagenav.BENCHMARK_SUCCESS_DISTANCE])
def test_imagenav_equals_reference(success_distance):
    o = imagenav.TaskOptions(max_episode_steps=STEPS_PER_ENV, success_distance=success_distance)
    c = _run(o, sensors=("rgb",))
    assert c["steps"] >= 10_000
    assert c["success"] >= 20 and c["stop_off"] >= 10 and c["truncated"] >= 20


def _goal_render(env, goal, yaw):
    """The batch renderer's RGB of every env's scene at ``goal`` [N, 3] facing ``yaw`` [N]."""
    yaw = np.asarray(yaw, np.float64)
    rot = torch.tensor(np.stack([0 * yaw, np.sin(yaw / 2), 0 * yaw, np.cos(yaw / 2)], 1), dtype=torch.float32)
    pos = torch.as_tensor(np.asarray(goal, np.float32))
    return env.world.render(env.state.scene_index.long(), pos, rot, ("rgb",))["rgb"].to(torch.uint8)


@pytest.mark.parametrize("budget_images", [None, 3])
def test_imagenav_goal_image_is_the_render_at_the_goal(budget_images):
    """The goal image equals the batch renderer's RGB at the goal (+ sensor height) facing
    ``goal_heading(episode id)``, for the episodes running after resets, also when it comes from
    the goal-image cache (dataset episodes repeat: hits); a small budget evicts and is kept."""
    scenes = _scenes()
    pixels = 16 * 16 * 3
    task = imagenav.DEFAULTS if budget_images is None else imagenav.TaskOptions(goal_cache_bytes=budget_images * pixels + 5)
    env = make_env(scenes, num_envs=4, episodes=_episodes(scenes, False)[0], task=task, sensors=("rgb",))
    by_id = {e["episode_id"]: e for eps in _episodes(scenes, False)[0].values() for e in eps}
    cache = env.host_hook.cache
    try:
        obs = env.reset()
        gen = torch.Generator().manual_seed(1)
        for t in range(80):
            obs, _, _, _ = env.step(torch.randint(0, 4, (4,), generator=gen))
            assert cache.nbytes <= task.goal_cache_bytes and len(cache) * pixels <= task.goal_cache_bytes
            if t % 8 == 7:
                ids = env.episode_ids
                want = _goal_render(env, [by_id[i]["goals"][0]["position"] for i in ids], [goal_heading(i) for i in ids])
                assert torch.equal(obs["imagegoal"], want)
                assert obs["imagegoal"].float().std() > 0
        episodes = env.stats["episodes"]
        assert episodes > 2 * len(by_id)          # every episode ran more than once
        if budget_images is None:
            assert cache.hits > 0 and env.host_hook.rendered == cache.misses == len(cache) <= len(by_id)
            assert cache.evictions == 0
        else:
            assert len(cache) == budget_images and cache.evictions > 0
            assert env.host_hook.rendered > len(by_id)
        env.task = imagenav.TaskOptions(goal_cache_bytes=0)      # no cache: every goal image rendered
        assert len(cache) == 0 and cache.nbytes == 0
        rendered = env.host_hook.rendered
        for _ in range(8):
            obs, *_ = env.step(torch.randint(0, 4, (4,), generator=gen))
        ids = env.episode_ids
        want = _goal_render(env, [by_id[i]["goals"][0]["position"] for i in ids], [goal_heading(i) for i in ids])
        assert torch.equal(obs["imagegoal"], want) and len(cache) == 0 and env.host_hook.rendered > rendered
    finally:
        env.close()


@pytest.mark.parametrize("goal_views", [3, 0])
def test_imagenav_sampled_goal_views(goal_views):
    """Sampled episodes view their pool goal at one of its ``goal_views`` headings (0: at
    ``goal_heading(episode id)``): the goal image equals the render there, the same for a seed,
    and with goal views a scene renders at most goal_pool x goal_views goal images."""
    scenes, n, pool = _scenes(), 8, 4
    envs = [make_env(scenes, num_envs=n, task=imagenav.DEFAULTS, sensors=("rgb",), goal_pool=pool,
                     goal_views=goal_views) for _ in range(2)]
    gen = torch.Generator().manual_seed(2)
    try:
        for env in envs:
            env.reset()
        for t in range(40):
            a = torch.randint(0, 4, (n,), generator=gen)
            (o1, *_), (o2, *_) = (env.step(a) for env in envs)
            assert torch.equal(o1["imagegoal"], o2["imagegoal"])
            if t % 8 == 7:
                env, sup = envs[0], envs[0].world.episodes
                goal, yaw = [], []
                for e, eid in enumerate(env.episode_ids):
                    st = sup.scenes[int(env.state.scene_index[e])]
                    ep = sup._draw(st, int(eid.rsplit(":", 1)[1]), 1)   # the episode, drawn again
                    goal.append(ep.goal[0])
                    if goal_views:
                        g = int(np.flatnonzero((st.ready_pool["goals"].astype(np.float32) == ep.goal[0]).all(1))[0])
                        assert ep.heading[0] in st.ready_pool["views"][g]
                        yaw.append(ep.heading[0])
                    else:
                        assert ep.heading is None
                        yaw.append(goal_heading(eid))
                assert torch.equal(o1["imagegoal"], _goal_render(env, goal, yaw))
                # the goal query (videos, tools) reports the heading the image was rendered at
                got = env.episode_goals()
                assert [d["goal_heading"] for d in got] == [float(y) for y in yaw]
                np.testing.assert_array_equal([d["goal_position"] for d in got], np.asarray(goal, np.float32))
        gi = envs[0].host_hook
        if goal_views:
            assert gi.rendered == len(gi.cache) <= len(scenes) * pool * goal_views and gi.cache.hits > gi.rendered
        else:
            from bps_runtime.step.fused import QUEUE_DEPTH
            assert gi.rendered == envs[0].stats["episodes"] + n * QUEUE_DEPTH   # one per episode queued
    finally:
        for env in envs:
            env.close()


def test_goal_image_cache_lru_and_budget():
    from bps_assets.errors import ConfigError
    from bps_runtime.tasks.goal_images import GoalImageCache

    c = GoalImageCache(4, budget_bytes=11)          # 2 images of 4 bytes
    img = lambda v: torch.full((1, 4), v, dtype=torch.uint8)  # noqa: E731
    c.insert(["a"], img(1))
    c.insert(["b"], img(2))
    assert c.lookup(["a"]).tolist() != [-1]         # a is now the most recently used
    c.insert(["c"], img(3))                         # evicts b
    rows = c.lookup(["a", "b", "c"])
    assert rows[1] == -1 and c.pool[rows[0]].tolist() == [1] * 4 and c.pool[rows[2]].tolist() == [3] * 4
    assert c.nbytes <= 11 and len(c) == 2 and c.evictions == 1 and (c.hits, c.misses) == (3, 1)
    c.insert(["d", "e"], torch.cat([img(4), img(5)]))
    assert c.lookup(["a", "c"]).tolist() == [-1, -1] and len(c) == 2 and c.nbytes <= 11
    c.set_budget(0)
    assert len(c) == 0 and c.nbytes == 0 and c.capacity == 0 and c.lookup(["e"]).tolist() == [-1]
    with pytest.raises(ConfigError, match="goal_cache_bytes"):
        GoalImageCache(4, budget_bytes=-1)
    from bps_runtime.episodes import SupplyOptions
    with pytest.raises(ConfigError, match="goal_views"):
        SupplyOptions(goal_views=-1)


def test_task_spaces_and_actions():
    from bps_runtime import make  # noqa: F401 - the front door's module imports
    from bps_runtime.env.make import action_space, observation_space

    s = observation_space(4, sensors=("depth",), resolution=(8, 8), task="objectnav")
    assert set(s.keys()) == {"depth", "objectgoal", "compass", "gps"}
    assert action_space(4, task="objectnav").nvec.tolist() == [6] * 4
    assert action_space(4, task="imagenav").nvec.tolist() == [4] * 4
    s = observation_space(4, sensors=("rgb",), resolution=(8, 8), task="imagenav")
    assert s["imagegoal"].shape == (4, 8, 8, 3)


def test_objectnav_equals_reference_across_scene_swaps(tmp_path):
    """``make(task="objectnav")`` on synth semantic scenes (sampled episodes, view-point fields)
    with 2 cache slots for 3 scenes swapping every 10 rounds: every step still equals the
    reference (the field of each episode read where the episode started)."""
    from click.testing import CliRunner

    from bps_runtime import make
    from cli.main import main

    src, out = tmp_path / "src", tmp_path / "out"
    for args in (["synth", src, "--layout", "mp3d", "-n", 4, "--semantic"],
                 ["preprocess", src, "-o", out, "--dataset", "mp3d", "--split", "benchmark", "--workers", 1,
                  "--agent-radius", 0.18, "--agent-height", 0.88]):
        r = CliRunner().invoke(main, [str(a) for a in args])
        assert r.exit_code == 0, r.output
    o = objectnav.TaskOptions(max_episode_steps=STEPS_PER_ENV)
    env = make(out, split="train", task=o, num_envs=8, resolution=(8, 8), seed=1,
               cache={"slots": 2, "swap_every": 10})
    rules = _rules(o)
    gen = torch.Generator().manual_seed(2)
    seen, steps = set(), 0
    try:
        env.reset()
        agents = [Agent(env, e, rules) for e in range(8)]
        for ag in agents:
            ag.start(env.last_info["distance_to_goal"][ag.e])
        for _ in range(150):
            a = _policy(agents, gen, 8, True)
            _, r, done, info = env.step(a)
            seen.update(info["scene_id"])
            for ag in agents:
                m = ag.t.step(int(a[ag.e]))
                ag.steps += 1
                steps += 1
                assert float(r[ag.e]) == pytest.approx(m["reward"], abs=TOL)
                assert bool(done[ag.e]) == m["done"]
                if m["done"]:
                    assert float(info["episode"]["soft_spl"][ag.e]) == pytest.approx(m["soft_spl"], abs=TOL)
                    assert float(info["episode"]["spl"][ag.e]) == pytest.approx(m["spl"], abs=TOL)
                    ag.start(info["distance_to_goal"][ag.e])
                else:
                    assert float(info["distance_to_goal"][ag.e]) == pytest.approx(m["distance_to_goal"], abs=TOL)
                    ag.sync()
    finally:
        env.close()
    assert len(seen) == 3 and steps == 1200


def test_task_config_round_trip_and_bad_task():
    from bps_assets.errors import ConfigError
    from bps_runtime.env.config import EnvConfig

    for name, opts in (("objectnav", objectnav.TaskOptions(max_pitch_degrees=None)), ("imagenav", "imagenav")):
        c = EnvConfig.from_kwargs("m.json", task=opts)
        d = c.to_dict()
        assert d["task_name"] == name and EnvConfig.from_dict(d) == c
    assert EnvConfig.from_kwargs("m.json", task="imagenav").task == imagenav.DEFAULTS
    with pytest.raises(ConfigError, match="choose from"):
        EnvConfig.from_kwargs("m.json", task="vln")
    with pytest.raises(ConfigError, match="TaskOptions"):
        EnvConfig.from_kwargs("m.json", task=object())


def test_goalnav_step_limit_0_is_no_limit_and_a_negative_step_moves_back():
    """habitat-lab's Env._past_limit: max_episode_steps 0 ends no episode (ObjectNav / ImageNav's
    step); a negative forward_step moves the agent back (habitat-sim's move_forward)."""
    scenes = _scenes()[:1]
    eps, goals = _episodes(scenes, True, per_scene=2)
    env = make_env(scenes, num_envs=1, episodes=eps, goals=goals, task=objectnav.TaskOptions(max_episode_steps=0))
    try:
        env.reset()
        for i in range(510):    # past ObjectNav's 500
            obs, r, d, info = env.step(torch.tensor([ref.TURN_LEFT if i % 2 else ref.TURN_RIGHT]))
            assert not d[0] and not info["truncated"][0]
        env.task = objectnav.TaskOptions(max_episode_steps=0, forward_step=-0.25)
        p0, y0 = env.state.pos[0].clone(), float(env.state.yaw[0])
        obs, r, d, info = env.step(torch.tensor([ref.MOVE_FORWARD]))
        back = p0.double().numpy() - 0.25 * ref.forward_vector(y0)
        want = env.world.nav.scenes[0].navmesh.try_step(p0.double().numpy(), back, sliding=False)
        assert info["position"][0].double().numpy() == pytest.approx(want, abs=1e-5)
        assert np.dot(want - p0.double().numpy(), ref.forward_vector(y0)) < -0.05   # it did move back
    finally:
        env.close()


def _noisy_goal_images(kind, seed, steps=16):
    """(goal images, their noiseless renders) of an ImageNav env with RGB noise ``kind``, per step."""
    scenes = _scenes()
    eps = _episodes(scenes, False)[0]
    by_id = {e["episode_id"]: e for v in eps.values() for e in v}
    env = make_env(scenes, num_envs=4, episodes=eps, task=imagenav.DEFAULTS, sensors=("rgb",),
                   noise={"rgb": kind}, seed=seed)
    noisy, clean = [], []
    try:
        obs = env.reset()
        gen = torch.Generator().manual_seed(1)
        for _ in range(steps):
            ids = env.episode_ids
            clean.append(_goal_render(env, [by_id[i]["goals"][0]["position"] for i in ids], [goal_heading(i) for i in ids]))
            noisy.append(obs["imagegoal"].clone())
            obs, *_ = env.step(torch.randint(0, 4, (4,), generator=gen))
        assert env.stats["episodes"] > 8     # new episodes started (each gets its goal image's draw)
    finally:
        env.close()
    return torch.stack(noisy), torch.stack(clean)


@pytest.mark.parametrize("kind", ["gaussian", "salt_pepper"])
def test_imagenav_goal_image_gets_the_rgb_sensors_noise(kind):
    """habitat-lab's ImageGoalSensor renders the goal through the agent's RGB sensor (nav.py
    get_observations_at -> the sensor's get_observation, which applies its noise model): the
    goal image is the noiseless render with the sensor's noise, seeded by the run's seed."""
    noisy, clean = _noisy_goal_images(kind, seed=0)
    changed = noisy != clean
    if kind == "salt_pepper":    # 5% of the channels set to 0 or 255, the rest exact
        assert torch.isin(noisy[changed], torch.tensor([0, 255], dtype=torch.uint8)).all()
        assert 0.02 < changed.float().mean() < 0.07
    else:                        # intensity 0.2: N(0, 51^2) on 0-255 (clamped, truncated to uint8)
        mid = (clean > 64) & (clean < 192)
        diff = noisy.float() - clean.float()
        assert changed.float().mean() > 0.9 and mid.sum() > 1000
        assert 40 < float(diff[mid].std()) < 56 and abs(float(diff[mid].mean())) < 5
    again, _ = _noisy_goal_images(kind, seed=0)
    assert torch.equal(again, noisy)             # a seed reproduces it
    other, other_clean = _noisy_goal_images(kind, seed=1)
    same = (other_clean == clean).flatten(2).all(-1)    # [step, env]: the same goal view
    assert same.sum() > 0 and not (other[same] == noisy[same]).all()   # another seed, another draw
