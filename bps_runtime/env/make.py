"""The one front door: ``bps_runtime.make(...)`` -> a batched navigation env (any of ``tasks.TASKS``).

EnvPool-style: ``num_envs`` environments, simulated in groups of ``batch_size``;
``step(actions) == send(actions) + recv()``; spaces from the arguments alone
(``observation_space(...)`` / ``action_space(...)`` here, or the env's properties).
"""
from __future__ import annotations

import copy
import os
from pathlib import Path

import torch

from bps_assets.errors import ConfigError, did_you_mean

from . import spaces as sp
from .config import EnvConfig, check_batching, preset_kwargs
from .env import BatchNavEnv
from ..tasks import TASKS
from ..threads import check_threads


def observation_space(num_envs: int = 1, sensors=("depth",), resolution=(64, 64), normalize_depth=True,
                      batch_size: int | None = None, task: str = TASKS[0], max_goal_id: int | None = None,
                      depth_range=None):
    """The space of one ``recv()`` / ``step()`` result, computed without building anything;
    ``max_goal_id``: ObjectNav's largest task category id (the ``objectgoal`` high; None: 5,
    habitat's objectnav_hm3d map; ``env.observation_space`` has the dataset's own);
    ``depth_range``: (min, max) m of unnormalized depth (None: the task's camera's)."""
    _, b = check_batching(num_envs, batch_size)
    return sp.batched_observation_space(b, sensors, resolution, normalize_depth, task, max_goal_id, depth_range)


def action_space(num_envs: int = 1, batch_size: int | None = None, task: str = TASKS[0]):
    """The action space of one ``step()``: ``batch_size`` (default ``num_envs``) discrete actions,
    computed without building anything; ConfigError when batch_size does not divide num_envs."""
    _, b = check_batching(num_envs, batch_size)
    return sp.batched_action_space(b, task)


single_observation_space = sp.single_observation_space
single_action_space = sp.single_action_space


def check_keywords(kwargs: dict) -> None:
    """A ConfigError naming each keyword ``make()`` does not take (and the close matches)."""
    import inspect

    known = [p for p in inspect.signature(EnvConfig.from_kwargs).parameters if p != "dataset"] + ["preset"]
    bad = [k for k in kwargs if k not in known]
    if bad:
        hints = "; ".join(f"{k!r}: {hint}" for k in bad for hint in [did_you_mean(k, known)] if hint)
        raise ConfigError(None, f"make() got unknown argument(s) {', '.join(repr(k) for k in bad)}"
                                f"{' (' + hints + ')' if hints else ''}; it takes config=, dataset and "
                                f"{', '.join(sorted(known))}")


def _check_device(device, renderer):
    """The device on this machine (what a config cannot check when it is made)."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ConfigError(None, f"device={device!r}: not a torch device") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(None, f"device={device!r}: CUDA is not available on this machine")
    if dev.type not in ("cpu", "cuda"):
        raise ConfigError(None, f"device={device!r}: expected 'cpu' or 'cuda[:i]'")
    if renderer == "embree" and dev.type != "cpu":
        raise ConfigError(None, "renderer='embree' runs on the CPU: use device='cpu' or renderer='warp'")
    return dev


def make(dataset=None, config: EnvConfig | None = None, **kwargs) -> BatchNavEnv:
    """Build a batched navigation environment (its task: ``task``) over a preprocessed dataset,
    from one ``EnvConfig`` (``bps_runtime.env.config``) or from the common keywords, which make one
    (``EnvConfig.from_kwargs``; ``env.config`` is the config it ran with):

    - ``dataset``: a manifest path written by ``bps-assets preprocess`` (``manifest.json``, or
      its folder); ``split``: the subset of its scenes ("train", "val", ...; None: all).
    - ``num_envs`` agents, simulated in groups of ``batch_size`` (None: all at once; N/2: two
      alternating halves for ``send``/``recv`` double buffering).
    - ``device`` ("cpu", "cuda:0"); ``threads``: CPU threads the renderer and the step share
      (None: every core this process may use); ``capture_graph``: on CUDA, replay each group's
      step (and Warp frame) as a CUDA graph (``env.capture_status`` says whether it is).
    - ``sensors`` (subset of ("depth", "rgb", "semantic"); semantic: int32 instance ids, with
      ``env.category_table`` / ``env.categories``), ``resolution`` (height, width),
      ``normalize_depth`` (habitat's 0-1 for 0-10 m, else metres), ``renderer`` ("embree" CPU,
      "warp" CUDA or Warp's CPU device).
    - ``cache``: the scene cache (``bps_runtime.scenes.cache.CacheOptions``): None (defaults),
      an int (slots), a dict of its fields (``swap_every``, ``swap_after_episodes``, ...) or one.
    - ``seed``: episodes, scene order and swaps follow from it (whatever the loader timing).
    - ``episodes``: None (the manifest's PointNav episodes if any, else sampled), "sample",
      "dataset", or a habitat PointNav v1 ``json.gz``; ``goal_pool``: sampled mode's goals per
      scene; ``scene_shard``: (rank, world_size) for disjoint scenes per process.
    - ``task``: "pointnav" (default) or another name of ``tasks.TASKS`` (that task's defaults), or a
      task's ``TaskOptions`` (``bps_runtime.tasks.<name>``). ObjectNav: ``episodes`` None /
      "sample" (generated per scene visit from its semantics) or an ObjectNav v1 split file;
      the dataset's navmeshes must be built for the task's agent (0.18 / 0.88 m); ``categories``
      (ObjectNav, InstanceImageNav): the goal set, "hm3d" (None; habitat's six), "mp3d" (its 21)
      or "all" (``semantic_categories.goal_categories``); a file's own map must be that set's.

    - ``noise``: habitat-sim's sensor and actuation noise (docs/NOISE.md): None, a preset name, a
      dict such as ``{"depth": "redwood", "rgb": "gaussian", "actuation": "locobot-ilqr",
      "multiplier": 0.5}``, "key=value,..." text, or a ``NoiseOptions``; ``camera``: a dict of
      ``sensor_height``, ``hfov_deg``, ``min_depth``, ``max_depth``, ``view_cameras`` (goal-image
      cameras, ((h, w), hfov_deg) each, whose finer mips stay resident); ``lod``: the converter
      level of detail scenes made with ``--lod`` load: "auto" (the coarsest whose error fits one
      pixel at 1 m), "full", or a level index (``render.protocol.check_lod``; docs/ENV.md).
    - ``preset``: a named set of the above (``"challenge2021"``: habitat's realistic PointNav, its
      RGB-D sizes, camera, rules, agent and noise); keywords given as well override it.

    Returns a ``BatchNavEnv``: ``reset()``, ``step(actions)``, ``send``/``recv``,
    ``observation_space``/``action_space``, ``close()``.
    """
    if config is None:
        check_keywords(kwargs)
        name = kwargs.pop("preset", None)
        if name is not None:   # the preset's settings, the keywords given over them
            kwargs = {**preset_kwargs(name), **kwargs}
        config = EnvConfig.from_kwargs(dataset, **kwargs)
    elif kwargs or dataset is not None:
        raise ConfigError(None, "make(): pass either config=EnvConfig(...) or keywords, not both")
    elif not isinstance(config, EnvConfig):
        raise ConfigError(None, f"make(config=...): expected an EnvConfig, got {type(config).__name__} "
                                "(a dict: EnvConfig.from_dict(d); keywords: make(dataset, **keywords))")
    c = config   # checked when it was made (EnvConfig and its parts); here: the machine, the dataset
    dev = _check_device(c.device, c.sensors.renderer)
    if isinstance(c.dataset, (str, os.PathLike)):
        path = Path(c.dataset)
        if path.is_dir():
            path = path / "manifest.json"
    else:
        raise ConfigError(None, f"dataset={c.dataset!r}: expected the path of a manifest.json from "
                                "`bps-assets preprocess`")
    if c.threads is None:   # every usable core; set on a copy, as replace() would re-run all of the config's checks
        c = copy.copy(c)
        object.__setattr__(c, "threads", check_threads(None))
    from ..step.fused import RING_SIZE
    from ..tasks import spec_for
    from .checks import bytes_per_env, check_batch_memory
    from .world import build_world

    # before anything is allocated: a batch the device cannot hold is one line, not a MemoryError
    spec = spec_for(c.task)
    s = c.sensors
    per_env = bytes_per_env(spec.schema.fields, RING_SIZE, s.kinds, s.resolution, spec.sizes(s.resolution))
    check_batch_memory(c.num_envs, per_env, dev)
    world = build_world(path, c, device=dev)
    try:
        return BatchNavEnv(world, c)
    except BaseException:
        # the world's loads are under way: stopped here, not by the interpreter's exit, where
        # each would report "cannot schedule new futures after interpreter shutdown"
        world.cancel()
        world.close()
        raise
