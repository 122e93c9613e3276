"""The scene cache with composed scenes (issue 31's runtime review): two loads sharing an asset
that waits for room never hang the cache; the report's footprint counts the shared assets once
and sums to the resident bytes; the top-level instance structures are charged; close() gives
every asset back; the start-up budget counts each asset once and names a scene's whole need.

Scenes are generated (grid meshes: a stage, a small asset, a large asset) and packed with
``bps_assets.scene_dataset.packing.pack_scene``; they have no navmesh.
"""
from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from bps_assets.errors import ConfigError


def _grid_glb(path: Path, n: int, size: float, y: float = 0.0) -> None:
    """A flat n x n grid of quads (2 n^2 triangles), ``size`` metres wide, at height ``y``."""
    from bps_assets.scene import Material, Mesh, SceneDocument
    from bps_assets.writers.glb import write_glb

    u = np.linspace(-size / 2, size / 2, n + 1, dtype=np.float32)
    x, z = np.meshgrid(u, u)
    pos = np.c_[x.ravel(), np.full(x.size, y, np.float32), z.ravel()].astype(np.float32)
    k = np.arange(n * (n + 1)).reshape(n, n + 1)[:, :n].ravel()
    idx = np.r_[np.c_[k, k + n + 1, k + 1], np.c_[k + 1, k + n + 1, k + n + 2]].astype(np.uint32)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_glb(SceneDocument(meshes=[Mesh(pos, idx, material=0)], materials=[Material(name="grid")]), path)


def composed_library(root: Path, scenes: dict[str, list[str]], stage_grid: int = 24) -> dict[str, str]:
    """Packed composed scenes ``{name: [asset template per instance]}`` over one asset library:
    "small" (a 2x2 grid) and "big" (a grid with twice the stage's triangles). -> {name: path}."""
    from bps_assets.scene_dataset import habitat as H
    from bps_assets.scene_dataset.packing import pack_scene

    src = root / "src"
    _grid_glb(src / "stages" / "room.glb", stage_grid, 8.0)
    _grid_glb(src / "objects" / "small.glb", 2, 0.5, 0.3)
    _grid_glb(src / "objects" / "big.glb", int(stage_grid * 1.42), 1.0, 0.6)
    (src / "stages" / "room.stage_config.json").write_text(json.dumps({"render_asset": "room.glb"}))
    for name in ("small", "big"):
        (src / "objects" / f"{name}.object_config.json").write_text(json.dumps(
            {"render_asset": f"{name}.glb", "COM": [0, 0, 0], "category": name}))
    (src / "scenes").mkdir()
    for name, objs in scenes.items():
        inst = [{"template_name": t, "translation": [1.5 * i - 2, 0, 1], "motion_type": "STATIC"}
                for i, t in enumerate(objs)]
        (src / "scenes" / f"{name}.scene_instance.json").write_text(json.dumps(
            {"stage_instance": {"template_name": "room"}, "object_instances": inst}))
    cfg = src / "d.scene_dataset_config.json"
    cfg.write_text(json.dumps({"stages": {"paths": {".json": ["stages"]}}, "objects": {"paths": {".json": ["objects"]}},
                               "scene_instances": {"paths": {".json": ["scenes"]}}}))
    dc = H.read_dataset_config(cfg)
    (root / "out" / "scenes").mkdir(parents=True)
    out = {}
    for name in scenes:
        dst = root / "out" / "scenes" / f"{name}.bps"
        pack_scene(H.read_scene_instance(dc, name), dst, root / "out" / "assets")
        out[name] = str(dst)
    return out


def _first_asset(scene_path: str) -> str:
    """The asset file of a composed scene's first instance."""
    from bps_assets.scene_dataset.packing import read_composed
    _, table, paths = read_composed(scene_path)
    return paths[int(table.asset[0])]


def _renderer():
    from bps_runtime.render.embree import EmbreeRenderer
    from bps_runtime.render.protocol import RenderOptions
    r = EmbreeRenderer(RenderOptions(resolution=(8, 8), threads=1))
    assert r.instancing
    return r


def _sources(paths: dict[str, str], names):
    from bps_runtime.scenes.loader import SceneSource
    return [SceneSource(n, paths[n]) for n in names]


def _seeded_order(names, seed: int):
    """``names`` arranged so that a cache with ``seed`` takes them in the given order first."""
    perm = np.random.default_rng(seed).permutation(len(names)).tolist()
    out = [None] * len(names)
    for k, i in enumerate(perm):
        out[i] = names[k]
    return out


def test_two_loads_waiting_for_one_asset_without_room_never_hang(tmp_path):
    """Two slots prefetch two scenes that share an asset no resident scene holds, and the
    budget has no room for it: one load reads the asset and waits for room, the other waits for
    that load. Both count as held (the second used to be invisible to the ledger, so a due
    swap waited for it forever and ``unstick`` never gave up); the swap is given up, and the
    next round gives both loads up (Skipped)."""
    from bps_runtime.scenes.budget import Skipped
    from bps_runtime.scenes.cache import CacheOptions, SceneCache
    from bps_runtime.scenes.loader import LoadFailure

    paths = composed_library(tmp_path, {"p0": ["small"], "p1": ["small"], "q0": ["big"], "q1": ["big"]})
    r = _renderer()
    with SceneCache(_sources(paths, ["p0", "p1"]), r, 2, CacheOptions(slots=2, prefetch=False)) as probe:
        probe.start(refuse=True)
        own = max(probe.scene(i).nbytes for i in probe.resident_scene_indices)
        small = probe.loader.assets.nbytes
        need = probe.resident_bytes + own           # two actives and the small asset, one more to swap in
    big = sum(probe.loader.assets.measure(_first_asset(paths["q0"])).values())
    budget = need + 1024
    assert own + 1024 < big < budget, (big, own, budget)   # no room next to the actives, yet < the budget
    seed = 0
    sources = _sources(paths, _seeded_order(["p0", "p1", "q0", "q1"], seed))
    cache = SceneCache(sources, r, 2, CacheOptions(slots=2, budget_bytes=budget, seed=seed, loader_threads=2))
    cache.start(refuse=True)
    try:
        assert sorted(cache.resident_scene_ids()) == ["p0", "p1"]
        ledger = cache._ledger
        deadline = time.monotonic() + 60
        while ledger.held() != {"q0", "q1"} and time.monotonic() < deadline:
            time.sleep(0.02)
        # the load waiting for the other's asset is held too (before: only the asset's loader)
        assert ledger.held() == {"q0", "q1"}, ledger.held()
        done = []

        def swap_then_round():
            envs = cache.assign_next(np.arange(2))        # the first episodes
            cache.request_swap()
            cache.release_scenes(envs)
            cache.assign_next(np.arange(2))               # a due swap: its load waits for room
            cache.after_round()                           # nothing will make room: give the loads up
            done.append(True)

        t = threading.Thread(target=swap_then_round, daemon=True)
        t.start()
        t.join(30)
        hung = t.is_alive()
        if hung:
            cache.cancel()      # frees the stuck thread (the loads end), so the test ends
            t.join(30)
        assert not hung, "the swap waited forever for a load that waits for another load's asset"
        assert done
        rep = cache.take_report()
        assert any("given up" in x for x in rep.reasons), rep.reasons
        for s in cache.slots:
            if s.pending is not None:
                res = s.pending.result(timeout=30)
                assert isinstance(res, LoadFailure) and isinstance(res.error, Skipped), res
        assert ledger.held() == set() and cache.resident_bytes <= budget
    finally:
        cache.close()
    assert cache.loader.assets.resident == {} and cache.resident_bytes == 0


def test_an_asset_larger_than_the_budget_names_each_scene_and_the_asset(tmp_path):
    """Two loads share an asset larger than the whole budget; the second waits for the first's
    read of it, and both fail: each error names its own scene's file and the asset (before: the
    waiting load re-raised the first load's error, naming the first scene and no asset)."""
    from bps_runtime.scenes.budget import BudgetLedger
    from bps_runtime.scenes.loader import SceneLoader

    paths = composed_library(tmp_path, {"a": ["big"], "b": ["big"]})
    r = _renderer()
    asset = _first_asset(paths["a"])
    probe = SceneLoader(r, threads=1)
    big = sum(probe.assets.measure(asset).values())
    probe.close()
    ledger = BudgetLedger(big - 1)
    waited = threading.Event()

    def waiting(source, on):        # the second load now waits for the first's read
        waited.set()
        return ledger.waiting(source, on)

    def reserve(nbytes, source):    # the first reserves the asset only once the second waits
        if nbytes == big:
            assert waited.wait(30)
        return ledger.reserve(nbytes, source)

    loader = SceneLoader(r, threads=2, release=ledger.release, waiting=waiting)
    src = _sources(paths, ["a", "b"])
    futs = [loader.submit(s, reserve, quiet=True) for s in src]
    res = [f.result(timeout=60) for f in futs]
    loader.close()
    real = str(Path(asset).resolve())
    for s, x in zip(src, res):
        assert isinstance(x.error, ConfigError), x
        assert x.error.path == s.scene_path, (x.error.path, s.scene_path)
        assert f"asset {real}: needs {big} bytes, more than the whole cache budget" in x.message, x.message
    assert ledger.used == 0 and loader.assets.resident == {}


def test_a_composed_stage_at_a_level_reads_only_that_levels_geometry(tmp_path, monkeypatch):
    """A composed scene whose stage has converter LODs, loaded at a level: the stage's full
    geometry sections (positions, indices, ...) are never read, only the level's (before: the
    whole stage was decoded, then the level read)."""
    from bps_assets.packed_scene import ConvertOptions
    from bps_assets.scene_dataset import habitat as H
    from bps_assets.scene_dataset import packing
    from bps_runtime.render.protocol import RenderOptions
    from bps_runtime.scenes.loader import LoadedScene, SceneLoader, SceneSource
    from test_composed_scenes import _crate_room

    cfg = _crate_room(tmp_path / "src", [{"template_name": "crate", "translation": [1, 0, 1]}])
    sc = H.read_scene_instance(H.read_dataset_config(cfg), "s")
    (tmp_path / "out" / "scenes").mkdir(parents=True)
    dst = str(tmp_path / "out" / "scenes" / "s.bps")
    packing.pack_scene(sc, dst, tmp_path / "out" / "assets", ConvertOptions(lod=(0.01, 0.05)))
    asked = []
    read = packing.read_packed_scene

    def recording(path, sections=None, *a, **kw):
        asked.append((str(path), None if sections is None else list(sections)))
        return read(path, sections, *a, **kw)

    monkeypatch.setattr(packing, "read_packed_scene", recording)
    from bps_runtime.render.embree import EmbreeRenderer
    from bps_runtime.scenes.lod_levels import header_level
    r = EmbreeRenderer(RenderOptions(resolution=(16, 16), threads=1))
    assert header_level(dst, r.options) >= 0        # this sensor loads a level
    loader = SceneLoader(r, threads=1)
    got = loader.submit(SceneSource("s", dst)).result()
    loader.close()
    r.close()
    assert isinstance(got, LoadedScene) and got.footprint is not None, got
    stage_reads = [sec for p, sec in asked if p == dst]
    assert stage_reads and all(sec is not None and not {"positions", "indices"} & set(sec) for sec in stage_reads), \
        stage_reads


def test_a_waiting_load_ends_when_given_up_or_closed(tmp_path):
    """The second loader's wait honours the ledger: given up -> Skipped, closed -> cancelled;
    and when the asset's first load was given up, a waiter that was not loads it itself."""
    from bps_runtime.scenes.budget import BudgetLedger, Skipped
    from bps_runtime.scenes.loader import LoadCancelled, SceneLoader, SceneSource
    paths = composed_library(tmp_path, {"a": ["big"], "b": ["big"]})
    r = _renderer()
    asset = _first_asset(paths["a"])
    ledger = BudgetLedger(10 ** 9)
    loader = SceneLoader(r, threads=2, release=ledger.release, waiting=ledger.waiting)
    filler = ledger.reserve(10 ** 9 - 1000, SceneSource("x", "x"))       # no room for the asset
    store = loader.assets
    fa = loader._pool.submit(store.acquire, asset, ledger.reserve, SceneSource("a", paths["a"]))
    _until(lambda: ledger.held() == {"a"})
    fb = loader._pool.submit(store.acquire, asset, ledger.reserve, SceneSource("b", paths["b"]))
    _until(lambda: ledger.held() == {"a", "b"})
    ledger.give_up({"a"})                          # only the first: b then loads it itself
    with pytest.raises(Skipped):
        fa.result(10)
    _until(lambda: ledger.held() == {"b"})         # b is now the asset's loader, waiting for room
    ledger.release(filler)
    got = fb.result(10)
    assert got.refs == 1 and store.resident == {got.path: 1}
    store.release(got)
    # a waiter of a load that waits: closing the cache ends both
    filler = ledger.reserve(10 ** 9 - 1000, SceneSource("x", "x"))
    fa = loader._pool.submit(store.acquire, asset, ledger.reserve, SceneSource("a", paths["a"]))
    _until(lambda: ledger.held() == {"a"})
    fb = loader._pool.submit(store.acquire, asset, ledger.reserve, SceneSource("b", paths["b"]))
    _until(lambda: ledger.held() == {"a", "b"})
    ledger.give_up({"b"})                          # the waiter given up: it ends, the loader goes on
    with pytest.raises(Skipped):
        fb.result(10)
    assert not fa.done()
    ledger.cancel()
    with pytest.raises(LoadCancelled):
        fa.result(10)
    assert store.resident == {} and ledger.used == 10 ** 9 - 1000
    loader.close()


def _until(cond, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_report_footprint_counts_shared_assets_once_and_sums_to_resident_bytes(tmp_path):
    """Two composed scenes sharing both assets: the report's footprint is the scenes' own parts
    plus every shared asset's parts once, and sums to the resident bytes; an asset's footprint
    is ``scene_footprint``'s parts (plus its kept vertices); the top-level instance structures
    are charged to the scene, as bvh."""
    from bps_runtime.scenes.cache import CacheOptions, SceneCache
    from bps_assets.scene_dataset.packing import read_composed
    from bps_runtime.scenes.footprint import PARTS, add_footprints, scene_footprint

    paths = composed_library(tmp_path, {"s0": ["small", "big", "small"], "s1": ["big", "small"]})
    r = _renderer()
    with SceneCache(_sources(paths, ["s0", "s1"]), r, 2, CacheOptions(slots=2, prefetch=False)) as cache:
        cache.start(refuse=True)
        rep = cache.take_report()
        assets = cache.loader.assets.held_assets()
        assert len(assets) == 2 and rep.resident_scenes == 2
        assert set(rep.resident_footprint) == set(PARTS)
        assert sum(rep.resident_footprint.values()) == rep.resident_bytes == cache.resident_bytes
        scenes = [cache.scene(i) for i in cache.resident_scene_indices]
        assert rep.resident_footprint == add_footprints([s.footprint for s in scenes] + [a.footprint for a in assets])
        for a in assets:
            f = scene_footprint(a.shading, r, len(a.scene.positions), len(a.shading.indices))
            f["geometry"] += a.scene.positions.nbytes
            assert a.footprint == f and a.nbytes == sum(f.values())
        for s in scenes:
            top = s.accel.nbytes                       # the top-level instance structures
            stage = read_composed(s.source.scene_path)[0]
            own = scene_footprint(s.shading, r, len(stage.positions), len(stage.indices))
            assert top > 0 and s.footprint["bvh"] == own["bvh"] + top
            assert s.nbytes == sum(s.footprint.values())


def test_close_releases_the_assets_of_resident_and_prefetched_scenes(tmp_path):
    """close() with scenes resident and next scenes loaded (prefetch): the asset store holds
    nothing and every byte is given back."""
    from bps_runtime.scenes.cache import CacheOptions, SceneCache

    paths = composed_library(tmp_path, {"s0": ["small"], "s1": ["small", "big"], "s2": ["big"]})
    r = _renderer()
    cache = SceneCache(_sources(paths, ["s0", "s1", "s2"]), r, 1, CacheOptions(slots=1, prefetch=True))
    cache.start(refuse=True)
    _until(lambda: not cache.loading)
    store = cache.loader.assets
    assert store.resident and cache.resident_bytes > 0
    cache.close()
    assert store.resident == {} and cache.resident_bytes == 0


def _instance_arrays_bytes(accel, backend):
    """The bytes ``accel.nbytes`` stands for, summed from its arrays: the instance arrays (and,
    on Embree, the shading pointers) plus the per-instance BVH share."""
    if backend == "warp":
        from bps_runtime.render.warp_instances import WARP_BVH_BYTES_PER_INSTANCE as per
        arrays = (accel.assets, accel.asset_of, accel.inv, accel.nxf, accel.lod, accel.obj, accel.lowers,
                  accel.uppers)
        return sum(int(a.capacity) for a in arrays) + per * len(accel.parts)
    import ctypes

    from bps_runtime.render.embree_instances import EMBREE_BYTES_PER_INSTANCE as per
    return (accel._xfm.nbytes + accel._normal_xf.nbytes + accel._lod_scale.nbytes + accel.object.nbytes
            + ctypes.sizeof(accel._own[1]) + per * len(accel.parts))


def test_budget_needed_counts_each_asset_once_and_noroom_names_the_whole_need(tmp_path):
    """budget_needed of a 1-slot cache over 2 composed scenes: the active scene's own bytes
    twice (one more to swap in) and its assets once. A start-up budget with no room for an
    asset names the scene, the asset and the scene's whole need; the budget it names starts."""
    from bps_runtime.scenes.budget import BudgetLedger, NoRoom
    from bps_runtime.scenes.cache import CacheOptions, SceneCache
    from bps_runtime.scenes.loader import SceneLoader

    paths = composed_library(tmp_path, {"s0": ["small", "big"], "s1": ["small", "big"]})
    r = _renderer()
    src = _sources(paths, ["s0", "s1"])
    with SceneCache(src, r, 1, CacheOptions(slots=1, prefetch=False)) as cache:
        cache.start(refuse=True)
        sc = cache.scene(cache.resident_scene_indices[0])
        assets = sum(sc.asset_bytes.values())
        assert cache.budget_needed() == 2 * sc.nbytes + assets
        assert cache.resident_bytes == sc.nbytes + assets
    # the NoRoom of an asset's reservation: the scene, the asset, the whole need
    top = sc.accel.nbytes
    ledger = BudgetLedger(10 ** 9)
    filler = ledger.reserve(10 ** 9 - (sc.nbytes - top) // 4, src[0])    # room for the small asset only
    ledger.starting = True
    loader = SceneLoader(r, threads=1, release=ledger.release, waiting=ledger.waiting)
    res = loader.submit(src[0], ledger.reserve).result()
    loader.close()
    e = res.error
    assert isinstance(e, NoRoom), res
    # the instance structures are not built yet: the need has the renderer's estimate of them
    # (here their count: 3 parts over 3 meshes), the stage's, the table's and the assets'
    assert r.instances_bytes(3, 3) == top
    assert e.nbytes == sc.nbytes + assets and e.assets == sc.asset_bytes
    big = max(sc.asset_bytes, key=sc.asset_bytes.get)
    assert "'s0'" in str(e) and f"asset {big}" in str(e) and str(e.nbytes) in str(e)
    assert ledger.used == filler and loader.assets.resident == {}
    # after start-up, an asset larger than the whole budget: the error names the scene and the asset
    ledger = BudgetLedger(sc.asset_bytes[big] - 1)
    loader = SceneLoader(r, threads=1, release=ledger.release, waiting=ledger.waiting)
    res = loader.submit(src[0], ledger.reserve).result()
    loader.close()
    assert isinstance(res.error, ConfigError) and "more than the whole cache budget" in str(res.error)
    assert res.error.path == paths["s0"] and f"asset {big}: needs {sc.asset_bytes[big]} bytes" in str(res.error)
    assert ledger.used == 0 and loader.assets.resident == {}
    # a start-up budget that every part but the last fits: the cache names the whole need
    # (measured: the instance structures included) and starts with it
    with pytest.raises(ConfigError, match=r"give budget_bytes >= \d+") as err:
        SceneCache(src, r, 1, CacheOptions(slots=1, budget_bytes=sc.nbytes + assets - 1, prefetch=False)).start(
            refuse=True)
    named = int(re.search(r"budget_bytes >= (\d+)", str(err.value)).group(1))
    assert named == 2 * sc.nbytes + assets
    with SceneCache(src, r, 1, CacheOptions(slots=1, budget_bytes=named, prefetch=False)) as c:
        c.start(refuse=True)
        assert c.resident_bytes == sc.nbytes + assets
    # a budget with no room for the first asset: the need it names (the instance structures
    # included before they are built) starts the cache, not a second refusal with a larger need
    with pytest.raises(ConfigError, match=r"give budget_bytes >= \d+") as err:
        SceneCache(src[:1], r, 1, CacheOptions(slots=1, budget_bytes=1000, prefetch=False)).start(refuse=True)
    named = int(re.search(r"budget_bytes >= (\d+)", str(err.value)).group(1))
    with SceneCache(src[:1], r, 1, CacheOptions(slots=1, budget_bytes=named, prefetch=False)) as c:
        c.start(refuse=True)
        assert c.resident_bytes == sc.nbytes + assets


@pytest.mark.parametrize("backend", ["embree", "warp"])
def test_info_shows_the_cache_breakdown_of_a_composed_scene(tmp_path, backend):
    """`bps-assets info --json` of a composed scene gives, per renderer, the breakdown the
    cache's report gives for that scene alone (stage, instance table and structures, each shared
    asset once), not the flattened scene's."""
    from click.testing import CliRunner

    from bps_runtime.render.protocol import RenderOptions
    from bps_runtime.scenes.cache import CacheOptions, SceneCache
    from cli.main import main as cli

    paths = composed_library(tmp_path, {"s0": ["small", "big", "big", "small"]})
    res = CliRunner().invoke(cli, ["info", paths["s0"], "--json"])
    assert res.exit_code == 0, res.output
    info = json.loads(res.output)["resident_bytes"]
    if backend == "warp":
        import warp  # noqa: F401  (a dependency the test extra installs: missing is a failure, not a skip)
        from bps_runtime.render.warp_backend import WarpRenderer
        r = WarpRenderer(RenderOptions(threads=1), device="cpu")
    else:
        from bps_runtime.render.embree import EmbreeRenderer
        r = EmbreeRenderer(RenderOptions(threads=1))
    with SceneCache(_sources(paths, ["s0"]), r, 1, CacheOptions(slots=1, prefetch=False)) as cache:
        cache.start(refuse=True)
        rep = cache.take_report()
        # the loader's estimate of the instance structures before the build: their count (5
        # parts over 3 meshes: the stage, "small", "big")
        accel = cache.scene(cache.resident_scene_indices[0]).accel
        assert r.instances_bytes(5, 3) == accel.nbytes == _instance_arrays_bytes(accel, backend)
    assert rep.resident_footprint == info[backend]
    assert sum(info[backend].values()) == rep.resident_bytes
    text = CliRunner().invoke(cli, ["info", paths["s0"]])
    assert text.exit_code == 0 and f"{backend:<6} {rep.resident_bytes:>11}" in text.output


def test_report_footprint_is_kept_as_scenes_come_and_go(tmp_path):
    """The report's footprint is a running total, updated when a scene arrives or leaves (its
    shared assets when their first scene arrives / last one leaves): after every swap it equals
    the re-sum over the resident scenes, and a step without arrivals or departures folds in no
    footprint at all (before: every resident scene and asset re-summed on every report)."""
    from bps_runtime.scenes.cache import CacheOptions, SceneCache
    from bps_runtime.scenes.footprint import add_footprints

    paths = composed_library(tmp_path, {"a": ["small", "big"], "b": ["big"], "c": ["small", "small"],
                                        "d": ["big", "small"], "e": ["small"]})

    def resum(cache):
        scenes = [cache.scene(i) for i in cache.resident_scene_indices]
        assets: dict = {}
        for s in scenes:
            assets.update(s.asset_footprints or {})
        return add_footprints([s.footprint for s in scenes] + list(assets.values()))

    r = _renderer()
    with SceneCache(_sources(paths, list("abcde")), r, 2, CacheOptions(slots=1, swap_every=1, seed=3)) as cache:
        cache.start(refuse=True)
        fp = cache._sched.footprint
        held = cache.assign_next(np.arange(2))
        moves = evictions = 0
        for _ in range(12):
            before = fp.updates
            nxt = cache.assign_next(np.arange(2))
            cache.release_scenes(held)
            held = nxt
            cache.after_round()
            rep = cache.take_report()
            assert rep.resident_footprint == resum(cache)
            moved = rep.loads_completed + rep.evictions
            # at most the scene and its two assets per arrival / departure, whatever else is resident
            assert fp.updates - before <= 3 * moved
            moves, evictions = moves + moved, evictions + rep.evictions
            quiet = fp.updates
            for _ in range(20):   # reports without arrivals or departures fold in nothing
                assert cache.take_report().resident_footprint == resum(cache)
            assert fp.updates == quiet
        assert evictions >= 6 and moves >= 12


def test_a_renderer_estimating_its_instance_structures_low_fails_the_load_even_under_O(tmp_path):
    """render.protocol: ``instances_bytes`` is at least the built structures' ``nbytes`` (the
    estimate charged before the build covers them). A renderer breaking it fails the load with
    a RuntimeError naming it and the shortfall (before: an ``assert``, gone under ``python -O``,
    so the bytes went uncharged); the load's reservation and assets are given back."""
    from bps_runtime.render.embree import EmbreeRenderer
    from bps_runtime.render.protocol import RenderOptions
    from bps_runtime.scenes.loader import LoadFailure, SceneLoader

    class LowEstimate(EmbreeRenderer):
        def instances_bytes(self, num_instances, num_meshes):
            return super().instances_bytes(num_instances, num_meshes) - 8

    paths = composed_library(tmp_path, {"s0": ["small", "big"]})
    released = []
    loader = SceneLoader(LowEstimate(RenderOptions(resolution=(8, 8), threads=1)), threads=1,
                         release=released.append)
    try:
        res = loader.submit(_sources(paths, ["s0"])[0], lambda n, s: n).result(timeout=60)
        assert isinstance(res, LoadFailure), res
        assert type(res.error) is RuntimeError
        assert str(res.error) == "LowEstimate.instances_bytes under its nbytes by 8"
        assert released and loader.assets.resident == {}
    finally:
        loader.close()
