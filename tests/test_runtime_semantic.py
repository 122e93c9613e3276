"""The semantic sensor: per-pixel instance ids from the depth rays, in both renderers, batched
over scenes, one Warp launch, ids checked where the shading tables are built; the env's
CategoryTable. ``reference_ids`` / ``boundary`` / ``poses`` are the independent ray cast that
tests/test_semantic_integration.py checks the sensor against on converted annotated scans."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from bps_assets.errors import ConfigError, CorruptFileError
from bps_runtime.render import RenderOptions, build_shading_data, make_renderer
from bps_runtime.render.semantic import UNKNOWN, CategoryTable, category_row
from runtime_scenes import room_scene

RES = 64


def _engines():
    """Every (renderer, Embree engine, shading) path: embreex gets RGB from the Warp CPU shader,
    the bridge from its C shading or the Warp CPU shader."""
    out = [("embree", {"engine": "embreex", "shading": "warp"})]
    from bps_runtime.render import embree_bridge
    if embree_bridge.available():
        out += [("embree", {"engine": "bridge", "shading": "native"}),
                ("embree", {"engine": "bridge", "shading": "warp"})]
    return out + [("warp", {})]


ENGINES = _engines()
ENGINE_IDS = [f"{b}-{kw.get('engine', '')}-{kw.get('shading', '')}".strip("-") for b, kw in ENGINES]


def poses(info):
    """Agents at each room's free point: four turns, and one view of each piece of furniture
    in the room (the furniture fills much of the frame)."""
    pos, yaw = [], []
    for room in info.rooms:
        p = np.asarray(room.free_point, np.float32)
        for k in range(4):
            pos.append(p)
            yaw.append(k * math.pi / 2 + 0.3)
        for f in info.furniture:
            if f.room == room.id:
                dx = (f.rect.xmin + f.rect.xmax) / 2 - p[0]
                dz = (f.rect.zmin + f.rect.zmax) / 2 - p[2]
                pos.append(p)
                yaw.append(math.atan2(-dx, -dz))  # forward is (-sin yaw, 0, -cos yaw)
    return np.stack(pos).astype(np.float32), np.asarray(yaw, np.float64)


def reference_ids(scene, pos, yaw, res=RES, hfov=90.0, height=1.25, ids_at=None):
    """Instance ids [N, res, res] by embreex called directly on rays built here (not the
    renderers' camera module, not our bridge, not bps_assets.raycast). ``ids_at(prim, uv)``
    (hits only) gives a hit's id; default ``scene.tri_object[prim]``."""
    from embreex import mesh_construction, rtcore_scene

    es = rtcore_scene.EmbreeScene()
    mesh_construction.TriangleMesh(es, np.ascontiguousarray(scene.positions, np.float32),
                                   np.ascontiguousarray(scene.indices, np.int32))
    t = math.tan(math.radians(hfov) / 2)
    j, i = np.meshgrid(np.arange(res), np.arange(res))
    cam = np.stack([((j + 0.5) / res * 2 - 1) * t, (1 - (i + 0.5) / res * 2) * t, -np.ones_like(j, float)], -1)
    out = []
    for p, a in zip(pos, yaw):
        c, s = math.cos(a), math.sin(a)
        d = cam.reshape(-1, 3) @ np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]]).T
        o = np.tile(np.asarray(p, np.float64) + [0, height, 0], (len(d), 1))
        hit = es.run(o.astype(np.float32), d.astype(np.float32), output=1)
        prim = np.asarray(hit["primID"], np.int64)
        ok = prim >= 0
        ids = np.zeros(len(prim), np.int32)
        if ids_at is None:
            ids[ok] = scene.tri_object[prim[ok]]
        else:
            ids[ok] = ids_at(prim[ok], np.stack([hit["u"], hit["v"]], 1)[ok])
        out.append(ids.reshape(res, res))
    return np.stack(out)


def boundary(ids: np.ndarray) -> np.ndarray:
    """Pixels whose 3x3 neighbourhood holds more than one id (per image of [N, H, W])."""
    p = np.pad(ids, ((0, 0), (1, 1), (1, 1)), mode="edge")
    h, w = ids.shape[1:]
    out = np.zeros(ids.shape, bool)
    for dy in (0, 1, 2):
        for dx in (0, 1, 2):
            out |= p[:, dy:dy + h, dx:dx + w] != ids
    return out


def _renderer(backend, kw, scene, sid=0, options=None):
    if backend == "warp":
        import warp  # noqa: F401  (a dependency the test extra installs: missing is a failure, not a skip)
    r = make_renderer(backend, options or RenderOptions(resolution=(RES, RES), threads=2), **kw)
    attach(r, scene, sid)
    return r


def attach(r, scene, sid):
    sd = build_shading_data(scene)
    r.attach(sid, sd, r.prepare(sd, scene.positions, scene.indices))


@pytest.mark.parametrize("backend,kw", ENGINES, ids=ENGINE_IDS)
def test_semantic_is_batched_over_scenes(backend, kw):
    """Agents of two scenes interleaved in one frame each read their own scene's ids; a scene
    without tri_object gives 0 everywhere."""
    room = room_scene()
    a = replace(room, tri_object=(np.arange(len(room.indices)) // 2 + 1).astype(np.int32))
    b = replace(room, tri_object=(np.arange(len(room.indices)) // 2 + 101).astype(np.int32))
    r = _renderer(backend, kw, a, sid=0, options=RenderOptions(resolution=(16, 16), threads=2))
    attach(r, b, 5)
    attach(r, room, 2)
    sid = np.array([0, 5, 2, 5, 0, 2])
    pos = np.tile(np.array([[4.0, 0.0, -3.0]], np.float32), (6, 1))
    yaw = np.array([0.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    sem = r.render(sid, pos, yaw, ("semantic",))["semantic"].numpy()[..., 0]
    assert set(np.unique(sem[[0, 4]])) <= set(range(1, 7)) and set(np.unique(sem[[1, 3]])) <= set(range(101, 107))
    np.testing.assert_array_equal(sem[1], sem[0] + 100)
    np.testing.assert_array_equal(sem[3], sem[4] + 100)
    assert (sem[[2, 5]] == 0).all()
    assert len(np.unique(sem[0])) >= 3  # floor, ceiling, back wall


def test_warp_frame_is_one_launch_with_every_sensor(monkeypatch):
    """Semantic is one more output of the frame kernel, not another pass."""
    import warp  # noqa: F401  (a dependency the test extra installs: missing is a failure, not a skip)
    from bps_runtime.render import warp_backend

    room = room_scene()
    r = _renderer("warp", {}, replace(room, tri_object=np.ones(len(room.indices), np.int32)),
                  options=RenderOptions(resolution=(8, 8)))
    r.render([0], [[4.0, 0, -3]], [0.0], ("depth", "rgb", "semantic"))  # compile outside the count
    wp = warp_backend._wp
    calls = []
    real = wp.launch
    monkeypatch.setattr(wp, "launch", lambda *a, **k: (calls.append(a[0]), real(*a, **k))[1])
    out = r.render([0], [[4.0, 0, -3]], [0.0], ("depth", "rgb", "semantic"))
    assert len(calls) == 1 and (out["semantic"] == 1).all()


def test_tri_object_is_checked_where_the_tables_are_built():
    room = room_scene()
    nt = len(room.indices)
    sd = build_shading_data(replace(room, tri_object=np.arange(nt, dtype=np.int64)))
    assert sd.tri_object.dtype == np.int32 and sd.nbytes == build_shading_data(room).nbytes + 4 * nt
    with pytest.raises(CorruptFileError, match="x.bps.*tri_object has shape"):
        build_shading_data(replace(room, tri_object=np.ones(nt - 1, np.int32)), "x.bps")
    with pytest.raises(CorruptFileError, match="negative instance id"):
        build_shading_data(replace(room, tri_object=np.full(nt, -2, np.int32)), "x.bps")
    with pytest.raises(CorruptFileError, match="tri_object has dtype"):
        build_shading_data(replace(room, tri_object=np.ones(nt, np.float32)), "x.bps")


def _table(ids, category, categories):
    from bps_assets.semantics import SemanticTable

    n = len(ids)
    return SemanticTable(ids=np.asarray(ids, np.int32), category=np.asarray(category, np.int32),
                         raw_names=["x"] * n, region=np.full(n, -1, np.int32), aabb=np.zeros((n, 6), np.float32),
                         points=np.zeros((n, 1, 3), np.float32), categories=categories)


def test_category_table_maps_ids_per_scene_slot():
    from bps_assets.readers.semantic_categories import objectnav_hm3d

    task = objectnav_hm3d()
    vocab = sorted(task, key=task.get)   # chair, bed, plant, toilet, tv_monitor, sofa
    t1 = _table([1, 2, 7], [0, 1, -1], ["sofa", "wall", "chair"])     # sofa, wall (not in vocab), unknown
    t2 = _table([3], [0], ["toilet"])
    np.testing.assert_array_equal(category_row(t1, vocab), [UNKNOWN, 5, UNKNOWN] + [UNKNOWN] * 5)
    np.testing.assert_array_equal(category_row(t1), [UNKNOWN, 0, 1, UNKNOWN, UNKNOWN, UNKNOWN, UNKNOWN, UNKNOWN])
    ct = CategoryTable(3, vocabulary=vocab, capacity=4)
    ct.set(0, t1)   # 3 objects + a pad fit in 4 entries per scene index
    ct.set(2, t2)
    assert ct.version == 0 and ct.capacity == 4
    ct.set(1, _table([1, 2, 3, 4], [0, 0, 0, 0], ["bed"]))   # 4 objects do not: the table grows
    assert ct.version == 1 and ct.capacity >= 5 and ct.nbytes == 12 * (3 * ct.capacity + 1)
    keys = ct.keys
    ct.set(1, None)   # no growth: the segment is rewritten in place (a captured graph stays valid)
    assert ct.keys is keys and ct.version == 1
    sem = torch.tensor([[1, 2, 0, 7, 3, 500], [3, 1, 0, 0, 0, 0]], dtype=torch.int32).reshape(2, 1, 6, 1)
    cats = ct.lookup(torch.tensor([0, 2]), sem)
    assert cats.shape == sem.shape and cats.dtype == torch.int32
    assert cats.reshape(2, 6).tolist() == [[5, -1, -1, -1, -1, -1], [3, -1, -1, -1, -1, -1]]
    ct.clear(2)
    assert ct.lookup(torch.tensor([2]), sem[1:]).eq(UNKNOWN).all()
    with pytest.raises(ConfigError, match="ids must be in"):
        category_row(_table([0], [0], ["chair"]))
    with pytest.raises(ConfigError, match="ids must be in"):
        category_row(_table([2**31 - 1], [0], ["chair"]))  # refused before allocating a dense row
    from bps_runtime.render.semantic import category_pairs

    ids, cats = category_pairs(_table([9, 2, 5], [0, 1, 2], ["chair", "bed", "sofa"]), vocab)
    assert ids.tolist() == [2, 5, 9] and cats.tolist() == [1, 5, 0]   # sorted, whatever the order


def _device_bytes(table) -> int:
    """Bytes of every tensor a CategoryTable holds (whatever its layout)."""
    seen, out = set(), 0
    for v in vars(table).values():
        for t in (v if isinstance(v, (tuple, list)) else (v,)):
            if isinstance(t, torch.Tensor) and id(t) not in seen:
                seen.add(id(t))
                out += t.numel() * t.element_size()
    return out


def test_category_table_memory_follows_the_objects_not_the_ids():
    """Habitat ``semantic_id``s up to the 2^20 cap in every slot: the table holds entries for
    the objects (12 B each, per slot the largest scene's objects + 1, at most doubled), not one
    row per id; a scene swap rewrites only its slot's entries; every slot's ids still map
    after scenes leave and arrive in any order."""
    from bps_runtime.render.semantic import MAX_INSTANCE_ID

    rng = np.random.default_rng(3)
    names = ["chair", "bed", "sofa"]
    slots, per = 8, 50
    tabs = []
    for s in range(slots):
        ids = np.unique(np.append(rng.integers(1, MAX_INSTANCE_ID, per - 1), MAX_INSTANCE_ID - s))
        tabs.append(_table(ids, rng.integers(-1, 3, len(ids)), names))
    ct = CategoryTable(slots, vocabulary=names)
    for s in (5, 0, 7, 2, 1, 6, 3, 4):
        ct.set(s, tabs[s])
    assert _device_bytes(ct) <= 12 * 2 * (slots * per + 1), _device_bytes(ct)   # dense: 8 x 2^20 x 4 B
    before, k = ct.keys.clone(), ct.capacity
    ct.clear(2)
    moved = torch.nonzero(ct.keys != before).flatten()
    assert moved.numel() and moved.min() >= 2 * k and moved.max() < 3 * k   # slot 2's entries only
    ct.set(2, tabs[2])
    assert torch.equal(ct.keys, before)
    ct.set(6, None)

    def expect(s, frame):
        row = category_row(tabs[s], names) if s != 6 else np.full(1, UNKNOWN, np.int32)
        return np.where(frame < len(row), row[np.minimum(frame, len(row) - 1)], UNKNOWN)

    slot = np.arange(slots).repeat(2)
    frames = np.stack([rng.choice(np.concatenate([tabs[s].ids, [0, 1, MAX_INSTANCE_ID, 12345]]), (4, 5))
                       for s in slot]).astype(np.int32)
    got = ct.lookup(torch.from_numpy(slot), torch.from_numpy(frames[..., None]))[..., 0].numpy()
    want = np.stack([expect(s, f) for s, f in zip(slot, frames)])
    np.testing.assert_array_equal(got, want)
    assert (got[slot != 6] >= 0).any() and (got[slot == 6] == UNKNOWN).all()
    # device ops only (capture-safe on CUDA): no host sync, the same ops whatever the batch
    from cli.step_profile import count_ops

    counts = []
    for n in (1, len(slot)):
        with count_ops() as c:
            ct.lookup(torch.from_numpy(slot[:n]), torch.from_numpy(frames[:n, ..., None]))
        assert c.num_syncs == 0, c.syncs
        counts.append(c.torch_ops["step"])
    assert counts[0] == counts[1] and sum(counts[0].values()) <= 12, counts
    # an id of another slot's scene is not this slot's: no aliasing between scene indices
    other = torch.from_numpy(np.asarray(tabs[0].ids[:1], np.int32).reshape(1, 1))
    assert ct.lookup(torch.tensor([1]), other).item() == (
        UNKNOWN if tabs[0].ids[0] not in tabs[1].ids else expect(1, np.asarray(tabs[0].ids[:1]))[0])
