"""Warp renderer under the loader's threads: scene builds from several threads at once and scene
swaps while frames are in flight (CUDA; NVIDIA/warp#1491 made concurrent wp.Mesh builds crash
with "illegal memory access" on an H100), and the release of detached scenes (any device)."""
from __future__ import annotations

import gc
import threading
import time
import weakref
from types import SimpleNamespace
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

from bps_assets.packed_scene import PackedScene
from bps_runtime.render import RenderOptions, build_shading_data, make_renderer

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def bumpy_floor(seed: int, n: int = 240) -> PackedScene:
    """An 8 x 8 m floor of 2 n^2 triangles, heights from ``seed`` (every scene renders differently)."""
    rng = np.random.default_rng(seed)
    xs = np.linspace(0.0, 8.0, n + 1, dtype=np.float32)
    gx, gz = np.meshgrid(xs, -xs, indexing="ij")
    gy = (0.15 * rng.random((n + 1, n + 1))).astype(np.float32)
    pos = np.stack([gx, gy, gz], -1).reshape(-1, 3)
    i = np.arange(n)[:, None] * (n + 1) + np.arange(n)[None, :]
    a, b, c, d = i, i + (n + 1), i + (n + 2), i + 1
    tris = np.concatenate([np.stack([a, b, c], -1).reshape(-1, 3), np.stack([a, c, d], -1).reshape(-1, 3)])
    return PackedScene(
        header={"scene_id": f"floor{seed}", "frame": "habitat"}, positions=pos, indices=tris.astype(np.uint32),
        uvs=np.zeros((len(pos), 2), np.float32), colors=None, tri_material=np.zeros(len(tris), np.int32),
        material_color=np.array([[0.8, 0.7, 0.6, 1]], np.float32), material_texture=np.array([-1], np.int32),
        tex_blocks=np.zeros(0, np.uint8), tex_levels=np.zeros((0, 6), np.int64),
        chunk_tris=np.array([[0, len(tris)]], np.int64), chunk_spheres=np.zeros((1, 4), np.float32))


AGENTS = 64


def _poses(k: int):
    ids = torch.full((AGENTS,), k, dtype=torch.long)
    rng = np.random.default_rng(100)
    pos = torch.tensor(np.c_[rng.uniform(1, 7, AGENTS), np.zeros(AGENTS), rng.uniform(-7, -1, AGENTS)], dtype=torch.float32)
    return ids, pos, torch.tensor(rng.uniform(-np.pi, np.pi, AGENTS), dtype=torch.float32)


def _depth(r, k):
    return r.render(*_poses(k), ("depth",))["depth"].cpu().numpy()


@cuda
def test_scenes_built_on_eight_threads_at_once_render_as_built_one_by_one():
    scenes = [bumpy_floor(s) for s in range(8)]
    sds = [build_shading_data(s) for s in scenes]
    opts = RenderOptions(resolution=(32, 32))
    ref = make_renderer("warp", opts, device="cuda")
    want = []
    for k, (s, sd) in enumerate(zip(scenes, sds)):
        ref.attach(k, sd, ref.prepare(sd, s.positions, s.indices))
        want.append(_depth(ref, k))
    assert len({w.tobytes() for w in want}) == 8   # the scenes differ
    for _ in range(3):
        r = make_renderer("warp", opts, device="cuda")
        with ThreadPoolExecutor(8) as ex:
            accels = list(ex.map(lambda k: r.prepare(sds[k], scenes[k].positions, scenes[k].indices), range(8)))
        for k, a in enumerate(accels):
            r.attach(k, sds[k], a)
        for k in range(8):
            np.testing.assert_array_equal(_depth(r, k), want[k])
        r.close()
    torch.cuda.synchronize()


@cuda
def test_swapping_scenes_while_frames_are_queued_and_loads_run_beside():
    scenes = [bumpy_floor(s) for s in range(4)]
    sds = [build_shading_data(s) for s in scenes]
    r = make_renderer("warp", RenderOptions(resolution=(32, 32)), device="cuda")
    want = []
    for k in range(4):
        r.attach(0, sds[k], r.prepare(sds[k], scenes[k].positions, scenes[k].indices))
        want.append(_depth(r, 0))
    with ThreadPoolExecutor(2) as ex:   # the loader's two threads, building while the env swaps
        nxt = ex.submit(r.prepare, sds[1], scenes[1].positions, scenes[1].indices)
        for step in range(24):
            k = (step + 1) % 4
            accel = nxt.result()
            nxt = ex.submit(r.prepare, sds[(k + 1) % 4], scenes[(k + 1) % 4].positions, scenes[(k + 1) % 4].indices)
            for _ in range(3):   # frames queued on the scene about to go, not waited for
                r.render(*_poses(0), ("depth",))
            r.detach(0)
            r.attach(0, sds[k], accel)
            del accel
            np.testing.assert_array_equal(_depth(r, 0), want[k])
        nxt.result()
    r.close()
    assert r._retired == []
    torch.cuda.synchronize()


class _Event:
    def __init__(self, done):
        self.done = done

    def query(self):
        return self.done

    def synchronize(self):
        self.done = True


class _Scene:
    pass


def test_detached_scenes_are_released_only_after_their_frames_ran():
    r = make_renderer("warp", RenderOptions(resolution=(8, 8)), device="cpu")
    ran, queued = _Scene(), _Scene()
    gone_ran, gone_queued = weakref.ref(ran), weakref.ref(queued)
    pending = _Event(False)
    r._retired = [(_Event(True), ran), (pending, queued)]
    del ran, queued
    r._reap()
    gc.collect()
    assert gone_ran() is None and gone_queued() is not None
    assert [e for e, _ in r._retired] == [pending]
    r._reap()   # still queued: kept
    gc.collect()
    assert gone_queued() is not None
    r.close()   # lets everything go (on CUDA after a device sync)
    gc.collect()
    assert gone_queued() is None and r._retired == []


def _cuda_scene(seed: int):
    """(a Warp renderer on the CPU, a scene it prepared marked as built on CUDA, a weak reference
    to the scene's mesh): the ``CudaReleased`` paths without a GPU."""
    scene = bumpy_floor(seed, n=8)
    sd = build_shading_data(scene)
    r = make_renderer("warp", RenderOptions(resolution=(8, 8)), device="cpu")
    ran = r.prepare(sd, scene.positions, scene.indices)
    ran._cuda = True   # as built on CUDA
    return r, ran, weakref.ref(ran.mesh)


def test_a_swap_does_not_wait_for_a_build_to_release_scenes():
    """The env thread's ``_reap`` during a loader's CUDA build returns at once; the detached
    scene (``CudaReleased``) is not freed beside the build but by the loader as its build ends."""
    from bps_runtime.warp_init import device_build

    r, ran, mesh = _cuda_scene(5)
    r._retired = [(_Event(True), ran)]
    del ran
    building, done = threading.Event(), threading.Event()

    def loader():   # a loader thread building a CUDA scene
        with device_build(SimpleNamespace(is_cuda=True)):
            building.set()
            done.wait(10)

    t = threading.Thread(target=loader)
    t.start()
    building.wait(10)
    t0 = time.perf_counter()
    r._reap()           # returns at once: the swap does not wait for the build
    assert time.perf_counter() - t0 < 5 and r._retired == []
    gc.collect()
    assert mesh() is not None   # not freed beside the build
    done.set()
    t.join(10)
    gc.collect()
    assert mesh() is None and r._retired == []   # freed as the build ended


def test_a_scene_dropped_as_a_build_ends_is_freed_by_the_thread_that_dropped_it():
    """The loader has run its last ``free_orphans`` and not yet released ``CUDA_BUILD_LOCK`` when
    the env thread drops a CUDA scene: its ``__del__`` cannot take the lock and leaves the scene
    to the orphans; the loader then releases it. The drop's second try takes the lock and frees
    the scene (it used to wait for the next build or close()). The moment is pinned by a profile
    hook on the orphans' append, which lets the loader release there."""
    import sys

    from bps_runtime import warp_init

    r, dropped, mesh = _cuda_scene(6)
    in_window, release = threading.Event(), threading.Event()

    def loader():   # the end of a build (device_build): the last free_orphans(), then the release
        with warp_init.CUDA_BUILD_LOCK:
            warp_init.free_orphans()
            in_window.set()
            release.wait(10)

    t = threading.Thread(target=loader)
    t.start()
    assert in_window.wait(10)
    appended = []

    def hook(frame, event, arg):   # right after the orphans' append: the loader releases the lock
        if event == "c_return" and getattr(arg, "__self__", None) is warp_init._orphans and arg.__name__ == "append":
            appended.append(True)
            release.set()
            t.join(10)

    sys.setprofile(hook)
    try:
        del dropped
    finally:
        sys.setprofile(None)
    release.set()
    t.join(10)
    freed, left = mesh() is None, len(warp_init._orphans)
    with warp_init.CUDA_BUILD_LOCK:   # nothing left for the next test, whatever happened
        warp_init.free_orphans()
    assert appended and not t.is_alive()
    assert freed and left == 0   # freed by the drop's second try


def test_a_detached_cuda_scene_waits_for_its_frames_then_a_build_releases_it(monkeypatch):
    """The path detach -> event -> release, with the CUDA parts faked on the CPU: the env
    thread's release skips a scene whose frames still run; a loader's ``prepare`` waits for
    them and releases it before building the next scene."""
    scene = bumpy_floor(1, n=8)
    sd = build_shading_data(scene)
    r = make_renderer("warp", RenderOptions(resolution=(8, 8)), device="cpu")
    r.attach(0, sd, r.prepare(sd, scene.positions, scene.indices))
    gone = weakref.ref(r._scenes[0])
    events = []

    def frames_done():
        events.append(_Event(False))
        return events[-1]

    monkeypatch.setattr(r, "_wdev", SimpleNamespace(is_cuda=True, wrapped=r._wdev))
    monkeypatch.setattr(r, "_stream", lambda: None)
    monkeypatch.setattr(r, "_frames_done", frames_done)
    r.detach(0)
    gc.collect()
    assert len(r._retired) == 1 and gone() is not None   # its frames may still read it
    r.detach(5)   # a swap elsewhere: the env thread does not wait
    gc.collect()
    assert gone() is not None and not events[0].done
    monkeypatch.setattr(r, "_wdev", r._wdev.wrapped)
    r.prepare(sd, scene.positions, scene.indices)   # a loader: waits for the frames, then releases
    gc.collect()
    assert events[0].done and gone() is None and r._retired == []


def test_a_cuda_scene_let_go_during_a_build_is_freed_when_the_build_ends():
    from bps_runtime.render.warp_backend import WarpScene
    from bps_runtime.warp_init import device_build

    scene = bumpy_floor(2, n=8)
    sd = build_shading_data(scene)
    r = make_renderer("warp", RenderOptions(resolution=(8, 8)), device="cpu")
    sc = r.prepare(sd, scene.positions, scene.indices)
    assert isinstance(sc, WarpScene) and not sc._cuda
    sc._cuda = True   # as built on CUDA
    mesh = weakref.ref(sc.mesh)
    box = [sc]
    del sc
    let_go = threading.Thread(target=box.clear)   # the last reference, dropped on another thread
    with device_build(SimpleNamespace(is_cuda=True)):   # a loader's CUDA build in progress
        let_go.start()
        let_go.join(5)
        gc.collect()
        assert not let_go.is_alive() and mesh() is not None   # it did not wait, nor free beside the build
    gc.collect()
    assert mesh() is None   # freed as the build ended


def test_a_scene_dropped_under_the_renderers_lock_never_waits_for_a_build():
    """A loader holding the build lock waits for the renderer's lock (``_reap(wait=True)``)
    while the env thread, inside the renderer's lock, drops the last reference of a CUDA scene:
    dropping it must not wait for the build lock (a deadlock before); the loader frees it."""
    from bps_runtime.warp_init import device_build

    scene = bumpy_floor(3, n=8)
    sd = build_shading_data(scene)
    r = make_renderer("warp", RenderOptions(resolution=(8, 8)), device="cpu")
    sc = r.prepare(sd, scene.positions, scene.indices)
    sc._cuda = True
    mesh = weakref.ref(sc.mesh)
    box = [sc]
    del sc
    env_in, building, freed = threading.Event(), threading.Event(), threading.Event()

    def loader():
        env_in.wait(10)
        with device_build(SimpleNamespace(is_cuda=True)):   # a CUDA build in progress ...
            building.set()
            with r._lock:   # ... that then needs the renderer (as _reap(wait=True) does)
                pass
        freed.set()

    def env():
        with r._lock:
            env_in.set()
            building.wait(10)
            time.sleep(0.2)   # the loader now waits for the renderer's lock
            box.clear()   # the last reference, dropped inside the renderer's lock

    threads = [threading.Thread(target=loader, daemon=True), threading.Thread(target=env, daemon=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads), "deadlock"
    gc.collect()
    assert freed.is_set() and mesh() is None   # the loader freed it on leaving its build


def test_close_syncs_the_device_then_frees_every_scene_and_clears_its_row(monkeypatch):
    scene = bumpy_floor(4, n=8)
    sd = build_shading_data(scene)
    r = make_renderer("warp", RenderOptions(resolution=(8, 8)), device="cpu")
    r.attach(0, sd, r.prepare(sd, scene.positions, scene.indices))
    r._scenes[0]._cuda = True
    alive = weakref.ref(r._scenes[0])
    seen = []
    monkeypatch.setattr(r, "_wdev", SimpleNamespace(is_cuda=True))
    monkeypatch.setattr(r, "_stream", lambda: None)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: seen.append(alive() is not None))
    r.close()
    gc.collect()
    assert seen == [True] and alive() is None   # synchronized while the scene was still there
    assert r._meshes.numpy()[0] == 0 and r._scenes == {}   # its row renders as misses
