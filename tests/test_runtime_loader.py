"""Async scene loader: real packed files and navmeshes, background threads, quarantine."""
from __future__ import annotations

import logging
import threading

import numpy as np
import pytest

from bps_assets.errors import CorruptFileError, InputError
from bps_runtime.scenes.loader import LoadedScene, LoadFailure, SceneLoader, SceneSource, navmesh_nbytes
from bps_runtime.render import make_renderer
from bps_runtime.render.protocol import RenderOptions
from runtime_scenes import room_document, room_scene


@pytest.fixture(scope="module")
def packed_room(tmp_path_factory):
    from bps_assets.nav import build_navmesh
    from bps_assets.packed_scene import convert_scene

    d = tmp_path_factory.mktemp("scenes")
    convert_scene(room_document(), d / "room.bps")
    s = room_scene()
    nav = build_navmesh((s.positions, s.indices.astype(np.int64)))
    nav.save(d / "room.navmesh")
    return d


def test_loads_packed_scene_and_navmesh_in_background(packed_room):
    r = make_renderer("embree")
    loader = SceneLoader(r, threads=1)
    seen = {}

    def reserve(nbytes, src):
        seen["thread"] = threading.current_thread().name
        seen["nbytes"] = nbytes
        return nbytes

    fut = loader.submit(SceneSource("room", str(packed_room / "room.bps"), str(packed_room / "room.navmesh")), reserve)
    res = fut.result(timeout=60)
    loader.close()
    assert isinstance(res, LoadedScene), getattr(res, "message", res)
    assert seen["thread"].startswith("bps-loader")
    assert res.num_triangles == 12 and res.navmesh is not None and navmesh_nbytes(res.navmesh) > 0
    assert res.nbytes == seen["nbytes"] == res.ticket
    assert res.nbytes >= res.shading.nbytes + navmesh_nbytes(res.navmesh)
    # the accel is ready: render straight away from the resident data
    r.attach(0, res.shading, res.accel)
    d = r.render([0], [[4.0, 0, -3]], [0.0])["depth"]
    assert abs(float(d[0, 32, 32, 0]) - 3.0) < 1e-3


def test_corrupt_and_missing_files_become_failures(packed_room, tmp_path, caplog):
    data = bytearray((packed_room / "room.bps").read_bytes())
    from bps_assets.container import Container
    with Container(packed_room / "room.bps") as c:
        sec = max(c.sections.values(), key=lambda s: s.stored_length)
    data[sec.offset + sec.stored_length // 2] ^= 0xFF  # inside a section: CRC mismatch
    bad = tmp_path / "bad.bps"
    bad.write_bytes(bytes(data))
    loader = SceneLoader(make_renderer("embree"), threads=2)
    with caplog.at_level(logging.ERROR, logger="bps_runtime.scenes.loader"):
        futs = [loader.submit(SceneSource("bad", str(bad))),
                loader.submit(SceneSource("gone", str(tmp_path / "missing.bps"))),
                loader.submit(SceneSource("nonav", str(packed_room / "room.bps"), str(tmp_path / "x.navmesh")))]
        res = [f.result(timeout=60) for f in futs]
    loader.close()
    assert all(isinstance(x, LoadFailure) for x in res)
    assert isinstance(res[0].error, CorruptFileError) and "bad.bps" in res[0].message
    assert isinstance(res[1].error, InputError) and "missing.bps" in res[1].message
    assert "x.navmesh" in res[2].message
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert "'bad' quarantined" in logged and "'gone' quarantined" in logged


def test_reservation_is_released_when_a_load_fails_after_it():
    released = []

    class Boom:
        options = RenderOptions()

        def accel_breakdown(self, nv, nt):
            return {"bvh": 0}

        def prepare(self, *a):
            raise RuntimeError("bvh build failed")

    loader = SceneLoader(Boom(), threads=1, reader=lambda p: room_scene(), release=released.append)
    res = loader.submit(SceneSource("r", "mem"), lambda n, s: n).result()
    loader.close()
    assert isinstance(res, LoadFailure) and "bvh build failed" in res.message
    assert released and released[0] > 0


def test_warp_renderer_scenes_are_built_in_loader_threads(packed_room):
    import warp  # noqa: F401  (a dependency the test extra installs: missing is a failure, not a skip)
    r = make_renderer("warp")
    loader = SceneLoader(r, threads=2)
    futs = [loader.submit(SceneSource(f"room{i}", str(packed_room / "room.bps"))) for i in range(2)]
    res = [f.result(timeout=120) for f in futs]
    loader.close()
    assert all(isinstance(x, LoadedScene) for x in res), [getattr(x, "message", "") for x in res]
    for i, x in enumerate(res):
        r.attach(i, x.shading, x.accel)
    d = r.render([0, 1], [[4.0, 0, -3], [4.0, 0, -4.5]], [0.0, 0.0])["depth"]
    assert abs(float(d[0, 32, 32, 0]) - 3.0) < 1e-3 and abs(float(d[1, 32, 32, 0]) - 1.5) < 1e-3


def test_a_load_that_fails_before_its_end_prepares_nothing(packed_room):
    """The per-scene preparation (navigation arrays, the episode supply's visit and first fields)
    is a load's last step: a load refused by the budget (or failing earlier) prepares nothing,
    so nothing is left to free and the scene's next visit draws the same episodes."""
    from bps_runtime.scenes.loader import LoadCancelled

    prepared = []
    loader = SceneLoader(make_renderer("embree"), threads=1, prepare=lambda sid, nav: prepared.append(sid) or sid)
    src = SceneSource("room", str(packed_room / "room.bps"), str(packed_room / "room.navmesh"))

    def refuse(nbytes, source):
        raise LoadCancelled(source.scene_path, "cache closed")

    try:
        assert isinstance(loader.submit(src, refuse).result(timeout=60), LoadFailure)
        assert prepared == []
        res = loader.submit(src, lambda n, s: n).result(timeout=60)
        assert isinstance(res, LoadedScene) and res.prepared == "room" and prepared == ["room"]
    finally:
        loader.close()


def test_a_pool_refusing_work_at_the_interpreters_exit_ends_the_load_quietly(packed_room, monkeypatch, caplog):
    """The refusal is caught at the ``submit`` that raised it (the packed-scene reader's pool, the
    field worker): ``InterpreterExiting``, a quiet failure; a reader's own RuntimeError of the same
    text is a damaged scene, logged (nothing is judged by an error's text)."""
    import concurrent.futures

    import bps_assets.packed_scene as packed_scene
    from bps_assets.errors import InterpreterExiting
    from bps_runtime.nav.buffers import FieldWorker

    exiting = RuntimeError("cannot schedule new futures after interpreter shutdown")

    class Exiting(concurrent.futures.ThreadPoolExecutor):
        def submit(self, *a, **kw):
            raise exiting

    src = SceneSource("room", str(packed_room / "room.bps"))
    monkeypatch.setattr(packed_scene, "ThreadPoolExecutor", Exiting)
    loader = SceneLoader(make_renderer("embree"), threads=1)
    with caplog.at_level(logging.ERROR, logger="bps_runtime.scenes.loader"):
        res = loader.submit(src).result(timeout=60)
        assert isinstance(res, LoadFailure) and isinstance(res.error, InterpreterExiting), res
        assert not caplog.records
        own = SceneLoader(make_renderer("embree"), threads=1, reader=lambda p: (_ for _ in ()).throw(exiting))
        res = own.submit(src).result(timeout=60)
        assert isinstance(res, LoadFailure) and res.error is exiting
        assert "quarantined" in caplog.text
    loader.close()
    own.close()

    w = FieldWorker()
    w._pool.shutdown()   # as the interpreter's exit leaves it: refusing, though never closed
    with pytest.raises(InterpreterExiting):
        w.run(print)
    w.close()
    with pytest.raises(RuntimeError) as e:   # closed: the plain refusal
        w.run(print)
    assert not isinstance(e.value, InterpreterExiting)
