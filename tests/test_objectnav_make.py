"""``make(task="objectnav")`` and ``bps-train --task objectnav | imagenav`` on datasets made as a
user makes them: ``bps-assets synth --semantic`` -> ``preprocess --agent-radius 0.18
--agent-height 0.88`` -> ``episodes --task objectnav``; the episodes file (checked on each
scene's navmesh) and on-the-fly episodes (``episodes="sample"``) run; a dataset built for
another agent is refused with the manifest's one line; a scene without semantics is an
InputError; training and ``--eval`` (habitat-lab's metric names) for ObjectNav and ImageNav."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from bps_assets.errors import ConfigError, DatasetError, InputError
from bps_assets.readers.semantic_categories import objectnav_hm3d
from bps_runtime import make
from bps_runtime.tasks import objectnav
from cli.main import main


def _cli(*args):
    r = CliRunner().invoke(main, [str(a) for a in args])
    assert r.exit_code == 0, r.output
    return r


@pytest.fixture(scope="module")
def dataset(objectnav_dataset):   # conftest.py's, shared with test_video_goals
    return objectnav_dataset


def build_objectnav_dataset(root):
    """(preprocessed output folder, ObjectNav val split file) of one synth MP3D scene with semantics."""
    src, out, eps = root / "src", root / "out", root / "eps"
    _cli("synth", src, "--layout", "mp3d", "-n", 1, "--semantic")
    _cli("preprocess", src, "-o", out, "--dataset", "mp3d", "--split", "benchmark", "--workers", 1,
         "--agent-radius", 0.18, "--agent-height", 0.88)
    navs = sorted((out / "navmeshes").iterdir())
    _cli("episodes", *navs, "--task", "objectnav", "-o", eps, "--split", "val", "--per-scene", 8, "--seed", 1,
         "--any-subset")   # val episodes on the one (train) scene: said on purpose
    return out, eps / "val" / "val.json.gz"


def _run(env, steps=40):
    obs = env.reset()
    assert set(obs) == {"depth", "objectgoal", "compass", "gps"}
    gen = torch.Generator().manual_seed(0)
    dones = 0
    for _ in range(steps):
        obs, r, d, info = env.step(torch.randint(0, 6, (env.batch_size,), generator=gen))
        dones += int(d.sum())
        assert torch.isfinite(info["distance_to_goal"]).all()
    return obs, dones


def test_objectnav_from_the_episode_file(dataset):
    out, eps = dataset
    with make(out, split=None, task="objectnav", episodes=str(eps), num_envs=4, resolution=(16, 16)) as env:
        assert env.ACTIONS == objectnav.ACTION_NAMES and env.config.task == objectnav.DEFAULTS
        obs, dones = _run(env)
        assert set(obs["objectgoal"].ravel().tolist()) <= set(objectnav_hm3d().values())
        assert dones > 0
        assert env.world.renderer.options.hfov_deg == 79.0 and env.world.renderer.options.sensor_height == 0.88


def test_episodes_off_the_navmesh_are_dropped_and_counted(dataset, tmp_path):
    """A start and a view point moved 5 m up (off the navmesh): the scene's check drops them,
    counts them, and the rest of the file runs."""
    import gzip
    import json
    import shutil

    out, eps = dataset
    root = tmp_path / "eps"
    shutil.copytree(eps.parent.parent, root)
    content = sorted((root / "val" / "content").iterdir())[0]
    doc = json.loads(gzip.decompress(content.read_bytes()))
    doc["episodes"][0]["start_position"][1] += 5.0
    cat = doc["episodes"][1]["object_category"]
    goal = next(g for k, gs in doc["goals_by_category"].items() if k.endswith("_" + cat) for g in gs
                if len(g["view_points"]) > 1)
    goal["view_points"][0]["agent_state"]["position"][1] += 5.0
    content.write_bytes(gzip.compress(json.dumps(doc).encode()))
    name = content.name.split(".")[0]
    with make(out, split=None, task="objectnav", episodes=str(root / "val" / "val.json.gz"), num_envs=4,
              resolution=(16, 16)) as env:
        _run(env, 5)
        check = env.world.episodes.checks[name]
        assert check.dropped["starts_off_navmesh"] == 1 and check.dropped["view_points_off_navmesh"] == 1
        assert len(check.dataset.episodes) == len(doc["episodes"]) - 1


def test_objectnav_sampled_on_the_fly(dataset):
    out, _ = dataset
    with make(out, split=None, task="objectnav", episodes="sample", num_envs=4, resolution=(16, 16), seed=3) as env:
        obs, _ = _run(env, 10)
        assert (env.last_info["distance_to_goal"] >= 0).all()


def test_another_agent_is_refused_with_one_line(dataset):
    out, eps = dataset
    with pytest.raises(DatasetError) as e:
        make(out, split=None, task=objectnav.TaskOptions(agent_radius=0.1, agent_height=1.5), episodes=str(eps))
    msg = str(e.value)
    assert "\n" not in msg and "--agent-radius 0.1 --agent-height 1.5" in msg


def test_a_scene_without_semantics_is_refused(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    _cli("synth", src, "--layout", "gibson", "-n", 1)
    _cli("preprocess", src, "-o", out, "--dataset", "gibson", "--split", "tiny", "--workers", 1,
         "--agent-radius", 0.18, "--agent-height", 0.88)
    with pytest.raises(InputError, match="no semantic annotations"):
        make(out, split=None, task="objectnav")


@pytest.mark.slow
def test_bps_train_objectnav_and_eval_metric_names(dataset, tmp_path):
    """``bps-train --task objectnav`` trains (the ObjectNav policy: category embedding, compass,
    GPS) and ``--eval`` reports habitat-lab's metric names for a checkpoint, random and STOP."""
    import math

    from bps_train.train import run as main

    out_dir, _ = dataset
    tiny = ["--dataset", str(out_dir / "manifest.json"), "--task", "objectnav", "--resolution", "16", "--width", "4",
            "--hidden", "16", "--num-envs", "4", "--rollout-steps", "8", "--sim-only-steps", "0", "--threads", "1",
            "--split", "train"]
    res = main([*tiny, "--out-dir", str(tmp_path / "run"), "--total-steps", "64"])
    assert res["updates"] == 2 and math.isfinite(res["loss"])
    policy_keys = set(torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)["policy"])
    # the task's goal encoder (TaskSpec.goal_encoder) is the policy's submodule ``goal_encoder``
    assert {"goal_encoder.category.weight", "goal_encoder.compass.weight", "goal_encoder.gps.weight"} <= policy_keys
    assert "goal_encoder.goal.weight" not in policy_keys
    for what in (str(tmp_path / "run" / "checkpoint.pt"), "random", "stop"):
        r = main([*tiny, "--eval", what, "--eval-split", "train", "--eval-episodes", "8", "--seed", "2"])
        assert {"success", "spl", "soft_spl", "distance_to_goal"} <= set(r) and r["task"] == "objectnav"
        assert r["episodes"] == 8 and r["seed"] == 2
        if what == "stop":
            assert r["success"] == 0 and r["soft_spl"] == 0 and r["mean_length"] == 1


def test_bps_train_imagenav(tmp_path):
    """``bps-train --task imagenav``: the goal image goes through a visual encoder (a second
    SE-ResNet-9 when the agent sees depth), 2 updates train with a finite loss."""
    import math

    from bps_train.train import run as main

    src, out = tmp_path / "src", tmp_path / "out"
    _cli("synth", src, "--layout", "gibson", "-n", 1)
    _cli("preprocess", src, "-o", out, "--dataset", "gibson", "--split", "tiny", "--workers", 1)
    res = main(["--dataset", str(out / "manifest.json"), "--task", "imagenav", "--resolution", "16", "--width", "4",
                "--hidden", "16", "--num-envs", "4", "--rollout-steps", "8", "--sim-only-steps", "0", "--threads", "1",
                "--split", "train", "--out-dir", str(tmp_path / "run"), "--total-steps", "64"])
    assert res["updates"] == 2 and math.isfinite(res["loss"])
    keys = set(torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)["policy"])
    assert any(k.startswith("goal_encoder.cnn.") for k in keys)   # depth: a second CNN for the goal image


def test_objectnav_eval_writes_videos(dataset, tmp_path):
    """``--eval --video`` for an ObjectNav policy: the recorder needs no pointgoal (the goal
    objects, their view points and category come from ``env.episode_goals``); one video per
    episode, a frame per step taken."""
    import json

    from bps_train.train import run as main

    out_dir, _ = dataset
    res = main(["--dataset", str(out_dir / "manifest.json"), "--task", "objectnav", "--resolution", "16",
                "--threads", "1", "--split", "train", "--eval", "random", "--eval-split", "train",
                "--eval-episodes", "2", "--video", "2", "--video-format", "png", "--out-dir", str(tmp_path / "run")])
    assert len(res["videos"]) == 2
    for v in res["videos"]:
        doc = json.loads((tmp_path / "run" / "videos" / (v.rsplit("/", 1)[1] + ".json")).read_text())
        assert doc["goal"] == doc["goals"]["positions"][0] and len(doc["goals"]["view_points"]) > 0
        assert doc["goals"]["object_category"] in objectnav_hm3d()
        assert len(doc["positions"]) == doc["frames"] == doc["length"]
        assert len(list((tmp_path / "run" / "videos" / doc["video"]).glob("*.png"))) == doc["frames"]


def test_preview_draws_an_objectnav_files_episodes(dataset, tmp_path):
    """``bps-assets preview --episodes`` on an ObjectNav v1 file: every episode's start, its goal
    objects' view points, and a shortest path ending at the nearest view point."""
    import numpy as np
    from PIL import Image

    from bps_assets.nav.objectnav_files import read_objectnav_dataset
    from bps_assets.nav.topdown import KINDS

    out, eps = dataset
    nav = sorted((out / "navmeshes").iterdir())[0]
    r = _cli("preview", nav, "-o", tmp_path / "m.png", "--episodes", eps)
    n = len(read_objectnav_dataset(eps).episodes)
    assert n > 0 and f", {n} episode(s)" in r.output and "with no path" not in r.output
    im = np.asarray(Image.open(tmp_path / "m.png").convert("RGB"))
    for kind in ("start", "view_point", "shortest_path"):   # drawn (the legend lists only what was)
        assert (im == np.array(KINDS[kind][0], np.uint8)).all(axis=2).any(), kind


def test_objectnav_with_the_semantic_sensor(dataset):
    """docs/TASKS.md (issue 35 item 8): the semantic sensor works with ObjectNav: instance ids of
    the scene's objects beside ObjectNav's observations."""
    out, eps = dataset
    with make(out, split=None, task="objectnav", episodes=str(eps), num_envs=2, resolution=(16, 16),
              sensors=("rgb", "semantic")) as env:
        obs = env.reset()
        assert set(obs) == {"rgb", "semantic", "objectgoal", "compass", "gps"}
        obs, _, _, info = env.step(torch.ones(2, dtype=torch.long))
        cats = env.category_table.lookup(info["scene_index"], obs["semantic"])
        assert (obs["semantic"] > 0).any() and (cats[obs["semantic"] > 0] >= 0).all()
