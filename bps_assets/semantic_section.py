"""The packed scene's optional semantic section (docs/FORMAT.md 5.6): arrays, header, checks.

Sections: ``tri_object`` i4 [T] (instance id of each render triangle, 0 none) and the object
table ``object_ids`` i4 [O], ``object_category`` i4 [O], ``object_region`` i4 [O],
``object_source_ids`` i8 [O], ``object_aabb`` f4 [O, 6], ``object_points`` f4 [O * P, 3]; the
header key ``semantics`` holds ``objects`` O, ``points_per_object`` P, ``categories`` and
``raw_names`` (MP3D: ``id_rule`` and ``no_object_id``, the id of faces of no object besides 0;
``warn_stale_ids`` logs once per file an MP3D scene packed under an older rule). Caps (before
anything is read): O <= T and O <= 2^20, P <= 64, 4096 categories, names <= 256 characters.
``check`` runs the value checks after reading.
"""
from __future__ import annotations

import numpy as np

import logging

from .errors import CorruptFileError, is_int
from .readers.semantic_mp3d import ID_RULE, NO_OBJECT
from .semantics import SemanticTable

HEADER_KEY = "semantics"
ID_RULE_KEY = "id_rule"   # MP3D files: how ids were made (semantic_mp3d.ID_RULE); older files lack it
NO_OBJECT_KEY = "no_object_id"   # a tri_object value meaning "no object" besides 0 (MP3D: 65535)
# what an older MP3D id rule got wrong ("": the key was absent)
_OLD_RULES = {"": ("object index + 1", "instance ids are not habitat's object_id"),
              "object_index": ("object_index", f"faces of no object read 0, not habitat's {NO_OBJECT}")}
MAX_OBJECTS = 1 << 20
MAX_POINTS = 64
MAX_CATEGORIES = 4096
MAX_NAME = 256
# section -> (dtype names, trailing shape)
LAYOUT = {
    "tri_object": (("i4",), ()), "object_ids": (("i4",), ()), "object_category": (("i4",), ()),
    "object_region": (("i4",), ()), "object_source_ids": (("i8",), ()),
    "object_aabb": (("f4",), (6,)), "object_points": (("f4",), (3,)),
}
FIELDS = tuple(LAYOUT)


def _err(path, msg, section=None):
    if section is None:
        return CorruptFileError(path, f"header: {HEADER_KEY}: {msg}")
    return CorruptFileError(path, msg, section=section)


def header_counts(path, header: dict, triangles: int) -> tuple[int, int] | None:
    """(O, P) from the header's ``semantics`` object (None when absent), checked against the caps."""
    s = header.get(HEADER_KEY)
    if s is None:
        return None
    if not isinstance(s, dict):
        raise _err(path, "not an object")
    o, p = s.get("objects"), s.get("points_per_object")
    for k, v, hi in (("objects", o, min(MAX_OBJECTS, triangles)), ("points_per_object", p, MAX_POINTS)):
        if not is_int(v) or not 0 <= v <= hi:
            raise _err(path, f"{k} missing or not an integer in [0, {hi}]")
    cats, names = s.get("categories"), s.get("raw_names")
    if not isinstance(cats, list) or len(cats) > MAX_CATEGORIES or not all(isinstance(c, str) and len(c) <= MAX_NAME for c in cats):
        raise _err(path, f"categories must be a list of at most {MAX_CATEGORIES} short strings")
    if not isinstance(names, list) or len(names) != o or not all(isinstance(c, str) and len(c) <= MAX_NAME for c in names):
        raise _err(path, f"raw_names must be a list of {o} strings of at most {MAX_NAME} characters")
    rule = s.get(ID_RULE_KEY, "")
    if not isinstance(rule, str) or len(rule) > MAX_NAME:
        raise _err(path, f"{ID_RULE_KEY} must be a string of at most {MAX_NAME} characters")
    none = s.get(NO_OBJECT_KEY, 0)
    if not is_int(none) or not 0 <= none < 1 << 31:
        raise _err(path, f"{NO_OBJECT_KEY} must be an integer in [0, 2^31)")
    return o, p


def no_object_id(header: dict) -> int:
    """The ``tri_object`` value besides 0 that means "no object" (0 when the file names none)."""
    s = header.get(HEADER_KEY)
    return int(s.get(NO_OBJECT_KEY, 0)) if isinstance(s, dict) else 0


def id_rule_header(fmt: str) -> dict:
    """The header keys a writer adds for an annotation of format ``fmt`` (MP3D: its id rule and
    its id of faces of no object)."""
    return {ID_RULE_KEY: ID_RULE, NO_OBJECT_KEY: NO_OBJECT} if fmt == "mp3d" else {}


def stale_ids(header: dict) -> str:
    """Why the ids of an MP3D scene packed before the current id rule are off ("" when they
    are not): a header-only check."""
    s = header.get(HEADER_KEY)
    src = s.get("source") if isinstance(s, dict) else None
    if not isinstance(src, dict) or src.get("format") != "mp3d" or s.get(ID_RULE_KEY) == ID_RULE:
        return ""
    rule = s.get(ID_RULE_KEY) or ""
    name, what = _OLD_RULES.get(rule, (rule, "instance ids may not be habitat's object_id"))
    return f"MP3D semantics packed under an older id rule ({name}, not {ID_RULE}): {what}; convert the scan again"


_warned: set[str] = set()


def warn_stale_ids(path, header: dict) -> None:
    """Log ``stale_ids``'s note, once per file and process."""
    note = stale_ids(header)
    if note and str(path) not in _warned:
        _warned.add(str(path))
        logging.getLogger("bps_assets.semantics").warning("%s: %s", path, note)


def section_rows(path, header: dict, triangles: int) -> dict[str, int]:
    """Rows each semantic section must have; with no ``semantics`` header, none may exist (0)."""
    c = header_counts(path, header, triangles)
    o, p = c if c is not None else (0, 0)
    rows = {n: o for n in FIELDS}
    rows["tri_object"] = triangles if c is not None else 0
    rows["object_points"] = o * p
    return rows


def arrays(tri_object: np.ndarray, table: SemanticTable) -> tuple[dict, dict]:
    """(sections, header object) of a table and its triangles' ids."""
    o = len(table)
    p = int(table.points.shape[1]) if table.points.ndim == 3 else 0
    src = table.source_ids if table.source_ids is not None else table.ids.astype(np.int64)
    secs = {"tri_object": np.ascontiguousarray(tri_object, np.int32),
            "object_ids": table.ids.astype(np.int32), "object_category": table.category.astype(np.int32),
            "object_region": table.region.astype(np.int32), "object_source_ids": np.asarray(src, np.int64),
            "object_aabb": table.aabb.astype(np.float32).reshape(o, 6),
            "object_points": table.points.astype(np.float32).reshape(o * p, 3)}
    hdr = {"objects": o, "points_per_object": p, "categories": list(table.categories),
           "raw_names": [n[:MAX_NAME] for n in table.raw_names]}
    return secs, hdr


def check(path, header: dict, a: dict) -> None:
    """Value checks of the read semantic sections ``a`` (name -> array; those read)."""
    ids = a.get("object_ids")
    if ids is not None and ids.size and (int(ids.min()) < 1 or (np.diff(ids.astype(np.int64)) <= 0).any()):
        raise _err(path, "ids must be >= 1 and strictly increasing", "object_ids")
    t = a.get("tri_object")
    if t is not None and t.size:
        if int(t.min()) < 0:
            raise _err(path, "negative instance id", "tri_object")
        if ids is not None:
            none = no_object_id(header)
            if none and np.isin(none, ids):
                raise _err(path, f"{NO_OBJECT_KEY} {none} is an object's id", "object_ids")
            nz = np.unique(t[(t > 0) & (t != none)])
            if nz.size and not np.isin(nz, ids).all():
                raise _err(path, f"instance id {int(nz[~np.isin(nz, ids)][0])} is not in object_ids", "tri_object")
    cat = a.get("object_category")
    n_c = len(header.get(HEADER_KEY, {}).get("categories", []))
    if cat is not None and cat.size and (int(cat.min()) < -1 or int(cat.max()) >= n_c):
        raise _err(path, f"category outside [-1, {n_c})", "object_category")
    reg = a.get("object_region")
    if reg is not None and reg.size and int(reg.min()) < -1:
        raise _err(path, "region below -1", "object_region")
    box = a.get("object_aabb")
    if box is not None and box.size:
        if not np.isfinite(box).all() or (box[:, :3] > box[:, 3:]).any():
            raise _err(path, "a box is not finite or has min > max", "object_aabb")


def table_of(header: dict, a: dict) -> SemanticTable | None:
    """The SemanticTable of read sections (None when the file has no semantic section)."""
    s = header.get(HEADER_KEY)
    if s is None or a.get("object_ids") is None:
        return None
    o, p = s["objects"], s["points_per_object"]
    pts = a.get("object_points")
    return SemanticTable(ids=a["object_ids"], category=a["object_category"], raw_names=list(s["raw_names"]),
                         region=a["object_region"], aabb=a["object_aabb"],
                         points=(pts.reshape(o, p, 3) if pts is not None else np.zeros((o, 0, 3), np.float32)),
                         categories=list(s["categories"]), source_ids=a.get("object_source_ids"))
