"""The task seam: ``TaskSpec``, everything the env, the step, the world and the trainer need from
a task, in one typed record. Each task module defines ``SPEC = TaskSpec(...)``, ``tasks.TASKS``
names the module; nothing outside ``tasks/`` names a task (tests/test_task_seam.py checks).

Members: name, options class (``TASK`` = name) and defaults, actions; the step (schema = CORE +
the task's fields, State / Out, params, max_move, the three kernels, staging = STAGE + its
columns, ``sizes(resolution)``: named field sizes); what a step returns (``observations``,
``info`` / ``episode_info`` / ``outcome``); episodes (``scenes(ScenesRequest)``: the split's
scenes it may serve, before ``scene_shard``; ``supply(SupplyRequest)`` -> (supply, entries it
serves; it checks what those scenes need)); ``host_hook(HostContext)`` -> a ``HostHook``
or None (ImageNav's goal images); ``goal_record(record, episode id, heading)`` (its
``episode_goals()`` entries); ``camera`` (sensor geometry defaults); the trainer's ``goal_input(obs)``,
``goal_input_spec(resolution)``, ``goal_encoder(GoalEncoderArgs)``; ``eval_episodes``: ``--eval``'s
episodes without a file ("dataset" or "sample"); ``goal_headings``: the ring keeps goal-view headings;
``categories``: goals of a category set; ``episode_file``: its habitat files' reader (``map_habitat_*``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import numpy as np

from bps_assets.pipeline.habitat_episodes import map_habitat_episodes

from ..step.schema import Schema, Staging


class HostHook(Protocol):
    """Host work of a task when episodes are queued (between steps, before the upload)."""

    def write(self, stage_i: np.ndarray, stage_f: np.ndarray, episode_ids: list, headings: list) -> None:
        """The staged rows (``TaskSpec.staging``), their episode ids and goal-view headings."""

    def set_options(self, options) -> None:
        """The task's options changed (``env.task = ...``)."""


@dataclass(frozen=True)
class HostContext:
    """What a host hook may use: the ring fields (name -> tensor), the staging layout, the
    batch render (``render(scene_index, positions, rotations, sensors)``), scene ids by scene
    index (``scene_id``), the task's options; the sensors' (h, w) ``resolution``, the batch
    render through another camera (``render_view(scene_index, camera centres, rotations, (h, w),
    hfov_deg, sensors)``) and the queued episodes' dicts (``episode_record(scene_index, id)``)."""
    ring: dict
    staging: Staging
    render: Callable
    scene_id: Callable[[int], str]
    options: Any
    resolution: tuple | None = None
    render_view: Callable | None = None
    episode_record: Callable | None = None


@dataclass(frozen=True)
class ScenesRequest:
    """What a task's ``scenes`` hook picks from: the manifest, its split, the split's scene
    entries (before ``scene_shard``: every rank picks from the same list) and the ``EnvConfig``."""
    manifest: Any
    split: str | None
    entries: list
    config: Any

    @property
    def announce(self) -> bool:
        """Whether this process says what the hook left out: rank 0 of a sharded run (or the
        only one), so a warning about the whole split is said once."""
        shard = self.config.episodes.scene_shard
        return shard is None or shard[0] == 0


def _every_scene(request: ScenesRequest) -> list:
    return request.entries


@dataclass(frozen=True)
class SupplyRequest:
    """What a task's episode supply is built from: the manifest, its split, the scene entries
    (after sharding), the ``EnvConfig`` and the goal-field worker."""
    manifest: Any
    split: str | None
    entries: list
    config: Any
    worker: Any

    @property
    def near_gate(self) -> float:
        """The supply's near-goal gate (m): ``bps_assets.nav.geodesic.near_gate`` of the task's
        success distance (exact reads cover the success boundary)."""
        from bps_assets.nav.geodesic import near_gate

        return near_gate(self.config.task.success_distance)


@dataclass(frozen=True)
class GoalEncoderArgs:
    """What the trainer's goal encoder is built from: the visual input's channels, the hidden
    size, the CNN width, the resolution, a category vocabulary size, ``make_cnn(in_channels)``
    (a new visual encoder of the policy's kind, output ``hidden``)."""
    in_channels: int
    hidden: int
    width: int
    resolution: tuple
    num_categories: int
    make_cnn: Callable


EVAL_EPISODES = ("dataset", "sample")   # where a task's evaluation episodes come from by default


def _no_hook(_ctx: HostContext):
    return None


def _no_goal_entries(_record: dict | None, _episode_id: str, _heading: float) -> dict:
    return {}


def _no_sizes(_resolution) -> dict:
    return {}


@dataclass(frozen=True)
class TaskSpec:
    """A task, as the runtime and the trainer see it (the module docstring lists the members)."""
    name: str
    options: type
    actions: tuple
    schema: Schema
    State: Any
    Out: Any
    params: Callable
    max_move: Callable
    apply_refills: Any
    begin_kernel: Any
    step_kernel: Any
    staging: Staging
    observations: tuple            # of step.schema.Observation
    info: Callable
    episode_info: Callable
    outcome: tuple
    supply: Callable               # SupplyRequest -> (EpisodeSupply, entries)
    goal_input: Callable           # obs dict -> the policy's goal input [B, ...]
    goal_input_spec: Callable      # resolution (h, w) -> (per-env shape, torch dtype)
    goal_encoder: Callable         # GoalEncoderArgs -> nn.Module (out_dim; forward(goal, visual_encoder))
    host_hook: Callable = _no_hook
    goal_record: Callable = _no_goal_entries
    camera: dict = field(default_factory=dict)   # sensor geometry defaults (SensorConfig's None fields)
    sizes: Callable = _no_sizes
    defaults: Any = field(default=None)
    eval_episodes: str = "dataset"   # --eval without a file: the split's episode files, or "sample" (from the seed)
    goal_headings: bool = False      # its host hook or goal_record reads the episodes' goal-view headings
    categories: bool = False         # its goals are objects of a named category set (make(categories=...))
    scenes: Callable = _every_scene  # ScenesRequest -> the split's entries it may serve (before scene_shard)
    episode_file: Callable = map_habitat_episodes   # (path, manifest, allow_unmatched=) -> MappedEpisodes

    def __post_init__(self):
        if self.eval_episodes not in EVAL_EPISODES:
            raise ValueError(f"TaskSpec {self.name}: eval_episodes={self.eval_episodes!r}, "
                             f"expected one of {EVAL_EPISODES}")
        if self.defaults is None:
            object.__setattr__(self, "defaults", self.options())

    @property
    def num_actions(self) -> int:
        """How many discrete actions the task has."""
        return len(self.actions)
