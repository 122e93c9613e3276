"""Scene readers: ``load(path) -> SceneDocument``, one module per file type, chosen by the
file's magic bytes with the extension as a hint (``detect.resolve_kind``).

Readers register themselves with :func:`register_reader`; a reader is a callable
``reader(path, **kw) -> SceneDocument``. Every reader flattens its file into world-space
meshes and leaves the frame as the file has it (see docs/ARCHITECTURE.md, "readers").
Keyword options every built-in reader accepts: ``textures=True`` (decode images).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import numpy as np

from ..errors import InputError, UnsupportedFormatError
from ..scene import SceneDocument

Reader = Callable[..., SceneDocument]
_READERS: dict[str, Reader] = {}


def register_reader(*extensions: str) -> Callable[[Reader], Reader]:
    """Decorator: register ``fn`` as the reader for these file extensions (e.g. ``".glb"``)."""

    def deco(fn: Reader) -> Reader:
        for ext in extensions:
            _READERS[ext.lower() if ext.startswith(".") else "." + ext.lower()] = fn
        return fn

    return deco


def supported_extensions() -> list[str]:
    """The file extensions with a registered reader, sorted."""
    return sorted(_READERS)


def reader_for(path: str | os.PathLike) -> Reader:
    """The reader for ``path``: by content for an existing file (a navmesh or tile cache is an
    UnsupportedFormatError pointing to ``bps-assets navmesh``), else by extension;
    UnsupportedFormatError when none fits."""
    ext = Path(path).suffix.lower()
    if Path(path).is_file():
        from .detect import KINDS, TILE_CACHE_MESSAGE, resolve_kind

        kind = resolve_kind(path)
        if kind in ("detour-set", "detour-tile", "bps-navmesh"):
            raise UnsupportedFormatError(path, f"is a {KINDS[kind][1]}, not a scene; import it "
                                               "with `bps-assets navmesh`")
        if kind == "tile-cache":
            raise UnsupportedFormatError(path, TILE_CACHE_MESSAGE)
        ext = {"glb": ".glb", "gltf": ".gltf", "ply": ".ply", "obj": ".obj"}.get(kind, ext)
    if ext not in _READERS:
        raise UnsupportedFormatError(
            path, f"unsupported file type {ext or '(none)'!r}; readable: {', '.join(supported_extensions())}")
    return _READERS[ext]


def load(path: str | os.PathLike, **kw) -> SceneDocument:
    """Read any supported scene file into a :class:`SceneDocument` (the file's own frame)."""
    reader = reader_for(path)
    p = Path(path)
    if not p.exists():
        raise InputError(path, "file not found")
    if p.is_dir():
        raise InputError(path, "is a directory, not a scene file")
    # a value past float32's range (a node scale of 1e300, a huge OBJ coordinate) becomes inf
    # here, quietly: the clean step counts and drops such triangles, or one typed error says
    # the scene has none left, so numpy's RuntimeWarning lines would only precede that error
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        return reader(path, **kw)


def _register_builtins() -> None:
    from . import gltf, obj, ply

    register_reader(".glb", ".gltf")(gltf.read_gltf)
    register_reader(".ply")(ply.read_ply)
    register_reader(".obj")(obj.read_obj)


_register_builtins()

__all__ = ["load", "register_reader", "reader_for", "supported_extensions"]
