"""PointNav task constants and the batched pose / goal / reward math (torch, no I/O).

Conventions follow habitat-lab (checked against habitat-lab's ``tasks/nav/nav.py``):
- actions: STOP=0, MOVE_FORWARD=1, TURN_LEFT=2, TURN_RIGHT=3 (HabitatSimActions order);
- habitat frame: Y up, -Z forward, +X right; an agent's rotation is a yaw about +Y, so
  TURN_LEFT adds +10 deg and the forward vector is (-sin yaw, 0, -cos yaw); quaternions are
  [x, y, z, w] = [0, sin(yaw/2), 0, cos(yaw/2)] as in habitat's episode files;
- ``pointgoal_with_gps_compass`` (POLAR, 2-D): the goal vector rotated into the agent frame,
  (x_a, z_a); ``rho, phi = cartesian_to_polar(-z_a, x_a)``; observation ``[rho, -phi]``, so a
  goal to the agent's left has a positive angle;
- success: STOP called with geodesic distance < 0.2 m (strict, as habitat's ``Success``);
  SPL = success * d0 / max(d0, path length), the path length summing the Euclidean distances
  between consecutive positions (habitat's ``SPL``);
- reward: -0.01 + (d_prev - d_now) + 2.5 * success (habitat's NavRLEnv).
"""
from __future__ import annotations

import math
from dataclasses import dataclass


STOP, MOVE_FORWARD, TURN_LEFT, TURN_RIGHT = 0, 1, 2, 3
ACTION_NAMES = ("STOP", "MOVE_FORWARD", "TURN_LEFT", "TURN_RIGHT")
NUM_ACTIONS = len(ACTION_NAMES)


@dataclass(frozen=True)
class TaskOptions:
    """habitat-lab's PointNav defaults (pointnav.yaml / DD-PPO)."""

    forward_step: float = 0.25        # metres per MOVE_FORWARD
    turn_degrees: float = 10.0        # degrees per TURN_LEFT / TURN_RIGHT
    success_distance: float = 0.2     # metres, geodesic, strict '<'
    max_episode_steps: int = 500
    slack_reward: float = -0.01
    success_reward: float = 2.5


DEFAULTS = TaskOptions()
