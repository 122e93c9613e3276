"""The ``objectgoal`` space's high is the dataset's largest task category id, as habitat's
ObjectGoalSensor declares it (habitat-lab tasks/nav/object_nav_task.py: high =
max(category_to_task_category_id.values())), so habitat-baselines' ``nn.Embedding(high + 1, 32)``
builds; the allocation-free spaces take it as ``max_goal_id`` (default: habitat's objectnav_hm3d
map's largest id, 5)."""
from __future__ import annotations

import gzip
import json
import shutil

import numpy as np
import pytest
import torch

import bps_runtime
from bps_assets.errors import ConfigError
from bps_assets.readers.semantic_categories import objectnav_hm3d


def _high(space) -> int:
    return int(np.max(space["objectgoal"].high))


def _run_within_space(env, steps=12):
    emb = torch.nn.Embedding(_high(env.single_observation_space) + 1, 32)
    space = env.observation_space["objectgoal"]
    obs = env.reset()
    gen = torch.Generator().manual_seed(0)
    for _ in range(steps):
        ids = obs["objectgoal"]
        assert space.contains(ids.numpy()), ids.tolist()
        emb(ids)   # every observed id indexes the embedding
        obs, *_ = env.step(torch.randint(0, 6, (env.batch_size,), generator=gen))


def test_static_spaces_have_a_finite_documented_high():
    assert _high(bps_runtime.single_observation_space(task="objectnav")) == max(objectnav_hm3d().values()) == 5
    assert _high(bps_runtime.observation_space(4, task="objectnav")) == 5
    assert _high(bps_runtime.observation_space(4, task="objectnav", max_goal_id=20)) == 20
    torch.nn.Embedding(_high(bps_runtime.single_observation_space(task="objectnav")) + 1, 32)
    with pytest.raises(ConfigError, match="max_goal_id"):
        bps_runtime.single_observation_space(task="objectnav", max_goal_id=-1)


def test_the_env_space_is_the_episode_files_largest_category_id(objectnav_dataset, tmp_path):
    out, eps = objectnav_dataset
    with bps_runtime.make(out, split=None, task="objectnav", episodes=str(eps), num_envs=2,
                          resolution=(16, 16)) as env:
        assert env.max_goal_id == max(json.loads(gzip.decompress(eps.read_bytes()))
                                      ["category_to_task_category_id"].values())
        _run_within_space(env)
    # an MP3D-style map (ids up to 20): the space follows the file
    root = tmp_path / "eps"
    shutil.copytree(eps.parent.parent, root)
    split = root / "val" / "val.json.gz"
    for f in [split, *(root / "val" / "content").iterdir()]:
        doc = json.loads(gzip.decompress(f.read_bytes()))
        if "category_to_task_category_id" in doc:
            doc["category_to_task_category_id"]["towel"] = 20
            doc["category_to_scene_annotation_category_id"]["towel"] = 20
            f.write_bytes(gzip.compress(json.dumps(doc).encode()))
    with bps_runtime.make(out, split=None, task="objectnav", episodes=str(split), num_envs=2,
                          resolution=(16, 16)) as env:
        assert _high(env.single_observation_space) == _high(env.observation_space) == 20
        _run_within_space(env, 4)


def test_sampled_objectnav_space_is_its_category_maps(objectnav_dataset):
    out, _ = objectnav_dataset
    with bps_runtime.make(out, split=None, task="objectnav", episodes="sample", num_envs=2,
                          resolution=(16, 16)) as env:
        assert _high(env.observation_space) == max(objectnav_hm3d().values())
        _run_within_space(env)
