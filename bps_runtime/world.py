"""The glue under BatchPointNavEnv: scenes (scene cache) + renderer + navigation + episodes.

``World`` answers what the env asks per step: which scene each agent is in, the next scene at
an episode boundary, try_step / geodesic (``BatchNav``), new episodes (``EpisodeSupply``) and
the batch render. Per-scene navigation work (the navmesh on the device, the geodesic
graph, the first goal fields) runs where the scene is loaded, off the step path
(``prepare_navmesh`` in the cache's loader threads); the step path only registers it
(``register_scene``) under the scene's resident id.

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
    threads: int | None = None   # CPU threads the renderer and the step share (None: all usable cores)

    @classmethod
    def build(cls, cache=None, renderer="embree", sensors=("depth",), resolution=(64, 64),
              normalize_depth=True, goal_pool=None, threads=None):
        supply = SUPPLY_DEFAULTS if goal_pool is None else replace(SUPPLY_DEFAULTS, goal_pool=int(goal_pool))
        if goal_pool is not None and int(goal_pool) < 1:
            raise ConfigError(None, f"goal_pool={goal_pool!r}: must be >= 1")
        return cls(renderer, tuple(sensors), tuple(resolution), bool(normalize_depth), cache, supply, threads)


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
        self.threads = renderer.options.threads  # the step's CPU work uses the render threads' count
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

    def prepare_navmesh(self, name: str, navmesh):
        """Loader-thread half of ``prepare_scene`` for the scene cache: device navmesh + the
        first episodes, not yet registered under a key (the cache assigns ids later)."""
        mesh = DeviceNavMesh(navmesh, self.device)
        return mesh, self.episodes.prepare(name, mesh)

    def register_scene(self, key: int, prepared):
        mesh, st = prepared
        self.episodes.register(key, st)
        self.nav.add(key, mesh, st.fields)

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

    def after_step(self, group: int):
        hook = getattr(self.scenes, "after_step", None)
        if hook is not None:
            hook(group)

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
        from concurrent.futures import ThreadPoolExecutor

        def load(key):
            name, shading, positions, indices, navmesh = self._scenes[key]
            accel = world.renderer.prepare(shading, positions, indices)
            world.renderer.attach(key, shading, accel)
            world.prepare_scene(key, name, navmesh)

        with ThreadPoolExecutor(2, thread_name_prefix="bps-static-load") as pool:
            for f in [pool.submit(load, k) for k in range(len(self._scenes))]:
                f.result()

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
    ropts = RenderOptions(resolution=tuple(options.resolution), normalize_depth=options.normalize_depth,
                          threads=options.threads)
    renderer = make_renderer(options.renderer, ropts, device=str(device) if options.renderer == "warp" else "cpu")
    scenes = make_scene_manager(entries, options.cache, num_envs=num_envs, seed=seed, renderer=renderer,
                                device=device)
    return World(scenes, renderer, device=device, num_envs=num_envs, seed=seed, supply=supply,
                 worker=worker, sensors=options.sensors)


def make_scene_manager(entries, cache, *, num_envs, seed, renderer, device="cpu"):
    """``CachedScenes`` over ``bps_runtime.cache.SceneCache`` (``cache``: None, an int = slots,
    a dict of ``CacheOptions`` fields plus ``swap_every``, or a ``CacheOptions``)."""
    return CachedScenes(entries, cache, num_envs=num_envs, seed=seed, renderer=renderer, device=device)


class CachedScenes:
    """The env's view of ``bps_runtime.cache.SceneCache``.

    - The cache's loader threads read each scene's navmesh through ``_load_navmesh``, which also
      builds the env's navigation for it there (device tensors, geodesic graph, first goal
      fields): a scene is ready for agents when its load is, and the step path only registers
      it (dict inserts) under the resident id the cache gives it.
    - Episode boundaries: ``scene_for_next_episode``; newly resident ids are registered,
      ids that left are dropped (an id can be reused for another scene: checked by identity).
    - ``swap_every`` steps: one slot (round robin) is asked to move new episodes to its
      prefetched scene. If that scene's load has not finished, the step waits for it (and
      reports ``waited``) so swaps happen at a fixed step and runs stay reproducible.
    """

    def __init__(self, entries, cache, *, num_envs: int, seed: int, renderer, device="cpu"):
        from .cache import CacheOptions
        from .loader import SceneSource

        swap_every = None
        if cache is None:
            opts = CacheOptions(slots=8, seed=seed)
        elif isinstance(cache, CacheOptions):
            opts = cache
        elif isinstance(cache, int) and not isinstance(cache, bool):
            opts = CacheOptions(slots=cache, seed=seed)
        elif isinstance(cache, dict):
            d = dict(cache)
            swap_every = d.pop("swap_every", None)
            d.setdefault("seed", seed)
            try:
                opts = CacheOptions(**d)
            except TypeError as e:
                raise ConfigError(None, f"cache={cache!r}: {e}") from None
            if swap_every is not None and (not isinstance(swap_every, int) or swap_every < 1):
                raise ConfigError(None, f"cache swap_every={swap_every!r}: expected an int >= 1 or None")
        else:
            raise ConfigError(None, f"cache={cache!r}: expected None, an int (slots), a dict or CacheOptions")
        self.options, self.swap_every = opts, swap_every
        self.entries = list(entries)
        self.sources = [SceneSource(e.name, str(e.scene), str(e.navmesh) if e.navmesh else None)
                        for e in self.entries]
        self._name_of_nav = {s.navmesh_path: s.scene_id for s in self.sources}
        self.num_envs, self.seed, self.renderer, self.device = num_envs, seed, renderer, device
        self.world = None
        self.cache = None
        self._registered: dict[int, object] = {}   # resident id -> the navmesh object registered
        self.steps = 0
        self._next_slot = 0
        self.swaps_requested = 0
        self.waits = 0

    # ---- loader threads
    def _load_navmesh(self, path):
        from bps_assets.nav import load_navmesh

        nm = load_navmesh(path)
        nm._bps_env_prepared = self.world.prepare_navmesh(self._name_of_nav.get(path, str(path)), nm)
        return nm

    def bind(self, world):
        from .cache import SceneCache

        self.world = world
        if any(s.navmesh_path is None for s in self.sources):
            bad = next(s.scene_id for s in self.sources if s.navmesh_path is None)
            raise InputError(None, f"scene {bad!r} has no navmesh in the manifest")
        self.cache = SceneCache(self.sources, self.renderer, self.num_envs, self.options, device=str(self.device),
                                navmesh_loader=self._load_navmesh)
        self.cache.wait_ready()

    # ---- registration of resident ids
    def _sync(self):
        c = self.cache
        resident = set(c.resident_ids)
        for rid in list(self._registered):
            if rid not in resident or c.scene(rid).navmesh is not self._registered[rid]:
                self._registered.pop(rid)
                self.world.scene_evicted(rid)
        for rid in resident:
            if rid not in self._registered:
                nm = c.scene(rid).navmesh
                self.world.register_scene(rid, nm._bps_env_prepared)
                self._registered[rid] = nm

    def initial(self, n):
        keys = self.cache.scene_for_next_episode(np.arange(n))
        self.cache.take_report()
        self._sync()
        return keys

    def boundary(self, env_ids, old_keys):
        keys = self.cache.scene_for_next_episode(np.asarray(env_ids))
        rep = self.cache.take_report()
        self._sync()
        waited = rep.waited or self._waited
        self._waited = False
        return keys, waited

    _waited = False

    def after_step(self, group: int):
        if group != 0 or not self.swap_every:
            return
        self.steps += 1
        if self.steps % self.swap_every:
            return
        c = self.cache
        c.poll()
        # the next slot (round robin) that has a scene prefetched or loading; with few spare
        # scenes not every slot has one. (The cache has no public view of its slots yet.)
        order = [(self._next_slot + i) % c.num_slots for i in range(c.num_slots)]
        k = next((i for i in order if c._slots[i].ready is not None or c._slots[i].pending is not None), None)
        if k is None:
            return
        self._next_slot = (k + 1) % c.num_slots
        slot = c._slots[k]
        if slot.ready is None and slot.pending is not None:
            self._waited = self._waited or not slot.pending.done()
            slot.pending.result()
            c.poll()
        c.request_swap([k])
        self.swaps_requested += 1

    def name(self, key):
        return self.cache.scene(int(key)).scene_id

    def resident_names(self):
        return [self.cache.scene(r).scene_id for r in self.cache.resident_ids]

    def swap_count(self):
        return self.swaps_requested

    def loading(self) -> bool:
        return any(s.pending is not None and not s.pending.done() for s in self.cache._slots)

    def close(self):
        if self.cache is not None:
            self.cache.close()
