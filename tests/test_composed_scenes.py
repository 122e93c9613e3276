"""Composed scenes (issue 31): habitat scene dataset configs with objects and articulated
objects, read on third-party data (../shared/datasets), packed as stage + instance table.

ReplicaCAD's stage GLBs are not available: ``_replicacad_copy`` links the real configs,
objects, URDFs and navmeshes into a temporary folder and writes a stand-in stage for each
stage config (a box room sized from the v3_sc0 navmesh bounds), said so in each test.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bps_assets.errors import DatasetError, InputError
from bps_assets.scene_dataset import habitat as H
from bps_assets.scene_dataset.model import quat_wxyz_matrix, rpy_matrix

REPO = Path(__file__).resolve().parents[1]
DATASETS = REPO.parent / "shared" / "datasets"
RCAD = DATASETS / "replicacad"
TEST0 = DATASETS / "habitat-sim-test-assets" / "dataset_tests" / "dataset_0" / "test_dataset_0.scene_dataset_config.json"
TEST1 = DATASETS / "habitat-sim-test-assets" / "dataset_tests" / "dataset_1" / "test_dataset_1.scene_dataset_config.json"

needs_rcad = pytest.mark.skipif(not RCAD.is_dir(), reason="../shared/datasets/replicacad absent")
needs_test = pytest.mark.skipif(not TEST0.is_file(), reason="../shared/datasets/habitat-sim-test-assets absent")


def _replicacad_copy(tmp: Path, scenes=None) -> Path:
    """ReplicaCAD with stand-in stages (the real ones are not public here): configs, objects,
    URDFs and navmeshes linked, each stage a box room sized from v3_sc0's navmesh bounds."""
    from bps_assets.nav.detour import read_detour_navmesh
    from bps_assets.scene_dataset.standin import replicacad_with_standins

    bounds = read_detour_navmesh(RCAD / "navmeshes" / "v3_sc0_staging_00.navmesh").bounds
    return replicacad_with_standins(RCAD, tmp / "replica_cad", bounds, scenes)


# ------------------------------------------------------------------------------ item 1: reading

@needs_test
def test_habitat_sim_dataset_0_parses_as_habitat_sim_tests_assert():
    """The values habitat-sim's MetadataMediatorTest asserts for dataset_0."""
    ds = H.read_dataset_config(TEST0)
    # 7 stage handles there = these 6 + habitat's default "NONE" stage
    assert len(ds.stages) == 6
    assert sum(h.endswith(".glb") for h in ds.stages) == 3
    assert len(ds.objects) == 6
    st = ds.lookup(ds.stages, "dataset_test_stage")
    assert st.attrs["scale"] == [2, 2, 2] and st.attrs["up"] == [0, 1, 0] and st.attrs["front"] == [0, 0, -1]
    assert st.attrs["margin"] == 0.03 and st.attrs["origin"] == [0, 0, 0]
    mod = ds.lookup(ds.stages, "modified_test_stage")
    assert mod.attrs["scale"] == [1, 1, 1] and mod.attrs["margin"] == 0.041 and mod.attrs["friction_coefficient"] == 0.4
    new = ds.lookup(ds.stages, "new_test_stage")
    # same render asset as the stage config's, though written relative to the dataset config
    assert H._asset_path(new) == H._asset_path(st)
    assert new.attrs["up"] == [0, -1, 0] and new.attrs["gravity"] == [0, 9.8, 0]
    assert ds.lookup(ds.stages, "glbload_test_stage0.glb").attrs["origin"] == [1.0, 2.0, 3.0]  # default_attributes
    o1 = ds.lookup(ds.objects, "modified_test_object1_1_slick_heavy")
    assert o1.attrs["mass"] == 3.5 and o1.attrs["friction_coefficient"] == 0.2
    o3 = ds.lookup(ds.objects, "new_test_object3")
    assert str(H._asset_path(o3)).endswith("dataset_test_object3.glb") and o3.attrs["mass"] == 1.1
    assert o3.attrs["inertia"] == [3, 2, 1]
    assert ds.lookup(ds.objects, "dataset_test_object0").attrs["mass"] == 9
    assert {k: v.name for k, v in ds.navmeshes.items()} == {"navmesh_path1": "test_navmesh_path1",
                                                              "navmesh_path2": "test_navmesh_path2"}
    sc = H.read_scene_instance(ds, "dataset_test_scene")
    assert sc.stage.name == "modified_test_stage"
    assert [i.name for i in sc.instances] == ["dataset_test_object1", "dataset_test_object2"]
    # asset_local origins: the asset's own origin lands on the translation
    assert np.allclose(sc.instances[0].transform[:3, 3], [0.1, 0.2, 0.3])
    assert np.allclose(sc.instances[1].transform[:3, 3], [0.3, 0.4, 0.5])
    # the handle resolves to test_navmesh_path1, a file the assets do not ship: no navmesh (habitat-sim
    # warns and loads none), the missing file noted
    assert sc.navmesh is None and Path(sc.navmesh_missing).name == "test_navmesh_path1"
    assert any("test_navmesh_path1 does not exist" in n for n in sc.notes)
    assert sc.semantic_scene.name == "dataset_test_scene.semantic_config.json"  # %%CONFIG_NAME...%% replaced
    assert any("default_lighting" in n for n in sc.notes)


@needs_test
def test_habitat_sim_dataset_1_counts():
    """habitat-sim: 6 stage handles (its default NONE stage + 2 globbed + 2 modified + 1 new),
    6 object templates (4 globbed + 2 modified), 2 scene instances."""
    ds = H.read_dataset_config(TEST1)
    assert len(ds.stages) == 5 and len(ds.objects) == 6 and len(ds.scenes) == 2


def test_com_origin_rules_follow_habitat_sim(tmp_path):
    """COM vs asset_local, COM from the config vs the box centre, scale, non-uniform scale:
    expected values from RigidObject::finalizeObject / resetStateFromSceneInstanceAttr."""
    from bps_assets.scene_dataset.model import frame_matrix
    cfg = tmp_path / "d.scene_dataset_config.json"
    (tmp_path / "o").mkdir()
    (tmp_path / "s").mkdir()
    for n in ("a", "b"):
        (tmp_path / "o" / f"{n}.glb").write_bytes(b"x")
    (tmp_path / "o" / "a.object_config.json").write_text(json.dumps({"render_asset": "a.glb", "COM": [0.1, 0.2, 0.3], "scale": [2, 2, 2]}))
    (tmp_path / "o" / "b.object_config.json").write_text(json.dumps({"render_asset": "b.glb", "up": [0, 0, 1], "front": [0, 1, 0]}))
    q = [math.cos(0.3), 0, math.sin(0.3), 0]
    (tmp_path / "s" / "x.scene_instance.json").write_text(json.dumps({"object_instances": [
        {"template_name": "a", "translation": [1, 2, 3], "rotation": q, "translation_origin": "COM"},
        {"template_name": "a", "translation": [1, 2, 3], "rotation": q, "translation_origin": "asset_local", "uniform_scale": 0.5},
        {"template_name": "b", "translation": [0, 1, 0], "non_uniform_scale": [1, 2, 3]},
        {"template_name": "b", "translation": [0, 1, 0], "translation_origin": "asset_local"}]}))
    cfg.write_text(json.dumps({"objects": {"paths": {".json": ["o"]}}, "scene_instances": {"paths": {".json": ["s"]}}}))
    bounds = {str(tmp_path / "o" / "b.glb"): ((0, 0, 0), (1, 2, 4))}
    sc = H.read_scene_instance(H.read_dataset_config(cfg), "x", bounds=lambda p: bounds[p])
    R = quat_wxyz_matrix(q)
    p = np.array([0.5, -0.5, 0.25])
    t0 = sc.instances[0].transform
    # COM origin: the COM (asset point COM) lands on the translation
    assert np.allclose(t0[:3, :3] @ [0.1, 0.2, 0.3] + t0[:3, 3], [1, 2, 3])
    assert np.allclose(t0[:3, :3] @ p + t0[:3, 3], R @ (2 * p - 2 * np.array([0.1, 0.2, 0.3])) + [1, 2, 3])
    t1 = sc.instances[1].transform   # asset_local, scale 2 x 0.5: the asset origin on the translation
    assert np.allclose(t1[:3, 3], [1, 2, 3]) and np.allclose(t1[:3, :3], R)
    # b: Z-up / +Y-front asset oriented onto habitat's frame, COM from the box centre
    O = frame_matrix([0, 0, 1], [0, 1, 0])
    assert np.allclose(O @ [0, 0, 1], [0, 1, 0]) and np.allclose(O @ [0, 1, 0], [0, 0, -1])
    t2 = sc.instances[2].transform
    centre = np.diag([1, 2, 3]) @ O @ np.array([0.5, 1, 2])
    assert np.allclose(t2[:3, :3] @ [0.5, 1, 2] + t2[:3, 3], [0, 1, 0])   # box centre on the translation
    assert np.allclose(t2[:3, :3], np.diag([1, 2, 3]) @ O) and np.allclose(t2[:3, 3], [0, 1, 0] - centre)
    assert np.allclose(sc.instances[3].transform[:3, 3], [0, 1, 0])


@needs_rcad
def test_replicacad_objects_and_links_land_where_habitat_sim_puts_them():
    """Every v3_sc0_staging_00 object and URDF link, against values derived by hand from
    habitat-sim's rules: rigid objects (all COM [0,0,0], COM origin) at T(t) R; articulated
    links at T(t) R (base) x joint origins (rpy: Rz Ry Rx, translations x uniform_scale) x
    visual origin x mesh scale x uniform_scale, joints at 0 (no initial_joint_pose there)."""
    ds = H.read_dataset_config(RCAD / "replicaCAD.scene_dataset_config.json")
    raw = json.loads((RCAD / "configs/scenes/v3_sc0_staging_00.scene_instance.json").read_text())
    sc = H.read_scene_instance(ds, "v3_sc0_staging_00", skip_missing=True)   # stage and bike_02 GLBs absent
    rigid = [i for i in sc.instances if i.kind == "object"]
    want = [o for o in raw["object_instances"] if o["template_name"] != "frl_apartment_bike_02"]
    assert len(rigid) == len(want) == 17
    for inst, o in zip(rigid, want):
        assert inst.name == o["template_name"] and inst.motion_type == o["motion_type"]
        assert np.allclose(inst.transform[:3, :3], quat_wxyz_matrix(o["rotation"]), atol=1e-9)
        assert np.allclose(inst.transform[:3, 3], o["translation"])
        cfg = json.loads((RCAD / "configs/objects" / f"{o['template_name']}.object_config.json").read_text())
        assert inst.semantic_id == cfg["semantic_id"] and inst.category   # lexicon name
    wall = rigid[0]
    assert wall.semantic_id == 94 and wall.category == "wall_cabinet"
    # the fridge: base at (0.535, 1.01, 4.4598), identity rotation; body below a fixed joint rpy (1.565,0,0)
    fr = {i.name.split("/")[1]: i.transform for i in sc.instances if i.name.startswith("fridge/")}
    assert set(fr) == {"body", "top_door", "bottom_door"}
    body = np.eye(4)
    body[:3, :3] = rpy_matrix([1.565, 0, 0])
    body[:3, 3] = [0.535, 1.01, 4.4597649574279785]
    assert np.allclose(fr["body"], body)
    top = body.copy()
    top[:3, 3] = body[:3, :3] @ (np.array([0.322, 0.353, -0.385]) + [0.014, -0.355, 0]) + body[:3, 3]
    assert np.allclose(fr["top_door"], top)
    # chest of drawers: uniform_scale 0.4 scales meshes and every joint / visual translation
    ch = [i for i in sc.instances if i.name.startswith("chestOfDrawers_01/")]
    assert len(ch) == 7
    for i in ch:
        assert np.allclose(np.linalg.norm(i.transform[:3, :3], axis=0), 0.4)
    base = ch[0].transform
    assert np.allclose(base[:3, 3], [-2.333279848098755, 0.0, -0.4101424217224121])
    aos = {i.name.split("/")[0] for i in sc.instances if i.kind == "articulated"}
    assert aos == {a["template_name"] for a in raw["articulated_object_instances"]}


# ------------------------------------------------------------------------------ item 5: bad data

def _tiny_dataset(tmp_path, instances, objects=None, aos=None):
    (tmp_path / "o").mkdir(exist_ok=True)
    (tmp_path / "s").mkdir(exist_ok=True)
    for name, cfg in (objects or {"a": {"render_asset": "a.glb", "COM": [0, 0, 0]}}).items():
        (tmp_path / "o" / f"{name}.object_config.json").write_text(json.dumps(cfg))
    (tmp_path / "o" / "a.glb").write_bytes(b"x")
    body = {"objects": {"paths": {".json": ["o"]}}, "scene_instances": {"paths": {".json": ["s"]}}}
    if aos:
        body["articulated_objects"] = {"paths": {".urdf": ["u"]}}
        (tmp_path / "u").mkdir(exist_ok=True)
        for n, text in aos.items():
            (tmp_path / "u" / f"{n}.urdf").write_text(text)
    (tmp_path / "s" / "x.scene_instance.json").write_text(json.dumps(instances) if not isinstance(instances, bytes) else "")
    if isinstance(instances, bytes):
        (tmp_path / "s" / "x.scene_instance.json").write_bytes(instances)
    cfg = tmp_path / "d.scene_dataset_config.json"
    cfg.write_text(json.dumps(body))
    return H.read_dataset_config(cfg)


def test_missing_assets_are_one_error_listing_all(tmp_path):
    urdf = ('<robot name="r"><link name="b"><visual><geometry><mesh filename="gone.glb"/></geometry></visual></link>'
            '<link name="c"><visual><geometry><mesh filename="gone2.glb"/></geometry></visual></link>'
            '<joint name="j" type="fixed"><parent link="b"/><child link="c"/></joint></robot>')
    ds = _tiny_dataset(tmp_path, {
        "stage_instance": {"template_name": "nostage"},
        "object_instances": [{"template_name": "a"}, {"template_name": "ghost"}, {"template_name": "broken"}],
        "articulated_object_instances": [{"template_name": "r"}, {"template_name": "nourdf"}]},
        objects={"a": {"render_asset": "a.glb", "COM": [0, 0, 0]}, "broken": {"render_asset": "nope.glb"}},
        aos={"r": urdf})
    with pytest.raises(H.MissingAssetsError) as e:
        H.read_scene_instance(ds, "x")
    kinds = [(m["instance"].split()[0], m["kind"]) for m in e.value.missing]
    assert kinds == [("stage_instance", "stage template"), ("object_instances[1]", "object template"),
                     ("object_instances[2]", "render_asset"), ("articulated_object_instances[0]", "URDF mesh"),
                     ("articulated_object_instances[0]", "URDF mesh"),
                     ("articulated_object_instances[1]", "articulated object template")]
    assert "nope.glb" in str(e.value) and "gone2.glb" in str(e.value) and "x.scene_instance.json" in str(e.value)
    assert all(m["scene"] == "x" for m in e.value.missing)
    sc = H.read_scene_instance(ds, "x", skip_missing=True)   # --skip-missing-assets
    assert [i.name for i in sc.instances] == ["a"] and len(sc.skipped) == 6


@pytest.mark.parametrize("inst, words", [
    ({"template_name": "a", "translation": [0, float("nan"), 0]}, "not finite"),
    ({"template_name": "a", "rotation": [float("inf"), 0, 0, 0]}, "not finite"),
    ({"template_name": "a", "rotation": [0, 0, 0, 0]}, "norm 0"),
    ({"template_name": "a", "uniform_scale": 0}, "zero scale"),
    ({"template_name": "a", "non_uniform_scale": [1, 0, 1]}, "zero scale"),
    # an integer beyond float range (numpy raises OverflowError converting it)
    ({"template_name": "a", "translation": [10 ** 400, 0, 0]}, "translation .* is not 3 numbers"),
    ({"template_name": "a", "uniform_scale": -(10 ** 400)}, "uniform_scale .* is not 1 numbers"),
])
def test_bad_transforms_are_typed_errors(tmp_path, inst, words):
    ds = _tiny_dataset(tmp_path, {"object_instances": [inst]})
    with pytest.raises(DatasetError, match=words):
        H.read_scene_instance(ds, "x")


def _refused_peak(fn, match: str) -> int:
    """The peak Python allocation (bytes, tracemalloc) of ``fn()``, which must raise a
    DatasetError matching ``match``."""
    import tracemalloc

    tracemalloc.start()
    try:
        with pytest.raises(DatasetError, match=match):
            fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_million_instances_is_refused_before_parsing(tmp_path):
    """10^6 instances (22 MB of JSON): refused from a count of the raw bytes; the peak Python
    allocation stays near the file's size instead of the ~1 GB a parse would take."""
    raw = b'{"object_instances":[' + b",".join([b'{"template_name":"a"}'] * 1_000_000) + b"]}"
    ds = _tiny_dataset(tmp_path, raw)
    peak = _refused_peak(lambda: H.read_scene_instance(ds, "x"), "exceed the cap")
    assert peak < 3 * len(raw)
    raw = b'{"object_instances":[' + b",".join([b"{}"] * 1_000_000) + b"]}"   # no template names
    ds = _tiny_dataset(tmp_path, raw)
    with pytest.raises(DatasetError, match="exceed the cap"):
        H.read_scene_instance(ds, "x")


def test_skipped_entries_count_toward_the_instance_cap(tmp_path):
    """Group ids are entry indices: 2^17 template-less ``{}`` entries (skipped under
    --skip-missing-assets, not counted by the raw ``template_name`` count) before a real one
    would give it a group id the packed file's reader refuses; the entry count is capped."""
    from bps_assets.composed_section import MAX_INSTANCES

    ds = _tiny_dataset(tmp_path, {"object_instances": [{}] * MAX_INSTANCES + [{"template_name": "a"}]})
    with pytest.raises(DatasetError, match=f"{MAX_INSTANCES + 1} instance entries exceed the cap") as e:
        H.read_scene_instance(ds, "x", skip_missing=True)
    assert "x.scene_instance.json" in str(e.value)
    ds = _tiny_dataset(tmp_path, {"object_instances": [{}] * 3 + [{"template_name": "a"}]})
    assert [i.group for i in H.read_scene_instance(ds, "x", skip_missing=True).instances] == [3]


def test_urdf_cycle_is_a_typed_error(tmp_path):
    urdf = ('<robot name="r"><link name="a"/><link name="b"/><link name="c"/>'
            '<joint name="j1" type="fixed"><parent link="a"/><child link="b"/></joint>'
            '<joint name="j2" type="fixed"><parent link="b"/><child link="c"/></joint>'
            '<joint name="j3" type="fixed"><parent link="c"/><child link="a"/></joint></robot>')
    ds = _tiny_dataset(tmp_path, {"articulated_object_instances": [{"template_name": "r"}]}, aos={"r": urdf})
    with pytest.raises(DatasetError, match="cycle"):
        H.read_scene_instance(ds, "x")


# ------------------------------------------------------------------------------ items 2, 3, 6: end to end

def _run_cli(*args):
    return subprocess.run([sys.executable, "-m", "cli.main", *args], capture_output=True, text=True, cwd=REPO)


@needs_rcad
def test_preprocess_replicacad_end_to_end_with_stand_in_stage(tmp_path):
    """ReplicaCAD v3_sc0_staging_00 (stand-in box-room stage: the real stage GLB is not public
    here; bike_02's GLB neither, dropped with --skip-missing-assets and listed in the manifest):
    preprocess, assets packed once, flattened read places every instance, navmesh built from
    the stage + STATIC objects + articulated objects, `info --json` lists the instances."""
    from bps_assets.packed_scene import read_packed_scene
    from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess
    from bps_assets.scene_dataset.packing import navmesh_triangles, read_composed

    cfg = _replicacad_copy(tmp_path)
    out = tmp_path / "out"
    opts = PreprocessOptions(in_process=True, subsets=None, skip_missing_assets=True, navmesh="build")
    from bps_assets.pipeline import datasets
    ds = datasets.load_dataset(str(cfg))
    assert "v3_sc0_staging_00" in ds.scene_files and len(ds.scene_files) == 91
    # two scenes sharing the object library (all 91 would take minutes here)
    cfg = _replicacad_copy(tmp_path / "two", ["v3_sc0_staging_00", "v3_sc0_staging_01"])
    res = preprocess(cfg.parent, out, str(cfg), options=opts)
    assert res.ok, [r.error for r in res.results]
    man = json.loads((out / "manifest.json").read_text())
    e = man["scenes"]["v3_sc0_staging_00"]
    assert e["stats"]["skipped_instances"][0]["template"] == "frl_apartment_bike_02"
    assert e["stats"]["instances"] == 48
    lib = {k: o for k, o in e["outputs"].items() if k.startswith("asset:")}
    assert len(lib) == e["stats"]["assets"] and all(o["path"].startswith("assets/") for o in lib.values())
    r = _run_cli("verify", str(out / "manifest.json"), "--deep")   # the asset library is checked too
    files = sum(len(x["outputs"]) for x in man["scenes"].values())
    assert r.returncode == 0 and f"{files} files" in r.stdout, r.stdout + r.stderr
    # each asset once for both scenes
    assets = sorted(p.name for p in (out / "assets").iterdir())
    assert len(assets) == len(set(assets))
    e1 = man["scenes"]["v3_sc0_staging_01"]["stats"]
    assert e1["assets_converted"] < e1["assets"]        # reused the library
    scene = out / "scenes" / "v3_sc0_staging_00.bps"
    stage, table, paths = read_composed(scene)
    flat = read_packed_scene(scene)
    assert flat.positions.shape[0] > stage.positions.shape[0]
    assert flat.semantics is not None and len(flat.semantics.ids) == len(set(table.group.tolist()))
    # a flattened instance's vertices are its asset's vertices through its transform
    i = 0
    asset = read_packed_scene(paths[int(table.asset[i])], ["positions"])
    m = table.transform[i]
    want = asset.positions.astype(np.float64) @ m[:3, :3].T + m[:3, 3]
    lo = flat.object_aabb[flat.object_ids.tolist().index(int(table.group[i]) + 1)]
    assert np.allclose(lo[:3], want.min(0), atol=1e-4) and np.allclose(lo[3:], want.max(0), atol=1e-4)
    v, t = navmesh_triangles(scene)
    dyn = [k for k in range(table.count) if table.motion_type(k) == "DYNAMIC" and table.header["kinds"][k] == "object"]
    assert t.shape[0] < flat.indices.shape[0] or not dyn
    r = _run_cli("info", str(scene), "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)["instances"]
    assert len(info) == table.count
    first = info[0]
    assert first["name"] == "frl_apartment_wall_cabinet_02" and first["semantic_id"] == 94
    assert first["category"] == "wall_cabinet" and first["motion_type"] == "STATIC"
    assert np.allclose(np.array(first["transform"])[:3, 3], [0.5339288711547852, 1.0684746503829956, -0.4996377229690552])


@needs_test
def test_preprocess_habitat_sim_test_dataset_cli(tmp_path):
    """`bps-assets preprocess X.scene_dataset_config.json -o OUT` on habitat-sim's dataset_0."""
    out = tmp_path / "out"
    r = _run_cli("preprocess", str(TEST0), "-o", str(out), "--in-process", "--json", "--no-progress")
    assert r.returncode == 0, r.stderr[-2000:]
    man = json.loads((out / "manifest.json").read_text())
    assert list(man["scenes"]) == ["dataset_test_scene"]
    assert man["scenes"]["dataset_test_scene"]["stats"]["instances"] == 2
    r = _run_cli("info", str(out / "scenes" / "dataset_test_scene.bps"), "--json")
    info = json.loads(r.stdout)["instances"]
    assert [i["name"] for i in info] == ["dataset_test_object1", "dataset_test_object2"]


@needs_rcad
def test_preprocess_imports_the_scene_navmesh_instance(tmp_path):
    """A scene naming a ``navmesh_instance`` gets that navmesh imported (ReplicaCAD's
    navmeshes/ are made for a 0.3 m agent, so the run asks for one); stand-in stage as above."""
    from bps_assets.nav.settings import DEFAULT_SETTINGS
    from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess

    cfg = _replicacad_copy(tmp_path, ["v3_sc0_staging_00"])
    nav = dataclasses.replace(DEFAULT_SETTINGS, agent_radius=0.3)
    res = preprocess(cfg.parent, tmp_path / "out", str(cfg),
                     options=PreprocessOptions(in_process=True, skip_missing_assets=True, nav=nav, episodes=5))
    assert res.ok, [r.error for r in res.results]
    man = json.loads((tmp_path / "out" / "manifest.json").read_text())
    e = man["scenes"]["v3_sc0_staging_00"]
    assert e["sources"]["navmesh"]["path"] == "navmeshes/v3_sc0_staging_00.navmesh"
    assert e["stats"]["navmesh_source"] == "imported", e["stats"].get("navmesh_note")
    assert e["stats"]["episodes"] == 5          # PointNav episodes on a composed scene (item 4)
    # ObjectNav goals and episodes from the flattened scene's objects (one per object instance)
    from bps_assets.nav import load_navmesh
    from bps_assets.nav.objectnav_episodes import objectnav_scene, semantic_scene

    v, t, tri_object, table = semantic_scene(tmp_path / "out" / "scenes" / "v3_sc0_staging_00.bps")
    assert set(np.unique(tri_object)) - {0} == set(table.ids.tolist())
    mesh = load_navmesh(tmp_path / "out" / e["outputs"]["navmesh"]["path"])
    ds = objectnav_scene(mesh, v, t, tri_object, table, "v3_sc0_staging_00", 4, 0,
                         categories={"chair": 0, "sofa": 1, "table": 2, "tv_screen": 3})
    assert len(ds.episodes) == 4
    assert all(ep["object_category"] in ("chair", "sofa", "table", "tv_screen") for ep in ds.episodes)
    # InstanceImageNav: objects whose habitat id another shares (e.g. 0: fridge and cabinet) are
    # no goals, said in the stats; every other object is a goal or counted as why not
    from collections import Counter

    from bps_assets.nav.instance_imagenav_episodes import build_instance_goals
    st = Counter()
    goals = build_instance_goals(mesh, v, t, tri_object, table, "v3_sc0_staging_00", stats=st)
    uses = Counter(table.habitat_id(r) for r in range(len(table)))
    ids = [g["object_id"] for g in goals.values()]
    assert ids and all(uses[i] == 1 for i in ids) and 0 in st["shared_ids"]
    assert set(st["shared_ids"]) <= {k for k, c in uses.items() if c > 1}
    assert len(goals) == st["objects"] - st["objects_without_view_points"] - st["objects_with_shared_ids"] \
        - st["objects_without_image_goals"]
    # object boxes come from the assets even when positions are not asked for (preview's read)
    from bps_assets.packed_scene import read_packed_scene
    boxes = read_packed_scene(tmp_path / "out" / "scenes" / "v3_sc0_staging_00.bps",
                              ["object_ids", "object_category", "object_aabb"]).object_aabb
    assert np.allclose(boxes, table.aabb, atol=1e-5) and (boxes[:, 3:] > boxes[:, :3]).all()
    # habitat-sim's recorded output: its navmesh of the real composed scene has holes where our
    # STATIC floor objects (0.3-1.4 m tall: no walking over or under) stand; 1 m off, it does not
    from bps_assets.scene_dataset.packing import read_composed
    _, tab, _ = read_composed(tmp_path / "out" / "scenes" / "v3_sc0_staging_00.bps", ["positions"])
    floor = float(mesh.bounds()[0][1] if callable(mesh.bounds) else mesh.bounds[0][1])

    def navigable_fraction(dx, dz):
        pts = []
        for oid, box in zip(table.ids, table.aabb):
            k = int(np.flatnonzero(tab.group == oid - 1)[0])
            lo, hi = box[:3], box[3:]
            if tab.header["kinds"][k] != "object" or lo[1] > floor + 0.15 or not floor + 0.3 < hi[1] < floor + 1.4:
                continue
            pts += [[x + dx, floor, z + dz] for x in np.linspace(lo[0] + 0.05, hi[0] - 0.05, 8)
                    for z in np.linspace(lo[2] + 0.05, hi[2] - 0.05, 8)]
        assert len(pts) >= 5 * 64   # tables, sofa, chairs, tv stand
        return float(np.mean(mesh.is_navigable(np.array(pts))))

    assert navigable_fraction(0, 0) == 0.0
    assert min(navigable_fraction(dx, dz) for dx, dz in ((1, 0), (-1, 0), (0, 1), (0, -1))) > 0.1
    # `preview --semantic` draws every object's footprint on the floor map (item 6)
    png = tmp_path / "objects.png"
    r = _run_cli("preview", str(tmp_path / "out" / e["outputs"]["navmesh"]["path"]), "-o", str(png),
                 "--semantic", str(tmp_path / "out" / "scenes" / "v3_sc0_staging_00.bps"))
    assert r.returncode == 0, r.stderr
    assert png.stat().st_size > 1000 and f"{len(table)} objects" in r.stdout


def _crate_room(src: Path, objects: list[dict], semantic_id: int | None = None) -> Path:
    """A generated composed dataset: a 6 m box-room stage and a 0.6 m crate object (its config's
    ``semantic_id`` when given) placed by ``objects`` in scene ``s``; returns its scene dataset config."""
    from bps_assets.scene_dataset.standin import write_box_room

    write_box_room(src / "stages" / "room.glb", (-3, 0, -3), (3, 2.5, 3))
    write_box_room(src / "objects" / "crate.glb", (-0.3, 0, -0.3), (0.3, 0.6, 0.3))
    (src / "stages" / "room.stage_config.json").write_text(json.dumps({"render_asset": "room.glb"}))
    (src / "objects" / "crate.object_config.json").write_text(json.dumps(
        {"render_asset": "crate.glb", "COM": [0, 0, 0], "category": "crate",
         **({} if semantic_id is None else {"semantic_id": semantic_id})}))
    (src / "scenes").mkdir()
    (src / "scenes" / "s.scene_instance.json").write_text(json.dumps({
        "stage_instance": {"template_name": "room"}, "object_instances": objects}))
    cfg = src / "d.scene_dataset_config.json"
    cfg.write_text(json.dumps({"stages": {"paths": {".json": ["stages"]}}, "objects": {"paths": {".json": ["objects"]}},
                               "scene_instances": {"paths": {".json": ["scenes"]}}}))
    return cfg


def test_an_unknown_navmesh_instance_handle_is_no_navmesh_as_in_habitat_sim(tmp_path):
    """ReplicaCAD's apt_* scenes name ``empty_stage_navmesh``, not a key of navmesh_instances:
    habitat-sim (MetadataMediator::getFilePathForHandle) warns and loads no navmesh. So here: a
    note naming the scene and handle, no navmesh path; auto builds one saying why, import fails
    naming the scene instance and the handle (not the output file, not "beside it")."""
    from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess

    cfg = _crate_room(tmp_path / "src", [{"template_name": "crate", "translation": [1.5, 0, 1.5]}])
    inst = tmp_path / "src" / "scenes" / "s.scene_instance.json"
    inst.write_text(json.dumps({**json.loads(inst.read_text()), "navmesh_instance": "empty_stage_navmesh"}))
    sc = H.read_scene_instance(H.read_dataset_config(cfg), "s")
    assert sc.navmesh is None and any("s: navmesh_instance 'empty_stage_navmesh'" in n for n in sc.notes)
    assert H.scene_files(cfg)["s"] == ("scenes/s.scene_instance.json", None)
    res = preprocess(cfg.parent, tmp_path / "auto", str(cfg), options=PreprocessOptions(in_process=True, episodes=0))
    (r,) = [r for r in res.results if r.name == "s"]
    assert r.status == "ok" and r.entry["stats"]["navmesh_source"] == "built"
    assert "'empty_stage_navmesh'" in r.entry["stats"]["navmesh_note"] and "navmesh" not in r.entry["sources"]
    res = preprocess(cfg.parent, tmp_path / "imp", str(cfg),
                     options=PreprocessOptions(in_process=True, episodes=0, navmesh="import"))
    (r,) = [r for r in res.results if r.name == "s"]
    assert r.status == "failed" and str(inst) in r.error and "'empty_stage_navmesh'" in r.error
    assert "beside" not in r.error and str(tmp_path / "imp") not in r.error


def test_a_navmesh_instance_file_that_is_missing_is_no_navmesh_as_in_habitat_sim(tmp_path):
    """A listed ``navmesh_instance`` handle whose file is not there: habitat-sim warns "Requested
    navmesh file not found" and loads none (Simulator.cpp). So here: a note naming the scene and
    the file, the header's ``navmesh`` null and ``navmesh_missing`` the path; auto builds one
    saying why, import fails naming the missing file (not "names no navmesh_instance")."""
    from bps_assets.composed_section import HEADER_KEY
    from bps_assets.container import Container
    from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess

    cfg = _crate_room(tmp_path / "src", [{"template_name": "crate", "translation": [1.5, 0, 1.5]}])
    d = json.loads(cfg.read_text())
    cfg.write_text(json.dumps({**d, "navmesh_instances": {"nm": "navmeshes/gone.navmesh"}}))
    inst = tmp_path / "src" / "scenes" / "s.scene_instance.json"
    inst.write_text(json.dumps({**json.loads(inst.read_text()), "navmesh_instance": "nm"}))
    gone = str(tmp_path / "src" / "navmeshes" / "gone.navmesh")
    sc = H.read_scene_instance(H.read_dataset_config(cfg), "s")
    assert sc.navmesh is None and sc.navmesh_missing == gone and any(gone in n for n in sc.notes)
    assert H.scene_files(cfg)["s"] == ("scenes/s.scene_instance.json", None)
    res = preprocess(cfg.parent, tmp_path / "auto", str(cfg), options=PreprocessOptions(in_process=True, episodes=0))
    (r,) = [r for r in res.results if r.name == "s"]
    assert r.status == "ok" and r.entry["stats"]["navmesh_source"] == "built"
    assert gone in r.entry["stats"]["navmesh_note"] and "does not exist" in r.entry["stats"]["navmesh_note"]
    with Container(tmp_path / "auto" / "scenes" / "s.bps") as c:
        comp = c.header[HEADER_KEY]
    assert comp["navmesh"] is None and comp["navmesh_missing"] == gone and comp["navmesh_unknown"] is None
    res = preprocess(cfg.parent, tmp_path / "imp", str(cfg),
                     options=PreprocessOptions(in_process=True, episodes=0, navmesh="import"))
    (r,) = [r for r in res.results if r.name == "s"]
    assert r.status == "failed" and gone in r.error and "names no navmesh_instance" not in r.error


def test_navmesh_import_of_a_composed_file_packed_before_navmesh_unknown_says_so(tmp_path):
    """A composed file without the ``navmesh_unknown`` header key (packed before it existed, kept
    by a resumed run) cannot say why its scene has no navmesh: --navmesh import says that and
    suggests --overwrite, not "names no navmesh_instance" (what a current file without a handle
    gets)."""
    from bps_assets.composed_section import HEADER_KEY
    from bps_assets.container import Container
    from bps_assets.pipeline.backend import Backend
    from hostile_cases import rewrite

    now = _tiny_composed(tmp_path)
    with Container(now) as c:
        comp = dict(c.header[HEADER_KEY])
    assert comp["navmesh_unknown"] is None
    old = rewrite(now, tmp_path / "old.bps", header={HEADER_KEY: {k: v for k, v in comp.items()
                                                                  if k != "navmesh_unknown"}})
    with pytest.raises(InputError) as e:
        Backend().navmesh("import", old, None, tmp_path / "old.navmesh.bps")
    assert "packed before" in str(e.value) and "--overwrite" in str(e.value) and str(old) in str(e.value)
    with pytest.raises(InputError) as e:
        Backend().navmesh("import", now, None, tmp_path / "now.navmesh.bps")
    assert "names no navmesh_instance" in str(e.value) and "packed before" not in str(e.value)


def test_resume_redoes_a_composed_scene_when_an_object_changes(tmp_path):
    """A rerun keeps an unchanged composed scene; changing an object's GLB (not the scene
    instance file) redoes the scene and re-converts that asset."""
    from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess
    from bps_assets.scene_dataset.standin import write_box_room

    src = tmp_path / "src"
    cfg = _crate_room(src, [{"template_name": "crate", "translation": [1, 0, 1], "motion_type": "STATIC"}])
    out = tmp_path / "out"
    opts = PreprocessOptions(in_process=True)
    r1 = preprocess(src, out, str(cfg), options=opts)
    assert r1.ok and r1.results[0].status == "ok"
    assert "input:objects/crate.glb" in r1.results[0].entry["sources"]
    assert preprocess(src, out, str(cfg), options=opts).results[0].status == "skipped"
    write_box_room(src / "objects" / "crate.glb", (-0.4, 0, -0.4), (0.4, 0.9, 0.4), overwrite=True)
    r3 = preprocess(src, out, str(cfg), options=opts)
    assert r3.results[0].status == "ok" and r3.results[0].entry["stats"]["assets_converted"] == 1
    from bps_assets.packed_scene import read_packed_scene
    ps = read_packed_scene(out / "scenes" / "s.bps", ["positions", "object_ids", "object_aabb"])
    assert np.allclose(ps.object_aabb[0], [0.6, 0, 0.6, 1.4, 0.9, 1.4], atol=2e-3)


def _tiny_composed(tmp_path) -> Path:
    """A packed composed scene: a box room with two crates of semantic_id 4 (generated, habitat layout)."""
    from bps_assets.scene_dataset.packing import pack_scene

    cfg = _crate_room(tmp_path / "src", [{"template_name": "crate", "translation": [1, 0, 1]},
                                         {"template_name": "crate", "translation": [-1, 0, 1], "non_uniform_scale": [-1, 1, 1]}],
                      semantic_id=4)
    sc = H.read_scene_instance(H.read_dataset_config(cfg), "s")
    (tmp_path / "out" / "scenes").mkdir(parents=True)
    dst = tmp_path / "out" / "scenes" / "s.bps"
    pack_scene(sc, dst, tmp_path / "out" / "assets")
    return dst


def test_flattened_read_places_mirrored_instances_counter_clockwise(tmp_path):
    from bps_assets.packed_scene import read_packed_scene
    from bps_assets.scene_dataset.packing import read_composed

    dst = _tiny_composed(tmp_path)
    stage, table, paths = read_composed(dst)
    flat = read_packed_scene(dst)
    asset = read_packed_scene(paths[int(table.asset[0])])
    n_s, n_a = len(stage.indices), len(asset.indices)
    assert len(flat.indices) == n_s + 2 * n_a
    # triangle normals of the mirrored copy equal the mirrored normals of the asset's triangles
    def normals(p, i):
        a, b, c = (p[i[:, k]].astype(np.float64) for k in range(3))
        return np.cross(b - a, c - a)
    src_n = normals(asset.positions, asset.indices) * [-1, 1, 1]
    got_n = normals(flat.positions, flat.indices[n_s + n_a:].astype(np.int64))
    assert np.allclose(got_n, src_n, atol=1e-5)
    assert flat.header["counts"]["triangles"] == len(flat.indices)
    assert list(flat.object_ids) == [1, 2] and flat.tri_object[:n_s].max() == 0


@pytest.mark.parametrize("damage, section", [
    (lambda h, a: a["instance_asset"].__setitem__(0, 7), "instance_asset"),
    (lambda h, a: a["instance_transform"].__setitem__((0, 0, 0), np.nan), "instance_transform"),
    (lambda h, a: a["instance_category"].__setitem__(0, 5), "instance_category"),
    (lambda h, a: h["composed"]["assets"][1].__setitem__("path", "../../../etc/passwd"), "header"),
    (lambda h, a: h["composed"].__setitem__("instances", 1 << 30), "header"),
    (lambda h, a: h["composed"].__setitem__("instances", 3), "instance_asset"),
    (lambda h, a: a["instance_group"].__setitem__(1, 2**31 - 1), "instance_group"),   # found by fuzz.py
])
def test_damaged_instance_tables_are_typed_errors(tmp_path, damage, section):
    from bps_assets.container import Container, SectionSpec, write_container
    from bps_assets.errors import CorruptFileError
    from bps_assets.packed_scene import read_packed_scene

    dst = _tiny_composed(tmp_path)
    with Container(dst, "SCEN") as c:
        header = {k: v for k, v in c.header.items() if k != "sections"}
        arrays = {n: np.array(c.read(n)) for n in c.sections}
    damage(header, arrays)
    write_container(dst, "SCEN", header, arrays, {n: SectionSpec("raw") for n in arrays}, overwrite=True)
    with pytest.raises(CorruptFileError) as e:
        read_packed_scene(dst)
    assert section in str(e.value)


def test_pointnav_runs_on_a_composed_dataset_through_make(tmp_path):
    """The runtime on a composed scene (loaded as instances: tests/test_composed_runtime.py):
    depth and the instances' semantic id (habitat's: the crates' config semantic_id 5)."""
    import torch

    from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess
    from bps_runtime.env.make import make

    cfg = _crate_room(tmp_path / "src", [{"template_name": "crate", "translation": [1, 0, 1]},
                                         {"template_name": "crate", "translation": [-1, 0, -1]}], semantic_id=5)
    res = preprocess(cfg.parent, tmp_path / "out", str(cfg), options=PreprocessOptions(in_process=True, episodes=4))
    assert res.ok, [r.error for r in res.results]
    env = make(str(tmp_path / "out" / "manifest.json"), num_envs=2, sensors=("depth", "semantic"),
               resolution=(32, 32), device="cpu", renderer="embree")
    seen = set()
    obs = env.reset()
    for _ in range(40):   # turning in place: the crates come into view
        seen |= set(torch.unique(obs["semantic"]).tolist())
        assert torch.isfinite(obs["depth"]).all()
        obs = env.step(torch.full((2,), 2))[0]
    assert seen == {0, 5}


def test_navmesh_bakes_static_objects_not_dynamic_ones(tmp_path):
    """habitat's rule: a STATIC crate is an obstacle of the built navmesh, a DYNAMIC one is not
    (it is still rendered: the flattened scene holds both)."""
    from bps_assets import nav
    from bps_assets.packed_scene import read_packed_scene
    from bps_assets.scene_dataset.packing import navmesh_triangles

    dst = tmp_path / "out" / "scenes" / "s.bps"
    cfg = _crate_room(tmp_path / "src", [{"template_name": "crate", "translation": [1, 0, 1], "motion_type": "STATIC"},
                                         {"template_name": "crate", "translation": [-1, 0, -1], "motion_type": "DYNAMIC"}])
    from bps_assets.scene_dataset.packing import pack_scene
    (tmp_path / "out" / "scenes").mkdir(parents=True)
    pack_scene(H.read_scene_instance(H.read_dataset_config(cfg), "s"), dst, tmp_path / "out" / "assets")
    v, t = navmesh_triangles(dst)
    flat = read_packed_scene(dst, ["positions", "indices"])
    crate = (len(flat.indices) - len(t))
    assert crate > 0 and len(t) + crate == len(flat.indices)
    mesh = nav.build_navmesh((v, t), nav.DEFAULT_SETTINGS)
    ok = mesh.is_navigable(np.array([[1.0, 0.0, 1.0], [-1.0, 0.0, -1.0]]))
    assert not ok[0] and ok[1]


def test_initial_joint_pose_moves_links(tmp_path):
    """A revolute joint at pi/2 about +Z and a prismatic one at 0.5 m (x uniform_scale 2): the
    links land where the URDF rules put them (expected values by hand)."""
    from bps_assets.scene_dataset.urdf import link_visuals, read_urdf

    u = tmp_path / "r.urdf"
    u.write_text('<robot name="r"><link name="base"/>'
                 '<link name="arm"><visual><origin xyz="1 0 0"/><geometry><mesh filename="arm.glb"/></geometry></visual></link>'
                 '<link name="slide"><visual><geometry><mesh filename="s.glb" scale="1 1 1"/></geometry></visual></link>'
                 '<joint name="hinge" type="revolute"><origin xyz="0 0 1"/><parent link="base"/><child link="arm"/><axis xyz="0 0 1"/></joint>'
                 '<joint name="rail" type="prismatic"><parent link="arm"/><child link="slide"/><axis xyz="1 0 0"/></joint></robot>')
    vis, skipped = link_visuals(read_urdf(u), [math.pi / 2, 0.5], scale=2.0)
    arm, slide = {ln: m for ln, _, m in vis}["arm"], {ln: m for ln, _, m in vis}["slide"]
    # arm: joint origin (0,0,1)x2, rotated 90 deg about Z; its visual origin (1,0,0)x2 -> (0,2,0)
    assert np.allclose(arm[:3, 3], [0, 2, 2]) and np.allclose(arm[:3, :3], rpy_matrix([0, 0, math.pi / 2]) * 2)
    # slide: 0.5 m along the arm's X (now world +Y) x2
    assert np.allclose(slide[:3, 3], [0, 1, 2]) and skipped == 0


def test_hssd_style_objectnav_files_map_onto_composed_scenes(tmp_path):
    """ObjectNav v1 files whose scene ids name scene instances (HSSD's layout:
    ``.../scenes/ID.scene_instance.json``, goals keyed by that basename) map onto the composed
    scenes of a preprocessed config and check against their navmeshes."""
    from bps_assets.nav import load_navmesh
    from bps_assets.nav.objectnav_episodes import objectnav_scene, semantic_scene
    from bps_assets.nav.objectnav_files import check_on_navmesh, write_objectnav_dataset
    from bps_assets.pipeline.habitat_episodes import map_habitat_objectnav
    from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess

    cfg = _crate_room(tmp_path / "src", [{"template_name": "crate", "translation": [1.5, 0, 1.5]},
                                         {"template_name": "crate", "translation": [-1.5, 0, -1.5]}])
    out = tmp_path / "out"
    assert preprocess(cfg.parent, out, str(cfg), options=PreprocessOptions(in_process=True)).ok
    man = json.loads((out / "manifest.json").read_text())["scenes"]["s"]
    mesh = load_navmesh(out / man["outputs"]["navmesh"]["path"])
    v, t, tri_object, table = semantic_scene(out / "scenes" / "s.bps")
    sid = "hssd-hab/scenes/s.scene_instance.json"
    ds = objectnav_scene(mesh, v, t, tri_object, table, sid, 3, 0, categories={"crate": 0})
    assert len(ds.episodes) == 3 and len(ds.goals_by_category["s.scene_instance.json_crate"]) == 2
    write_objectnav_dataset(tmp_path / "objectnav_hssd", "val", {"s": ds}, {"crate": 0})
    mapped = map_habitat_objectnav(tmp_path / "objectnav_hssd" / "val", out / "manifest.json")
    assert list(mapped.by_scene) == ["s"] and len(mapped.by_scene["s"]) == 3
    assert all(len(mapped.objectnav.goals_of(e)) == 2 for e in mapped.by_scene["s"])
    chk = check_on_navmesh(mapped.objectnav, mesh)
    assert not any(chk.dropped.values())


def test_cli_missing_assets_fail_the_scene_unless_skipped(tmp_path):
    """`preprocess` with a scene naming a missing object GLB: the scene fails naming the
    instance and path (exit 1); `--skip-missing-assets` drops it and the manifest lists it."""
    cfg = _crate_room(tmp_path / "src", [{"template_name": "crate", "translation": [1, 0, 1]},
                                         {"template_name": "ghost", "translation": [0, 0, 0]}])
    (tmp_path / "src" / "objects" / "ghost.object_config.json").write_text(json.dumps({"render_asset": "ghost.glb"}))
    r = _run_cli("preprocess", str(cfg), "-o", str(tmp_path / "a"), "--in-process", "--no-progress")
    assert r.returncode == 1
    man = json.loads((tmp_path / "a" / "manifest.json").read_text())["scenes"]["s"]
    assert man["status"] == "failed" and "MissingAssetsError" in man["error"]
    assert "object_instances[1] ghost" in man["error"] and "ghost.glb" in man["error"]
    r = _run_cli("preprocess", str(cfg), "-o", str(tmp_path / "b"), "--in-process", "--no-progress",
                 "--skip-missing-assets")
    assert r.returncode == 0, r.stderr[-1000:]
    man = json.loads((tmp_path / "b" / "manifest.json").read_text())["scenes"]["s"]
    assert [m["template"] for m in man["stats"]["skipped_instances"]] == ["ghost"]
    assert man["stats"]["instances"] == 1


def test_joint_pose_order_is_bullets_link_order(tmp_path):
    """habitat-sim orders joint positions as Bullet numbers the links: depth first with siblings
    by joint name (its URDF parser keeps joints in a name-sorted map), or the file's link order
    with ``link_order: urdf_order``."""
    from bps_assets.scene_dataset.urdf import link_poses, read_urdf

    u = tmp_path / "r.urdf"
    u.write_text('<robot name="r"><link name="base"/><link name="l1"/><link name="l2"/>'
                 '<joint name="zeta" type="revolute"><parent link="base"/><child link="l1"/><axis xyz="0 1 0"/></joint>'
                 '<joint name="alpha" type="revolute"><parent link="base"/><child link="l2"/><axis xyz="0 1 0"/></joint></robot>')
    r = read_urdf(u)

    def angle(poses, link):
        m = dict(poses)[link]
        return math.atan2(m[0, 2], m[0, 0])
    tree = link_poses(r, [0.3, 0.7])
    assert math.isclose(angle(tree, "l2"), 0.3) and math.isclose(angle(tree, "l1"), 0.7)
    ordered = link_poses(r, [0.3, 0.7], link_order="urdf_order")
    assert math.isclose(angle(ordered, "l1"), 0.3) and math.isclose(angle(ordered, "l2"), 0.7)


# ------------------------------------------------------------------------------ review fixes (issue 31)

def _link_chain(n: int, mesh: str = "m.glb") -> str:
    """A URDF of ``n`` links in a fixed-joint chain, each with one mesh visual."""
    links = "".join(f'<link name="l{k}"><visual><geometry><mesh filename="{mesh}"/></geometry></visual></link>'
                    for k in range(n))
    joints = "".join(f'<joint name="j{k}" type="fixed"><parent link="l{k - 1}"/><child link="l{k}"/></joint>'
                     for k in range(1, n))
    return f'<robot name="r">{links}{joints}</robot>'


def _chain_scene(tmp_path, monkeypatch, copies: int, links: int):
    """A dataset whose scene ``x`` holds ``copies`` instances of a ``links``-link URDF, and the
    list that records every ``urdf.read_urdf`` call."""
    from bps_assets.scene_dataset import urdf as U

    ds = _tiny_dataset(tmp_path, {"articulated_object_instances": [{"template_name": "r"}] * copies},
                       aos={"r": _link_chain(links)})
    (tmp_path / "u" / "m.glb").write_bytes(b"x")
    reads, real_read = [], U.read_urdf
    monkeypatch.setattr(U, "read_urdf", lambda p: reads.append(p) or real_read(p))
    return ds, reads


def test_instance_cap_counts_urdf_links_before_placing_any(tmp_path, monkeypatch):
    """132 instances of a 1000-link URDF (132,000 links > the 2^17 cap): refused after one
    parse of the URDF and before any link is placed, with memory far below what placing them
    takes (~100 MB of transforms and Instance objects)."""
    from bps_assets.composed_section import MAX_INSTANCES
    from bps_assets.scene_dataset import urdf as U

    assert 132 * 1000 > MAX_INSTANCES
    ds, reads = _chain_scene(tmp_path, monkeypatch, 132, 1000)
    monkeypatch.setattr(U, "link_visuals", lambda *a, **k: pytest.fail("links placed before the cap check"))
    peak = _refused_peak(lambda: H.read_scene_instance(ds, "x"), "132000 instances .links counted. exceed the cap")
    assert len(reads) == 1 and peak < 30 << 20, (len(reads), peak)


def test_urdf_with_more_visuals_than_the_cap_is_refused_while_read(tmp_path):
    from bps_assets.scene_dataset.urdf import MAX_VISUALS, read_urdf

    vis = '<visual><geometry><mesh filename="m.glb"/></geometry></visual>'
    u = tmp_path / "big.urdf"
    u.write_text(f'<robot name="r"><link name="a">{vis * (MAX_VISUALS + 1)}</link></robot>')
    with pytest.raises(DatasetError, match=f"{MAX_VISUALS + 1} link visuals exceed the cap") as e:
        read_urdf(u)
    assert "big.urdf" in str(e.value)


def test_urdf_is_read_once_per_dataset_read(tmp_path, monkeypatch):
    ds, reads = _chain_scene(tmp_path, monkeypatch, 5, 3)
    sc = H.read_scene_instance(ds, "x", bounds=lambda p: ((0, 0, 0), (0, 0, 0)))
    assert len(sc.instances) == 15 and len(reads) == 1
    H.read_scene_instance(ds, "x", bounds=lambda p: ((0, 0, 0), (0, 0, 0)))
    assert len(reads) == 1


def test_asset_library_is_reconverted_when_the_convert_options_change(tmp_path):
    """The asset library is keyed on the sources AND the converter settings (and tool version),
    like the scene files: other options re-convert the object, the same ones keep it."""
    from bps_assets.container import Container
    from bps_assets.packed_scene import DEFAULTS
    from bps_assets.scene_dataset.packing import pack_scene

    cfg = _crate_room(tmp_path / "src", [{"template_name": "crate", "translation": [1, 0, 1]}])
    sc = H.read_scene_instance(H.read_dataset_config(cfg), "s")
    out, lib = tmp_path / "out" / "scenes", tmp_path / "out" / "assets"
    out.mkdir(parents=True)
    assert pack_scene(sc, out / "s.bps", lib)["assets_converted"] == 1
    assert pack_scene(sc, out / "s.bps", lib, overwrite=True)["assets_converted"] == 0
    coarse = dataclasses.replace(DEFAULTS, position_error=DEFAULTS.position_error * 4)
    assert pack_scene(sc, out / "s.bps", lib, coarse, overwrite=True)["assets_converted"] == 1
    with Container(next(lib.iterdir()), "SCEN") as c:
        assert c.header["converter"]["settings"]["position_error"] == coarse.position_error
    assert pack_scene(sc, out / "s.bps", lib, coarse, overwrite=True)["assets_converted"] == 0


def _motion_room(src: Path, obj_motion: str | None, ao_motion: str | None) -> Path:
    """``_crate_room`` with one crate object at (1, 0, 1) and one one-link articulated crate at
    (-1, 0, -1), each with the given motion type (None: unset)."""
    obj = {"template_name": "crate", "translation": [1, 0, 1]}
    ao = {"template_name": "crate_ao", "translation": [-1, 0, -1]}
    if obj_motion:
        obj["motion_type"] = obj_motion
    if ao_motion:
        ao["motion_type"] = ao_motion
    cfg = _crate_room(src, [obj])
    d = json.loads(cfg.read_text())
    d["articulated_objects"] = {"paths": {".urdf": ["objects"]}}
    cfg.write_text(json.dumps(d))
    (src / "objects" / "crate_ao.urdf").write_text(_link_chain(1, "crate.glb"))
    s = src / "scenes" / "s.scene_instance.json"
    d = json.loads(s.read_text())
    d["articulated_object_instances"] = [ao]
    s.write_text(json.dumps(d))
    return cfg


@pytest.mark.parametrize("obj_motion, ao_motion, baked", [
    ("STATIC", "STATIC", (True, True)),
    ("KINEMATIC", "KINEMATIC", (False, False)),
    ("DYNAMIC", "DYNAMIC", (False, False)),
    (None, None, (False, False)),        # unset: DYNAMIC for both, as Bullet creates them
])
def test_navmesh_bakes_what_habitat_sim_bakes(tmp_path, obj_motion, ao_motion, baked):
    """habitat-sim's Simulator::getJoinedMesh (include_static_objects): the stage plus rigid and
    articulated objects whose motion type is STATIC, nothing else. `bps-assets navmesh` on the
    composed scene builds the same navmesh preprocess builds (one helper, nav.sources.navmesh_input)."""
    from bps_assets.nav.sources import navmesh_from_file, navmesh_input, open_navmesh
    from bps_assets.scene_dataset.packing import NAVMESH_MOTIONS, navmesh_triangles, pack_scene

    assert NAVMESH_MOTIONS == ("STATIC",)
    cfg = _motion_room(tmp_path / "src", obj_motion, ao_motion)
    sc = H.read_scene_instance(H.read_dataset_config(cfg), "s")
    assert [i.motion_type for i in sc.instances] == [obj_motion or "DYNAMIC", ao_motion or "DYNAMIC"]
    (tmp_path / "out" / "scenes").mkdir(parents=True)
    dst = tmp_path / "out" / "scenes" / "s.bps"
    pack_scene(sc, dst, tmp_path / "out" / "assets")
    v, t = navmesh_input(dst, 45.0)
    assert np.array_equal(t, navmesh_triangles(dst)[1])
    nav = navmesh_from_file(dst)
    where = np.array([[1.0, 0.0, 1.0], [-1.0, 0.0, -1.0]])
    assert [not b for b in nav.is_navigable(where)] == list(baked)
    r = _run_cli("navmesh", str(dst), "-o", str(tmp_path / "nav"), "--json")
    assert r.returncode == 0, r.stderr
    cli_nav = open_navmesh(json.loads(r.stdout)["output"])
    assert [not b for b in cli_nav.is_navigable(where)] == list(baked)


@pytest.mark.parametrize("damage, field", [
    (lambda c: c.pop("names"), "names"),
    (lambda c: c.__setitem__("names", c["names"][:1]), "names"),
    (lambda c: c["names"].__setitem__(1, 7), "names[1]"),
    (lambda c: c.pop("kinds"), "kinds"),
    (lambda c: c.__setitem__("kinds", c["kinds"][:1]), "kinds"),
    (lambda c: c["kinds"].__setitem__(0, "robot"), "kinds[0]"),
    (lambda c: c.__setitem__("motion_types", ["DYNAMIC", "STATIC", "KINEMATIC"]), "motion_types"),
    (lambda c: c["assets"][0].__setitem__("source", 3), "assets[0]"),
    (lambda c: c.__setitem__("notes", "text"), "notes"),
    (lambda c: c.__setitem__("stage", []), "stage"),
    (lambda c: c.__setitem__("source", {}), "source"),
    (lambda c: c.__setitem__("navmesh", 1), "navmesh"),
    (lambda c: c.__setitem__("navmesh_unknown", ["h"]), "navmesh_unknown"),
    (lambda c: c.__setitem__("navmesh_missing", 3), "navmesh_missing"),
])
def test_damaged_composed_headers_name_the_field(tmp_path, damage, field):
    """Every field of the ``composed`` header is checked: a missing, short or mistyped one is a
    CorruptFileError naming the file and the field (not a KeyError / IndexError / TypeError),
    from the flattened read, the unflattened one and `info --json`."""
    from bps_assets.container import Container, SectionSpec, write_container
    from bps_assets.errors import CorruptFileError
    from bps_assets.packed_scene import read_packed_scene
    from bps_assets.scene_dataset.packing import read_composed

    dst = _tiny_composed(tmp_path)
    with Container(dst, "SCEN") as c:
        header = {k: v for k, v in c.header.items() if k != "sections"}
        arrays = {n: np.array(c.read(n)) for n in c.sections}
    damage(header["composed"])
    write_container(dst, "SCEN", header, arrays, {n: SectionSpec("raw") for n in arrays}, overwrite=True)
    for read in (read_packed_scene, read_composed):
        with pytest.raises(CorruptFileError) as e:
            read(dst)
        assert f"composed: {field}" in str(e.value) and str(dst) in str(e.value)
    r = _run_cli("info", str(dst), "--json")
    assert r.returncode != 0 and "Traceback" not in r.stderr and field in r.stderr + r.stdout


@pytest.mark.parametrize("template, field", [
    ({"render_asset": "a.glb", "COM": [0, 0, 0], "semantic_id": "chair"}, "semantic_id"),
    ({"render_asset": "a.glb", "COM": [0, 0, 0], "semantic_id": [3]}, "semantic_id"),
    ({"render_asset": "a.glb", "COM": [0, 0, 0], "semantic_id": 2.5}, "semantic_id"),
    ({"render_asset": "a.glb", "COM": [0, 0, 0], "semantic_id": 1 << 40}, "semantic_id"),
])
def test_mistyped_template_values_are_typed_errors(tmp_path, template, field):
    ds = _tiny_dataset(tmp_path, {"object_instances": [{"template_name": "a"}]}, objects={"a": template})
    with pytest.raises(DatasetError, match=field) as e:
        H.read_scene_instance(ds, "x")
    assert "a.object_config.json" in str(e.value)


@pytest.mark.parametrize("scale", ["big", [1, 2], None, 0])
def test_mistyped_articulated_uniform_scale_is_a_typed_error(tmp_path, scale):
    ds = _tiny_dataset(tmp_path, {"articulated_object_instances": [{"template_name": "r"}]}, aos={"r": _link_chain(1)})
    (tmp_path / "u" / "m.glb").write_bytes(b"x")
    (tmp_path / "u" / "r.ao_config.json").write_text(json.dumps({"urdf_filepath": "r.urdf", "uniform_scale": scale}))
    body = json.loads(ds.path.read_text())
    body["articulated_objects"] = {"paths": {".json": ["u"]}}
    ds.path.write_text(json.dumps(body))
    with pytest.raises(DatasetError, match="uniform_scale") as e:
        H.read_scene_instance(H.read_dataset_config(ds.path), "x")
    assert "x.scene_instance.json" in str(e.value)


def test_one_definition_of_the_instance_cap_and_motion_types():
    """MAX_INSTANCES and MOTION_TYPES live in composed_section (the file format) only; the
    scene-dataset reader reads JSON through readers.guard.read_limited."""
    from bps_assets import composed_section as cs
    from bps_assets.scene_dataset import model, urdf

    assert H.MAX_INSTANCES is cs.MAX_INSTANCES and urdf.MAX_VISUALS == cs.MAX_INSTANCES
    assert H.MOTION_TYPES is cs.MOTION_TYPES and not hasattr(model, "MOTION_TYPES")
    assert not hasattr(H, "read_json")


def test_semantic_ids_above_the_runtime_cap_are_refused_naming_the_file(tmp_path):
    """Habitat's semantic ids are capped at the semantic sensor's bound
    (bps_runtime.render.semantic.MAX_INSTANCE_ID): a larger id is refused when
    packing (a DatasetError naming the scene instance file and the id, nothing written) and when
    reading a file packed before the check (a CorruptFileError naming the file and the id)."""
    from bps_assets import composed_section as cs
    from bps_assets.container import Container, SectionSpec, write_container
    from bps_assets.errors import CorruptFileError
    from bps_assets.packed_scene import read_packed_scene
    from bps_assets.scene_dataset.packing import pack_scene, read_composed
    from bps_runtime.render.semantic import MAX_INSTANCE_ID

    assert cs.MAX_SEMANTIC_ID == MAX_INSTANCE_ID
    cfg = _crate_room(tmp_path / "big", [{"template_name": "crate", "translation": [1, 0, 1]}],
                      semantic_id=5_000_000)
    sc = H.read_scene_instance(H.read_dataset_config(cfg), "s")
    out = tmp_path / "bigout"
    (out / "scenes").mkdir(parents=True)
    with pytest.raises(DatasetError, match="semantic_id 5000000 outside 0..1048576") as e:
        pack_scene(sc, out / "scenes" / "s.bps", out / "assets")
    assert "s.scene_instance.json" in str(e.value) and "crate" in str(e.value)
    assert not (out / "scenes" / "s.bps").exists() and not (out / "assets").exists()
    dst = _tiny_composed(tmp_path)   # ids 4: accepted; then one rewritten as a file packed before the check
    with Container(dst, "SCEN") as c:
        header = {k: v for k, v in c.header.items() if k != "sections"}
        arrays = {n: np.array(c.read(n)) for n in c.sections}
    arrays["instance_semantic"][1] = MAX_INSTANCE_ID + 1
    write_container(dst, "SCEN", header, arrays, {n: SectionSpec("raw") for n in arrays}, overwrite=True)
    for read in (read_packed_scene, read_composed):
        with pytest.raises(CorruptFileError, match=f"semantic_id {MAX_INSTANCE_ID + 1} outside") as e:
            read(dst)
        assert str(dst) in str(e.value) and "instance_semantic" in str(e.value)


def test_a_packed_composed_scene_records_resolved_source_paths(tmp_path, monkeypatch):
    """FORMAT.md's `source` rule holds for composed scenes too: the scene instance file and each
    asset's source are recorded by their resolved absolute paths (read_dataset_config resolves
    its config; a scene whose paths are relative, through a symlink, is resolved when packed)."""
    import dataclasses
    import os

    from bps_assets.container import read_header
    from bps_assets.scene_dataset.packing import pack_scene

    cfg = _crate_room(tmp_path / "real", [{"template_name": "crate", "translation": [1, 0, 1]}])
    os.symlink(tmp_path / "real", tmp_path / "link")
    sc = H.read_scene_instance(H.read_dataset_config(cfg), "s")
    monkeypatch.chdir(tmp_path)
    rel = lambda p: Path("link") / Path(p).relative_to(tmp_path / "real")   # noqa: E731
    sc.source = rel(sc.source)
    sc.assets = [dataclasses.replace(a, path=rel(a.path)) for a in sc.assets]
    (tmp_path / "out" / "scenes").mkdir(parents=True)
    dst = tmp_path / "out" / "scenes" / "s.bps"
    pack_scene(sc, dst, tmp_path / "out" / "assets")
    h = read_header(dst)[0]
    real = os.path.realpath(tmp_path / "real")
    assert h["source"]["path"] == os.path.realpath(sc.source) and h["source"]["path"].startswith(real + os.sep)
    assets = h["composed"]["assets"]
    assert assets and all(a["source"].startswith(real + os.sep) for a in assets), assets
