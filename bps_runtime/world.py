"""The glue under BatchPointNavEnv: scenes (scene cache) + renderer + navigation + episodes.

``World`` answers what the env asks per step: which scene each agent is in, the next scene at
an episode boundary, try_step / geodesic (``BatchNav``), new episodes (``EpisodeSupply``) and
the batch render. Per-scene navigation work (the navmesh on the device, the geodesic
graph, the first goal fields) is started by ``prepare_scene`` when a scene is loaded, off the
step path; ``activate`` only registers what is ready.

Scene managers (``scenes``): ``CachedScenes`` streams scenes through ``bps_runtime.cache``
(fixed budget, swaps at episode boundaries); ``StaticScenes`` keeps a fixed set resident
(in-memory scenes for tests, or when everything fits).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bps_assets.errors import ConfigError, InputError

from .episode_supply import DEFAULTS as SUPPLY_DEFAULTS, EpisodeSupply, SupplyOptions
from .nav import BatchNav, DeviceNavMesh, FieldWorker


@dataclass(frozen=True)
class WorldOptions:
    renderer: str = "embree"
    sensors: tuple = ("depth",)
    resolution: tuple = (64, 64)
    normalize_depth: bool = True
    cache: Any = None
    supply: SupplyOptions = SUPPLY_DEFAULTS

    @classmethod
    def build(cls, cache=None, renderer="embree", sensors=("depth",), resolution=(64, 64),
              normalize_depth=True, goal_pool=None):
        supply = SUPPLY_DEFAULTS if goal_pool is None else replace(SUPPLY_DEFAULTS, goal_pool=int(goal_pool))
        if goal_pool is not None and int(goal_pool) < 1:
            raise ConfigError(None, f"goal_pool={goal_pool!r}: must be >= 1")
        return cls(renderer, tuple(sensors), tuple(resolution), bool(normalize_depth), cache, supply)


class World:
    def __init__(self, scenes, renderer, *, device, num_envs: int, seed: int, supply: EpisodeSupply,
                 worker: FieldWorker, sensors=("depth",)):
        self.scenes = scenes
        self.renderer = renderer
        self.device = torch.device(device)
        self.num_envs = num_envs
        self.seed = seed
        self.nav = BatchNav(self.device)
        self.episodes = supply
        self.worker = worker
        self.sensors = tuple(sensors)
        self._active: set[int] = set()
        self._lock = threading.Lock()
        scenes.bind(self)

    # ---- per-scene preparation (called from loader threads) and activation (sim thread)
    def prepare_scene(self, key: int, name: str, navmesh) -> DeviceNavMesh:
        """Navmesh on the device + the geodesic graph (``DeviceNavMesh``) and the first
        episodes' distance fields (queued on the field worker)."""
        mesh = DeviceNavMesh(navmesh, self.device)
        fields = self.episodes.scene_arrived(key, name, mesh)
        self.nav.add(key, mesh, fields)
        return mesh

    def scene_evicted(self, key: int):
        self.episodes.scene_left(key)
        self.nav.remove(key)

    def scene_ready(self, key: int) -> bool:
        return key in self.nav.scenes and not self.episodes.pending(key)

    # ---- what the env calls
    def start(self, seed: int):
        self.seed = seed

    def initial_scenes(self, n: int) -> np.ndarray:
        return np.asarray(self.scenes.initial(n), np.int64)

    def episode_boundary(self, env_ids: np.ndarray, old_keys: np.ndarray):
        keys, waited = self.scenes.boundary(np.asarray(env_ids), np.asarray(old_keys))
        return np.asarray(keys, np.int64), bool(waited)

    def scene_name(self, key: int) -> str:
        return self.scenes.name(int(key))

    def render(self, keys: torch.Tensor, pos: torch.Tensor, yaw: torch.Tensor, sensors):
        out = self.renderer.render(keys, pos, yaw, sensors)
        if self.device.type != "cpu":
            out = {k: v.to(self.device, non_blocking=True) for k, v in out.items()}
        return out

    def close(self):
        self.worker.close()
        self.scenes.close()
        close = getattr(self.renderer, "close", None)
        if close is not None:
            close()


class StaticScenes:
    """A fixed set of resident scenes, assigned round-robin (env i -> scene i % K), no swaps.

    ``scenes``: list of (name, shading ShadingData, positions, indices, NavMesh).
    """

    def __init__(self, scenes: list):
        if not scenes:
            raise ConfigError(None, "no scenes to run on")
        self._scenes = scenes
        self.names = [s[0] for s in scenes]

    def bind(self, world: World):
        for key, (name, shading, positions, indices, navmesh) in enumerate(self._scenes):
            accel = world.renderer.prepare(shading, positions, indices)
            world.renderer.attach(key, shading, accel)
            world.prepare_scene(key, name, navmesh)

    def initial(self, n):
        return np.arange(n) % len(self._scenes)

    def boundary(self, env_ids, old_keys):
        return old_keys, False

    def name(self, key):
        return self.names[key]

    def resident_names(self):
        return list(self.names)

    def close(self):
        pass


def group_episodes(episodes: list[dict]) -> dict[str, list[dict]]:
    """habitat episodes -> {scene name: [episodes]} (scene name = file stem of scene_id)."""
    import os

    out: dict[str, list[dict]] = {}
    for e in episodes:
        name = os.path.basename(e["scene_id"]).split(".")[0]
        out.setdefault(name, []).append(e)
    return out


# ---------------------------------------------------------------------------- from a manifest
def read_scene_files(entry):
    """(name, ShadingData, positions, indices, NavMesh) of a manifest scene, read synchronously
    (StaticScenes; the scene cache reads in its loader threads instead)."""
    from bps_assets.nav import load_navmesh
    from bps_assets.packed_scene import read_packed_scene

    from .render import build_shading_data

    if entry.scene is None or entry.navmesh is None:
        raise InputError(None, f"scene {entry.name!r} has no packed scene or navmesh in the manifest")
    ps = read_packed_scene(entry.scene)
    shading = build_shading_data(ps, str(entry.scene))
    nm = load_navmesh(entry.navmesh)
    return (entry.name, shading, ps.positions, ps.indices, nm)


def resolve_episodes(manifest, split, names: list[str], episodes):
    """-> (mode, {scene name: [episodes]} or None) for make(episodes=...)."""
    from bps_assets.nav.episodes import read_pointnav_dataset

    if episodes == "sample":
        return "sample", None
    if episodes is None or episodes == "dataset":
        subsets = [split] if split is not None else manifest.subsets
        paths = [manifest.episodes_path(s) for s in subsets]
        paths = [p for p in paths if p is not None and Path(p).exists()]
        if not paths:
            if episodes == "dataset":
                raise InputError(manifest.path, f"has no PointNav episodes for split {split!r}")
            return "sample", None
    else:
        paths = [Path(episodes)]
        if not paths[0].exists():
            raise InputError(paths[0], "episodes dataset not found")
    path = paths[0]
    grouped = group_episodes([e for p in paths for e in read_pointnav_dataset(p, scenes=None)])
    grouped = {k: v for k, v in grouped.items() if k in set(names)}
    if not grouped:
        raise InputError(path, f"has no episodes for the scenes of the manifest ({', '.join(names[:5])} ...)")
    return "dataset", grouped


def build_world(manifest_path, split, *, device, num_envs: int, seed: int, episodes, options: WorldOptions,
                scene_shard=None) -> World:
    from bps_assets.pipeline.manifest import load_manifest

    from .render import RenderOptions, make_renderer

    manifest = load_manifest(manifest_path)
    entries = manifest.scenes(split)
    if not entries:
        raise ConfigError(None, f"{manifest_path}: no usable scene in split {split!r} "
                                f"(subsets: {', '.join(manifest.subsets) or 'none'})")
    if scene_shard is not None:
        rank, size = scene_shard
        entries = entries[rank::size]
        if not entries:
            raise ConfigError(None, f"{manifest_path}: scene_shard {rank}/{size} gets no scene of split "
                                    f"{split!r} ({len(manifest.scenes(split))} scenes)")
    names = [e.name for e in entries]
    mode, by_scene = resolve_episodes(manifest, split, names, episodes)
    if by_scene is not None:
        entries = [e for e in entries if e.name in by_scene]
    worker = FieldWorker()
    supply = EpisodeSupply(mode, seed, worker, by_scene, options=options.supply)
    ropts = RenderOptions(resolution=tuple(options.resolution), normalize_depth=options.normalize_depth)
    renderer = make_renderer(options.renderer, ropts, device=str(device) if options.renderer == "warp" else "cpu")
    scenes = make_scene_manager(entries, options.cache, num_envs=num_envs, seed=seed, renderer=renderer)
    return World(scenes, renderer, device=device, num_envs=num_envs, seed=seed, supply=supply,
                 worker=worker, sensors=options.sensors)


def make_scene_manager(entries, cache, *, num_envs, seed, renderer):
    """The scene cache when ``bps_runtime.cache`` is available, else the first scenes resident."""
    try:
        from .cache import SceneCache  # noqa: F401
    except ImportError:
        slots = cache if isinstance(cache, int) else 8
        return StaticScenes([read_scene_files(e) for e in entries[:slots]])
    return CachedScenes(entries, cache, num_envs=num_envs, seed=seed, renderer=renderer)


class CachedScenes:  # filled in against bps_runtime.cache
    def __init__(self, *a, **k):
        raise NotImplementedError
