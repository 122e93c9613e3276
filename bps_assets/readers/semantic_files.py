"""Where a scan's semantic annotation files are, and reading whichever pair it has.

HM3D (habitat-sim's hm3d layout and ``*.scene_dataset_config.json``: ``semantic_asset`` /
``semantic_descriptor_filename`` of a stage): ``NAME.semantic.glb`` + ``NAME.semantic.txt``
beside ``NAME.basis.glb`` (NAME = file name up to its first dot). MP3D (habitat layout):
``ID_semantic.ply`` + ``ID.house`` beside ``ID.glb``. ``find_semantic(scene)`` returns the
pair found beside a scene, or None (the scene stays usable without semantics). The table file
marks a pair: a table without its mesh is an ``AnnotationError`` (a half-copied download must not
silently lose objects); a mesh without its table is not a pair we read (Gibson ships
``NAME_semantic.ply`` with a ``.scn``, not a ``.house``) and is ignored.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import AnnotationError
from ..semantics import Annotation

FORMATS = ("hm3d", "mp3d")
# THE file rule of a pair, per format: (mesh, table) = the scan's name up to its first dot + these
# (``candidates``; synth writes its pairs by it too: ``synth.names.semantic_paths``)
PAIR_SUFFIXES = {"hm3d": (".semantic.glb", ".semantic.txt"), "mp3d": ("_semantic.ply", ".house")}


@dataclass(frozen=True)
class SemanticSource:
    """An annotation pair: ``format`` hm3d (mesh .semantic.glb, table .semantic.txt) or mp3d
    (mesh _semantic.ply, table .house)."""
    format: str
    mesh: str
    table: str

    def files(self) -> dict[str, str]:
        """{role: path} of the pair."""
        return {"semantic_mesh": self.mesh, "semantic_table": self.table}


def candidates(scene: str | os.PathLike) -> list[SemanticSource]:
    """The annotation pairs habitat would look for beside ``scene`` (HM3D, then MP3D)."""
    p = Path(scene)
    stem = p.name.split(".")[0]
    return [SemanticSource(f, *(str(p.with_name(stem + s)) for s in PAIR_SUFFIXES[f])) for f in FORMATS]


def find_semantic(scene: str | os.PathLike, formats=FORMATS) -> SemanticSource | None:
    """The annotation pair beside ``scene``, or None when there is none."""
    for c in candidates(scene):
        if c.format not in formats:
            continue
        mesh, table = os.path.isfile(c.mesh), os.path.isfile(c.table)
        if mesh and table:
            return c
        if table:
            raise AnnotationError(c.mesh, f"missing: its {c.format} annotation table {c.table} is there")
    return None


def read_annotation(src: SemanticSource) -> Annotation:
    """Read an annotation pair (positions in the mesh file's own frame)."""
    if src.format == "hm3d":
        from .semantic_hm3d import read_hm3d_semantics
        return read_hm3d_semantics(src.mesh, src.table)
    if src.format == "mp3d":
        from .semantic_mp3d import read_mp3d_semantics
        return read_mp3d_semantics(src.mesh, src.table)
    raise AnnotationError(src.mesh, f"unknown annotation format {src.format!r} (choose from {', '.join(FORMATS)})")
