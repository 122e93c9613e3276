"""A PointNav episode with several goals is measured as habitat measures it: its DistanceToGoal
(distance_to POINT) is the geodesic distance to the nearest of every goal's position
(habitat-lab tasks/nav/nav.py), so are success, SPL and the reward; its PointGoalSensor (and
ours) points at goals[0]. Files are the user-journey tester's ``two_goals`` case."""
from __future__ import annotations

import gzip
import json

import numpy as np
import torch

import bps_runtime
from bps_assets.pipeline.manifest import load_manifest


def _val_episodes(dataset) -> list[dict]:
    m = load_manifest(dataset)
    content = next((m.episodes_path("val").parent / "content").iterdir())
    return json.loads(gzip.decompress(content.read_bytes()))["episodes"][:3]


def write_split(root, episodes) -> str:
    """A habitat PointNav v1 split (empty split file + one content file per scene)."""
    (root / "content").mkdir(parents=True)
    scene = episodes[0]["scene_id"].rsplit("/", 1)[-1].split(".")[0]
    (root / "content" / f"{scene}.json.gz").write_bytes(gzip.compress(json.dumps({"episodes": episodes}).encode()))
    (root / "val.json.gz").write_bytes(gzip.compress(json.dumps({"episodes": []}).encode()))
    return str(root / "val.json.gz")


def _run(dataset, path, stops=6) -> dict:
    """{episode id: (start distance, success, first pointgoal)} over ``stops`` STOP actions."""
    out = {}
    with bps_runtime.make(dataset, split="val", num_envs=1, episodes=path) as env:
        obs = env.reset()
        for _ in range(stops):
            pg = obs["pointgoal"][0].tolist()
            obs, r, d, info = env.step(torch.zeros(1, dtype=torch.long))
            ep = info["episode"]
            out[ep["episode_id"][0]] = (float(ep["start_distance"][0]), float(ep["success"][0]), pg, float(r[0]))
    return out


def test_two_goals_measure_to_the_nearest(dataset, tmp_path):
    src = _val_episodes(dataset)
    base = _run(dataset, write_split(tmp_path / "one", src))
    two = json.loads(json.dumps(src))
    for e in two:   # the tester's case: a second goal at the start
        e["goals"].append({"position": e["start_position"], "radius": 0.2})
    at_start = _run(dataset, write_split(tmp_path / "two", two))
    assert set(base) == set(at_start) == {e["episode_id"] for e in src}
    for eid, (d0, succ, pg, _) in base.items():
        assert d0 > 0.2 and succ == 0.0
        d0_two, succ_two, pg_two, reward = at_start[eid]
        assert d0_two < 0.2 and succ_two == 1.0 and reward > 2.0   # STOP at a goal: success, its reward
        assert np.allclose(pg_two, pg, atol=1e-5)   # the pointgoal still points at goals[0]

    # goals of two episodes: the distance is the smaller of each alone
    other = json.loads(json.dumps(src))
    for k, e in enumerate(other):
        e["goals"] = [src[(k + 1) % len(src)]["goals"][0]]
    alone = _run(dataset, write_split(tmp_path / "other", other))
    both = json.loads(json.dumps(src))
    for e, o in zip(both, other):
        e["goals"] = e["goals"] + o["goals"]
    mixed = _run(dataset, write_split(tmp_path / "both", both))
    for eid in base:
        assert abs(mixed[eid][0] - min(base[eid][0], alone[eid][0])) < 1e-4, (eid, base[eid], alone[eid], mixed[eid])
