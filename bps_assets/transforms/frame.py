"""Move a scene into the habitat frame (Y up, -Z forward, +X right).

Gibson and MP3D GLBs are Z-up and enter the habitat frame as (x, y, z) -> (x, z, -y);
plain glTF is already Y-up. The matrix applied is recorded in ``SceneDocument.frame_matrix``
and, from there, in the packed file's header. The Z-up matrix is a signed permutation, so
positions are moved exactly (no rounding).
"""
from __future__ import annotations

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
