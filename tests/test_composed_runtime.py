"""Composed scenes in the runtime (issue 31 item 2): each asset resident once, instances rendered
without flattening and pixel for pixel like the flattened scene.

ReplicaCAD's stage GLBs are not public: the ReplicaCAD checks run on the real objects, URDFs and
configs with a stand-in box-room stage (``bps_assets.scene_dataset.standin``), as in
tests/test_composed_scenes.py.
"""
from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_composed_scenes import H, RCAD, _crate_room, _replicacad_copy, _tiny_composed, needs_rcad  # noqa: E402

SCENES8 = [f"v3_sc{k // 21}_staging_{k % 21:02d}" for k in range(8)]


@pytest.fixture(scope="module")
def rcad8(tmp_path_factory):
    """8 ReplicaCAD scenes preprocessed into one output (one shared asset library)."""
    if not RCAD.is_dir():
        pytest.skip("../shared/datasets/replicacad absent")
    from bps_assets.nav.settings import DEFAULT_SETTINGS
    from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess

    tmp = tmp_path_factory.mktemp("rcad8")
    cfg = _replicacad_copy(tmp, SCENES8)
    res = preprocess(cfg.parent, tmp / "out", str(cfg), options=PreprocessOptions(
        skip_missing_assets=True, workers=1, nav=dataclasses.replace(DEFAULT_SETTINGS, agent_radius=0.3)))
    assert res.ok, [r.error for r in res.results if r.error]
    return tmp / "out"


BACKENDS = ["embree", "warp"]


def _renderer(backend="embree", res=(48, 48)):
    from bps_runtime.render.protocol import RenderOptions
    if backend == "warp":   # the CUDA path's kernels, on Warp's CPU device
        from bps_runtime.render.warp_backend import WarpRenderer
        return WarpRenderer(RenderOptions(resolution=res, threads=1), device="cpu")
    from bps_runtime.render.embree import EmbreeRenderer
    return EmbreeRenderer(RenderOptions(resolution=res, threads=1))


def _both(renderer, path, navmesh=None):
    """The scene loaded as instances (scene id 0) and flattened (scene id 1), both attached."""
    from bps_assets.packed_scene import read_packed_scene
    from bps_runtime.scenes.loader import SceneLoader, SceneSource

    src = SceneSource("s", str(path), navmesh and str(navmesh))
    inst = SceneLoader(renderer, threads=1).submit(src).result()
    flat = SceneLoader(renderer, threads=1, reader=lambda p: read_packed_scene(p)).submit(src).result()
    assert not hasattr(inst, "error") and not hasattr(flat, "error"), (getattr(inst, "message", ""),
                                                                        getattr(flat, "message", ""))
    renderer.attach(0, inst.shading, inst.accel)
    renderer.attach(1, flat.shading, flat.accel)
    return inst, flat


def _same_table(a, b):
    assert np.array_equal(a.ids, b.ids) and np.array_equal(a.category, b.category)
    assert np.array_equal(a.source_ids, b.source_ids) and a.raw_names == b.raw_names
    assert np.allclose(a.aabb, b.aabb, atol=1e-5)


def _compare(renderer, pos, yaw):
    n = len(pos)
    sensors = ("depth", "rgb", "semantic")
    a = renderer.render(np.zeros(n, np.int64), pos, yaw, sensors)
    b = renderer.render(np.ones(n, np.int64), pos, yaw, sensors)
    return {k: (a[k].numpy(), b[k].numpy()) for k in sensors}


@pytest.mark.parametrize("backend", BACKENDS)
def test_instances_render_like_the_flattened_scene_mirrored_crates(tmp_path, backend):
    """A generated room with two crates, one mirrored: depth, RGB and semantic of the instanced
    scene equal the flattened scene's (Embree instances; Warp's top-level BVH)."""
    r = _renderer(backend)
    inst, flat = _both(r, _tiny_composed(tmp_path))
    assert type(inst.accel).__name__ in ("InstancedAccel", "WarpInstances")
    assert type(flat.accel).__name__ in ("BridgeAccel", "WarpScene")
    assert inst.shading.indices.shape[0] < flat.shading.indices.shape[0]   # the stage alone
    yaw = np.linspace(0, 2 * np.pi, 12, endpoint=False)
    out = _compare(r, np.zeros((12, 3)), yaw)
    d, rgb, sem = out["depth"], out["rgb"], out["semantic"]
    assert np.allclose(d[0], d[1], atol=1e-5)
    assert (np.abs(rgb[0].astype(int) - rgb[1]) <= 1).all()
    assert (sem[0] == sem[1]).all() and set(np.unique(sem[0])) == {0, 4}   # habitat's id: the crates' semantic_id
    _same_table(inst.semantics, flat.semantics)


@pytest.mark.parametrize("backend", BACKENDS)
def test_composed_semantic_sensor_reports_habitat_semantic_ids(tmp_path, backend):
    """habitat-sim's semantic sensor reports an object's config ``semantic_id`` (0 unset): two
    crates of id 7 and a crate template with none, instanced and flattened, render {0, 7}; the
    env's category table maps 7 to the crate, and the ObjectNav goals' object_id (the table's
    habitat id, nav.objectnav_episodes) is an id the sensor reports."""
    import json

    from bps_assets.nav.objectnav_episodes import semantic_scene
    from bps_assets.scene_dataset.packing import pack_scene
    from bps_runtime.render.semantic import category_row

    src = tmp_path / "src"
    cfg = _crate_room(src, [{"template_name": "crate", "translation": [1.2, 0, 1.2]},
                            {"template_name": "crate", "translation": [-1.2, 0, 1.2]},
                            {"template_name": "plain", "translation": [0, 0, -1.5]}], semantic_id=7)
    (src / "objects" / "plain.object_config.json").write_text(json.dumps({"render_asset": "crate.glb", "COM": [0, 0, 0]}))
    sc = H.read_scene_instance(H.read_dataset_config(cfg), "s")
    (tmp_path / "out" / "scenes").mkdir(parents=True)
    dst = tmp_path / "out" / "scenes" / "s.bps"
    pack_scene(sc, dst, tmp_path / "out" / "assets")
    r = _renderer(backend)
    inst, flat = _both(r, dst)
    out = _compare(r, np.zeros((12, 3)), np.linspace(0, 2 * np.pi, 12, endpoint=False))
    sem = out["semantic"]
    assert (sem[0] == sem[1]).all() and set(np.unique(sem[0])) == {0, 7}
    _same_table(inst.semantics, flat.semantics)
    assert inst.semantics.ids.tolist() == [7] and inst.semantics.category_name(0) == "crate"
    assert category_row(inst.semantics)[7] == inst.semantics.categories.index("crate")
    _, _, tri_object, table = semantic_scene(dst)   # goal generation: one row per instance
    assert len(table) == 3 and sorted({table.habitat_id(i) for i in range(len(table))}) == [0, 7]
    assert len(np.unique(tri_object)) == 4          # 0 and the three instances, told apart


@needs_rcad
@pytest.mark.parametrize("backend", BACKENDS)
def test_instances_render_like_the_flattened_scene_replicacad(rcad8, backend):
    """A real ReplicaCAD scene (textured objects, articulated links; stand-in stage), agents on
    its navmesh: the instanced render equals the flattened one (depth to float tolerance; RGB and
    semantic except at a few triangle-edge pixels where the two BVHs order equal hits apart)."""
    r = _renderer(backend)
    name = SCENES8[0]
    inst, flat = _both(r, rcad8 / "scenes" / f"{name}.bps", rcad8 / "navmeshes" / f"{name}.navmesh.bps")
    assert inst.num_triangles == flat.num_triangles
    assert np.allclose(inst.header["bounds"]["min"], flat.header["bounds"]["min"], atol=1e-4)
    assert np.allclose(inst.header["bounds"]["max"], flat.header["bounds"]["max"], atol=1e-4)
    rng = np.random.default_rng(0)
    from bps_assets.nav.queries import sample_navigable_point
    pts = np.asarray(sample_navigable_point(inst.navmesh, 16, seed=0), np.float64).reshape(16, 3)
    out = _compare(r, pts, rng.uniform(0, 2 * np.pi, 16))
    d, rgb, sem = out["depth"], out["rgb"], out["semantic"]
    close = np.isclose(d[0], d[1], rtol=1e-4, atol=1e-4)
    assert close.mean() > 0.998, close.mean()
    assert (np.abs(rgb[0].astype(int) - rgb[1]) > 1).any(-1).mean() < 0.005
    assert (sem[0] != sem[1]).mean() < 0.005
    assert len(np.unique(sem[0])) > 3          # instances are seen
    _same_table(inst.semantics, flat.semantics)


def _expected_bytes(out: Path, names, renderer) -> tuple[int, int]:
    """(unique assets + stages, every instance's asset counted) in the bytes the cache charges,
    computed from the files: shading tables + the renderer's accel estimate (+ navmesh; assets:
    + their vertices, kept for the object boxes)."""
    from bps_assets.nav import load_navmesh
    from bps_assets.packed_scene import read_packed_scene
    from bps_assets.scene_dataset.packing import read_composed
    from bps_runtime.render.shading_data import build_shading_data
    from bps_runtime.scenes.footprint import accel_bytes
    from bps_runtime.scenes.loader import navmesh_nbytes

    def cost(ps, path):
        return build_shading_data(ps, path).nbytes + accel_bytes(renderer, len(ps.positions), len(ps.indices))

    assets: dict[str, int] = {}
    stages = per_instance = 0
    for n in names:
        p = out / "scenes" / f"{n}.bps"
        stage, table, paths = read_composed(p)
        stages += cost(stage, p) + navmesh_nbytes(load_navmesh(out / "navmeshes" / f"{n}.navmesh.bps"))
        for a in table.asset.tolist():
            key = os.path.realpath(paths[a])
            if key not in assets:
                ps = read_packed_scene(key, expand=False)
                assets[key] = cost(ps, key) + ps.positions.nbytes
            per_instance += assets[key]
    return stages + sum(assets.values()), stages + per_instance


@needs_rcad
@pytest.mark.parametrize("backend", BACKENDS)
def test_eight_resident_replicacad_scenes_hold_each_asset_once(rcad8, backend):
    """8 composed scenes resident at once in the cache: resident bytes <= 1.2 x (unique assets +
    stages), far below every scene holding its own copy; the assets leave with their last scene.
    With the Warp renderer the charge is the cache's GPU estimate (device bytes)."""
    from bps_runtime.scenes.cache import CacheOptions, SceneCache
    from bps_runtime.scenes.loader import SceneSource
    from bps_runtime.scenes.residency import renderer_listener

    r = _renderer(backend)
    sources = [SceneSource(n, str(rcad8 / "scenes" / f"{n}.bps"), str(rcad8 / "navmeshes" / f"{n}.navmesh.bps"))
               for n in SCENES8]
    unique, per_instance = _expected_bytes(rcad8, SCENES8, r)
    with SceneCache(sources, r, 8, CacheOptions(slots=8, prefetch=False), listeners=[renderer_listener(r)]) as cache:
        cache.start(refuse=True)
        assert len(cache.resident_scene_indices) == 8
        got = cache.resident_bytes
        store = cache.loader.assets
        assert got <= 1.2 * unique, (got, unique)
        assert 0.99 * got <= cache.budget_needed() <= 1.2 * unique   # shared assets counted once
        assert got < per_instance / 4, (got, per_instance)   # not one copy per instance (nor per scene)
        assert max(store.resident.values()) == 8         # one reference per scene that uses the asset
        # the cache's own estimate (shading + the renderer's accel bytes) equals the expected sum
        assert abs(got - unique) <= 0.01 * unique + 64 * 8 * 400
        # release every scene: every asset leaves with its last user, its bytes given back
        idx = np.asarray(cache.assign_next(np.arange(8)))
        cache.release_scenes(idx)
        for s in cache._sched.slots:
            s.active = None
        for i in list(cache.resident_scene_indices):
            cache._sched.maybe_evict(i)
        assert store.resident == {} and cache.resident_bytes == 0


def test_an_asset_leaves_with_its_last_scene(tmp_path):
    """Two scenes using the same crate asset: loaded once, charged once, kept while either scene
    is resident, freed (bytes given back) when both have left."""
    import shutil

    from bps_runtime.scenes.budget import BudgetLedger
    from bps_runtime.scenes.loader import SceneLoader, SceneSource

    dst = _tiny_composed(tmp_path)
    other = dst.with_name("s2.bps")
    shutil.copy(dst, other)
    r = _renderer()
    ledger = BudgetLedger(None)
    loader = SceneLoader(r, threads=2, release=ledger.release)
    a, b = (loader.submit(SceneSource(n, str(p)), ledger.reserve).result() for n, p in (("a", dst), ("b", other)))
    store = loader.assets
    (asset_path, refs), = store.resident.items()
    assert refs == 2                      # one reference per scene (2 instances each), one resident asset
    asset_bytes = store.nbytes
    assert ledger.used == a.nbytes + b.nbytes + asset_bytes
    a.release_assets()
    ledger.release(a.ticket)
    assert store.resident == {asset_path: 1} and ledger.used == b.nbytes + asset_bytes
    b.release_assets()
    ledger.release(b.ticket)
    assert store.resident == {} and ledger.used == 0
    c = loader.submit(SceneSource("c", str(dst)), ledger.reserve).result()   # loads it again
    assert store.resident == {asset_path: 1} and ledger.used == c.nbytes + asset_bytes
    loader.close()


def test_non_instancing_renderers_load_composed_scenes_flattened(tmp_path):
    """The embreex engine (and Python-side shading) has no instance path: the loader flattens."""
    from bps_runtime.render.embree import EmbreeRenderer
    from bps_runtime.render.protocol import RenderOptions
    from bps_runtime.scenes.loader import SceneLoader, SceneSource

    r = EmbreeRenderer(RenderOptions(resolution=(16, 16), threads=1), engine="embreex")
    assert not r.instancing
    sc = SceneLoader(r, threads=1).submit(SceneSource("s", str(_tiny_composed(tmp_path)))).result()
    assert sc.release_assets is None and sc.num_triangles == sc.shading.indices.shape[0]


def build_composed_rooms(root: Path, n_scenes: int = 3, episodes: int = 8, agent=None) -> Path:
    """A preprocessed composed dataset (generated): ``n_scenes`` box-room scenes sharing one
    library of two objects ("chair" crates of semantic_id 3, a "sofa" slab of 10), placed differently in each (one
    mirrored, one rotated, one scaled); PointNav episodes per scene; navmeshes for ``agent``
    (radius, height; None: the default agent). Returns the manifest."""
    import json

    from bps_assets.nav.settings import DEFAULT_SETTINGS

    from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess
    from bps_assets.scene_dataset.standin import write_box_room

    src = root / "src"
    write_box_room(src / "stages" / "room.glb", (-3, 0, -3), (3, 2.5, 3))
    write_box_room(src / "objects" / "crate.glb", (-0.3, 0, -0.3), (0.3, 0.6, 0.3))
    write_box_room(src / "objects" / "slab.glb", (-0.6, 0, -0.25), (0.6, 0.45, 0.25))
    (src / "stages" / "room.stage_config.json").write_text(json.dumps({"render_asset": "room.glb"}))
    for name, cat, sid in (("crate", "chair", 3), ("slab", "sofa", 10)):
        (src / "objects" / f"{name}.object_config.json").write_text(json.dumps(
            {"render_asset": f"{name}.glb", "COM": [0, 0, 0], "category": cat, "semantic_id": sid}))
    (src / "scenes").mkdir()
    for k in range(n_scenes):
        s = 1.0 + 0.5 * k
        # lifted 1-2 cm: an open box's floor coplanar with the stage's would make equal-distance
        # hits whose surface either BVH may report
        objs = [{"template_name": "crate", "translation": [1.2 - 0.3 * k, 0.01, 1.2], "motion_type": "STATIC"},
                {"template_name": "crate", "translation": [-1.4, 0.01, 1.0 + 0.2 * k], "non_uniform_scale": [-1, 1, 1],
                 "motion_type": "STATIC"},
                {"template_name": "slab", "translation": [0.5 * k - 0.5, 0.02, -1.6], "rotation": [0.924, 0, 0.383, 0],
                 "uniform_scale": s, "motion_type": "STATIC"}]
        (src / "scenes" / f"room{k}.scene_instance.json").write_text(json.dumps(
            {"stage_instance": {"template_name": "room"}, "object_instances": objs}))
    cfg = src / "d.scene_dataset_config.json"
    cfg.write_text(json.dumps({"stages": {"paths": {".json": ["stages"]}}, "objects": {"paths": {".json": ["objects"]}},
                               "scene_instances": {"paths": {".json": ["scenes"]}}}))
    nav = DEFAULT_SETTINGS if agent is None else dataclasses.replace(
        DEFAULT_SETTINGS, agent_radius=agent[0], agent_height=agent[1])
    res = preprocess(src, root / "out", str(cfg), options=PreprocessOptions(in_process=True, episodes=episodes,
                                                                             nav=nav))
    assert res.ok, [r.error for r in res.results]
    return root / "out" / "manifest.json"


@pytest.fixture(scope="module")
def composed_rooms(tmp_path_factory):
    return build_composed_rooms(tmp_path_factory.mktemp("composed_rooms"))


def test_pointnav_on_composed_scenes_renders_instances_through_make(composed_rooms):
    """make() on a composed dataset loads its scenes as instances (each asset once) and the
    agents see the instances (their habitat semantic ids 3 and 10, depth finite)."""
    import torch

    from bps_runtime import make

    with make(str(composed_rooms), split=None, num_envs=4, sensors=("depth", "semantic"), resolution=(24, 24),
              renderer="embree", seed=1) as env:
        obs = env.reset()
        store = env.world.scenes.loader.assets
        assert len(store.resident) == 2       # the crate and the slab, shared by every resident scene
        seen = set()
        for _ in range(40):
            seen |= set(torch.unique(obs["semantic"]).tolist())
            assert torch.isfinite(obs["depth"]).all()
            obs = env.step(torch.full((4,), 2))[0]
        assert {3, 10} <= seen <= {0, 3, 10}


def test_objectnav_on_composed_scenes_through_make(tmp_path):
    """ObjectNav with episodes sampled per scene visit (habitat's HM3D categories: chair, sofa):
    goals come from the instances' semantic table, distances are finite, steps run."""
    import torch

    from bps_runtime import make

    # habitat's ObjectNav agent (radius 0.18 m, height 0.88 m): the task refuses other navmeshes
    manifest = build_composed_rooms(tmp_path, episodes=0, agent=(0.18, 0.88))
    with make(str(manifest), split=None, task="objectnav", episodes="sample", num_envs=4,
              resolution=(16, 16), seed=3) as env:
        env.reset()
        for _ in range(10):
            _, _, _, info = env.step(torch.randint(0, 4, (4,), generator=torch.Generator().manual_seed(0)))
        assert (env.last_info["distance_to_goal"] >= 0).all()
        assert len(env.world.scenes.loader.assets.resident) == 2


@pytest.mark.parametrize("task, sensors", [("pointnav", ("depth", "rgb", "semantic")), ("imagenav", ("depth", "rgb"))])
def test_env_observations_on_instances_equal_the_flattened_scenes(composed_rooms, monkeypatch, task, sensors):
    """The same seeded run through make() with scenes as instances and flattened (the renderer's
    instance path switched off): every depth, RGB, semantic and ImageNav goal-image observation
    agrees (depth to float tolerance), and the instances are in view."""
    import torch

    from bps_runtime import make
    from bps_runtime.render.embree import EmbreeRenderer

    def run():
        kw = dict(split=None, task=task, num_envs=4, sensors=sensors, resolution=(20, 20), renderer="embree", seed=2)
        if task == "imagenav":
            kw["episodes"] = "sample"
        frames = []
        with make(str(composed_rooms), **kw) as env:
            obs = env.reset()
            gen = torch.Generator().manual_seed(0)
            for _ in range(30):
                frames.append({k: v.clone() for k, v in obs.items() if k in ("depth", "rgb", "semantic", "imagegoal")})
                obs = env.step(torch.randint(1, 4, (4,), generator=gen))[0]
            instanced = env.world.scenes.loader.assets.resident
        return frames, instanced

    inst, held = run()
    monkeypatch.setattr(EmbreeRenderer, "instancing", False)
    flat, none = run()
    assert held and not none            # the first run held shared assets; the flattened one none
    for a, b in zip(inst, flat):
        assert torch.allclose(a["depth"], b["depth"], atol=1e-4)
    for k in set(inst[0]) - {"depth"}:
        diff = torch.cat([(a[k].int() - b[k].int()).abs() for a, b in zip(inst, flat)])
        assert (diff > (1 if k != "semantic" else 0)).float().mean() < 0.001, (k, diff.float().mean())
    if "semantic" in sensors:
        assert set(torch.cat([f["semantic"] for f in inst]).unique().tolist()) == {0, 3, 10}
    if task == "imagenav":
        assert any(f["imagegoal"].float().std() > 0 for f in inst)


def test_concurrent_loads_of_one_asset_build_it_once(tmp_path):
    """Four threads acquiring the same asset at once: one read + accel build, four references;
    a build that fails reaches every waiter and leaves nothing behind."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    from bps_runtime.scenes.assets import AssetStore

    dst = _tiny_composed(tmp_path)
    asset = next((tmp_path / "out" / "assets").glob("*.bps"))
    r = _renderer()
    calls = []
    fail = threading.Event()

    class Slow:
        accel_breakdown = r.accel_breakdown

        def prepare(self, sd, p, i):
            calls.append(1)
            time.sleep(0.2)
            if fail.is_set():
                raise RuntimeError("build failed")
            return r.prepare(sd, p, i)

    store = AssetStore(Slow())
    with ThreadPoolExecutor(4) as ex:
        got = list(ex.map(lambda _: store.acquire(asset), range(4)))
    assert len(calls) == 1 and all(g is got[0] for g in got) and got[0].refs == 4
    for g in got:
        store.release(g)
    assert store.resident == {}
    fail.set()
    with ThreadPoolExecutor(3) as ex:
        futs = [ex.submit(store.acquire, asset) for _ in range(3)]
    assert all(isinstance(f.exception(), RuntimeError) for f in futs) and len(calls) == 2
    assert store.resident == {} and dst.exists()


def test_topdown_map_of_a_composed_scene_shows_its_static_instances(composed_rooms):
    """The top-down map (drawn from the navmesh, which bakes the STATIC instances in) is blocked
    along a crate's walls and navigable in the open room around it."""
    from bps_assets.nav import load_navmesh
    from bps_assets.nav.topdown import BLOCKED, NAVIGABLE, MapOptions, TopDownMap

    nav = load_navmesh(composed_rooms.parent / "navmeshes" / "room0.navmesh.bps")
    tdm = TopDownMap(nav, MapOptions(metres_per_pixel=0.05))
    img = tdm.base()

    def at(x, z):
        c, r = tdm.pixel_of([[x, 0.0, z]])[0]
        return tuple(img[r, c])

    # room0's first crate: 0.6 m wide, centred on (1.2, 1.2); open floor half a metre away
    assert at(1.5, 1.2) == BLOCKED and at(1.2, 1.5) == BLOCKED and at(0.9, 1.2) == BLOCKED
    assert at(0.3, 1.2) == NAVIGABLE and at(1.2, 0.3) == NAVIGABLE


def chair_scene(tmp_path) -> Path:
    """A packed composed scene: a stand-in box room and ReplicaCAD's textured chair placed at
    scales 0.5, 1 and 2.5, rotated (needs ../shared/datasets/replicacad)."""
    import json
    import shutil

    from bps_assets.scene_dataset.standin import write_box_room

    src = tmp_path / "src"
    write_box_room(src / "stages" / "room.glb", (-3, 0, -3), (3, 2.5, 3))
    (src / "objects").mkdir(parents=True)
    shutil.copy(RCAD / "objects" / "frl_apartment_chair_01.glb", src / "objects" / "chair.glb")
    (src / "stages" / "room.stage_config.json").write_text(json.dumps({"render_asset": "room.glb"}))
    (src / "objects" / "chair.object_config.json").write_text(json.dumps(
        {"render_asset": "chair.glb", "COM": [0, 0, 0], "semantic_id": 20}))
    objs = [{"template_name": "chair", "translation": [0.8 * k - 0.8, 0.01, -1.6], "uniform_scale": s,
             "rotation": [0.924, 0, 0.383 * (k - 1), 0]} for k, s in enumerate((0.5, 1.0, 2.5))]
    (src / "scenes").mkdir()
    (src / "scenes" / "s.scene_instance.json").write_text(json.dumps(
        {"stage_instance": {"template_name": "room"}, "object_instances": objs}))
    cfg = src / "d.scene_dataset_config.json"
    cfg.write_text(json.dumps({"stages": {"paths": {".json": ["stages"]}}, "objects": {"paths": {".json": ["objects"]}},
                               "scene_instances": {"paths": {".json": ["scenes"]}}}))
    return pack_s(cfg, tmp_path)


def pack_s(cfg: Path, tmp_path) -> Path:
    """Scene ``s`` of the dataset config ``cfg`` packed into ``tmp_path/out`` (its scene file)."""
    from bps_assets.scene_dataset import habitat as H
    from bps_assets.scene_dataset.packing import pack_scene

    sc = H.read_scene_instance(H.read_dataset_config(cfg), "s")
    (tmp_path / "out" / "scenes").mkdir(parents=True)
    dst = tmp_path / "out" / "scenes" / "s.bps"
    pack_scene(sc, dst, tmp_path / "out" / "assets")
    return dst


@needs_rcad
@pytest.mark.parametrize("backend", BACKENDS)
def test_scaled_textured_instances_pick_the_flattened_mip(tmp_path, backend):
    """ReplicaCAD's textured chair placed at scales 0.5, 1 and 2.5, rotated: the instance's mip
    footprint is taken in asset space, so the colours equal the flattened scene's."""
    dst = chair_scene(tmp_path)
    r = _renderer(backend, res=(64, 64))
    _both(r, dst)
    yaw = np.linspace(-0.5, 0.5, 6)
    pos = np.tile([[0.0, 0.0, 0.6]], (6, 1))
    out = _compare(r, pos, yaw)
    d, rgb, sem = out["depth"], out["rgb"], out["semantic"]
    assert np.isclose(d[0], d[1], rtol=1e-4, atol=1e-4).mean() > 0.999
    assert (sem[0] == sem[1]).mean() > 0.999 and set(np.unique(sem[0])) == {0, 20}   # the chairs' semantic_id
    assert (np.abs(rgb[0].astype(int) - rgb[1]) > 1).any(-1).mean() < 0.002
    assert len(np.unique(rgb[0].reshape(-1, 3), axis=0)) > 20      # textured


def test_composed_scenes_stream_through_a_budget_with_shared_assets(composed_rooms):
    """3 composed scenes through a 1-slot cache whose budget holds two scenes' stages and the
    shared assets once: swaps happen, the budget is never exceeded, each swap keeps the shared
    assets resident (the next scene holds them before the last one leaves), and after the run
    every asset's references are the resident scenes'."""
    import json

    from bps_runtime.scenes.cache import CacheOptions, SceneCache
    from bps_runtime.scenes.loader import SceneSource
    from bps_runtime.scenes.residency import renderer_listener
    from test_runtime_cache import _run_episodes

    out = composed_rooms.parent
    entries = json.loads(composed_rooms.read_text())["scenes"]
    sources = [SceneSource(n, str(out / e["outputs"]["scene"]["path"]), str(out / e["outputs"]["navmesh"]["path"]))
               for n, e in sorted(entries.items())]
    r = _renderer(res=(16, 16))
    with SceneCache(sources[:1], r, 4, CacheOptions(slots=1, prefetch=False)) as probe:
        probe.start(refuse=True)
        one = probe.resident_bytes                     # a scene and its assets
        assets = probe.loader.assets.nbytes
    budget = int(2 * (one - assets) + assets + 4096)   # two stages, the assets once
    seen, loads = set(), []
    with SceneCache(sources, r, 4, CacheOptions(slots=1, budget_bytes=budget, seed=0, swap_after_episodes=4),
                    listeners=[renderer_listener(r)]) as cache:
        cache.start(refuse=True)
        store = cache.loader.assets

        def check(rep):
            assert cache.resident_bytes <= budget
            loads.append(rep.loads_completed)
            seen.update(cache.resident_scene_ids())
            assert len(store.resident) == 2 and all(n >= 1 for n in store.resident.values())

        _run_episodes(cache, r, 4, 80, np.random.default_rng(0), check, until=lambda: len(seen) == 3)
        assert len(seen) == 3 and sum(loads) >= 2
        resident = len(cache.resident_scene_indices)
        inflight = sum(s.pending is not None for s in cache.slots)
        assert all(resident <= n <= resident + inflight for n in store.resident.values())


def test_a_caching_reader_s_scene_is_not_remapped_twice(tmp_path):
    """The loader reports habitat's ids for a composed scene's triangles on a copy of the reader's
    scene: a reader that caches and returns one PackedScene object sees it unchanged, and a
    second load of it shades the same ids (crates of semantic_id 4: groups 1, 2 -> 4)."""
    from bps_assets.packed_scene import read_packed_scene
    from bps_runtime.scenes.loader import SceneLoader, SceneSource

    dst = _tiny_composed(tmp_path)
    cached = read_packed_scene(dst)
    before = cached.tri_object.copy()
    assert set(np.unique(before)) == {0, 1, 2}
    loader = SceneLoader(_renderer(), threads=1, reader=lambda p: cached)
    first, second = (loader.submit(SceneSource(f"s{k}", str(dst))).result() for k in range(2))
    for got in (first, second):
        assert not hasattr(got, "error"), getattr(got, "message", "")
        assert set(np.unique(got.shading.tri_object)) == {0, 4}
    assert np.array_equal(cached.tri_object, before)
    assert np.array_equal(first.shading.tri_object, second.shading.tri_object)
