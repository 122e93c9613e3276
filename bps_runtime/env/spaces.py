"""Observation / action spaces computed from arguments only (no env, scene or frame is built).

gymnasium spaces when gymnasium is installed (``pip install gymnasium``), else ``SpaceSpec``
objects with the same ``shape`` / ``dtype`` / ``low`` / ``high`` / ``n`` attributes, so code
that only reads shapes does not need gymnasium. A gymnasium Box holds low / high arrays of its
whole shape: a batched space costs about 10 bytes per observed value (built once, directly at
the batched shape; docs/ENV.md), a SpaceSpec nothing.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bps_assets.errors import ConfigError, is_int, is_real

from ..render.inputs import check_sensors   # the sensors an env offers are the renderer's
from ..render.protocol import check_resolution, depth_clip_range
from ..render.semantic import MAX_INSTANCE_ID
from ..tasks import TASKS, spec_for, task_spec
from ..tasks.spec import TaskSpec


@dataclass(frozen=True)
class SpaceSpec:
    """A tiny stand-in for a gymnasium space: Box (shape, dtype, low, high) or Discrete (n)."""

    kind: str
    shape: tuple = ()
    dtype: Any = np.int64
    low: float | None = None
    high: float | None = None
    n: int | None = None
    spaces: dict = field(default_factory=dict)

    def __getitem__(self, key):
        return self.spaces[key]

    def keys(self):
        """Names of the sub-spaces of a "dict" space."""
        return self.spaces.keys()


def _gym():
    try:
        import gymnasium
        return gymnasium.spaces
    except ImportError:
        return None


def _spec(task) -> TaskSpec:
    """A ``TaskSpec`` from a spec, a task name or a task's options."""
    if isinstance(task, TaskSpec):
        return task
    return task_spec(task) if isinstance(task, str) else spec_for(task)


def _boxes(spec: TaskSpec, h: int, w: int, max_goal_id: int | None = None) -> dict:
    """The task's observations (``spec.observations``) as (low, high, shape, dtype)."""
    out = {}
    for o in spec.observations:
        lo, hi = (np.array(v, o.dtype) for v in (o.low, o.high_for(max_goal_id)))
        out[o.name] = (lo if lo.size > 1 else lo.item(), hi if hi.size > 1 else hi.item(), o.space_shape(h, w),
                       np.dtype(o.dtype))
    return out


def check_max_goal_id(max_goal_id) -> int | None:
    """``max_goal_id`` as None or an int >= 0 (a ConfigError otherwise)."""
    if max_goal_id is None:
        return None
    if not is_int(max_goal_id) or max_goal_id < 0:
        raise ConfigError(None, f"max_goal_id={max_goal_id!r}: expected None or an int >= 0")
    return int(max_goal_id)


def depth_bounds(normalize_depth: bool, spec: TaskSpec, depth_range=None) -> tuple[float, float]:
    """The depth box's (low, high): (0, 1) normalized, else the sensor's clip range in metres
    (habitat-lab's Box(min_depth, max_depth)): ``depth_range`` (min, max), None: the task's
    camera's (``TaskSpec.camera``), else the renderer's defaults. A non-bool ``normalize_depth``
    or a ``depth_range`` that is not two finite numbers 0 <= min < max is a ConfigError."""
    from .config import check_flag

    if depth_range is not None:
        check_depth_range(depth_range)
    if check_flag(normalize_depth, "normalize_depth"):
        return 0.0, 1.0
    lo, hi = depth_clip_range(spec.camera) if depth_range is None else depth_range
    return float(lo), float(hi)


def check_depth_range(depth_range) -> None:
    """``depth_range`` as (min, max) metres, finite, 0 <= min < max (the renderer's clip rule)."""
    ok = isinstance(depth_range, (tuple, list)) and len(depth_range) == 2 and all(map(is_real, depth_range))
    if not ok or not (np.isfinite(depth_range).all() and 0 <= depth_range[0] < depth_range[1]):
        raise ConfigError(None, f"depth_range={depth_range!r}: expected (min, max) metres with 0 <= min < max")


def _obs_boxes(sensors, resolution, normalize_depth, task, max_goal_id, depth_range) -> dict:
    """name -> (low, high, shape, dtype) of one env's observations."""
    sensors = check_sensors(sensors)
    h, w = check_resolution(resolution)
    spec = _spec(task)
    max_goal_id = check_max_goal_id(max_goal_id)
    boxes = {}
    if "depth" in sensors:
        lo, hi = depth_bounds(normalize_depth, spec, depth_range)
        boxes["depth"] = (lo, hi, (h, w, 1), np.dtype(np.float32))
    if "rgb" in sensors:
        boxes["rgb"] = (0, 255, (h, w, 3), np.dtype(np.uint8))
    if "semantic" in sensors:
        boxes["semantic"] = (0, MAX_INSTANCE_ID, (h, w, 1), np.dtype(np.int32))
    boxes.update(_boxes(spec, h, w, max_goal_id))
    return boxes


def _dict_space(boxes: dict, n: int | None = None):
    """The Dict of ``boxes``; ``n``: each with a leading batch dimension (gymnasium's
    ``batch_space`` of the single space, built at once: scalar bounds stay scalars until the Box
    fills them, instead of a single space repeated n times and then copied)."""
    lead = () if n is None else (n,)
    g = _gym()
    if g is not None:
        def bound(v, shape):
            return v if np.ndim(v) == 0 else np.broadcast_to(v, lead + shape).copy()
        return g.Dict({k: g.Box(bound(lo, shape), bound(hi, shape), lead + shape, dt)
                       for k, (lo, hi, shape, dt) in boxes.items()})
    return SpaceSpec("dict", spaces={k: SpaceSpec("box", lead + shape, dt.type, float(np.min(lo)), float(np.max(hi)))
                                     for k, (lo, hi, shape, dt) in boxes.items()})


def single_observation_space(sensors=("depth",), resolution=(64, 64), normalize_depth: bool = True,
                             task=TASKS[0], max_goal_id: int | None = None, depth_range=None):
    """One environment's observation space: dict of depth [H,W,1], rgb [H,W,3], semantic [H,W,1]
    (int32 instance ids, 0 = no object) and the task's observations (``TaskSpec.observations``;
    ``task`` a spec, a task name or a task's options). ``max_goal_id``: the high of a goal-id
    observation (ObjectNav's ``objectgoal``: the dataset's largest task category id; None: the
    task's declared default, habitat's objectnav_hm3d map's 5). Depth: ``depth_bounds``."""
    return _dict_space(_obs_boxes(sensors, resolution, normalize_depth, task, max_goal_id, depth_range))


def single_action_space(task=TASKS[0]):
    """One environment's action space: Discrete(the task's actions) (a SpaceSpec without gymnasium)."""
    n = _spec(task).num_actions
    g = _gym()
    if g is not None:
        return g.Discrete(n)
    return SpaceSpec("discrete", (), np.int64, 0, n - 1, n=n)


def batched_observation_space(n: int, sensors=("depth",), resolution=(64, 64), normalize_depth=True,
                              task=TASKS[0], max_goal_id: int | None = None, depth_range=None):
    """The space of one ``recv()`` result: every entry gets a leading batch dimension ``n``
    (equal to gymnasium's ``batch_space`` of the single space)."""
    return _dict_space(_obs_boxes(sensors, resolution, normalize_depth, task, max_goal_id, depth_range), n)


def batched_action_space(n: int, task=TASKS[0]):
    """The actions of ``n`` environments: MultiDiscrete of ``n`` x the task's actions (a SpaceSpec
    "box" of shape [n] without gymnasium)."""
    k = _spec(task).num_actions
    g = _gym()
    if g is not None:
        return g.MultiDiscrete(np.full(n, k, np.int64))
    return SpaceSpec("box", (n,), np.int64, 0, k - 1, n=k)
