"""The one front door: ``bps_runtime.make(...)`` -> a batched PointNav environment.

EnvPool-style: ``num_envs`` environments, simulated in groups of ``batch_size``;
``step(actions) == send(actions) + recv()``; spaces from the arguments alone
(``observation_space(...)`` / ``action_space(...)`` here, or the env's properties).
"""
from __future__ import annotations

import os
from pathlib import Path

import torch

from bps_assets.errors import ConfigError

from . import spaces as sp
from .env import BatchPointNavEnv, check_batching
from ..tasks.pointnav import DEFAULTS as TASK_DEFAULTS, TaskOptions
from ..threads import check_threads

RENDERERS = ("embree", "warp")


def observation_space(num_envs: int = 1, sensors=("depth",), resolution=(64, 64), normalize_depth=True,
                      batch_size: int | None = None):
    """The space of one ``recv()`` / ``step()`` result, computed without building anything."""
    _, b = check_batching(num_envs, batch_size)
    return sp.batched_observation_space(b, sensors, resolution, normalize_depth)


def action_space(num_envs: int = 1, batch_size: int | None = None):
    """The action space of one ``step()``: ``batch_size`` (default ``num_envs``) discrete actions,
    computed without building anything; ConfigError when batch_size does not divide num_envs."""
    _, b = check_batching(num_envs, batch_size)
    return sp.batched_action_space(b)


single_observation_space = sp.single_observation_space
single_action_space = sp.single_action_space


def _check_device(device, renderer):
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ConfigError(None, f"device={device!r}: not a torch device") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(None, f"device={device!r}: CUDA is not available on this machine")
    if dev.type not in ("cpu", "cuda"):
        raise ConfigError(None, f"device={device!r}: expected 'cpu' or 'cuda[:i]'")
    if renderer not in RENDERERS:
        raise ConfigError(None, f"renderer={renderer!r}: choose from {RENDERERS}")
    if renderer == "embree" and dev.type != "cpu":
        raise ConfigError(None, "renderer='embree' runs on the CPU: use device='cpu' or renderer='warp'")
    return dev


def make(dataset, split: str | None = "train", num_envs: int = 16, batch_size: int | None = None,
         device="cpu", sensors=("depth",), resolution=(64, 64), cache=None, seed: int = 0,
         renderer: str = "embree", episodes=None, normalize_depth: bool = True,
         task: TaskOptions = TASK_DEFAULTS, goal_pool: int | None = None, capture_graph: bool = False,
         scene_shard: tuple[int, int] | None = None, threads: int | None = None) -> BatchPointNavEnv:
    """Build a batched PointNav environment over a preprocessed dataset.

    - ``dataset``: a manifest path written by ``bps-assets preprocess`` (``manifest.json``, or
      its folder).
    - ``split``: the subset of the manifest's scenes ("train", "val", ...; None: all).
    - ``num_envs`` agents, simulated in groups of ``batch_size`` (None: all at once; N/2: two
      alternating halves for ``send``/``recv`` double buffering).
    - ``device``: where observations and state live ("cpu", "cuda:0").
    - ``sensors``: subset of ("depth", "rgb"); ``resolution`` (height, width); depth is
      habitat's normalized 0-1 (0-10 m) unless ``normalize_depth=False`` (metres).
    - ``cache``: the scene cache (``bps_runtime.scenes.cache``): None (8 slots), an int (slots), a
      ``CacheOptions``, or a dict of its fields plus ``swap_every`` (every ``swap_every`` steps
      one slot, round robin, moves new episodes to its prefetched scene).
    - ``seed``: episodes (order, sampling) are deterministic for a seed.
    - ``renderer``: "embree" (CPU) or "warp" (CUDA; Warp's CPU device when device="cpu").
    - ``episodes``: None (the manifest's PointNav episodes when it has them, else sampled on
      the fly), "sample", "dataset", or the path of a habitat PointNav v1 ``json.gz`` dataset.
    - ``goal_pool``: sampled mode, goals (distance fields) kept per resident scene.
    - ``scene_shard``: ``(rank, world_size)``: use only every world_size-th scene of the split
      starting at ``rank`` (disjoint scenes per process in multi-process training).
    - ``threads``: CPU threads the renderer and the step share (None: every core this process
      may use, ``os.sched_getaffinity``); ``env.world.threads`` says how many it got. On the
      CPU the step kernel runs as that many env ranges side by side (bit for bit the one-thread
      result); on CUDA it is one launch.
    - ``capture_graph``: on CUDA, replay each group's step as a CUDA graph, its frame included
      when ``renderer="warp"`` (falls back to plain launches where capture fails;
      ``env.capture_status`` says which). The frame buffers are then the group's own, rewritten
      at its next step, like every other output tensor.

    Returns a ``BatchPointNavEnv``: ``reset()``, ``step(actions)``, ``send``/``recv``,
    ``observation_space``/``action_space``, ``close()``.
    """
    n, b = check_batching(num_envs, batch_size)
    sensors = sp.check_sensors(sensors)
    resolution = sp.check_resolution(resolution)
    dev = _check_device(device, renderer)
    threads = check_threads(threads)
    if isinstance(dataset, (str, os.PathLike)):
        path = Path(dataset)
        if path.is_dir():
            path = path / "manifest.json"
    else:
        raise ConfigError(None, f"dataset={dataset!r}: expected the path of a manifest.json from "
                                "`bps-assets preprocess`")
    from .world import WorldOptions, build_world

    wopts = WorldOptions.build(cache=cache, renderer=renderer, sensors=sensors, resolution=resolution,
                               normalize_depth=normalize_depth, goal_pool=goal_pool, threads=threads)
    if scene_shard is not None:
        try:
            rank, size = (int(v) for v in scene_shard)
        except (TypeError, ValueError):
            raise ConfigError(None, f"scene_shard={scene_shard!r}: expected (rank, world_size)") from None
        if not 0 <= rank < size:
            raise ConfigError(None, f"scene_shard={scene_shard!r}: need 0 <= rank < world_size")
        scene_shard = (rank, size)
    world = build_world(path, split, device=dev, num_envs=n, seed=seed, episodes=episodes, options=wopts,
                        scene_shard=scene_shard)
    return BatchPointNavEnv(world, num_envs=n, batch_size=b, device=dev, sensors=sensors,
                            resolution=resolution, normalize_depth=normalize_depth, task=task, seed=seed,
                            capture_graph=capture_graph)
