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
    """The scene cache (``bps_runtime.cache``) when it is available; otherwise ``RotatingScenes``
    (slots from ``cache``: an int, or {"slots": K, "swap_every": steps or None})."""
    try:
        from .cache import SceneCache  # noqa: F401
    except ImportError:
        return RotatingScenes(entries, RotationOptions.from_arg(cache), num_envs=num_envs, seed=seed)
    return CachedScenes(entries, cache, num_envs=num_envs, seed=seed, renderer=renderer)


class CachedScenes:  # filled in against bps_runtime.cache
    def __init__(self, *a, **k):
        raise NotImplementedError


@dataclass(frozen=True)
class RotationOptions:
    slots: int = 8                 # resident scenes (plus at most one incoming per slot)
    swap_every: int | None = None  # full env steps between scene swaps (None: never)
    load_steps: int | None = None  # steps a load may take before agents wait for it (default swap_every // 2)

    @classmethod
    def from_arg(cls, cache):
        if cache is None:
            return cls()
        if isinstance(cache, RotationOptions):
            return cache
        if isinstance(cache, int):
            return cls(slots=cache)
        if isinstance(cache, dict):
            unknown = set(cache) - {"slots", "swap_every", "load_steps"}
            if unknown:
                raise ConfigError(None, f"cache: unknown settings {sorted(unknown)} (slots, swap_every, load_steps)")
            o = cls(**cache)
            if o.slots < 1 or (o.swap_every is not None and o.swap_every < 1):
                raise ConfigError(None, f"cache={cache!r}: slots and swap_every must be >= 1")
            return o
        raise ConfigError(None, f"cache={cache!r}: expected None, an int (slots) or a dict")


class RotatingScenes:
    """K resident slots; every ``swap_every`` steps one slot (round robin) starts loading the
    next scene of the (seeded, shuffled) scene list in a background thread: packed scene ->
    renderer BVH, navmesh -> device tensors and goal fields. Agents of that slot move to the
    new scene at their next episode boundary from ``load_steps`` steps after the load began
    (a fixed step, so runs are reproducible; if the load is not done by then, the boundary
    waits for it and the step reports ``waited``); the old scene leaves (renderer detach,
    navigation freed) when its last agent has moved. A scene that fails to load is logged
    and skipped. Agent i belongs to slot i % K.

    Stand-in for ``bps_runtime.cache`` (used only when that module is absent).
    """

    def __init__(self, entries, options: RotationOptions, *, num_envs: int, seed: int):
        if not entries:
            raise ConfigError(None, "no scenes to run on")
        self.options = options
        self.entries = list(entries)
        rng = np.random.default_rng(np.random.SeedSequence([int(seed) & (2**63 - 1), 0x5CE4E]))
        self.queue = [self.entries[i] for i in rng.permutation(len(self.entries))]
        self.k = min(options.slots, len(self.entries))
        self.num_envs = num_envs
        self.names: dict[int, str] = {}
        self.users: dict[int, int] = {}
        self.slot_current: list[int] = []
        self.slot_pending: list = [None] * self.k   # (key, Future, switch_step)
        self.next_key = 0
        self.next_scene = 0
        self.steps = 0
        self.next_slot = 0
        self.swaps = 0
        self.failed: list[tuple[str, str]] = []
        self._loader = None
        self.world = None

    # ---- loading
    def _take_entry(self):
        e = self.queue[self.next_scene % len(self.queue)]
        self.next_scene += 1
        return e

    def _load(self, key: int, entry):
        """Loader thread: read, build the BVH, attach, prepare navigation."""
        from .nav import lower_priority

        lower_priority(10)
        name, shading, positions, indices, navmesh = read_scene_files(entry)
        r = self.world.renderer
        accel = r.prepare(shading, positions, indices)
        r.attach(key, shading, accel)
        self.world.prepare_scene(key, name, navmesh)
        return key

    def bind(self, world: World):
        from concurrent.futures import ThreadPoolExecutor

        self.world = world
        self._loader = ThreadPoolExecutor(1, thread_name_prefix="bps-scene-load")
        with ThreadPoolExecutor(2, thread_name_prefix="bps-initial-load") as pool:
            todo = []
            for _ in range(self.k):
                key, e = self.next_key, self._take_entry()
                self.next_key += 1
                self.names[key] = e.name
                todo.append((key, e, pool.submit(self._load, key, e)))
            for key, e, f in todo:
                f.result()  # the initial scenes must load: errors surface here
                self.slot_current.append(key)
                self.users[key] = 0

    def _start_swap(self):
        slot = self.next_slot
        self.next_slot = (self.next_slot + 1) % self.k
        if self.slot_pending[slot] is not None or len(self.entries) <= self.k:
            return
        e = self._take_entry()
        key = self.next_key
        self.next_key += 1
        self.names[key] = e.name
        wait = self.options.load_steps if self.options.load_steps is not None else max(1, (self.options.swap_every or 2) // 2)
        self.slot_pending[slot] = (key, self._loader.submit(self._load, key, e), self.steps + wait)

    def after_step(self, group: int):
        if group != 0:
            return
        self.steps += 1
        se = self.options.swap_every
        if se and self.steps % se == 0:
            self._start_swap()

    # ---- assignment
    def initial(self, n):
        keys = np.array([self.slot_current[i % self.k] for i in range(n)], np.int64)
        for k in keys.tolist():
            self.users[k] += 1
        return keys

    def _promote(self, slot) -> tuple[bool, bool]:
        """(the slot's pending scene is ready for agents, this call waited for it)."""
        p = self.slot_pending[slot]
        if p is None or self.steps < p[2]:
            return False, False
        key, fut, _ = p
        waited = not fut.done()
        try:
            fut.result()
        except Exception as e:  # noqa: BLE001 - quarantine: log, skip the scene, carry on
            import logging
            logging.getLogger("bps_runtime").error("scene %s failed to load, skipped: %s", self.names[key], e)
            self.failed.append((self.names[key], str(e)))
            self.slot_pending[slot] = None
            self.world.renderer.detach(key)
            self.world.scene_evicted(key)
            return False, waited
        old = self.slot_current[slot]
        self.slot_current[slot] = key
        self.slot_pending[slot] = None
        self.users.setdefault(key, 0)
        self.swaps += 1
        self._old = getattr(self, "_old", set())
        self._old.add(old)
        return True, waited

    def boundary(self, env_ids, old_keys):
        waited = False
        new = np.array(old_keys, np.int64)
        for j, e in enumerate(np.asarray(env_ids).tolist()):
            slot = e % self.k
            _, w = self._promote(slot)
            waited |= w
            cur = self.slot_current[slot]
            if new[j] != cur:
                self.users[int(new[j])] -= 1
                self.users[cur] = self.users.get(cur, 0) + 1
                new[j] = cur
        for k in list(getattr(self, "_old", ())):
            if self.users.get(k, 0) <= 0:
                self._old.discard(k)
                self.users.pop(k, None)
                self.world.renderer.detach(k)
                self.world.scene_evicted(k)
        return new, waited

    def name(self, key):
        return self.names[key]

    def resident_names(self):
        return [self.names[k] for k in self.slot_current]

    def swap_count(self):
        return self.swaps

    def close(self):
        if self._loader is not None:
            self._loader.shutdown(wait=False, cancel_futures=True)
