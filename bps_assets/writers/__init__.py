"""Scene writers, registered by file extension (the counterpart of ``bps_assets.readers``).

``write(doc, path, overwrite=False)`` picks the writer from the extension; today only
binary glTF (``.glb``) is written, which is what the synthetic datasets need.
"""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import UnsupportedFormatError
from ..scene import SceneDocument
from .glb import DEFAULTS as GLB_DEFAULTS, GlbOptions, build_glb, encode_image, write_glb

WRITERS = {".glb": write_glb}


def write(doc: SceneDocument, path: str | os.PathLike, overwrite: bool = False, **kw) -> int:
    """Write ``doc`` to ``path`` with the writer for its extension; returns bytes written."""
    ext = Path(path).suffix.lower()
    fn = WRITERS.get(ext)
    if fn is None:
        raise UnsupportedFormatError(path, f"no writer for {ext or 'files without extension'} "
                                           f"(can write: {', '.join(sorted(WRITERS))})")
    return fn(doc, path, overwrite=overwrite, **kw)


__all__ = ["write", "write_glb", "build_glb", "encode_image", "GlbOptions", "GLB_DEFAULTS", "WRITERS"]
