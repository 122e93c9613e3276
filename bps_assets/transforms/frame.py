"""Move a scene into the habitat frame (Y up, -Z forward, +X right).

Gibson and MP3D GLBs are Z-up and enter the habitat frame as (x, y, z) -> (x, z, -y);
plain glTF is already Y-up. The matrix applied is recorded in ``SceneDocument.frame_matrix``
and, from there, in the packed file's header. The Z-up matrix is a signed permutation, so
positions are moved exactly (no rounding). ``quat_matrix``: the one quaternion -> rotation
matrix of bps_assets (glTF's and habitat's component orders).
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from ..scene import SceneDocument

DATASETS = ("gibson", "mp3d", "generic")
UP_AXES = ("y", "z")
DATASET_UP = {"gibson": "z", "mp3d": "z", "generic": "y"}

# (x, y, z) -> (x, z, -y): new = M @ old
Z_UP_TO_Y_UP = np.array([[1, 0, 0, 0],
                         [0, 0, 1, 0],
                         [0, -1, 0, 0],
                         [0, 0, 0, 1]], dtype=np.float64)


def quat_matrix(q, order: str = "xyzw") -> np.ndarray:
    """3x3 rotation of a quaternion whose components ``q`` are in ``order`` ("xyzw": glTF's,
    "wxyz": habitat's), normalized first; a zero quaternion gives the identity. The one
    quaternion -> matrix of bps_assets."""
    q = [float(v) for v in q]
    # the norm summed in the stored order: each format's matrices keep their bits
    n = q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]
    if (math.isinf(n) or n < sys.float_info.min) and any(q):
        # the squares overflow or leave the normal range (1e200, 1e-170): rescale first; only
        # then, so every ordinary quaternion keeps its bits
        big = max(abs(v) for v in q)
        q = [v / big for v in q]
        n = q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]
    c = dict(zip(order, (v / math.sqrt(n) for v in q))) if n > 0 else {"x": 0.0, "y": 0.0, "z": 0.0, "w": 1.0}
    x, y, z, w = c["x"], c["y"], c["z"], c["w"]
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
    ])


@dataclass(frozen=True)
class Options:
    dataset: str = "generic"   # preset: gibson | mp3d (Z-up) | generic (Y-up)
    up: str | None = None      # override the preset's up axis: y | z


DEFAULTS = Options()


def up_axis(options: Options) -> str:
    if options.dataset not in DATASETS:
        raise ConfigError(None, f"unknown dataset {options.dataset!r} (choose {', '.join(DATASETS)})")
    if options.up is not None and options.up not in UP_AXES:
        raise ConfigError(None, f"unknown up axis {options.up!r} (choose y or z)")
    return options.up or DATASET_UP[options.dataset]


def frame_matrix(options: Options) -> np.ndarray:
    """The 4x4 matrix taking source coordinates into the habitat frame."""
    return Z_UP_TO_Y_UP.copy() if up_axis(options) == "z" else np.eye(4)


def frame(options: Options = DEFAULTS):
    """Factory: a callable that moves a SceneDocument into the habitat frame (in place)."""
    m = frame_matrix(options)

    def apply(doc: SceneDocument) -> SceneDocument:
        if doc.frame == "habitat":
            return doc
        r = m[:3, :3]
        if not np.array_equal(r, np.eye(3)):
            for mesh in doc.meshes:
                # float64 then back: exact for a signed permutation
                mesh.positions = (mesh.positions.astype(np.float64) @ r.T).astype(np.float32)
                if mesh.normals is not None:
                    mesh.normals = (mesh.normals.astype(np.float64) @ r.T).astype(np.float32)
        doc.frame = "habitat"
        doc.frame_matrix = m @ np.asarray(doc.frame_matrix, dtype=np.float64)
        return doc

    return apply
