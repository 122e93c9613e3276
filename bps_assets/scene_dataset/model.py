"""A composed scene in memory: a stage plus a table of placed asset instances (no I/O here).

``ComposedScene`` is what the habitat reader (``habitat``) produces and the packer
(``packing``) writes: ``assets`` (each render asset once, by absolute path), ``stage`` and
``instances`` (each an asset index, a 4x4 float64 world transform in the habitat frame, a
semantic id, a category, a motion type). Rigid objects are one instance each; an articulated
object is one instance per link visual mesh, all sharing the object's ``group`` name.
The math helpers follow habitat-sim's conventions: quaternions ``[w, x, y, z]``, URDF ``rpy``
as Rz(yaw) Ry(pitch) Rx(roll), asset frames given by ``up`` / ``front`` mapped onto habitat's
(+Y up, -Z front).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..transforms.frame import quat_matrix


@dataclass(frozen=True)
class AssetRef:
    """One render asset: ``path`` (absolute) and ``key``, a file-name-safe unique id."""

    key: str
    path: Path


@dataclass
class Instance:
    """One placed asset. ``transform``: asset coordinates -> habitat world (4x4, float64)."""

    name: str                 # template name (rigid) or "template/link" (articulated link)
    asset: int                # index into ComposedScene.assets
    transform: np.ndarray
    kind: str = "object"      # "stage" or one of composed_section.KINDS
    motion_type: str = "STATIC"
    semantic_id: int = 0      # habitat's semantic id (0: none)
    category: str = ""
    group: int = -1           # index of the scene-instance entry it came from (links share one)


@dataclass
class ComposedScene:
    """A scene instance resolved: stage, instances, the assets they use, where its navmesh and
    semantic descriptor are (None: none named), and notes (ignored fields, said once)."""

    name: str
    source: Path
    assets: list[AssetRef] = field(default_factory=list)
    stage: Instance | None = None
    instances: list[Instance] = field(default_factory=list)
    navmesh: Path | None = None
    navmesh_unknown: str | None = None   # a navmesh_instance handle the dataset does not list
    navmesh_missing: str | None = None   # the file a listed handle names when it is not there
    semantic_scene: Path | None = None
    notes: list[str] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)   # instances dropped (--skip-missing-assets)
    inputs: list[Path] = field(default_factory=list)    # config and URDF files read (resume fingerprints)

    def asset_index(self, key: str, path: Path) -> int:
        """The index of the asset ``key`` (added on first use)."""
        for i, a in enumerate(self.assets):
            if a.key == key:
                return i
        self.assets.append(AssetRef(key, Path(path)))
        return len(self.assets) - 1


def quat_wxyz_matrix(q) -> np.ndarray:
    """3x3 rotation of a quaternion ``[w, x, y, z]`` (habitat's order; normalized first)."""
    return quat_matrix(q, "wxyz")


def rpy_matrix(rpy) -> np.ndarray:
    """3x3 rotation of URDF ``rpy`` (fixed axes X, then Y, then Z): Rz @ Ry @ Rx."""
    r, p, y = (float(v) for v in rpy)
    cr, sr, cp, sp, cy, sy = math.cos(r), math.sin(r), math.cos(p), math.sin(p), math.cos(y), math.sin(y)
    rx = np.array([[1, 0, 0], [0, cr, -sr], [0, sr, cr]])
    ry = np.array([[cp, 0, sp], [0, 1, 0], [-sp, 0, cp]])
    rz = np.array([[cy, -sy, 0], [sy, cy, 0], [0, 0, 1]])
    return rz @ ry @ rx


def axis_angle_matrix(axis, angle: float) -> np.ndarray:
    """3x3 rotation by ``angle`` radians about ``axis`` (normalized first)."""
    a = np.asarray(axis, np.float64)
    a = a / np.linalg.norm(a)
    k = np.array([[0, -a[2], a[1]], [a[2], 0, -a[0]], [-a[1], a[0], 0]])
    return np.eye(3) + math.sin(angle) * k + (1 - math.cos(angle)) * (k @ k)


def frame_matrix(up, front) -> np.ndarray:
    """3x3 rotation taking an asset whose ``up`` / ``front`` are given onto habitat's frame
    (up -> +Y, front -> -Z, front x up -> +X), as habitat-sim orients a render asset."""
    u = np.asarray(up, np.float64)
    f = np.asarray(front, np.float64)
    u, f = u / np.linalg.norm(u), f / np.linalg.norm(f)
    src = np.stack([np.cross(f, u), u, -f], axis=1)  # asset axes that become X, Y, Z
    return src.T


def affine(rot=None, trans=None, scale=None) -> np.ndarray:
    """4x4 ``T(trans) @ R(rot) @ S(scale)``."""
    m = np.eye(4)
    r = np.eye(3) if rot is None else np.asarray(rot, np.float64)
    s = np.ones(3) if scale is None else np.broadcast_to(np.asarray(scale, np.float64), (3,))
    m[:3, :3] = r * s[None, :]
    if trans is not None:
        m[:3, 3] = np.asarray(trans, np.float64)
    return m
