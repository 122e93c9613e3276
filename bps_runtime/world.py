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
from dataclasses import dataclass, field, replace
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
