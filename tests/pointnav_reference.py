"""The PointNav task maths in torch, one function per rule: the REFERENCE the fused step's Warp
kernels (bps_runtime/step/kernels.py) are checked against (tests/test_fused_step.py,
tests/test_runtime_pointnav.py). Not used by the runtime; conventions: bps_runtime.tasks.pointnav.
"""
from __future__ import annotations

import math

import torch

from bps_runtime.tasks.pointnav import DEFAULTS, STOP, TURN_LEFT, TURN_RIGHT, TaskOptions


def yaw_to_quat(yaw: torch.Tensor) -> torch.Tensor:
    """[N] yaw (radians about +Y) -> [N, 4] quaternions [x, y, z, w]."""
    h = 0.5 * yaw
    z = torch.zeros_like(yaw)
    return torch.stack([z, torch.sin(h), z, torch.cos(h)], dim=-1)


def quat_to_yaw(q: torch.Tensor) -> torch.Tensor:
    """[N, 4] quaternions [x, y, z, w] (rotations about +Y) -> [N] yaw in (-pi, pi]."""
    return wrap_angle(2.0 * torch.atan2(q[..., 1], q[..., 3]))


def wrap_angle(a: torch.Tensor) -> torch.Tensor:
    """Angles into (-pi, pi]."""
    return a - 2.0 * math.pi * torch.ceil((a - math.pi) / (2.0 * math.pi))


def forward_vector(yaw: torch.Tensor) -> torch.Tensor:
    """[N] yaw -> [N, 3] unit forward vectors in the habitat frame."""
    z = torch.zeros_like(yaw)
    return torch.stack([-torch.sin(yaw), z, -torch.cos(yaw)], dim=-1)


def pointgoal_polar(position: torch.Tensor, yaw: torch.Tensor, goal: torch.Tensor) -> torch.Tensor:
    """habitat's ``pointgoal_with_gps_compass``: [N, 2] float32 ``[rho, -phi]``."""
    d = goal - position
    c, s = torch.cos(yaw), torch.sin(yaw)
    x_a = c * d[:, 0] - s * d[:, 2]          # inverse rotation about +Y
    z_a = s * d[:, 0] + c * d[:, 2]
    fwd, right = -z_a, x_a
    rho = torch.sqrt(fwd * fwd + right * right)
    phi = torch.atan2(right, fwd)
    return torch.stack([rho, -phi], dim=-1).to(torch.float32)


def apply_turns(yaw: torch.Tensor, actions: torch.Tensor, options: TaskOptions = DEFAULTS) -> torch.Tensor:
    """New yaw after TURN_LEFT (+) / TURN_RIGHT (-); other actions keep the heading."""
    step = math.radians(options.turn_degrees)
    delta = (actions == TURN_LEFT).to(yaw.dtype) - (actions == TURN_RIGHT).to(yaw.dtype)
    return wrap_angle(yaw + step * delta)


def reward_and_success(actions: torch.Tensor, d_prev: torch.Tensor, d_now: torch.Tensor,
                       options: TaskOptions = DEFAULTS):
    """(reward [N] float32, success [N] bool) for one step."""
    success = (actions == STOP) & (d_now < options.success_distance)
    reward = options.slack_reward + (d_prev - d_now) + options.success_reward * success.to(d_now.dtype)
    return reward.to(torch.float32), success


def soft_spl(d0: torch.Tensor, d: torch.Tensor, path_length: torch.Tensor) -> torch.Tensor:
    """habitat-lab's SoftSPL: max(0, 1 - d / d0) * d0 / max(d0, path length) (at d0 = 0, where
    habitat divides by zero: 1 at d = 0, else 0)."""
    soft = torch.where(d0 > 0, (1 - d / d0.clamp_min(1e-12)).clamp_min(0), (d <= 0).to(d0.dtype))
    return soft * spl(torch.ones_like(d0, dtype=torch.bool), d0, path_length)


def spl(success: torch.Tensor, d0: torch.Tensor, path_length: torch.Tensor) -> torch.Tensor:
    """SPL = S * d0 / max(d0, path length) (0 where d0 is 0 and nothing moved, as 0/0 -> 1*S)."""
    denom = torch.maximum(d0, path_length)
    ratio = torch.where(denom > 0, d0 / denom.clamp_min(1e-12), torch.ones_like(d0))
    return success.to(d0.dtype) * ratio
