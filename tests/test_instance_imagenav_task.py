"""The InstanceImageNav task (bps_runtime/tasks/instance_imagenav.py): its step against the numpy
reference of habitat's rules (tests/nav_task_reference.py), its goal image against a renderer
built with the episode's own camera (in memory, and for a habitat-lab-written episode file on a
dataset made as a user makes it), ``make(task="instance_imagenav")`` with generated episodes and
``bps-train --task instance_imagenav``."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import nav_task_reference as ref
from bps_assets.nav.instance_imagenav_files import make_image_goal
from bps_assets.nav.pose import yaw_pitch_quaternion
from bps_runtime.render import RenderOptions, make_renderer
from bps_runtime.tasks import instance_imagenav as iin
from inmemory_scenes import make_env
from test_goalnav_step import STEPS_PER_ENV, _episodes, _rules, _run, _scenes
from test_objectnav_make import _cli


def _cameras(scenes, dims=(16, 16), other=None):
    """``_episodes``' ObjectNav-like episodes, each with one goal camera 1.5 m from its goal point
    looking at it (HFOV 50-110); every third has the image size ``other`` when given."""
    eps, goals = _episodes(scenes, True)
    for name, scene_eps in eps.items():
        for i, e in enumerate(scene_eps):
            v = np.array(e["goals"][0]["position"])
            a = 0.7 * i
            eye = v + [1.5 * math.sin(a), 1.2, 1.5 * math.cos(a)]
            to = v - eye
            yaw, pitch = math.atan2(-to[0], -to[2]), math.atan2(to[1], math.hypot(to[0], to[2]))
            size = other if (other and i % 3 == 0) else dims
            cam = make_image_goal(eye, yaw_pitch_quaternion(yaw, pitch), 50 + 20 * (i % 4), size)
            e["goals"][0]["image_goals"] = [make_image_goal([0, 0, 0], [0, 0, 0, 1], 90, size), cam]
            e["goal_image_id"], e["goal_object_id"] = 1, str(i % 2)
    return eps, goals


def test_defaults_are_habitats_rules():
    assert _rules(iin.DEFAULTS) == ref.INSTANCE_IMAGENAV
    o = iin.DEFAULTS
    c = iin.CAMERA
    assert (o.agent_height, o.agent_radius, c["sensor_height"], c["hfov_deg"], c["min_depth"], c["max_depth"]) == \
        (1.41, 0.17, 1.31, 42.0, 0.5, 5.0)
    assert iin.ACTION_NAMES == ("STOP", "MOVE_FORWARD", "TURN_LEFT", "TURN_RIGHT", "LOOK_UP", "LOOK_DOWN")


def test_step_equals_reference():
    o = iin.TaskOptions(max_episode_steps=STEPS_PER_ENV)
    c = _run(o, sensors=("rgb",), episodes=_cameras)
    assert c["steps"] >= 10_000
    assert c["success"] >= 20 and c["stop_off"] >= 20 and c["truncated"] >= 20
    assert c["blocked"] >= 20 and c["look"] >= 1000


def _direct(scene, cam, resolution=None):
    """uint8 [H, W, 3]: a renderer built with the camera's image size and HFOV, at its pose."""
    name, shading, pos, idx, _ = scene
    h, w = cam["image_dimensions"]
    r = make_renderer("embree", RenderOptions(resolution=(h, w), hfov_deg=cam["hfov"], sensor_height=0.0))
    r.attach(0, shading, r.prepare(shading, pos, idx))
    img = r.render([0], np.array([cam["position"]]), np.array([cam["rotation"]]), ("rgb",))["rgb"]
    if resolution is not None and tuple(resolution) != (h, w):   # the env shows it at its sensors' size
        img = torch.nn.functional.interpolate(img.permute(0, 3, 1, 2).float(), size=resolution, mode="area")
        img = img.round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1)
    return img[0]


@pytest.mark.parametrize("budget_images, noise", [(None, None), (2, None), (None, {"rgb": "gaussian"})])
def test_goal_image_is_the_render_at_its_camera(budget_images, noise):
    """The goal camera's render, also with RGB sensor noise on: habitat-lab's InstanceImageGoalSensor
    renders through a camera of its own (instance_image_nav_task.py _add_sensor: a CameraSensorSpec
    without a noise model; habitat-sim's default is "None"), unlike ImageNav's goal image."""
    scenes = _scenes()
    eps, goals = _cameras(scenes, dims=(16, 16), other=(24, 20))
    o = iin.TaskOptions(max_episode_steps=3)
    if budget_images is not None:
        o = iin.TaskOptions(max_episode_steps=3, goal_cache_bytes=budget_images * 16 * 16 * 3)
    env = make_env(scenes, num_envs=6, episodes=eps, goals=goals, task=o, sensors=("rgb",), noise=noise)
    by_name = {s[0]: s for s in scenes}
    try:
        obs = env.reset()
        assert "imagegoal" not in obs and obs["instance_imagegoal_hfov"].dtype == torch.float32
        seen, hfovs = 0, set()
        gen = torch.Generator().manual_seed(1)
        for _ in range(8):
            for e, g in enumerate(env.episode_goals()):
                cam = g["image_goal"]
                assert cam == g["goals"][0]["image_goals"][g["goal_image_id"]]
                want = _direct(by_name[g["scene_id"].removesuffix(".glb")], cam, (16, 16))
                assert torch.equal(obs["instance_imagegoal"][e], want), (g["episode_id"], cam["image_dimensions"])
                # habitat's InstanceImageGoalHFOVSensor: the camera's HFOV in degrees, float32 [1]
                assert obs["instance_imagegoal_hfov"][e].tolist() == [float(np.float32(cam["hfov"]))]
                hfovs.add(cam["hfov"])
                seen += cam["image_dimensions"] != [16, 16]
            obs, *_ = env.step(torch.randint(1, 6, (6,), generator=gen))
        assert seen > 0 and env.host_hook.rendered > 0 and len(hfovs) > 1
        if budget_images is None:
            assert env.host_hook.cache.hits > 0
    finally:
        env.close()


def test_an_episode_without_a_goal_camera_is_a_dataset_error():
    from bps_assets.errors import DatasetError

    scenes = _scenes()
    eps, goals = _episodes(scenes, True)   # ObjectNav-like: no image_goals
    env = make_env(scenes, num_envs=2, episodes=eps, goals=goals, task=iin.DEFAULTS, sensors=("rgb",))
    try:
        with pytest.raises(DatasetError, match="has no goal camera"):
            env.reset()
    finally:
        env.close()


# ------------------------------------------------------------------ a dataset made as a user makes it
@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """A synth MP3D scene with semantics, preprocessed for habitat's InstanceImageNav agent."""
    root = tmp_path_factory.mktemp("iin")
    src, out = root / "src", root / "out"
    _cli("synth", src, "--layout", "mp3d", "-n", 1, "--semantic")
    _cli("preprocess", src, "-o", out, "--dataset", "mp3d", "--split", "benchmark", "--workers", 1,
         "--agent-radius", 0.17, "--agent-height", 1.41)
    return out


def test_goal_image_of_a_habitat_written_episode(dataset, tmp_path):
    """Episodes generated here, read and written again by habitat-lab's own classes
    (``InstanceImageNavDatasetV1.to_json``), run by ``make``: each env's goal image equals a
    renderer built with its ``image_goals`` camera (size, HFOV) drawing at its pose."""
    import gzip

    from habitat_lab_stub import load_habitat, unload
    from test_habitat_interop import _config

    from bps_assets.nav.instance_imagenav_episodes import InstanceImageNavOptions, instance_imagenav_scene
    from bps_assets.nav.instance_imagenav_files import write_instance_imagenav_dataset
    from bps_assets.nav.objectnav_episodes import semantic_scene
    from bps_assets.nav.sources import open_navmesh
    from bps_assets.packed_scene import read_packed_scene
    from bps_runtime import make
    from bps_runtime.render import build_shading_data

    h = load_habitat()
    if h is None:
        pytest.skip("habitat-lab is not installed")
    try:
        (nav,) = sorted((dataset / "navmeshes").iterdir())
        (packed,) = sorted((dataset / "scenes").iterdir())
        name = packed.name.removesuffix(".bps")
        v, t, tri_object, table = semantic_scene(packed)
        sid = f"mp3d/{name}/{name}.glb"
        ds = instance_imagenav_scene(open_navmesh(nav), v, t, tri_object, table, sid, 6, seed=3,
                                     options=InstanceImageNavOptions(image_dimensions=(24, 32)))
        write_instance_imagenav_dataset(tmp_path / "ours", "val", {name: ds})
        theirs = h.InstanceImageNavDatasetV1(_config(tmp_path / "ours"))
        from habitat.tasks.nav import instance_image_nav_task as hiin

        # habitat's sensor uuids, and its HFOV sensor's observation of each episode
        uuids = (hiin.InstanceImageGoalSensor.cls_uuid, hiin.InstanceImageGoalHFOVSensor.cls_uuid)
        their_hfov = {str(ep.episode_id): hiin.InstanceImageGoalHFOVSensor.get_observation(None, episode=ep)
                      for ep in theirs.episodes}
        content = tmp_path / "theirs" / "val" / "content" / f"{name}.json.gz"
        content.parent.mkdir(parents=True)
        content.write_bytes(gzip.compress(theirs.to_json().encode()))
        (tmp_path / "theirs" / "val" / "val.json.gz").write_bytes(gzip.compress(b'{"episodes": []}'))
    finally:
        unload(h)
    ps = read_packed_scene(packed)
    shading = build_shading_data(ps)
    with make(dataset, split=None, task="instance_imagenav", episodes=str(tmp_path / "theirs" / "val" / "val.json.gz"),
              num_envs=3, resolution=(24, 32), sensors=("rgb",)) as env:
        obs = env.reset()
        for e, g in enumerate(env.episode_goals()):
            cam = g["image_goal"]
            assert cam["image_dimensions"] == [24, 32]
            r = make_renderer("embree", RenderOptions(resolution=(24, 32), hfov_deg=cam["hfov"], sensor_height=0.0))
            r.attach(0, shading, r.prepare(shading, ps.positions, ps.indices))
            want = r.render([0], np.array([cam["position"]]), np.array([cam["rotation"]]), ("rgb",))["rgb"][0]
            assert torch.equal(obs["instance_imagegoal"][e], want)
            assert want.float().std() > 0   # a picture, not an empty frame
            theirs_hfov = their_hfov[g["episode_id"]]
            assert theirs_hfov.dtype == np.float32 and obs["instance_imagegoal_hfov"][e].numpy().tobytes() == \
                theirs_hfov.tobytes()
        assert uuids == ("instance_imagegoal", "instance_imagegoal_hfov") and set(uuids) <= set(obs)


def test_make_with_generated_episodes_and_training(dataset, tmp_path):
    import math

    from bps_runtime import make
    from bps_train.train import run as train

    with make(dataset, split=None, task="instance_imagenav", episodes="sample", num_envs=4, resolution=(16, 16),
              sensors=("rgb", "depth")) as env:
        obs = env.reset()
        assert set(obs) == {"rgb", "depth", "instance_imagegoal", "instance_imagegoal_hfov", "compass", "gps"}
        assert obs["instance_imagegoal"].shape == (4, 16, 16, 3) and obs["instance_imagegoal_hfov"].shape == (4, 1)
        space = env.single_observation_space   # habitat's: Box(0, 255, (H, W, 3), uint8), Box(0, 360, (1,), float32)
        goal, hfov = space["instance_imagegoal"], space["instance_imagegoal_hfov"]
        assert (goal.shape, goal.dtype, goal.low.min(), goal.high.max()) == ((16, 16, 3), np.uint8, 0, 255)
        assert (hfov.shape, hfov.dtype, hfov.low.min(), hfov.high.max()) == ((1,), np.float32, 0.0, 360.0)
        assert env.world.renderer.options.hfov_deg == 42.0 and env.world.renderer.options.sensor_height == 1.31
        g = torch.Generator().manual_seed(0)
        for _ in range(20):
            obs, r, d, info = env.step(torch.randint(0, 6, (4,), generator=g))
            assert torch.isfinite(info["distance_to_goal"]).all()
        assert all(g["goal_object_id"] for g in env.episode_goals())
    res = train(["--dataset", str(dataset / "manifest.json"), "--task", "instance_imagenav", "--resolution", "16",
                 "--width", "4", "--hidden", "16", "--num-envs", "4", "--rollout-steps", "8", "--sim-only-steps", "0",
                 "--threads", "1", "--split", "train", "--out-dir", str(tmp_path / "run"), "--total-steps", "64"])
    assert res["updates"] == 2 and math.isfinite(res["loss"])
    # the observation key is in no checkpoint (the trainer reads the goal through TaskSpec.goal_input),
    # so one written while the key was ``imagegoal`` loads as it is: --eval and resume take it
    from bps_train.checkpoint import _leaves, load

    ckpt = tmp_path / "run" / "checkpoint.pt"
    assert not [n for n, v in _leaves(load(ckpt)) if "imagegoal" in f"{n}{v if isinstance(v, str) else ''}"]
    ev = train(["--dataset", str(dataset / "manifest.json"), "--eval", str(ckpt), "--eval-split", "train",
                "--eval-episodes", "4", "--threads", "1"])
    assert ev["task"] == "instance_imagenav" and ev["episodes"] == 4


def test_video_shows_the_instance_goal_image(dataset, tmp_path):
    """The recorder's goal image panel is the episode's ``instance_imagegoal`` observation."""
    from bps_runtime import make
    from bps_train.video import GOAL_IMAGE, FrameLayout
    from test_video_goals import _record_one

    env = make(dataset, split=None, task="instance_imagenav", episodes="sample", num_envs=2, sensors=("rgb",),
               resolution=(16, 16), threads=1)
    _rec, _goal, first, frames, _doc = _record_one(env, dataset, tmp_path)
    layout = FrameLayout(("rgb", GOAL_IMAGE), (16, 16))
    assert first["instance_imagegoal"].std() > 0 and frames
    for f in frames:
        assert np.array_equal(layout.read_sensor(f, GOAL_IMAGE), first["instance_imagegoal"])


def test_categories_pick_sampled_goals_not_a_files(dataset, tmp_path):
    """``categories=`` picks the goal instances of sampled episodes; with an InstanceImageNav file
    (whose goals are its own) it is a ConfigError naming the file."""
    from bps_assets.errors import ConfigError
    from bps_runtime import make

    path = str(tmp_path / "val" / "val.json.gz")
    with pytest.raises(ConfigError, match="an InstanceImageNav file's goals are its own") as e:
        make(dataset, split=None, task="instance_imagenav", episodes=path, categories="mp3d")
    assert e.value.path == path


def test_a_checkpoint_trained_with_categories_evaluates_on_a_file(dataset, tmp_path):
    """``--eval`` of a checkpoint trained with ``--categories`` on an InstanceImageNav file: the
    checkpoint's set is taken only for sampled episodes (a file's goals are its own)."""
    from bps_assets.nav.instance_imagenav_episodes import InstanceImageNavOptions, instance_imagenav_scene
    from bps_assets.nav.instance_imagenav_files import write_instance_imagenav_dataset
    from bps_assets.nav.objectnav_episodes import semantic_scene
    from bps_assets.nav.sources import open_navmesh
    from bps_train.train import run as train

    (nav,) = sorted((dataset / "navmeshes").iterdir())
    (packed,) = sorted((dataset / "scenes").iterdir())
    name = packed.name.removesuffix(".bps")
    v, t, tri_object, table = semantic_scene(packed)
    ds = instance_imagenav_scene(open_navmesh(nav), v, t, tri_object, table, f"mp3d/{name}/{name}.glb", 4, seed=3,
                                 options=InstanceImageNavOptions(image_dimensions=(16, 16)))
    write_instance_imagenav_dataset(tmp_path / "eps", "val", {name: ds})
    tiny = ["--dataset", str(dataset / "manifest.json"), "--task", "instance_imagenav", "--resolution", "16",
            "--width", "4", "--hidden", "16", "--num-envs", "2", "--rollout-steps", "4", "--sim-only-steps", "0",
            "--threads", "1", "--split", "train"]
    train([*tiny, "--out-dir", str(tmp_path / "run"), "--total-steps", "8", "--categories", "mp3d"])
    ev = [*tiny, "--eval", str(tmp_path / "run" / "checkpoint.pt"), "--eval-split", "train", "--eval-episodes", "2"]
    assert train([*ev, "--eval-episodes-file", str(tmp_path / "eps" / "val" / "val.json.gz")])["episodes"] == 2
    assert train(ev)["episodes"] == 2   # sampled: the checkpoint's set
