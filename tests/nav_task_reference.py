"""REFERENCE, not product code: habitat-lab's ObjectNav and ImageNav task rules in plain numpy,
one agent at a time, written to be read. The runtime's fused task kernels are checked against it.
Rules read from habitat-lab (habitat/tasks/nav/nav.py, object_nav_task.py, config/benchmark/nav/):
- actions STOP 0, MOVE_FORWARD 1 (0.25 m), TURN_LEFT 2 / TURN_RIGHT 3 (ObjectNav 30 deg, ImageNav
  10 deg), LOOK_UP 4 / LOOK_DOWN 5 (+-30 deg; clamped at ``max_pitch_deg``, None = no limit);
  sliding off for ObjectNav, on for ImageNav;
- distance_to_goal: geodesic to the nearest view point (ObjectNav) or to the goal (ImageNav),
  re-measured only when the position moved (``np.allclose(prev, now, atol=1e-4)``); success =
  STOP and distance < success_distance (strict); the episode ends on STOP or after ``max_steps`` (0: never);
- spl = success * d0 / max(d0, path), path = sum of euclidean moves; soft_spl = max(0, 1 - d /
  d0) * d0 / max(d0, path); reward = -(d - d_prev) - 0.01 + 2.5 * success;
- geodesic (docs/NAVMESH.md section 4): min over the spans seen from the point's span of field +
  |p - centre|; below the gate (max(NEAR_EXACT, success_distance + 0.3 m)) also |p - g| for each
  goal g the point sees in a straight line; float64, rounded to float32 as the step's kernel.
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Callable

import numpy as np

from bps_assets.nav.geodesic import NEAR_EXACT, line_of_sight

STOP, MOVE_FORWARD, TURN_LEFT, TURN_RIGHT, LOOK_UP, LOOK_DOWN = range(6)


def gate(success_distance: float) -> float:
    """The near-goal gate of a task (docs/NAVMESH.md section 4): max(0.5, success_distance + 0.3)."""
    return max(NEAR_EXACT, success_distance + 0.3)


def geodesic(scene, field: np.ndarray, points, goals: np.ndarray | None = None,
             near: float = NEAR_EXACT) -> np.ndarray:
    """The step's geodesic rule for one field [S] of ``scene`` (a ``SceneNav``) and points [N, 3];
    ``goals`` [P, 4] (x, y, z, span: the row's ``GoalFields.near``), None: the field read alone;
    ``near``: the gate (m) below which the goals' straight lines count."""
    nm = scene.navmesh
    p = np.asarray(points, np.float64).reshape(-1, 3)
    c = np.floor((p[:, 0] - scene.origin[0]) / scene.cell_size).astype(np.int64)
    r = np.floor((p[:, 2] - scene.origin[1]) / scene.cell_size).astype(np.int64)
    inb = (r >= 0) & (r < scene.D) & (c >= 0) & (c < scene.W)
    rr, cc = np.where(inb, r, 0), np.where(inb, c, 0)
    dy = np.abs(np.asarray(nm.height, np.float32)[:, rr, cc].T - p[:, 1:2].astype(np.float32))
    dy = np.where(np.isnan(dy), np.inf, dy)
    span = np.asarray(nm.span_index)[dy.argmin(axis=1), rr, cc].astype(np.int64)
    span = np.where(inb & (span >= 0), span, -1)
    out = np.full(len(p), np.inf)
    ok = span >= 0
    if ok.any():
        sp, S = nm.span_pos, scene.num_spans
        seen = scene.seen[span[ok]].astype(np.int64)                             # [n, K]
        q = p[ok].copy()
        q[:, 1] = sp[span[ok], 1]
        valid = seen < S
        sc = np.where(valid, seen, 0)
        d = np.linalg.norm(sp[sc] - q[:, None, :], axis=2)
        out[ok] = np.where(valid, np.asarray(field, np.float32)[sc].astype(np.float64) + d, np.inf).min(axis=1)
        for j, g in enumerate(np.zeros((0, 4)) if goals is None else np.asarray(goals, np.float64)):
            dg = np.linalg.norm(q - g[:3], axis=1)
            i = np.nonzero((out[ok] < near) & (dg < out[ok]))[0]
            if i.size:
                sees = line_of_sight(nm, span[ok][i], q[i], np.full(i.size, int(g[3])), np.repeat(g[None, :3], i.size, 0))
                sub = out[ok]
                sub[i[sees]] = np.minimum(sub[i[sees]], dg[i[sees]])
                out[ok] = sub
    return out.astype(np.float32).astype(np.float64)


@dataclass(frozen=True)
class Rules:
    forward_step: float = 0.25
    turn_deg: float = 30.0
    tilt_deg: float = 30.0
    max_pitch_deg: float | None = 30.0
    sliding: bool = False
    success_distance: float = 0.1
    success_reward: float = 2.5
    slack_reward: float = -0.01
    max_steps: int = 500
    look_actions: bool = True


OBJECTNAV = Rules()
IMAGENAV = Rules(turn_deg=10.0, sliding=True, success_distance=0.2, max_steps=1000, look_actions=False,
                 max_pitch_deg=None)
INSTANCE_IMAGENAV = Rules(max_steps=1000)   # ObjectNav's rules, habitat's 1000 steps
IMAGENAV_1M = Rules(turn_deg=10.0, sliding=True, success_distance=1.0, max_steps=1000, look_actions=False,
                    max_pitch_deg=None)


def forward_vector(yaw: float) -> np.ndarray:
    """The agent's forward (-Z turned by ``yaw`` about +Y)."""
    return np.array([-math.sin(yaw), 0.0, -math.cos(yaw)])


def imagenav_goal_heading(episode_id) -> float:
    """habitat's ImageGoalSensor draw, seeded by crc32(episode_id) instead of Python's salted hash."""
    return float(np.random.RandomState(zlib.crc32(str(episode_id).encode())).uniform(0, 2 * np.pi))


class TaskReference:
    """One agent. ``distance(p)``: distance to goal at position p (geodesic; inf unreachable);
    ``move(start, end)``: where a step from start towards end ends (the navmesh's try_step with
    the rules' sliding)."""

    def __init__(self, rules: Rules, distance: Callable[[np.ndarray], float],
                 move: Callable[[np.ndarray, np.ndarray], np.ndarray]):
        self.r, self.distance, self.move = rules, distance, move

    def reset(self, position, yaw: float, pitch: float = 0.0) -> dict:
        self.pos = np.asarray(position, np.float64).copy()
        self.yaw, self.pitch = float(yaw), float(pitch)
        self.d0 = self.d = float(self.distance(self.pos))
        self.measured_at = self.pos.copy()
        self.path = 0.0
        self.steps = 0
        self.done = False
        return self.metrics(success=False)

    def metrics(self, success: bool) -> dict:
        d0, d, path = self.d0, self.d, self.path
        denom = max(d0, path)
        ratio = d0 / denom if denom > 0 else 1.0
        soft = max(0.0, 1.0 - d / d0) if d0 > 0 else float(d <= 0)
        return {"distance_to_goal": d, "success": float(success), "spl": float(success) * ratio,
                "soft_spl": soft * ratio}

    def step(self, action: int) -> dict:
        assert not self.done, "episode over: reset first"
        r = self.r
        stop = action == STOP
        if action == MOVE_FORWARD:
            end = self.pos + r.forward_step * forward_vector(self.yaw)
            new = np.asarray(self.move(self.pos, end), np.float64)
            self.path += float(np.linalg.norm(new - self.pos))
            self.pos = new
        elif action in (TURN_LEFT, TURN_RIGHT):
            self.yaw += math.radians(r.turn_deg) * (1 if action == TURN_LEFT else -1)
        elif action in (LOOK_UP, LOOK_DOWN):
            assert r.look_actions, "this task has no LOOK actions"
            self.pitch += math.radians(r.tilt_deg) * (1 if action == LOOK_UP else -1)
            if r.max_pitch_deg is not None:
                lim = math.radians(r.max_pitch_deg)
                self.pitch = min(max(self.pitch, -lim), lim)
        prev = self.d
        if not np.allclose(self.measured_at, self.pos, atol=1e-4):
            self.d = float(self.distance(self.pos))
            self.measured_at = self.pos.copy()
        self.steps += 1
        success = stop and self.d < r.success_distance
        out = self.metrics(success)
        out["reward"] = -(self.d - prev) + r.slack_reward + (r.success_reward if success else 0.0)
        self.done = stop or (r.max_steps > 0 and self.steps >= r.max_steps)   # 0: no limit
        out["done"] = self.done
        return out
