"""Synth scans with object annotations, converted: what semantic tests (ours, the semantic
sensor's, ObjectNav's) start from.

``synth_semantic_scene(tmp, layout)`` writes one synth scan with its annotation pair (gibson
layout: HM3D-Semantics ``.semantic.glb/.txt``; mp3d: ``_semantic.ply`` + ``.house``), converts
it, and returns ``(packed path, SceneInfo, truth)``; ``truth`` is synth's ground truth (objects
per mpcat40 category). ``annotation_mesh(packed, layout, name)`` is the annotated geometry in the
packed scene's habitat frame with its per-face ids (positions [V,3], triangles [F,3], ids [F]):
an independent reference for ray casts against ``PackedScene.tri_object``.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from bps_assets import synth
from bps_assets.packed_scene import ConvertOptions, convert_file, read_packed_scene
from bps_assets.synth import semantic as ssem


def synth_semantic_scene(tmp: Path, layout: str = "gibson", colours: str = "texture", name: str | None = None):
    """(packed scene path, SceneInfo, truth) of one annotated synth scan."""
    info = synth.generate(tmp / "src", layout=layout, scenes=[name] if name else 1)[0]
    if layout == "mp3d":
        truth = ssem.write_mp3d(info.path, layout, info.name)
    else:
        truth = ssem.write_hm3d(info.path, layout, info.name, colours=colours)
    out = tmp / f"{info.name}.bps"
    res = convert_file(info.path, out, ConvertOptions(dataset=layout))
    return Path(res.output), info, truth


def annotation_mesh(packed: Path, layout: str, name: str):
    """(positions float32 [V,3] habitat frame, triangles int64 [F,3], instance id int32 [F])."""
    pos, idx, tri_obj, _ = ssem.annotate(layout, name)
    m = np.asarray(read_packed_scene(packed, sections=["tri_object"]).header["frame"]["matrix"], np.float64)
    return (pos.astype(np.float64) @ m[:3, :3].T + m[:3, 3]).astype(np.float32), idx.astype(np.int64), tri_obj
