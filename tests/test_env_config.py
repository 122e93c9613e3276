"""make() takes one config (issue 21): an EnvConfig tree with every default in one place, built
from the common keywords, printable, round-tripping through plain data (checkpoints)."""
from __future__ import annotations

import json

import pytest

import pointnav_trace as pt
from bps_assets.errors import ConfigError
from bps_runtime.env.config import EnvConfig, cache_options
from bps_runtime.scenes.cache import DEFAULTS as CACHE_DEFAULTS, CacheOptions
from bps_runtime.tasks.pointnav import TaskOptions


def test_keywords_make_the_config_and_it_round_trips_through_plain_data():
    c = EnvConfig.from_kwargs("m/manifest.json", split="val", num_envs=8, batch_size=4, sensors=("depth", "rgb"),
                              resolution=(32, 48), cache={"slots": 2, "swap_after_episodes": 16}, seed=3,
                              goal_pool=5, task=TaskOptions(max_episode_steps=50), scene_shard=(1, 2))
    assert c.sensors.kinds == ("depth", "rgb") and c.sensors.resolution == (32, 48)
    assert c.cache.slots == 2 and c.cache.swap_after_episodes == 16 and c.cache.seed is None
    assert c.cache_for_run().seed == 3 and c.episodes.supply.goal_pool == 5
    d = c.to_dict()
    assert EnvConfig.from_dict(json.loads(json.dumps(d))) == c
    assert "swap_after_episodes=16" in str(c) and "max_episode_steps=50" in str(c)


def test_cache_defaults_live_in_cache_options_alone():
    assert cache_options(None) == CacheOptions(seed=None)
    assert cache_options(3).slots == 3 and cache_options(None).slots == CACHE_DEFAULTS.slots
    with pytest.raises(ConfigError, match="cache="):
        cache_options("big")
    with pytest.raises(ConfigError, match="swap_every"):
        cache_options({"swap_every": 0})


@pytest.mark.parametrize("field, value", [
    ("loader_threads", "x"), ("loader_threads", -5), ("loader_threads", 2.5), ("loader_threads", True),
    ("seed", "a"), ("seed", -1), ("slots", True), ("prefetch", "no"), ("budget_bytes", "1e9"),
    ("swap_after_episodes", 1.5)])
def test_cache_fields_of_the_wrong_type_are_a_config_error_naming_the_field(field, value):
    """make(cache={...}) checks every CacheOptions field: no TypeError from deep in the loader,
    no bool or float rounded into a thread count, no string read as 'prefetch on'."""
    with pytest.raises(ConfigError, match=f"cache {field}={value!r}: expected"):
        EnvConfig.from_kwargs("m/manifest.json", cache={field: value})
    assert CacheOptions(loader_threads=1, seed=None, prefetch=False).loader_threads == 1


def test_cache_numpy_ints_are_stored_as_python_ints():
    """make(cache={"slots": np.int64(2)}) (or cache=np.int64(2)) keeps Python ints and bools in
    CacheOptions, so the env's config.to_dict() is JSON."""
    import numpy as np

    for cache in ({"slots": np.int64(2), "budget_bytes": np.int32(1 << 20), "loader_threads": np.uint8(1),
                   "swap_after_episodes": np.int64(3), "seed": np.int64(4), "swap_every": np.int16(5),
                   "prefetch": np.bool_(False)}, np.int64(2)):
        c = EnvConfig.from_kwargs("m/manifest.json", cache=cache)
        d = json.loads(json.dumps(c.to_dict()))
        assert d["cache"]["slots"] == 2 and type(c.cache.slots) is int
        assert all(type(getattr(c.cache, f)) in (int, bool, type(None)) for f in d["cache"])
    assert (c.cache_for_run().seed, CacheOptions(prefetch=np.bool_(False)).prefetch) == (0, False)
    assert type(CacheOptions(prefetch=np.bool_(True)).prefetch) is bool


def test_a_repeated_sensor_is_said_to_be_repeated_not_unknown():
    """sensors=["depth", "depth"] names known sensors twice: the error says "repeated" and names
    them; an unknown name is still "unknown"; an empty list is refused."""
    from bps_runtime.render.inputs import check_sensors

    with pytest.raises(ConfigError, match=r"repeated sensors \['depth'\]") as e:
        EnvConfig.from_kwargs("m/manifest.json", sensors=["depth", "depth"])
    assert "unknown" not in str(e.value)
    with pytest.raises(ConfigError, match=r"repeated sensors \['rgb', 'depth'\]"):
        check_sensors(("rgb", "depth", "rgb", "semantic", "depth"))
    with pytest.raises(ConfigError, match=r"unknown sensors \['normals'\]"):
        check_sensors(("depth", "normals", "depth"))
    with pytest.raises(ConfigError, match="unknown sensors"):
        check_sensors(())
    assert check_sensors("rgb") == ("rgb",)


def test_make_from_a_config_runs_as_from_its_keywords(tmp_path):
    from bps_runtime import make

    m = pt.build_manifest(tmp_path)
    kw = dict(pt.CONFIGS["sample"])
    a = pt.run_trace(m, steps=20, **kw)
    cfg = EnvConfig.from_kwargs(m, **kw)
    env = make(config=cfg)
    try:
        assert env.config.num_envs == kw["num_envs"] and env.config.dataset == str(m)
    finally:
        env.close()
    b = pt.run_trace(None, steps=20, config=cfg)
    assert a == b
    with pytest.raises(ConfigError, match="either"):
        make(m, config=cfg)


def test_checkpoints_keep_the_env_config_and_a_resume_compares_it():
    from bps_train import checkpoint

    a = EnvConfig.from_kwargs("m", seed=1)
    b = EnvConfig.from_kwargs("m", seed=2, threads=3)            # per-run settings may change
    c = EnvConfig.from_kwargs("m", task=TaskOptions(success_distance=0.36))
    ida = {"env": checkpoint.env_identity(a)}
    checkpoint.check_same_run("ck.pt", ida, {"env": checkpoint.env_identity(b)})
    with pytest.raises(ConfigError, match="env config") as e:
        checkpoint.check_same_run("ck.pt", ida, {"env": checkpoint.env_identity(c)})
    # only the key that differs, not both whole configs (~1.5 KB)
    assert "task.success_distance 0.2 (this run: 0.36)" in str(e.value) and "sensors" not in str(e.value)
    checkpoint.check_same_run("ck.pt", {}, {"env": checkpoint.env_identity(c)})   # older checkpoints


def test_a_resume_may_change_a_tasks_memory_budget_but_not_its_rules():
    """ImageNav's goal-image cache budget (TaskOptions.RESOURCES) is not part of a run's identity;
    its success distance is. The options round-trip through plain data with the budget."""
    from bps_train import checkpoint
    from bps_runtime.tasks import imagenav

    assert imagenav.TaskOptions.RESOURCES == ("goal_cache_bytes",)
    a = EnvConfig.from_kwargs("m", task=imagenav.DEFAULTS)
    small = EnvConfig.from_kwargs("m", task=imagenav.TaskOptions(goal_cache_bytes=1 << 20))
    wider = EnvConfig.from_kwargs("m", task=imagenav.TaskOptions(success_distance=1.0))
    ida = {"env": checkpoint.env_identity(a)}
    checkpoint.check_same_run("ck.pt", ida, {"env": checkpoint.env_identity(small)})
    with pytest.raises(ConfigError, match="success_distance"):
        checkpoint.check_same_run("ck.pt", ida, {"env": checkpoint.env_identity(wider)})
    back = EnvConfig.from_dict(json.loads(json.dumps(small.to_dict())))
    assert back.task == small.task and back.task.goal_cache_bytes == 1 << 20


def test_a_resume_with_another_task_is_refused_before_the_weights_load():
    """The task is part of a run's identity (its policy has other inputs); checkpoints saved
    before the key existed were PointNav's."""
    from types import SimpleNamespace

    from bps_train import checkpoint

    args = dict(split="train", episodes="sample", sensor="depth", resolution=64, hidden=512, width=32, num_envs=8,
                rollout_steps=32, minibatches=2, seed=1)
    pointnav = checkpoint.identity(SimpleNamespace(task="pointnav", **args), "sha")
    objectnav = checkpoint.identity(SimpleNamespace(task="objectnav", **args), "sha")
    with pytest.raises(ConfigError, match="--task pointnav"):
        checkpoint.check_same_run("ck.pt", pointnav, objectnav)
    old = checkpoint.saved_identity({"identity": {k: v for k, v in pointnav.items() if k != "task"},
                                     "args": {}, "world": 1})
    checkpoint.check_same_run("ck.pt", old, pointnav)
    with pytest.raises(ConfigError, match="--task pointnav"):
        checkpoint.check_same_run("ck.pt", old, objectnav)


def test_supply_options_are_checked_where_they_are_made():
    """A bad episode-supply size is refused by SupplyOptions itself, so a config read back from a
    checkpoint (EnvConfig.from_dict) is checked as make()'s keywords are."""
    from bps_runtime.episodes.supply import SupplyOptions

    for bad in ({"goal_pool": 0}, {"reservoir": -5}, {"lookahead": 0}, {"goal_views": 1.5}):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            SupplyOptions(**bad)
    with pytest.raises(ConfigError, match="goal_pool"):
        EnvConfig.from_kwargs("m", goal_pool=0)
    d = EnvConfig.from_kwargs("m").to_dict()
    d["episodes"]["supply"]["goal_pool"] = 0
    with pytest.raises(ConfigError, match="goal_pool"):
        EnvConfig.from_dict(d)


def test_supply_sizes_take_numpy_ints_stored_as_python_ints():
    """goal_pool (and every SupplyOptions size) takes a numpy int as docs/ENV.md says numpy scalars
    count, stored as a Python int so the config's to_dict is JSON; a bool or a float is refused."""
    import numpy as np

    from bps_runtime.episodes.supply import SupplyOptions

    c = EnvConfig.from_kwargs("m/manifest.json", goal_pool=np.int64(5))
    assert c.episodes.supply.goal_pool == 5 and type(c.episodes.supply.goal_pool) is int
    assert json.loads(json.dumps(c.to_dict()))["episodes"]["supply"]["goal_pool"] == 5
    s = SupplyOptions(lookahead=np.int32(3), reservoir=np.uint8(0), goal_views=np.int16(2))
    assert [type(v) for v in (s.lookahead, s.reservoir, s.goal_views)] == [int] * 3
    for bad in (True, np.bool_(True), 5.0, "5"):
        with pytest.raises(ConfigError, match="goal_pool"):
            SupplyOptions(goal_pool=bad)


def test_spaces_take_a_task_name_spec_or_options():
    from bps_runtime.env.spaces import single_observation_space
    from bps_runtime.tasks import objectnav

    by_name = single_observation_space(task="objectnav")
    assert single_observation_space(task=objectnav.DEFAULTS) == by_name == single_observation_space(task=objectnav.SPEC)
    assert {"objectgoal", "compass", "gps", "depth"} <= set(by_name.spaces)


@pytest.mark.parametrize("threads", [None, 2])
def test_make_checks_its_config_once(tmp_path, monkeypatch, threads):
    """make() builds the EnvConfig once, with the final threads (None: every usable core);
    it does not re-run its checks (replace() would) and leaves a caller's config unchanged."""
    from bps_assets.host import available_cores
    from bps_runtime import make

    m = pt.build_manifest(tmp_path)
    kw = {**pt.CONFIGS["sample"], "threads": threads}
    calls = []
    post_init = EnvConfig.__post_init__
    monkeypatch.setattr(EnvConfig, "__post_init__", lambda self: (calls.append(1), post_init(self))[1])
    env = make(m, **kw)
    try:
        assert len(calls) == 1
        assert env.config.threads == (threads or available_cores())
    finally:
        env.close()
    cfg = EnvConfig.from_kwargs(m, **kw)
    calls.clear()
    env = make(config=cfg)
    try:
        assert calls == [] and env.config.threads == (threads or available_cores()) and cfg.threads == threads
    finally:
        env.close()


def test_unset_categories_and_hm3d_are_one_identity():
    """Goal categories unset mean hm3d's set: a run started without them resumes with
    ``categories="hm3d"`` and the reverse (a checkpoint that recorded "hm3d" too); another set
    differs."""
    from bps_train import checkpoint

    unset = {"env": checkpoint.env_identity(EnvConfig.from_kwargs("m", task="objectnav"))}
    hm3d = {"env": checkpoint.env_identity(EnvConfig.from_kwargs("m", task="objectnav", categories="hm3d"))}
    mp3d = {"env": checkpoint.env_identity(EnvConfig.from_kwargs("m", task="objectnav", categories="mp3d"))}
    checkpoint.check_same_run("ck.pt", unset, hm3d)
    checkpoint.check_same_run("ck.pt", hm3d, unset)
    recorded = {"env": {**hm3d["env"], "episodes": {**hm3d["env"]["episodes"], "categories": "hm3d"}}}
    checkpoint.check_same_run("ck.pt", recorded, unset)
    with pytest.raises(ConfigError, match=r"episodes.categories \(unset\) \(this run: mp3d\)"):
        checkpoint.check_same_run("ck.pt", unset, mp3d)
    with pytest.raises(ConfigError, match=r"episodes.categories mp3d \(this run: \(unset\)\)"):
        checkpoint.check_same_run("ck.pt", mp3d, hm3d)


def test_numpy_scalars_are_numbers_for_every_option():
    """A task option, a noise option and a camera setting take numpy scalars as numbers (stored
    as Python's) and refuse a bool or a string alike (``bps_assets.errors.is_real``)."""
    import numpy as np

    from bps_runtime.noise.options import NoiseOptions
    from bps_runtime.render.protocol import check_real

    t = TaskOptions(forward_step=np.float32(0.25), turn_degrees=np.int64(10), max_episode_steps=np.int32(7))
    assert (t.forward_step, t.turn_degrees, t.max_episode_steps) == (0.25, 10, 7)
    assert type(t.forward_step) is float and type(t.max_episode_steps) is int
    assert json.loads(json.dumps(EnvConfig.from_kwargs("m", task=t).to_dict()))["task"]["turn_degrees"] == 10
    assert NoiseOptions(multiplier=np.float64(0.5)).multiplier == 0.5
    assert check_real("hfov_deg", np.float32(90)) == 90.0
    for bad in (True, "0.25", float("nan"), np.float32("inf")):
        with pytest.raises(ConfigError, match="forward_step"):
            TaskOptions(forward_step=bad)
        with pytest.raises(ConfigError, match="multiplier"):
            NoiseOptions(multiplier=bad)
        with pytest.raises(ConfigError, match="hfov_deg"):
            check_real("hfov_deg", bad)
