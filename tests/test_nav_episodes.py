"""PointNav episode generation (habitat-lab's rules) and habitat v1 dataset files."""
from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import numpy as np
import pytest

from bps_assets.errors import ConfigError, InputError, NavError, OutputExistsError
from bps_assets.nav import episodes as ep
from episode_files import write_gz

ASSETS = Path(__file__).resolve().parents[1].parent / "shared" / "assets"
APARTMENT = ASSETS / "habitat_test_scenes_navmesh" / "apartment_1.navmesh"


class WalledFloors:
    """Exact test double: axis-aligned floors; floor 0 may have a wall at x = wall_x with a gap.

    Geodesic distances are exact (straight line, or via the nearer gap end when the wall
    blocks the line), islands are the floors, island radius = half the floor's diagonal.
    """

    def __init__(self, floors, wall_x=None, gap=(8.0, 10.0)):
        self.floors = np.array(floors, np.float64)  # rows x0, x1, z0, z1, y
        self.wall_x, self.gap = wall_x, gap
        f = self.floors
        self.area = (f[:, 1] - f[:, 0]) * (f[:, 3] - f[:, 2])

    def _floor(self, p):
        p = np.atleast_2d(p)
        f = self.floors
        inside = ((p[:, None, 0] >= f[None, :, 0]) & (p[:, None, 0] <= f[None, :, 1]) &
                  (p[:, None, 2] >= f[None, :, 2]) & (p[:, None, 2] <= f[None, :, 3]) &
                  (np.abs(p[:, None, 1] - f[None, :, 4]) < 0.5))
        return np.where(inside.any(1), inside.argmax(1), -1)

    def sample_navigable_point(self, n, seed, island=None):
        rng = np.random.default_rng(seed)
        k = rng.choice(len(self.floors), size=n, p=self.area / self.area.sum())
        f = self.floors[k]
        x = rng.uniform(f[:, 0], f[:, 1])
        z = rng.uniform(f[:, 2], f[:, 3])
        if self.wall_x is not None:  # nudge points off the wall line
            on = (k == 0) & (np.abs(x - self.wall_x) < 1e-6)
            x[on] += 1e-3
        return np.stack([x, f[:, 4], z], 1)

    def island_radius(self, p):
        k = self._floor(p)
        f = self.floors[k]
        r = 0.5 * np.hypot(f[:, 1] - f[:, 0], f[:, 3] - f[:, 2])
        return np.where(k >= 0, r, 0.0)

    def geodesic_distance(self, a, b):
        a, b = np.atleast_2d(a).astype(np.float64), np.atleast_2d(b).astype(np.float64)
        ka, kb = self._floor(a), self._floor(b)
        d = np.linalg.norm(a - b, axis=1)
        if self.wall_x is not None:
            w = self.wall_x
            cross = (ka == 0) & (kb == 0) & ((a[:, 0] - w) * (b[:, 0] - w) < 0)
            t = (w - a[:, 0]) / np.where(cross, b[:, 0] - a[:, 0], 1.0)
            zc = a[:, 2] + t * (b[:, 2] - a[:, 2])
            blocked = cross & ((zc < self.gap[0]) | (zc > self.gap[1]))
            for gz in self.gap:
                e = np.array([w, 0.0, gz])
                e = np.broadcast_to(e, a.shape).copy()
                e[:, 1] = a[:, 1]
                via = np.linalg.norm(a - e, axis=1) + np.linalg.norm(e - b, axis=1)
                d = np.where(blocked & (gz == self.gap[0]), via, d)
                if gz == self.gap[1]:
                    d = np.where(blocked, np.minimum(d, via), d)
        return np.where((ka >= 0) & (ka == kb), d, np.inf)


def _check_rules(e, nm, scene_id, goal_radius=0.2):
    s, g = np.array(e["start_position"]), np.array(e["goals"][0]["position"])
    geo = float(nm.geodesic_distance(g[None], s[None])[0])  # from the goal, like the env
    assert math.isfinite(geo) and 1.0 - 1e-6 <= geo <= 30.0 + 1e-6
    assert e["info"]["geodesic_distance"] == pytest.approx(geo, rel=1e-5, abs=1e-5)
    back = float(nm.geodesic_distance(s[None], g[None])[0])  # habitat's start -> goal
    assert back == pytest.approx(geo, rel=0.02)
    assert abs(s[1] - g[1]) <= 0.5
    assert nm.island_radius(s[None])[0] >= 1.5 and nm.island_radius(g[None])[0] >= 1.5
    q = np.array(e["start_rotation"])
    assert q[0] == 0 and q[2] == 0 and np.linalg.norm(q) == pytest.approx(1.0)
    assert e["scene_id"] == scene_id and e["goals"][0]["radius"] == goal_radius
    assert e["shortest_paths"] is None and e["start_room"] is None
    return geo / np.linalg.norm(s - g)


def test_generated_episodes_follow_the_rules():
    nm = WalledFloors([[0, 20, 0, 10, 0.0],       # big room with a wall
                       [30, 40, 0, 10, 0.3],      # second island, y within 0.5 of the first
                       [0, 20, 0, 10, 3.0],       # upper floor right above the first
                       [50, 51, 0, 1, 0.0]],      # small island (radius 0.71 < 1.5)
                      wall_x=10.0)
    stats = {}
    eps = ep.generate_episodes(nm, "gibson/Fake.glb", 60, seed=3, stats=stats)
    assert [e["episode_id"] for e in eps] == [str(i) for i in range(60)]
    ratios = [_check_rules(e, nm, "gibson/Fake.glb") for e in eps]
    # nothing starts or ends on the small island; walls produce ratios above 1.1
    pts = np.array([e["start_position"] for e in eps] + [e["goals"][0]["position"] for e in eps])
    assert not np.any(pts[:, 0] > 49)
    assert max(ratios) > 1.1
    assert stats["episodes"] == 60 and stats["rejected_dy"] > 0
    assert stats["target_island_too_small"] > 0 and stats["rejected_unreachable"] > 0


def test_straight_line_episodes_are_kept_with_habitats_probability():
    nm = WalledFloors([[0, 20, 0, 20, 0.0]])  # open floor: geodesic == euclidean, ratio 1
    stats = {}
    eps = ep.generate_episodes(nm, "x.glb", 40, seed=0, stats=stats)
    assert all(_check_rules(e, nm, "x.glb") == pytest.approx(1.0) for e in eps)
    kept = stats["episodes"]
    tried = kept + stats["rejected_ratio"]
    rate = kept / tried
    assert 0.005 < rate < 0.012, (rate, 20 * 0.02 ** 2)  # 20 * (1 - 0.98)^2 = 0.008


def test_determinism_per_seed():
    nm = WalledFloors([[0, 20, 0, 10, 0.0]], wall_x=10.0)
    a = ep.generate_episodes(nm, "s.glb", 15, seed=7)
    b = ep.generate_episodes(nm, "s.glb", 15, seed=7)
    c = ep.generate_episodes(nm, "s.glb", 15, seed=8)
    assert a == b and a != c
    assert ep.scene_seed(1, "Adrian") == ep.scene_seed(1, "Adrian") != ep.scene_seed(1, "Airport")


def test_impossible_scene_is_a_nav_error():
    nm = WalledFloors([[0, 1, 0, 1, 0.0]])  # island radius 0.71 < 1.5: no valid episode
    with pytest.raises(NavError, match="only 0 of 3 episodes"):
        ep.generate_episodes(nm, "tiny.glb", 3, seed=0,
                             options=ep.EpisodeOptions(max_targets_per_episode=50))
    with pytest.raises(ConfigError):
        ep.EpisodeOptions(closest_dist_limit=5, furthest_dist_limit=1)


# ------------------------------------------------------------------------------ files
def _eps(nm=None, n=5, scene="gibson/A.glb", seed=0):
    nm = nm or WalledFloors([[0, 20, 0, 10, 0.0]], wall_x=10.0)
    return ep.generate_episodes(nm, scene, n, seed=seed)


def test_write_read_round_trip(tmp_path):
    by_scene = {"Adrian": _eps(seed=1), "Airport": _eps(seed=2, n=3)}
    written = ep.write_pointnav_dataset(tmp_path, "val", by_scene,
                                        scene_path_fn=lambda s: f"gibson/{s}.glb")
    split = tmp_path / "val" / "val.json.gz"
    assert written[0] == split and len(written) == 3
    assert json.loads(gzip.decompress(split.read_bytes())) == {"episodes": []}
    content = json.loads(gzip.decompress((tmp_path / "val/content/Adrian.json.gz").read_bytes()))
    assert len(content["episodes"]) == 5
    assert content["episodes"][0]["scene_id"] == "gibson/Adrian.glb"
    back = ep.read_pointnav_dataset(split)
    assert len(back) == 8
    assert {e["scene_id"] for e in back} == {"gibson/Adrian.glb", "gibson/Airport.glb"}
    want = {**{("gibson/Adrian.glb", e["episode_id"]): e for e in by_scene["Adrian"]},
            **{("gibson/Airport.glb", e["episode_id"]): e for e in by_scene["Airport"]}}
    for e in back:
        w = dict(want[(e["scene_id"], e["episode_id"])], scene_id=e["scene_id"])
        assert e == w
    # the split folder and one scene
    assert len(ep.read_pointnav_dataset(tmp_path / "val", scenes=["Airport"])) == 3
    # same input, same bytes (gzip without timestamps)
    b1 = (tmp_path / "val/content/Adrian.json.gz").read_bytes()
    ep.write_pointnav_dataset(tmp_path / "again", "val", by_scene,
                              scene_path_fn=lambda s: f"gibson/{s}.glb")
    assert (tmp_path / "again/val/content/Adrian.json.gz").read_bytes() == b1


def test_a_relative_split_path_finds_its_content_files(tmp_path, monkeypatch):
    """The split file named relative to the working folder reads its content/ files too (the
    content folder was once joined to the relative split folder twice, and none was found)."""
    ep.write_pointnav_dataset(tmp_path / "ds", "val", {"A": _eps(), "B": _eps(scene="gibson/B.glb", seed=4)})
    monkeypatch.chdir(tmp_path)
    for path in ("ds/val/val.json.gz", "ds/val"):
        assert len(ep.read_pointnav_dataset(path)) == 10, path


def test_write_refuses_to_overwrite_and_replaces_with_overwrite(tmp_path):
    ep.write_pointnav_dataset(tmp_path, "train", {"A": _eps(), "B": _eps(seed=4)})
    before = (tmp_path / "train/content/A.json.gz").read_bytes()
    with pytest.raises(OutputExistsError):
        ep.write_pointnav_dataset(tmp_path, "train", {"A": _eps(seed=9)})
    assert (tmp_path / "train/content/A.json.gz").read_bytes() == before
    ep.write_pointnav_dataset(tmp_path, "train", {"A": _eps(seed=9)}, overwrite=True)
    assert not (tmp_path / "train/content/B.json.gz").exists()  # the split was replaced
    assert (tmp_path / "train/content/A.json.gz").read_bytes() != before
    assert not list((tmp_path / "train").rglob("*.tmp"))
    bad = _eps()
    bad[1]["start_rotation"] = [0, 0, 0, 2]
    with pytest.raises(InputError, match="episode 1 .*unit quaternion"):
        ep.write_pointnav_dataset(tmp_path, "bad", {"A": bad})
    assert not (tmp_path / "bad").exists()


def _habitat_episode(i, scene, **extra):
    e = {"episode_id": str(i), "scene_id": scene,
         "start_position": [1.0 + i, 0.1, -2.5], "start_rotation": [0, 0.7071068, 0, 0.7071068],
         "info": {"geodesic_distance": 6.3, "difficulty": "easy"},
         "goals": [{"position": [2.3, 0.12, 16.9], "radius": None}],
         "shortest_paths": None, "start_room": None}
    e.update(extra)
    return e


def test_reads_habitats_own_layouts(tmp_path):
    # 1) everything in the split file, habitat's scene path prefix, extra fields kept
    eps = [_habitat_episode(0, "data/scene_datasets/gibson/Adrian.glb"),
           _habitat_episode(1, "data/scene_datasets/gibson/Cantwell.glb",
                            scene_dataset_config="default", additional_obj_config_paths=[])]
    write_gz(tmp_path / "one" / "val" / "val.json.gz", {"episodes": eps})
    back = ep.read_pointnav_dataset(tmp_path / "one/val/val.json.gz")
    assert back == eps
    back = ep.read_pointnav_dataset(tmp_path / "one/val/val.json.gz", scenes=["Cantwell"],
                                    scenes_dir="/data/scenes")
    assert [e["scene_id"] for e in back] == ["/data/scenes/gibson/Cantwell.glb"]
    assert back[0]["scene_dataset_config"] == "default"
    # 2) empty split file + content/ files (MP3D layout), integer ids become strings
    root = tmp_path / "two" / "train"
    write_gz(root / "train.json.gz", {"episodes": []})
    write_gz(root / "content" / "17DRP5sb8fy.json.gz",
        {"episodes": [_habitat_episode(0, "mp3d/17DRP5sb8fy/17DRP5sb8fy.glb", episode_id=0)]})
    write_gz(root / "content" / "1LXtFkjw3qL.json.gz",
        {"episodes": [_habitat_episode(i, "mp3d/1LXtFkjw3qL/1LXtFkjw3qL.glb") for i in range(3)]})
    back = ep.read_pointnav_dataset(root / "train.json.gz")
    assert len(back) == 4 and back[0]["episode_id"] == "0"
    assert back[0]["goals"][0]["radius"] is None
    assert len(ep.read_pointnav_dataset(root, scenes=["1LXtFkjw3qL"])) == 3
    with pytest.raises(InputError, match="no content file"):
        ep.read_pointnav_dataset(root, scenes=["nope"])
    # 3) one content file on its own
    assert len(ep.read_pointnav_dataset(root / "content" / "1LXtFkjw3qL.json.gz")) == 3
    # 4) plain (not gzipped) JSON
    (tmp_path / "plain.json").write_text(json.dumps({"episodes": eps}))
    assert len(ep.read_pointnav_dataset(tmp_path / "plain.json")) == 2


@pytest.mark.parametrize("mutate, msg", [
    (lambda e: e.pop("start_position"), "start_position"),
    (lambda e: e.update(start_position=[0, "a", 0]), "start_position"),
    (lambda e: e.update(start_position=[0, float("nan"), 0]), "start_position"),
    (lambda e: e.update(start_rotation=[0, 0, 0]), "start_rotation"),
    (lambda e: e.update(goals=[]), "goals"),
    (lambda e: e.update(goals=[{"radius": 0.2}]), "goal"),
    (lambda e: e.update(goals=[{"position": [0, 0, 0], "radius": -1}]), "radius"),
    (lambda e: e.update(scene_id=None), "scene_id"),
    (lambda e: e.update(episode_id=[1]), "episode_id"),
    (lambda e: e.update(info={"geodesic_distance": "far"}), "geodesic_distance"),
])
def test_malformed_episodes_are_input_errors(tmp_path, mutate, msg):
    eps = [_habitat_episode(0, "gibson/A.glb"), _habitat_episode(1, "gibson/A.glb")]
    mutate(eps[1])
    p = tmp_path / "bad.json.gz"
    write_gz(p, {"episodes": eps})
    with pytest.raises(InputError, match=msg) as e:
        ep.read_pointnav_dataset(p)
    assert str(p) in str(e.value) and "episode 1" in str(e.value)


def test_malformed_files_are_input_errors(tmp_path):
    p = tmp_path / "x.json.gz"
    p.write_bytes(gzip.compress(b"{not json"))
    with pytest.raises(InputError, match="not valid JSON"):
        ep.read_pointnav_dataset(p)
    p.write_bytes(gzip.compress(b"{}")[:-6])
    with pytest.raises(InputError, match="cannot read"):
        ep.read_pointnav_dataset(p)
    p.write_bytes(gzip.compress(b'{"episodes": 3}'))
    with pytest.raises(InputError, match="not a PointNav dataset"):
        ep.read_pointnav_dataset(p)
    with pytest.raises(InputError, match="no such file"):
        ep.read_pointnav_dataset(tmp_path / "missing.json.gz")


# ------------------------------------------------------------- real navmesh + CLI
def _real_navmesh():
    if not APARTMENT.exists():
        pytest.skip("../shared/assets absent")
    from bps_assets.nav.detour import import_detour

    return import_detour(APARTMENT)


def test_rules_hold_on_an_imported_habitat_navmesh():
    nm = _real_navmesh()
    eps = ep.generate_episodes(nm, "apartment_1.glb", 12, seed=0)
    assert len(eps) == 12
    for e in eps:
        _check_rules(e, nm, "apartment_1.glb")
        # both ends are on the navmesh
        p = np.array([e["start_position"], e["goals"][0]["position"]])
        assert np.all(nm.is_navigable(p))


def test_cli_episodes(tmp_path):
    _real_navmesh()
    from click.testing import CliRunner

    from cli.main import main

    out = tmp_path / "pointnav"
    args = ["episodes", str(APARTMENT), "-o", str(out), "--split", "val", "--per-scene", "4",
            "--seed", "1", "--dataset", "gibson"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    eps = ep.read_pointnav_dataset(out / "val" / "val.json.gz")
    assert len(eps) == 4 and eps[0]["scene_id"] == "gibson/apartment_1.glb"
    r = CliRunner().invoke(main, args)
    assert r.exit_code != 0 and "already exists" in r.output
    r = CliRunner().invoke(main, args + ["--overwrite"])
    assert r.exit_code == 0
    assert ep.read_pointnav_dataset(out / "val") == eps  # same seed, same episodes
