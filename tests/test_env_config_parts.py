"""An ``EnvConfig`` built by hand, or read back with ``from_dict``, checks its parts' types when
it is made: a tuple for ``sensors``, a task name, a dict for ``config=``, an unknown key, a
non-bool flag are one-line ConfigErrors naming the part (they were AttributeErrors from deep
inside ``make()``, a message contradicting itself, or silently dropped / taken as True)."""
from __future__ import annotations

import pytest

from bps_assets.errors import ConfigError
from bps_runtime.env.config import EnvConfig, EpisodeConfig, SensorConfig
from bps_runtime.env.make import make
from bps_runtime.scenes.cache import CacheOptions

DATA = "m/manifest.json"


@pytest.mark.parametrize("part, value, hint", [
    ("sensors", ("depth", "rgb"), "SensorConfig"),
    ("episodes", "sample", "EpisodeConfig"),
    ("cache", 4, "CacheOptions"),
    ("task", "objectnav", "from_kwargs"),
    ("capture_graph", "no", "True or False"),
    ("dataset", 5, "manifest"),
    ("split", 3, "split"),
    ("device", 0, "device"),
])
def test_a_part_of_the_wrong_type_is_named(part, value, hint):
    with pytest.raises(ConfigError, match=part) as e:
        EnvConfig(**{"dataset": DATA, part: value})
    assert hint in str(e.value)


def test_the_parts_of_the_right_type_are_taken():
    c = EnvConfig(DATA, sensors=SensorConfig(("depth", "rgb")), episodes=EpisodeConfig("sample"),
                  cache=CacheOptions(slots=2), capture_graph=False)
    assert c.sensors.kinds == ("depth", "rgb") and c.cache.slots == 2 and c.episodes.source == "sample"


@pytest.mark.parametrize("kw", [{"normalize_depth": "no"}, {"normalize_depth": "false"}, {"normalize_depth": None},
                                {"capture_graph": "False"}, {"capture_graph": 1}])
def test_flags_are_bools(kw):
    """"no" / "False" were taken as True (any truthy value), None as False."""
    with pytest.raises(ConfigError, match=next(iter(kw))):
        EnvConfig.from_kwargs(DATA, **kw)


def test_numpy_bools_are_bools():
    import numpy as np

    assert EnvConfig.from_kwargs(DATA, normalize_depth=np.bool_(False)).sensors.normalize_depth is False


def test_episode_source_is_text_or_none():
    with pytest.raises(ConfigError, match="source"):
        EpisodeConfig(source=3)


def test_make_takes_an_envconfig_only():
    with pytest.raises(ConfigError, match="config="):
        make(config={"dataset": DATA})


def test_from_dict_refuses_unknown_keys_and_wrong_types():
    d = EnvConfig.from_kwargs(DATA, num_envs=4).to_dict()
    with pytest.raises(ConfigError, match=r"num_env.*did you mean 'num_envs'"):
        EnvConfig.from_dict({**d, "num_env": 8})
    with pytest.raises(ConfigError, match="bogus"):
        EnvConfig.from_dict({**d, "sensors": {**d["sensors"], "bogus": 1}})
    with pytest.raises(ConfigError, match="sensors"):
        EnvConfig.from_dict({**d, "sensors": "depth"})
    with pytest.raises(ConfigError, match="dict"):
        EnvConfig.from_dict([1, 2])
    with pytest.raises(ConfigError, match="task_name"):
        EnvConfig.from_dict({**d, "task_name": "pointgoal"})
    assert EnvConfig.from_dict(d) == EnvConfig.from_kwargs(DATA, num_envs=4)


def test_env_task_setter_names_its_form():
    """``env.task = "objectnav"`` said "expected a task name ... or a task's TaskOptions"."""
    from inmemory_scenes import make_env, room

    env = make_env([room()], num_envs=1, threads=1)
    try:
        with pytest.raises(ConfigError, match="TaskOptions") as e:
            env.task = "objectnav"
        assert "expected a task name" not in str(e.value)
    finally:
        env.close()


def test_env_md_signature_names_every_make_keyword():
    """docs/ENV.md's ``make(dataset, ...)`` line left out noise, camera, categories and preset."""
    import inspect
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "ENV.md").read_text()
    sig = re.search(r"`make\(dataset, (.*?)\)`,", text, re.S).group(1)
    documented = set(re.findall(r"(\w+)=", sig))
    known = set(inspect.signature(EnvConfig.from_kwargs).parameters) - {"dataset"} | {"preset"}
    assert documented == known, f"missing {sorted(known - documented)}, extra {sorted(documented - known)}"


def test_a_path_or_torch_device_is_stored_as_text():
    """``EnvConfig(dataset=Path(...), device=torch.device("cpu"))`` kept them: ``to_dict()`` was no
    longer plain data (json.dumps failed)."""
    import json
    from pathlib import Path

    import torch

    c = EnvConfig(dataset=Path(DATA), device=torch.device("cpu"))
    assert c.dataset == DATA and c.device == "cpu"
    assert EnvConfig.from_dict(json.loads(json.dumps(c.to_dict()))) == c


def test_a_numpy_seed_is_stored_as_an_int():
    """``make(seed=np.int64(3))`` (a seed from a numpy sweep) was kept as numpy's: to_dict() was not JSON."""
    import json

    import numpy as np

    c = EnvConfig.from_kwargs(DATA, seed=np.int64(3), num_envs=np.int32(4))
    assert type(c.seed) is int and type(c.num_envs) is int
    assert json.loads(json.dumps(c.to_dict()))["seed"] == 3


@pytest.mark.parametrize("sensors", [None, 3, {"depth"}])
def test_sensors_of_another_kind(sensors):
    """``make(sensors=None)`` was a TypeError ('NoneType' object is not iterable)."""
    with pytest.raises(ConfigError, match="sensors="):
        EnvConfig.from_kwargs(DATA, sensors=sensors)


def test_env_md_names_every_envconfig_field():
    """docs/ENV.md's ``EnvConfig(...)`` left out ``noise``."""
    import re
    from dataclasses import fields
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "ENV.md").read_text()
    sig = re.search(r"`EnvConfig\((dataset.*?)\)`, every default", text, re.S).group(1)
    depth, top, word = 0, [], ""
    for ch in sig + ",":   # the top-level names: nested parentheses skipped
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            top.append(word.strip().split("=")[0])
            word = ""
            continue
        if depth == 0 and ch not in "()":
            word += ch
    assert top == [f.name for f in fields(EnvConfig)]
