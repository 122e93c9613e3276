"""ImageNav's goal heading for an episode id the file writes as a JSON integer is habitat-lab's:
its ImageGoalSensor seeds ``RandomState(abs(hash(episode_id)) % 2**32)`` with the id as the file
has it (habitat's Episode keeps the int) and Python's hash of an int is not salted. bps reads ids
as text (an ``IntEpisodeId`` for an integer) and draws that heading where the type is known.
habitat's own draw is run where habitat-lab imports (tests/habitat_lab_stub.py); string ids keep
bps's crc32 rule (tests/test_nav_task_reference.py)."""
from __future__ import annotations

import gzip
import json
import math
import zlib

import numpy as np
import pytest
from habitat_lab_stub import habitat_lab  # noqa: F401 - the fixture

from bps_assets.nav.episode_table import IntEpisodeId, text_id
from bps_assets.nav.episodes import read_pointnav_dataset, read_pointnav_table
from bps_assets.nav.imagenav import goal_heading, goal_rotation
from bps_assets.pipeline.manifest import load_manifest

INT_IDS = [0, 1, 2, 4, 17, 123456, 2**40 + 3, -1, -7]


def _formula(eid: int) -> float:
    """habitat-lab 0.3.3 habitat/tasks/nav/nav.py:259-261, for an int id (hash(int) unsalted)."""
    return float(np.random.RandomState(abs(hash(eid)) % 2**32).uniform(0, 2 * np.pi))


def test_int_ids_get_habitats_heading_and_string_ids_keep_crc32():
    for eid in INT_IDS:
        a = goal_heading(eid)
        assert a == _formula(eid) == goal_heading(text_id(eid)) == goal_heading(np.int64(eid))
        assert goal_heading(str(eid)) == float(np.random.RandomState(zlib.crc32(str(eid).encode())).uniform(
            0, 2 * np.pi))   # the text "4" is not the integer 4
    assert isinstance(text_id(4), IntEpisodeId) and text_id(4) == "4" and type(str(text_id(4))) is str
    assert type(text_id("4")) is str and type(text_id(True)) is str
    assert goal_heading(4) != goal_heading("4")


def test_habitats_own_image_goal_sensor_draws_the_same_heading(habitat_lab):
    nav = habitat_lab.nav
    seen = []

    class Sim:
        def get_observations_at(self, position, rotation):
            seen.append(rotation)
            return {"rgb": None}

    class Sensor:
        _sim, _rgb_sensor_uuid = Sim(), "rgb"

    for eid in INT_IDS:
        ep = nav.NavigationEpisode(episode_id=eid, scene_id="s.glb", start_position=[0, 0, 0],
                                   start_rotation=[0, 0, 0, 1], goals=[nav.NavigationGoal(position=[1, 0, 1])])
        nav.ImageGoalSensor._get_pointnav_episode_image_goal(Sensor(), ep)
        assert seen[-1] == pytest.approx(goal_rotation(text_id(eid)), abs=1e-12)


def _int_id_file(manifest, tmp_path):
    """The manifest's val episodes in one split file, each id the JSON integer 10 * k + 3."""
    eps = read_pointnav_dataset(load_manifest(manifest).episodes_path("val"))
    for k, e in enumerate(eps):
        e["episode_id"] = 10 * k + 3
    path = tmp_path / "val.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"episodes": eps}).encode()))
    return path


def test_the_readers_mark_int_ids(manifest, tmp_path):
    path = _int_id_file(manifest, tmp_path)
    table, dicts = read_pointnav_table(path), read_pointnav_dataset(path)
    assert all(isinstance(i, IntEpisodeId) for i in table.ids) and table.ids[1] == "13"
    assert all(isinstance(e["episode_id"], IntEpisodeId) for e in dicts) and table == dicts
    assert isinstance(table[2]["episode_id"], IntEpisodeId) and isinstance(table.take([2]).ids[0], IntEpisodeId)
    assert json.loads(json.dumps(table[0]))["episode_id"] == "3"
    assert not any(isinstance(i, IntEpisodeId) for i in read_pointnav_table(load_manifest(manifest).episodes_path("val")).ids)


def test_an_imagenav_env_renders_int_id_goals_at_habitats_heading(manifest, tmp_path, monkeypatch):
    """The integer ids reach the goal images' renders and ``episode_goals`` marked (the ring
    keeps the reader's ``IntEpisodeId``): both draw habitat's heading."""
    from bps_runtime import make
    from bps_runtime.tasks import goal_images

    drawn = []   # (id, heading) of every goal image rendered

    def recorded(eid):
        drawn.append((eid, goal_heading(eid)))
        return drawn[-1][1]

    monkeypatch.setattr(goal_images, "goal_heading", recorded)
    path = _int_id_file(manifest, tmp_path)
    with make(manifest, split="val", task="imagenav", episodes=str(path), num_envs=4, resolution=(16, 16),
              sensors=("rgb",)) as env:
        env.reset()
        for _ in range(3):
            goals = env.episode_goals()
            ids = env.episode_ids
            assert all(i.isdigit() for i in map(str, ids))
            got = [g["goal_heading"] for g in goals]
            assert got == [_formula(int(i)) for i in ids]
            assert all(not math.isclose(h, goal_heading(str(i))) for h, i in zip(got, ids))
            env.step(np.zeros(4, np.int64))   # STOP: new episodes
    assert drawn and all(isinstance(i, IntEpisodeId) and h == _formula(int(i)) for i, h in drawn)
