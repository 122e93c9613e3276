"""In-memory scenes + worlds for the batched-env tests and benchmarks (real Embree renderer, real
NavMesh), so neither needs a preprocessed dataset.

A scene is a closed box room (floor, ceiling, 4 walls) with optional pillars; its navmesh is
the floor minus the pillars, rasterized by ``NavMesh.from_walkable_triangles``.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from bps_assets.nav import NavMesh
from bps_assets.nav.geodesic import NEAR_EXACT, near_gate
from bps_assets.packed_scene import PackedScene
from bps_runtime.episodes import SupplyOptions, make_supply
from bps_runtime.nav.buffers import FieldWorker
from bps_runtime.env.env import BatchNavEnv
from bps_runtime.render import RenderOptions, build_shading_data, make_renderer
from bps_assets.errors import ConfigError
from bps_runtime.env.world import World
from bps_runtime.scenes.residency import Residency


def _box(x0, z0, x1, z1, y0, y1):
    """Closed axis-aligned box [x0,x1]x[y0,y1]x[z0,z1] (12 triangles)."""
    v = np.array([[x0, y0, z0], [x1, y0, z0], [x1, y0, z1], [x0, y0, z1],
                  [x0, y1, z0], [x1, y1, z0], [x1, y1, z1], [x0, y1, z1]], np.float32)
    t = np.array([[0, 2, 1], [0, 3, 2], [4, 5, 6], [4, 6, 7], [0, 1, 5], [0, 5, 4],
                  [1, 2, 6], [1, 6, 5], [2, 3, 7], [2, 7, 6], [3, 0, 4], [3, 4, 7]], np.int64)
    return v, t


def floor_tiles(w, d, holes, tile=0.5):
    """Floor [0,w]x[-d,0] as tiles of ``tile`` m, leaving out tiles that overlap ``holes``."""
    V, T = [], []
    for i in range(int(round(w / tile))):
        for j in range(int(round(d / tile))):
            x0, x1, z1, z0 = i * tile, (i + 1) * tile, -j * tile, -(j + 1) * tile
            if any(not (x1 <= hx0 or x0 >= hx1 or z1 <= hz0 or z0 >= hz1) for hx0, hz0, hx1, hz1 in holes):
                continue
            b = len(V)
            V += [[x0, 0, z1], [x1, 0, z1], [x1, 0, z0], [x0, 0, z0]]
            T += [[b, b + 1, b + 2], [b, b + 2, b + 3]]
    return np.array(V, np.float64), np.array(T, np.int64)


def room(name="room", w=4.0, d=6.0, h=2.5, pillars=()):
    """(name, ShadingData, positions, indices, NavMesh). ``pillars``: (x0, z0, x1, z1) boxes."""
    vs, ts, n = [], [], 0
    # room shell: a box seen from inside (reverse the winding; Embree does not cull anyway)
    v, t = _box(0, -d, w, 0, 0, h)
    vs.append(v); ts.append(t[:, ::-1] + n); n += len(v)
    for (x0, z0, x1, z1) in pillars:
        v, t = _box(x0, z0, x1, z1, 0, h)
        vs.append(v); ts.append(t + n); n += len(v)
    pos = np.concatenate(vs).astype(np.float32)
    idx = np.concatenate(ts).astype(np.uint32)
    ntri = len(idx)
    mat = np.zeros(ntri, np.int32)
    mat[2:4] = 1  # the ceiling a different colour
    shading = build_shading_data(PackedScene(
        header={}, positions=pos, indices=idx, uvs=None, colors=None, tri_material=mat,
        material_color=np.array([[0.8, 0.6, 0.4, 1], [0.2, 0.3, 0.9, 1]], np.float32),
        material_texture=np.full(2, -1, np.int32), tex_levels=np.zeros((0, 6), np.int64),
        tex_blocks=np.zeros(0, np.uint8)))
    fv, ft = floor_tiles(w, d, pillars)
    nm = NavMesh.from_walkable_triangles(fv, ft)
    return (name, shading, pos, idx, nm)


def corridor(name="corridor", length=6.0):
    """A 1 m wide straight corridor along -Z: x in [0, 1], z in [-length, 0]."""
    return room(name, w=1.0, d=length)


def make_env(scenes, num_envs=4, batch_size=None, seed=0, resolution=(16, 16), sensors=("depth",),
             episodes=None, goal_pool=8, normalize_depth=True, device="cpu", renderer="embree",
             capture_graph=False, threads=None, task=None, goal_views=4, goals=None, noise=None):
    """BatchNavEnv over resident in-memory scenes. ``episodes``: None (sampled) or
    {scene name: [habitat episode dicts]} (dataset mode; ``goals``: {scene name: {episode id:
    EpisodeGoal}}); ``threads``: CPU threads of the
    renderer and the step (None: every usable core); ``task``: a task's options (PointNav's);
    ``noise``: make()'s noise forms (bps_runtime.noise.presets.noise_options)."""
    worker = FieldWorker()
    supply = make_supply(seed, worker, episodes, options=SupplyOptions(goal_pool=goal_pool, goal_views=goal_views),
                         goals=goals, near_gate=NEAR_EXACT if task is None else near_gate(task.success_distance))
    from bps_runtime.env.config import EnvConfig, SensorConfig
    from bps_runtime.noise.presets import noise_options

    # as build_world: raw depth frames where depth noise runs (it clips after its model)
    r = make_renderer(renderer, RenderOptions(resolution=tuple(resolution), normalize_depth=normalize_depth,
                                                threads=threads, raw_depth=noise_options(noise).depth_on),
                      device=device if renderer == "warp" else "cpu")
    w = World(StaticScenes(list(scenes), r), r, device=device, supply=supply, worker=worker, sensors=sensors)

    config = EnvConfig(num_envs=num_envs, batch_size=batch_size, seed=seed, device=str(device), threads=threads,
                       capture_graph=capture_graph, sensors=SensorConfig(sensors, resolution, normalize_depth, renderer),
                       noise=noise_options(noise), **({} if task is None else {"task": task}))
    return BatchNavEnv(w, config)


def episode(eid, scene, start, goal, yaw=0.0):
    """One habitat v1 PointNav episode dict (start yaw about +Y; straight-line distance as the
    recorded geodesic distance, which the env does not use)."""
    return {"episode_id": str(eid), "scene_id": f"{scene}.glb", "start_position": list(map(float, start)),
            "start_rotation": [0.0, float(np.sin(yaw / 2)), 0.0, float(np.cos(yaw / 2))],
            "goals": [{"position": list(map(float, goal)), "radius": 0.2}],
            "info": {"geodesic_distance": float(np.linalg.norm(np.subtract(goal, start)))}}


def house_scene(name="house"):
    """reference_scenes.house() (two rooms and a door, a table, a 0.15 m step, stairs up to a
    mezzanine) as a renderable scene with its voxel-built navmesh."""
    from bps_assets.nav import build_navmesh
    from bps_assets.nav.reference_scenes import house

    v, t = house().arrays()
    pos = v.astype(np.float32)
    idx = t.astype(np.uint32)
    shading = build_shading_data(PackedScene(
        header={}, positions=pos, indices=idx, uvs=None, colors=None, tri_material=np.zeros(len(idx), np.int32),
        material_color=np.array([[0.7, 0.7, 0.7, 1]], np.float32),
        material_texture=np.full(1, -1, np.int32), tex_levels=np.zeros((0, 6), np.int64),
        tex_blocks=np.zeros(0, np.uint8)))
    return (name, shading, pos, idx, build_navmesh((v, t)))


class StaticScenes:
    """A test double of the scene manager (``bps_runtime.scenes.cache.SceneCache``'s protocol):
    a fixed set of resident scenes, env i -> scene i % K, no swaps, no loader.

    ``scenes``: list of (name, shading ShadingData, positions, indices, NavMesh).
    """

    def __init__(self, scenes: list, renderer):
        if not scenes:
            raise ConfigError(None, "no scenes to run on")
        self._scenes, self.renderer = scenes, renderer
        self.names = [s[0] for s in scenes]
        self.capacity = len(scenes)
        self.residency = Residency()
        self.loading, self.swaps_requested = False, 0

    def add_listener(self, listener):
        self.residency.add(listener)

    def start(self, prepare=None, refuse=False):
        """Renderer accel + navigation of every scene (two threads), then each scene's arrival
        told to the listeners (a failure raises: these scenes are all there is)."""
        from concurrent.futures import ThreadPoolExecutor

        def load(i):
            name, shading, positions, indices, navmesh = self._scenes[i]
            return SimpleNamespace(scene_id=name, shading=shading, semantics=None,   # a LoadedScene's fields
                                   accel=self.renderer.prepare(shading, positions, indices),
                                   prepared=prepare(name, navmesh) if prepare else None)

        with ThreadPoolExecutor(2, thread_name_prefix="bps-static-load") as pool:
            loaded = [f.result() for f in [pool.submit(load, i) for i in range(len(self._scenes))]]
        for i, sc in enumerate(loaded):
            self.residency.arrived(i, sc)

    def assign_next(self, env_ids):
        return np.asarray(env_ids) % len(self._scenes)

    def release_scenes(self, scene_indices):
        """Static scenes stay resident for the env's life: no reference to drop."""

    def after_round(self):
        """Static scenes: no swap is ever due."""

    def take_report(self):
        return SimpleNamespace(waited=False, reasons=[])

    def scene_id(self, i):
        return self.names[i]

    def resident_scene_ids(self):
        return list(self.names)

    def cancel(self):
        """No load ever waits here."""

    def close(self):
        pass
