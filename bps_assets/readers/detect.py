"""What a file is, from its first bytes; the extension is only a hint.

``detect_kind(path)`` sniffs the content: Detour navmesh set (``MSET``), single Detour tile
(``DNAV``), DetourTileCache set (``TSET``), bps packed files (scene / navmesh), binary glTF
(``glTF``), JSON glTF, PLY (``ply``), OBJ text. ``resolve_kind(path)`` combines it with the
extension: content wins; a known extension whose type disagrees with a recognised content is a
``FileTypeMismatchError`` naming both; unrecognised content falls back to the extension (the
reader then says what is wrong with it; ``describe_file`` says what the bytes are). Detour
files are little-endian: their magics are the four characters reversed on disk.
"""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import FileTypeMismatchError, InputError

SNIFF_BYTES = 4096
BPS_MAGIC = b"\x89BPS\r\n\x1a\n"
TILE_CACHE_MESSAGE = ("not supported: tile-cache, build the navmesh first (a DetourTileCache "
                      "'TSET' set holds compressed layers, not polygons)")

# kind -> (family, description). Kinds of one family are read by the same code path, so an
# extension of one and content of another (e.g. binary glTF named .gltf) is no mismatch.
KINDS = {
    "detour-set": ("navmesh", "Detour navmesh set ('MSET' magic)"),
    "detour-set-be": ("navmesh", "big-endian Detour navmesh set ('MSET' byte-swapped)"),
    "detour-tile": ("navmesh", "single Detour navmesh tile ('DNAV' magic)"),
    "tile-cache": ("tile-cache", "DetourTileCache set ('TSET' magic)"),
    "bps-navmesh": ("navmesh", "bps navmesh (NAVM container)"),
    "bps-scene": ("bps-scene", "bps packed scene (SCEN container)"),
    "glb": ("gltf", "binary glTF ('glTF' magic)"),
    "gltf": ("gltf", "glTF JSON"),
    "ply": ("ply", "PLY ('ply' magic)"),
    "obj": ("obj", "OBJ text"),
}
# extension -> kind it suggests. '.bin' is left out on purpose: Detour sets, single tiles and
# glTF buffers all use it, so it says nothing.
EXTENSION_KINDS = {".navmesh": "detour-set", ".glb": "glb", ".gltf": "gltf", ".ply": "ply",
                   ".obj": "obj", ".bps": "bps-scene"}
_OBJ_KEYWORDS = {b"v", b"vt", b"vn", b"vp", b"f", b"l", b"p", b"o", b"g", b"s", b"mtllib",
                 b"usemtl", b"cstype", b"deg", b"curv", b"surf"}
_GLTF_KEYS = (b'"asset"', b'"scenes"', b'"nodes"', b'"meshes"', b'"accessors"', b'"buffers"')


def sniff(head: bytes) -> str | None:
    """The kind (a ``KINDS`` key) of a file starting with ``head``, or None."""
    four = head[:4]
    if four == b"TESM":
        return "detour-set"
    if four == b"MSET":
        return "detour-set-be"
    if four == b"VAND":
        return "detour-tile"
    if four == b"TEST":  # 'TSET' little-endian
        return "tile-cache"
    if head[:8] == BPS_MAGIC:
        kind = head[12:16]
        return {b"NAVM": "bps-navmesh", b"SCEN": "bps-scene"}.get(kind)
    if four == b"glTF":
        return "glb"
    if head[:4] in (b"ply\n", b"ply\r"):
        return "ply"
    text = head[3:] if head[:3] == b"\xef\xbb\xbf" else head
    stripped = text.lstrip()
    if stripped[:1] == b"{":
        return "gltf" if any(k in stripped for k in _GLTF_KEYS) else None
    return "obj" if _looks_like_obj(text) else None


def _looks_like_obj(text: bytes) -> bool:
    """Printable text whose first statement (after comments / blank lines) is an OBJ keyword."""
    if b"\x00" in text:
        return False
    for line in text.splitlines()[:200]:
        line = line.strip()
        if not line or line.startswith(b"#"):
            continue
        return line.split()[0] in _OBJ_KEYWORDS
    return False


def detect_kind(path: str | os.PathLike) -> str | None:
    """The kind of the file at ``path`` from its content (None: not recognised)."""
    try:
        with open(path, "rb") as f:
            head = f.read(SNIFF_BYTES)
    except OSError as e:
        raise InputError(path, f"cannot read: {e.strerror or e}") from e
    return sniff(head)


def extension_kind(path: str | os.PathLike) -> str | None:
    name = os.fspath(path).lower()
    if name.endswith(".navmesh.bps"):
        return "bps-navmesh"
    return EXTENSION_KINDS.get(Path(name).suffix)


def resolve_kind(path: str | os.PathLike) -> str | None:
    """Content kind, checked against the extension's; None when neither says anything."""
    found, hinted = detect_kind(path), extension_kind(path)
    if found is None:
        return hinted
    if hinted is not None and KINDS[found][0] != KINDS[hinted][0]:
        raise FileTypeMismatchError(
            path, f"content is a {KINDS[found][1]} but the extension "
                  f"{Path(os.fspath(path)).suffix!r} says {KINDS[hinted][1]}; rename the file "
                  "or check that it is the one you meant")
    return found


def describe(kind: str | None) -> str:
    """``kind``'s description, or "unrecognised content"."""
    return KINDS[kind][1] if kind in KINDS else "unrecognised content"


def describe_file(path: str | os.PathLike) -> str:
    """What the file at ``path`` is, for a message ("is ..."): its content's kind when
    recognised; else, since ``resolve_kind`` then falls back to the extension, that the
    extension's type was not found in the bytes, and the first bytes themselves."""
    found = detect_kind(path)
    if found is not None:
        return f"a {KINDS[found][1]}"
    with open(path, "rb") as f:
        head = f.read(16)
    hinted = extension_kind(path)
    bytes_ = f"its first bytes are {head!r}" if head else "it is empty"
    if hinted is None:
        return f"a file of unrecognised content ({bytes_})"
    return (f"not a {KINDS[hinted][1]} as its extension {Path(os.fspath(path)).suffix!r} says: "
            f"its content is not recognised ({bytes_})")
