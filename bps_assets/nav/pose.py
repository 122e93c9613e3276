"""Habitat's agent rotations as yaw. Episode files and agent states store a rotation about +Y
(Y up, -Z forward; TURN_LEFT adds yaw) as a quaternion [x, y, z, w] = [0, sin(a/2), 0, cos(a/2)].
The one conversion each way for single poses (``math``, so a file's numbers do not depend on the
CPU's vector unit); the renderer's batch form is ``bps_runtime.render.camera.yaw_to_quaternion``.
"""
from __future__ import annotations

import math


def yaw_quaternion(yaw: float) -> list[float]:
    """[x, y, z, w] of a rotation by ``yaw`` radians about +Y."""
    return [0.0, math.sin(yaw / 2), 0.0, math.cos(yaw / 2)]


def yaw_pitch_quaternion(yaw: float, pitch: float) -> list[float]:
    """[x, y, z, w] of a camera turned by ``yaw`` about +Y, then by ``pitch`` about its own +X
    (positive looks up): ``view_points.camera_basis(yaw, pitch)`` as a quaternion."""
    cy, sy, cp, sp = math.cos(yaw / 2), math.sin(yaw / 2), math.cos(pitch / 2), math.sin(pitch / 2)
    return [cy * sp, sy * cp, -sy * sp, cy * cp]


def quaternion_yaw(q) -> float:
    """The yaw in (-pi, pi] of a rotation about +Y given as [x, y, z, w]."""
    a = 2.0 * math.atan2(float(q[1]), float(q[3]))
    return a - 2.0 * math.pi * math.ceil((a - math.pi) / (2.0 * math.pi))


__all__ = ["yaw_quaternion", "yaw_pitch_quaternion", "quaternion_yaw"]
