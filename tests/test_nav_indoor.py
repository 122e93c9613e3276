"""Episodes start and end on indoor ground (issue 35 item 3): a synth scene with a walkable roof
(``synth.generate(roof=True)``, an opt-in feature: other scenes keep their bytes) gets an outdoor
roof island larger than its floor; PointNav / ImageNav, ObjectNav and the runtime's sampled
episodes stay off it by default (habitat's largest indoor island) and reach it with all_islands."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from bps_assets import synth
from bps_assets.errors import CorruptFileError
from bps_assets.nav import build_navmesh, load_navmesh
from bps_assets.nav.episodes import EpisodeOptions, generate_episodes
from bps_assets.nav.indoor import episode_islands, island_indoor


@pytest.fixture(scope="module")
def roofed(tmp_path_factory):
    root = tmp_path_factory.mktemp("roof")
    info = synth.generate(root, "gibson", ["Beechwood"], seed=0, size="small", roof=True)[0]
    nav = build_navmesh(info.path, dataset="gibson")
    return info, nav


def _on_roof(info, y):
    return np.asarray(y) > info.roof_y - 0.3


def test_roof_is_an_outdoor_island_larger_than_the_floor(roofed, tmp_path):
    info, nav = roofed
    roof = [i for i in range(nav.num_islands) if _on_roof(info, nav.span_pos[nav.span_island == i, 1]).all()]
    assert len(roof) == 1 and roof[0] == 0           # the largest island is the roof
    assert nav.island_indoor[0] == 0 and (nav.island_indoor[1:] == 1).all()
    assert episode_islands(nav) == [1] and episode_islands(nav, all_islands=True) is None
    # the default scene (no roof) is byte-identical to before the feature: same triangles, no roof
    plain = synth.describe("gibson", "Beechwood", 0, "small")
    assert plain.roof_y is None and plain.triangles != info.triangles
    # stored in the header, read back, permuted with the islands; bad values are corruption
    nav.save(tmp_path / "r.navmesh.bps")
    back = load_navmesh(tmp_path / "r.navmesh.bps")
    assert back.island_indoor.tolist() == pytest.approx(nav.island_indoor.tolist(), abs=1e-4)
    from bps_assets.container import Container, write_container

    with Container(tmp_path / "r.navmesh.bps") as c:
        h = dict(c.header)
        arrays = {k: c.read(k) for k in ("height", "neighbors", "island", "island_area", "island_radius")}
    h["island_indoor"] = [2.0] * nav.num_islands
    h.pop("sections", None)
    write_container(tmp_path / "bad.navmesh.bps", "NAVM", h, arrays)
    with pytest.raises(CorruptFileError, match="island_indoor"):
        load_navmesh(tmp_path / "bad.navmesh.bps")


def test_indoor_share_follows_the_ceiling_distance(roofed):
    info, nav = roofed
    from bps_assets.nav.build import scene_triangles
    from bps_assets.nav.indoor import IndoorOptions

    v, t, _ = scene_triangles(info.path, "gibson")
    # ceilings are ~2.5 m over the floor: a 1 m reach finds none, so nothing is indoor then
    assert (island_indoor(nav, v, t, IndoorOptions(ceiling_within=1.0)) == 0).all()
    assert island_indoor(nav, v, t).tolist() == pytest.approx(nav.island_indoor.tolist())


def test_pointnav_episodes_avoid_the_roof_unless_all_islands(roofed):
    info, nav = roofed
    st: dict = {}
    eps = generate_episodes(nav, "gibson/Beechwood.glb", 30, seed=1, stats=st)
    assert not _on_roof(info, [e["start_position"][1] for e in eps]).any()
    assert not _on_roof(info, [e["goals"][0]["position"][1] for e in eps]).any()
    assert "island 1" in st["where"] and "indoor" in st["where"]
    anyw = generate_episodes(nav, "gibson/Beechwood.glb", 30, seed=1, options=EpisodeOptions(all_islands=True),
                             stats=st)
    assert _on_roof(info, [e["start_position"][1] for e in anyw]).any()
    assert "all 4 islands" in st["where"] and "3.1" in st["where"]


def test_objectnav_starts_avoid_the_roof(roofed):
    from bps_assets.nav.objectnav_episodes import ObjectNavOptions, generate_objectnav_episodes
    from bps_assets.nav.objectnav_files import goals_key

    info, nav = roofed
    sid = "gibson/Beechwood.glb"
    # one goal object on the floor with view points around it, one on the roof
    floor_pt = nav.sample_navigable_point(1, seed=3, island=1)[0]
    roof_pt = nav.sample_navigable_point(1, seed=3, island=0)[0]

    def goal(oid, p):
        return {"object_id": oid, "object_category": "chair", "position": [float(x) for x in p],
                "view_points": [{"agent_state": {"position": [float(x) for x in p], "rotation": [0, 0, 0, 1]},
                                 "iou": 1.0}]}
    gbc = {goals_key(sid, "chair"): [goal(1, floor_pt), goal(2, roof_pt)]}
    o = ObjectNavOptions(closest_dist_limit=0.5, same_floor=False, geodesic_to_euclid_min_ratio=0.0)
    eps = generate_objectnav_episodes(nav, gbc, sid, 12, seed=0, options=o)
    assert not _on_roof(info, [e["start_position"][1] for e in eps]).any()
    assert {e["info"]["closest_goal_object_id"] for e in eps} == {1}
    import dataclasses
    anyw = generate_objectnav_episodes(nav, gbc, sid, 12, seed=0, options=dataclasses.replace(o, all_islands=True),
                                       stats=Counter())
    assert _on_roof(info, [e["start_position"][1] for e in anyw]).any()


def test_runtime_sampled_episodes_avoid_the_roof(roofed):
    from bps_runtime.episodes.sampled import SampledEpisodes
    from bps_runtime.episodes.supply import SupplyOptions
    from bps_runtime.nav.buffers import FieldWorker, NavBuffers, SceneNav

    info, nav = roofed
    for all_islands, want in ((False, False), (True, True)):
        sup = SampledEpisodes(3, FieldWorker(), options=SupplyOptions(goal_pool=8, reservoir=0,
                                                                       all_islands=all_islands))
        sup.register(0, sup.prepare("Beechwood", SceneNav(nav, NavBuffers(capacity=2))))   # what the world does
        e, _ = sup.take(np.zeros(64, np.int64))
        on = _on_roof(info, e.start[:, 1]) | _on_roof(info, e.goal[:, 1])
        assert bool(on.any()) is want


def test_preview_colours_islands_with_a_legend_and_marks_the_episodes_island(roofed, tmp_path):
    from PIL import Image

    from bps_assets.nav.topdown import NAVIGABLE, MapOptions, TopDownMap, island_legend, write_map

    info, nav = roofed
    tdm = TopDownMap(nav, MapOptions(islands=True))
    labels = [label for _, label, _ in island_legend(tdm)]
    assert labels[0].startswith("island 0: 55") and "outdoor" in labels[0] and "episodes" not in labels[0]
    assert "episodes" in labels[1] and "outdoor" not in labels[1]
    assert tdm.island_colour(1) == NAVIGABLE and tdm.island_colour(0) != NAVIGABLE
    # the roof's colour is on the map (its floor panel), under the legend the footer grew by
    write_map(nav, tmp_path / "m.png", options=MapOptions(islands=True))
    im = np.asarray(Image.open(tmp_path / "m.png").convert("RGB"))
    roof_px = np.all(im[: tdm.height] == tdm.island_colour(0), axis=-1).sum()
    assert roof_px > 0.5 * nav.island_area[0] / tdm.mpp ** 2
    assert im.shape[0] > tdm.height   # the footer with the legend


def test_preprocess_episodes_stay_indoor_and_say_where(roofed, tmp_path):
    import gzip
    import json

    from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess

    info, _ = roofed
    res = preprocess(info.path.parent.parent, tmp_path / "o", "gibson", "tiny",
                     PreprocessOptions(workers=1, in_process=True, episodes=12, subsets=("train",)),
                     log=lambda s: None)
    r = [x for x in res.results if x.name == "Beechwood"][0]
    assert r.status == "ok", r.error
    assert "island 1" in r.entry["stats"]["episodes_where"] and "outdoor" not in r.entry["stats"]["episodes_where"]
    doc = json.loads(gzip.decompress((tmp_path / "o" / r.entry["outputs"]["episodes"]["path"]).read_bytes()))
    ys = [e["start_position"][1] for e in doc["episodes"]] + [e["goals"][0]["position"][1] for e in doc["episodes"]]
    assert len(doc["episodes"]) == 12 and not _on_roof(info, ys).any()


def test_cli_episodes_all_islands_flag_and_where(roofed, tmp_path):
    from click.testing import CliRunner

    from bps_assets.nav.episodes import read_pointnav_dataset
    from cli.main import main

    info, nav = roofed
    nav.save(tmp_path / "Beechwood.navmesh.bps")
    for flag, on_roof in (([], False), (["--all-islands"], True)):
        out = tmp_path / f"eps{len(flag)}"
        r = CliRunner().invoke(main, ["episodes", str(tmp_path / "Beechwood.navmesh.bps"), "-o", str(out),
                                      "--split", "val", "--per-scene", "30", "--dataset", "gibson", *flag])
        assert r.exit_code == 0, r.output
        assert ("all 4 islands" if flag else "island 1 (40.8 m^2, 100% indoor") in r.output
        eps = read_pointnav_dataset(out / "val")
        assert bool(_on_roof(info, [e["start_position"][1] for e in eps]).any()) is on_roof
