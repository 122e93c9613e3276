"""A stand-in stage: a box room (floor + four inward walls) written as a GLB.

For datasets whose stage files are not available (ReplicaCAD's stage GLBs are not public):
tests and benchmarks size it from the scene's habitat navmesh bounds, so an imported navmesh
still fits the packed scene. Not a substitute for the real stage's geometry. No library code
calls it on purpose: a missing stage is a MissingAssetsError in preprocess, never silently
replaced; it lives here (not in tests/) because tests and benchmarks/ both build data with it.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np


def write_box_room(path: str | os.PathLike, lo, hi, overwrite: bool = False) -> Path:
    """Write a box room spanning ``lo``..``hi`` (floor at ``lo[1]``) to ``path`` (a GLB)."""
    from ..scene import Material, Mesh, SceneDocument
    from ..writers.glb import write_glb

    (x0, y0, z0), (x1, y1, z1) = lo, hi
    quads = [[(x0, y0, z0), (x0, y0, z1), (x1, y0, z1), (x1, y0, z0)],            # floor, +Y up
             [(x0, y0, z0), (x1, y0, z0), (x1, y1, z0), (x0, y1, z0)],
             [(x0, y0, z1), (x0, y1, z1), (x1, y1, z1), (x1, y0, z1)],
             [(x0, y0, z0), (x0, y1, z0), (x0, y1, z1), (x0, y0, z1)],
             [(x1, y0, z0), (x1, y0, z1), (x1, y1, z1), (x1, y1, z0)]]
    pos = np.array([p for q in quads for p in q], np.float32)
    idx = np.array([[4 * k, 4 * k + 1, 4 * k + 2] for k in range(5)] +
                   [[4 * k, 4 * k + 2, 4 * k + 3] for k in range(5)], np.uint32)
    doc = SceneDocument(meshes=[Mesh(pos, idx, material=0)], materials=[Material(name="standin")])
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_glb(doc, path, overwrite=overwrite)
    return path


def replicacad_with_standins(src: str | os.PathLike, dst: str | os.PathLike, bounds, scenes=None) -> Path:
    """A ReplicaCAD folder at ``dst``: ``src``'s configs, objects, URDFs and navmeshes linked,
    each stage config's missing GLB written as a box room around ``bounds`` ((lo, hi), e.g. a
    scene's navmesh bounds; +0.5 m around, 2.5 m high); ``scenes``: limit the scene instances
    to these names. Returns the copied dataset config."""
    import json
    import shutil

    src, root = Path(src), Path(dst)
    root.mkdir(parents=True)
    for d in ("configs", "objects", "urdf", "navmeshes", "navmeshes_default"):
        os.symlink(src / d, root / d)
    cfg = root / "replicaCAD.scene_dataset_config.json"
    shutil.copy(src / cfg.name, cfg)
    if scenes is not None:
        d = json.loads(cfg.read_text())
        d["scene_instances"]["paths"][".json"] = [f"configs/scenes/{n}.scene_instance.json" for n in scenes]
        cfg.write_text(json.dumps(d))
    lo, hi = bounds
    for sc in (src / "configs" / "stages").glob("*.stage_config.json"):
        asset = json.loads(sc.read_text())["render_asset"]
        write_box_room(os.path.normpath(root / "configs" / "stages" / asset),
                       (lo[0] - 0.5, lo[1] - 0.05, lo[2] - 0.5), (hi[0] + 0.5, lo[1] + 2.5, hi[2] + 0.5))
    return cfg
