"""The glue under BatchPointNavEnv: scenes (scene cache) + renderer + navigation + episodes.

``World`` answers what the env's host side asks between fused steps: the resident id of each
queued episode (``next_scenes``, holding a reference until ``release_scenes``), new episodes
(``EpisodeSupply``), scene names, and the batch render. Navigation lives in ``nav``
(``bps_runtime.nav.buffers.NavBuffers``: every resident scene's arrays in flat device buffers
by resident id), which the fused step reads. Per-scene navigation work (the scene's arrays in
the buffers, the geodesic graph, the first goal fields) runs where the scene is loaded, off the
step path (``prepare_navmesh`` in the cache's loader threads); the host side between steps
only publishes it (``register_scene``: one row of the meta table) under its resident id.

Scene managers (``scenes``): ``CachedScenes`` streams scenes through ``bps_runtime.scenes.cache``
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

from ..nav.buffers import FieldWorker, NavBuffers, SceneNav
from ..episodes.files import resolve_episodes
from ..episodes.supply import DEFAULTS as SUPPLY_DEFAULTS, EpisodeSupply, SupplyOptions


@dataclass(frozen=True)
class WorldOptions:
    """What ``make()`` sets on the world: renderer, sensors, cache, episode supply."""

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
        """``WorldOptions`` from ``make()``'s arguments (checked)."""
        supply = SUPPLY_DEFAULTS if goal_pool is None else replace(SUPPLY_DEFAULTS, goal_pool=int(goal_pool))
        if goal_pool is not None and int(goal_pool) < 1:
            raise ConfigError(None, f"goal_pool={goal_pool!r}: must be >= 1")
        return cls(renderer, tuple(sensors), tuple(resolution), bool(normalize_depth), cache, supply, threads)


class World:
    """Scenes + renderer + navigation buffers + episode supply, for one env.

    Thread use: ``prepare_navmesh`` runs in the cache's loader threads; everything else on the
    env's simulator thread, between fused steps. Per-scene state prepared by the loaders waits
    in ``self._prepared`` (keyed by the navmesh object) until its resident id is published.
    """

    def __init__(self, scenes, renderer, *, device, num_envs: int, seed: int, supply: EpisodeSupply,
                 worker: FieldWorker, sensors=("depth",)):
        self.scenes = scenes
        self.renderer = renderer
        self.device = torch.device(device)
        self.num_envs = num_envs
        self.seed = seed
        self.nav = NavBuffers(self.device, capacity=scenes.capacity(num_envs))
        self.episodes = supply
        self.worker = worker
        self.sensors = tuple(sensors)
        self.threads = renderer.options.threads  # the step's CPU work uses the render threads' count
        self._prepared: dict[int, tuple] = {}   # id(navmesh) -> (navmesh, SceneNav, supply state)
        self._lock = threading.Lock()
        scenes.bind(self)

    # ---- per-scene preparation (loader threads) and publication (simulator thread)
    def _scene_nav(self, navmesh) -> SceneNav:
        scene = SceneNav(navmesh, self.nav)
        o = self.episodes.options
        self.nav.size_for(scene, o.goal_pool if self.episodes.mode == "sample" else 2 * o.lookahead + 16)
        return scene

    def prepare_scene(self, key: int, name: str, navmesh) -> SceneNav:
        """Navigation arrays in the buffers + the first episodes' distance fields, published
        under ``key`` at once (static scenes)."""
        scene = self._scene_nav(navmesh)
        fields = self.episodes.scene_arrived(key, name, scene)
        self.nav.publish(key, scene, fields)
        return scene

    def prepare_navmesh(self, name: str, navmesh) -> None:
        """Loader-thread half of ``prepare_scene`` for the scene cache: arrays + the first
        episodes, kept until the cache gives the scene a resident id (``register_scene``)."""
        scene = self._scene_nav(navmesh)
        st = self.episodes.prepare(name, scene)
        with self._lock:
            self._prepared[id(navmesh)] = (navmesh, scene, st)

    def register_scene(self, key: int, navmesh):
        """Publish the scene prepared for ``navmesh`` under resident id ``key``."""
        with self._lock:
            _, scene, st = self._prepared.pop(id(navmesh))
        self.episodes.register(key, st)
        self.nav.publish(key, scene, st.fields)

    def scene_evicted(self, key: int):
        """Resident id ``key`` left: drop its episodes and navigation."""
        self.episodes.scene_left(key)
        self.nav.unpublish(key)

    def scene_ready(self, key: int) -> bool:
        """Whether ``key`` is published and its first episodes are prepared."""
        return key in self.nav.scenes and not self.episodes.pending(key)

    # ---- what the env calls (simulator thread, between steps)
    def start(self, seed: int):
        """The run's seed."""
        self.seed = seed

    def next_scenes(self, env_ids: np.ndarray) -> tuple[np.ndarray, bool]:
        """Resident ids of one more queued episode per env in ``env_ids`` (each holds a
        reference until ``release_scenes``) and whether that waited for a load."""
        keys, waited = self.scenes.next_scenes(np.asarray(env_ids, np.int64))
        return np.asarray(keys, np.int64), bool(waited)

    def release_scenes(self, keys: np.ndarray):
        """Episodes in these resident ids have ended (one reference each)."""
        self.scenes.release_scenes(np.asarray(keys, np.int64))

    def after_step(self, group: int) -> bool:
        """Per-step hook of the scene manager (scheduled swaps) after group ``group``'s step;
        True if it waited for a load (then ``take_wait_reasons`` says why)."""
        hook = getattr(self.scenes, "after_step", None)
        return bool(hook(group)) if hook is not None else False

    def take_wait_reasons(self) -> list[str]:
        """Why anything waited for a load or an episode since the last call (one line each)."""
        take = getattr(self.scenes, "take_wait_reasons", None)
        out = list(take()) if take is not None else []
        return out + self.episodes.take_wait_reasons()

    def scene_name(self, key: int) -> str:
        """Scene id of resident id ``key``."""
        return self.scenes.name(int(key))

    def render(self, keys: torch.Tensor, pos: torch.Tensor, rot: torch.Tensor, sensors):
        """The renderer's frames for resident ids / positions / [x, y, z, w] rotations."""
        out = self.renderer.render(keys, pos, rot, sensors)
        if self.device.type != "cpu":
            out = {k: v.to(self.device, non_blocking=True) for k, v in out.items()}
        return out

    def close(self):
        """Stop the field worker, the scene manager and the renderer."""
        self.worker.close()
        self.scenes.close()
        close = getattr(self.renderer, "close", None)
        if close is not None:
            close()


def build_world(manifest_path, split, *, device, num_envs: int, seed: int, episodes, options: WorldOptions,
                scene_shard=None) -> World:
    """``World`` over a manifest's scenes: cache, renderer, episode supply."""
    from bps_assets.pipeline.manifest import load_manifest

    from ..render import RenderOptions, make_renderer

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
    """``CachedScenes`` over ``bps_runtime.scenes.cache.SceneCache`` (``cache``: None, an int = slots,
    a dict of ``CacheOptions`` fields plus ``swap_every``, or a ``CacheOptions``)."""
    return CachedScenes(entries, cache, num_envs=num_envs, seed=seed, renderer=renderer, device=device)


class CachedScenes:
    """The env's view of ``bps_runtime.scenes.cache.SceneCache``.

    - The cache's loader threads read each scene's navmesh through ``_load_navmesh``, which also
      builds the env's navigation for it there (arrays in the device buffers, geodesic graph,
      first goal fields): a scene is ready for agents when its load is, and the step thread
      only publishes it (one meta-table row) under the resident id the cache gives it.
    - Queued episodes: ``next_scenes`` takes one cache reference per queued episode
      (``SceneCache.assign_next``), ``release_scenes`` gives them back once the host learns
      the episode ended; newly resident ids are published, ids that left are dropped (an id
      can be reused for another scene: checked by identity of the navmesh).
    - ``swap_every`` steps: one slot (round robin) is asked to move new episodes to its
      prefetched scene. If that scene's load has not finished, the step waits for it (and
      reports ``waited``, with the reason in ``take_wait_reasons``) so swaps happen at a fixed
      step and runs stay reproducible. The slot's next load starts at its swap (the cache's
      module docstring), so the step waits only when a load takes longer than the slot's turn
      comes round again, or when the cache budget holds loads back.
    """

    def __init__(self, entries, cache, *, num_envs: int, seed: int, renderer, device="cpu"):
        from ..scenes.cache import CacheOptions
        from ..scenes.loader import SceneSource

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
        self._registered: dict[int, object] = {}   # resident id -> the navmesh object published
        self._synced = None                         # cache.generation at the last _sync
        self.steps = 0
        self._next_slot = 0
        self.swaps_requested = 0
        self._reasons: list[str] = []

    def capacity(self, num_envs: int) -> int:
        """Resident ids the cache can hand out (``SceneCache.capacity``)."""
        from ..scenes.cache import SCENES_PER_SLOT

        return SCENES_PER_SLOT * min(self.options.slots, len(self.sources), num_envs)

    # ---- loader threads
    def _load_navmesh(self, path):
        from bps_assets.nav import load_navmesh

        nm = load_navmesh(path)
        self.world.prepare_navmesh(self._name_of_nav.get(path, str(path)), nm)
        return nm

    def bind(self, world):
        """Load the scenes (renderer + navigation) for ``world``."""
        from ..scenes.cache import SceneCache

        self.world = world
        if any(s.navmesh_path is None for s in self.sources):
            bad = next(s.scene_id for s in self.sources if s.navmesh_path is None)
            raise InputError(None, f"scene {bad!r} has no navmesh in the manifest")
        self.cache = SceneCache(self.sources, self.renderer, self.num_envs, self.options, device=str(self.device),
                                navmesh_loader=self._load_navmesh)
        self.cache.wait_ready()
        self.cache.clock = lambda: f"step {self.steps}"   # rounds: one step of every group

    # ---- publication of resident ids
    def _sync(self):
        c = self.cache
        if c.generation == self._synced:   # no scene arrived or left since the last sync
            return
        resident = set(c.resident_ids)
        for rid in list(self._registered):
            if rid not in resident or c.scene(rid).navmesh is not self._registered[rid]:
                self._registered.pop(rid)
                self.world.scene_evicted(rid)
        for rid in sorted(resident):
            if rid not in self._registered:
                nm = c.scene(rid).navmesh
                self.world.register_scene(rid, nm)
                self._registered[rid] = nm
        self._synced = c.generation

    def next_scenes(self, env_ids):
        """(resident ids of one more queued episode per env, waited for a load)."""
        keys = self.cache.assign_next(np.asarray(env_ids))
        rep = self.cache.take_report()
        self._sync()
        self._reasons += rep.reasons
        return keys, rep.waited

    def take_wait_reasons(self) -> list[str]:
        """The cache's wait reasons since the last call."""
        out, self._reasons = self._reasons, []
        return out

    def release_scenes(self, keys):
        """Queued or running episodes in these resident ids ended."""
        self.cache.release_scenes(keys)
        self._sync()

    def after_step(self, group: int) -> bool:
        """Per-step hook (scheduled swaps) after group ``group``'s step; True if the swap due
        now waited for its scene's load."""
        if group != 0:
            return False
        self.steps += 1      # rounds: the clock of wait reasons
        if not self.swap_every or self.steps % self.swap_every:
            return False
        c = self.cache
        # the next slot (round robin) that has a scene prefetched or loading; with few spare
        # scenes not every slot has one
        order = [(self._next_slot + i) % c.num_slots for i in range(c.num_slots)]
        k = next((i for i in order if c.has_pending(i)), None)
        if k is None:
            return False
        self._next_slot = (k + 1) % c.num_slots
        c.wait_pending(k)
        c.request_swap([k])
        self.swaps_requested += 1
        rep = c.take_report()    # this step's wait, reported with this step
        self._reasons += rep.reasons
        return rep.waited

    def name(self, key):
        """Scene id of resident id ``key``."""
        return self.cache.scene(int(key)).scene_id

    def resident_names(self):
        """Scene ids now resident."""
        return [self.cache.scene(r).scene_id for r in self.cache.resident_ids]

    def swap_count(self):
        """Swaps requested so far."""
        return self.swaps_requested

    def loading(self) -> bool:
        """Whether a scene load is in flight."""
        return self.cache.loading

    def close(self):
        """Stop the field worker, the scene manager and the renderer."""
        if self.cache is not None:
            self.cache.close()
