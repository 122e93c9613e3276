"""The packed scene's optional levels of detail (docs/FORMAT.md 5.8): arrays, header, checks, read.

Header key ``lods``: ``levels``, a list (at most ``MAX_LEVELS``) of ``{max_error, result_error,
triangles, vertices}`` with ``max_error`` (metres) strictly increasing. Level ``i`` is its own
compact mesh in sections ``lod{i}.positions_q`` (the full mesh's quantization grid),
``lod{i}.indices``, ``lod{i}.tri_material`` and, exactly when the full mesh has them,
``lod{i}.uvs_q``, ``lod{i}.colors``, ``lod{i}.tri_object``. Caps before reading: a level has at
most the full mesh's triangles and vertices, and no more vertices than 3 x its triangles.
``build`` makes the sections from merged geometry (``transforms.lod``);
``packed_scene.read_lod_level`` reads one level in place of the full mesh's geometry; ``choose_level`` picks the coarsest level whose
error fits a pixel footprint. A file without ``lods`` reads exactly as before.
"""
from __future__ import annotations

import math

import numpy as np

from .errors import ConfigError, CorruptFileError, is_int, is_real

HEADER_KEY = "lods"
MAX_LEVELS = 8
MAX_ERROR = 10.0   # metres: a coarser "level" is no render mesh
GEOMETRY = ("positions_q", "indices", "tri_material", "uvs_q", "colors", "tri_object")
_REQUIRED = ("positions_q", "indices", "tri_material")
_PER_VERTEX = ("positions_q", "uvs_q", "colors")
_TAIL = {"positions_q": (("u2", "u4"), (3,)), "indices": (("u4",), (3,)), "tri_material": (("i4",), ()),
         "uvs_q": (("u2", "u4"), (2,)), "colors": (("u1",), (4,)), "tri_object": (("i4",), ())}


def section(level: int, field: str) -> str:
    """The stored section name of ``field`` of level ``level`` (``lod0.indices``)."""
    return f"lod{level}.{field}"


LAYOUT = {section(i, f): _TAIL[f] for i in range(MAX_LEVELS) for f in GEOMETRY}


def _err(path, msg, name=None):
    if name is None:
        return CorruptFileError(path, f"header: {HEADER_KEY}: {msg}")
    return CorruptFileError(path, msg, section=name)


def levels(path, header: dict, triangles: int | None = None, vertices: int | None = None) -> list[dict]:
    """The header's levels (``[]`` without ``lods``), checked: count, errors, and each level's
    counts against the full mesh's (``triangles`` / ``vertices``; default from ``counts``)."""
    s = header.get(HEADER_KEY)
    if s is None:
        return []
    lv = s.get("levels") if isinstance(s, dict) else None
    if not isinstance(lv, list) or not 1 <= len(lv) <= MAX_LEVELS:
        raise _err(path, f"levels must be a list of 1 to {MAX_LEVELS} levels")
    counts = header.get("counts") if isinstance(header.get("counts"), dict) else {}
    t_full = counts.get("triangles", 0) if triangles is None else triangles
    v_full = counts.get("vertices", 0) if vertices is None else vertices
    prev = 0.0
    for i, x in enumerate(lv):
        e = x.get("max_error") if isinstance(x, dict) else None
        if not is_real(e) or not prev < e <= MAX_ERROR:
            raise _err(path, f"levels[{i}].max_error must be a number in ({prev}, {MAX_ERROR}], increasing")
        prev = float(e)
        t, v = x.get("triangles"), x.get("vertices")
        for k, val, hi in (("triangles", t, t_full), ("vertices", v, None)):
            if not is_int(val) or not 1 <= val <= (hi if hi is not None else val):
                raise _err(path, f"levels[{i}].{k} missing or not an integer in [1, {hi if hi is not None else 'inf'}]")
        if v > min(3 * t, v_full):
            raise _err(path, f"levels[{i}].vertices = {v} exceeds min(3 x triangles, counts.vertices)")
    return lv


def section_rows(path, header: dict, triangles: int, vertices: int) -> dict[str, int]:
    """Rows each LOD section must have (0 for levels the header does not list)."""
    rows = dict.fromkeys(LAYOUT, 0)
    for i, x in enumerate(levels(path, header, triangles, vertices)):
        for f in GEOMETRY:
            rows[section(i, f)] = x["vertices"] if f in _PER_VERTEX else x["triangles"]
    return rows


def check_present(path, header: dict, secs: dict) -> None:
    """Each listed level has its required sections, and ``uvs_q`` / ``colors`` / ``tri_object``
    exactly when the full mesh has them; no section of an unlisted level exists."""
    n = len(levels(path, header))
    for i in range(MAX_LEVELS):
        for f in GEOMETRY:
            name = section(i, f)
            full = f in _REQUIRED or f in secs
            if i < n and full and name not in secs:
                raise _err(path, "required section is missing", name)
            if name in secs and (i >= n or not full):
                raise _err(path, "section of a level (or a table) the file does not have", name)


def choose_level(errors, footprint_m: float) -> int:
    """Index of the coarsest level whose ``max_error`` <= ``footprint_m``; -1: the full mesh."""
    best = -1
    for i, e in enumerate(errors):
        if e <= footprint_m:
            best = i
    return best


def pixel_footprint(hfov_deg: float, width: int, distance_m: float = 1.0) -> float:
    """Metres one pixel spans at ``distance_m``: the sensor's angular pixel size (HFOV / width)
    times the distance (64 px at HFOV 90: 2.45 cm at 1 m)."""
    return math.radians(hfov_deg) / width * distance_m


def build(positions: np.ndarray, g, tri_object: np.ndarray | None, errors) -> tuple[dict, dict, dict]:
    """(arrays, header object, stats) of the levels of ``errors`` (metres) of merged geometry
    ``g`` (its ``positions_q``, ``indices``, ``tri_material``, ``uvs_q``, ``colors``), the
    dequantized ``positions`` and the semantic ids ``tri_object`` (or None). Groups: one per
    (object, material), borders locked (``transforms.lod``)."""
    from .transforms.lod import Options, lod

    errs = check_errors(errors)
    mat = np.asarray(g.tri_material, np.int64)
    groups = mat if tri_object is None else np.asarray(tri_object, np.int64) * (int(mat.max(initial=0)) + 1) + mat
    arrays, out = {}, []
    for i, e in enumerate(errs):
        lv = lod(Options(max_error=e))(positions, g.indices, groups)
        used, inv = np.unique(lv.indices, return_inverse=True)  # the level's own compact vertices
        idx = inv.reshape(-1, 3).astype(np.uint32)
        a = {"positions_q": g.positions_q[used], "indices": idx,
             "tri_material": np.asarray(g.tri_material, np.int32)[lv.tri_source]}
        if g.uvs_q is not None:
            a["uvs_q"] = g.uvs_q[used]
        if g.colors is not None:
            a["colors"] = g.colors[used]
        if tri_object is not None:
            a["tri_object"] = np.asarray(tri_object, np.int32)[lv.tri_source]
        arrays.update({section(i, k): np.ascontiguousarray(v) for k, v in a.items()})
        out.append({"max_error": e, "result_error": float(lv.result_error),
                    "triangles": int(len(idx)), "vertices": int(len(used))})
    stats = {"lod_triangles": [x["triangles"] for x in out]}
    return arrays, {"levels": out}, stats


def check_errors(errors) -> list[float]:
    """The requested errors sorted, each checked (> 0, <= MAX_ERROR, distinct, <= MAX_LEVELS)."""
    errs = sorted(float(e) for e in errors)
    if len(errs) > MAX_LEVELS:
        raise ConfigError(None, f"at most {MAX_LEVELS} LOD levels, got {len(errs)}")
    for a, b in zip(errs, errs[1:]):
        if a == b:
            raise ConfigError(None, f"LOD error {a} given twice")
    for e in errs:
        if not 0 < e <= MAX_ERROR:
            raise ConfigError(None, f"a LOD error must be in (0, {MAX_ERROR}] metres, got {e}")
    return errs
