"""ObjectNav data end to end through the CLI, as a user runs it: annotated scans (``bps-assets
synth --semantic``, MP3D and Gibson layouts; HM3D: the v0.2 tree of tests/hm3d_tree.py with
synth's .semantic pair) ->
``bps-assets preprocess`` -> ``bps-assets episodes --task objectnav`` on the packed scenes it
wrote (default --scenes) -> habitat-lab's own ``ObjectNavDatasetV1`` reads the split. Every view
point lies on the navmesh, and the batch renderer's semantic sensor (a different ray caster
from the generator's) sees the goal object from it, with the file's ``iou``."""
from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner

from bps_assets.nav import load_navmesh
from bps_assets.nav.view_points import DEFAULTS as VP
from bps_assets.packed_scene import read_packed_scene
from bps_assets.readers.semantic_categories import objectnav_hm3d
from cli.main import main
from habitat_lab_stub import habitat_lab  # noqa: F401 - the fixture


def _cli(*args):
    r = CliRunner().invoke(main, [str(a) for a in args])
    assert r.exit_code == 0, r.output
    return r


def _hm3d_source(src: Path) -> str:
    import hm3d_tree
    from bps_assets.synth import semantic as ssem

    folder, index, sid, name, _ = hm3d_tree.SCANS[1]
    glb = hm3d_tree.scan_dir(src, folder, index, sid) / f"{sid}.basis.glb"
    hm3d_tree.write_scan(glb, name, ktx2=None)
    ssem.write_hm3d(glb, "gibson", name, y_up=True)
    return folder


@pytest.fixture(scope="module", params=["mp3d", "hm3d", "gibson"])
def pipeline(request, tmp_path_factory):
    """(dataset, preprocess OUT, episodes root, split, manifest scenes) after the three commands."""
    ds = request.param
    root = tmp_path_factory.mktemp(ds)
    src, out, eps = root / "src", root / "out", root / "eps"
    if ds in ("mp3d", "gibson"):   # gibson layout: synth writes HM3D-Semantics files beside the scan
        _cli("synth", src, "--layout", ds, "-n", 1, "--semantic")
        split = "benchmark" if ds == "mp3d" else "tiny"
    else:
        split = _hm3d_source(src)
    _cli("preprocess", src, "-o", out, "--dataset", ds, "--split", split, "--workers", 1)
    scenes = {n: e for n, e in json.loads((out / "manifest.json").read_text())["scenes"].items()
              if e["status"] == "ok"}
    assert len(scenes) == 1 and all(e["stats"]["objects"] > 0 for e in scenes.values())
    navs = [out / e["outputs"]["navmesh"]["path"] for e in scenes.values()]
    _cli("episodes", *navs, "--task", "objectnav", "-o", eps, "--split", "val", "--per-scene", 6,
         "--seed", 1, "--any-subset")   # no --dataset, no --scenes: the preprocess output names both
    # (--any-subset: val episodes on the one scene, whatever subset it has)
    return ds, out, eps, scenes


def _config(root):
    return SimpleNamespace(data_path=str(root / "{split}" / "{split}.json.gz"), split="val",
                           scenes_dir="data/scene_datasets", content_scenes=["*"])


def _quat_mul(a, b):
    ax, ay, az, aw = a
    bx, by, bz, bw = b
    return [aw * bx + ax * bw + ay * bz - az * by, aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw, aw * bw - ax * bx - ay * by - az * bz]


def test_habitat_reads_the_split_and_view_points_see_their_objects(pipeline, habitat_lab):
    from bps_runtime.render import RenderOptions, build_shading_data, make_renderer

    ds, out, eps, scenes = pipeline
    (name, entry), = scenes.items()
    h = habitat_lab.ObjectNavDatasetV1(_config(eps))
    assert h.category_to_task_category_id == objectnav_hm3d()
    ps = read_packed_scene(out / entry["outputs"]["scene"]["path"])
    table = ps.semantics
    # habitat's scene annotation ids are the object table's category indices (mpcat40)
    for cat, k in h.category_to_scene_annotation_category_id.items():
        assert k == -1 or table.categories[k] == cat
    assert len(h.episodes) == 6
    # the scene is named as habitat names it: the scan's path under the source root
    assert {e.scene_id for e in h.episodes} == {"data/scene_datasets/" + entry["sources"]["scene"]["path"]}
    navmesh = load_navmesh(out / entry["outputs"]["navmesh"]["path"])
    opts = RenderOptions(resolution=(VP.height, VP.width), hfov_deg=VP.hfov, sensor_height=VP.sensor_height,
                         threads=2)
    r = make_renderer("embree", opts)
    sd = build_shading_data(ps)
    r.attach(0, sd, r.prepare(sd, ps.positions, ps.indices))
    goals = {id(g): g for e in h.episodes for g in e.goals}.values()
    assert {g.object_category for g in goals} >= {e.object_category for e in h.episodes}
    checked = 0
    for g in goals:
        row = int(np.flatnonzero(table.source_ids == g.object_id)[0])   # habitat's id -> our row
        assert table.category_name(row) == g.object_category
        oid = int(table.ids[row])
        assert oid == g.object_id   # the sensor reports habitat's id (MP3D: the .house object index)
        pos = np.array([vp.agent_state.position for vp in g.view_points], np.float32)
        assert len(pos) and np.all(navmesh.is_navigable(pos, 0.1))
        seen = np.zeros(len(pos))
        for pitch in VP.pitches:
            p = math.radians(pitch)
            rot = [_quat_mul(vp.agent_state.rotation, [math.sin(p / 2), 0, 0, math.cos(p / 2)])
                   for vp in g.view_points]
            # the renderer pitches the camera about the sensor, 0.88 m above the feet (as habitat)
            sem = r.render(np.zeros(len(pos), np.int64), pos, np.asarray(rot, np.float32), ("semantic",))
            seen += (sem["semantic"].numpy()[..., 0] == oid).mean((1, 2))
        iou = np.array([vp.iou for vp in g.view_points])
        assert np.all(seen > 0), (g.object_id, seen, iou)
        np.testing.assert_allclose(seen, iou, rtol=0.05, atol=2e-3)
        checked += len(pos)
    assert checked >= 10
