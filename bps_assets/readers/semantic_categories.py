"""Category sets of semantic annotations, read from ``data_manifests/semantics/categories.json``.

``mpcat40()`` is the category list every packed scene's object table indexes (Matterport3D's
mpcat40, 0 void ... 40 misc, 41 unlabeled); ``map_raw(name)`` maps an annotation's raw label to
an mpcat40 index (exact, lower-cased, then its last word; -1 when nothing matches);
``objectnav_hm3d()`` is the six HM3D ObjectNav goal categories with habitat-lab's task ids;
``goal_categories(name)`` a named goal set ("hm3d", "mp3d": habitat's 21, "all": fixed ids).
``read_label_table(path)`` reads a habitat-sim mapping table (``matterport_category_mappings.tsv``,
``hm3dsem_category_mappings.tsv``: a header row naming columns, ``raw_category`` and ``mpcat40``
among them; tab-separated, or 4 spaces as in the Matterport file); ``label_mapper(path)`` is
``map_raw``, or with a table exact labels only (then lower-cased; else -1). Bad table:
``DatasetError`` naming the file and line. The file names its sources; no category name is
written in code.
"""
from __future__ import annotations

import os
from functools import lru_cache
from typing import Callable

from ..errors import DatasetError
from ..json_input import parse_json
from ..manifests_location import manifests_dir

CATEGORIES_FILE = "semantics/categories.json"


@lru_cache(maxsize=1)
def _load() -> dict:
    p = manifests_dir() / CATEGORIES_FILE
    try:
        d = parse_json(p.read_bytes(), p, prefix="not a category file", error=DatasetError, encoding="utf-8")
        assert isinstance(d["mpcat40"], list) and isinstance(d["raw_to_mpcat40"], dict)
        assert isinstance(d["objectnav_hm3d"], dict)
    except FileNotFoundError:
        raise DatasetError(p, "category file not found") from None
    except (OSError, ValueError, KeyError, TypeError, AssertionError) as e:
        raise DatasetError(p, f"not a category file ({type(e).__name__}: {e})") from None
    return d


def mpcat40() -> list[str]:
    """The mpcat40 names, index = mpcat40 number."""
    return list(_load()["mpcat40"])


def objectnav_hm3d() -> dict[str, int]:
    """HM3D ObjectNav goal categories -> habitat-lab task category id."""
    return dict(_load()["objectnav_hm3d"])


GOAL_SETS = ("hm3d", "mp3d", "all")   # ObjectNav's named category sets (``goal_categories``)


def goal_categories(name: str) -> dict[str, int]:
    """ObjectNav goal categories -> task id of a named set: "hm3d" (habitat-lab's six HM3D ones),
    "mp3d" (its 21 MP3D ones), "all" (every mpcat40 class but the file's ``not_objects``,
    numbered in mpcat40 order: the same ids whatever the scenes). Another name: ConfigError."""
    d = _load()
    if name == "all":
        skip = set(d.get("not_objects", ()))
        return {n: i for i, n in enumerate(n for n in d["mpcat40"] if n not in skip)}
    if name not in GOAL_SETS or f"objectnav_{name}" not in d:
        from ..errors import ConfigError
        raise ConfigError(None, f"goal categories {name!r}: choose from {', '.join(GOAL_SETS)}")
    return dict(d[f"objectnav_{name}"])


@lru_cache(maxsize=4096)
def map_raw(name: str) -> int:
    """mpcat40 index of a raw annotation label, or -1 when the table has no match."""
    d = _load()
    table, names = d["raw_to_mpcat40"], d["mpcat40"]
    key = name.strip()
    for k in (key, key.lower(), key.lower().split()[-1] if key.split() else ""):
        if k in table:
            return names.index(table[k])
        if k in names:
            return names.index(k)
    return -1


def builtin_table_digest() -> str:
    """SHA-256 of the built-in table as ``map_raw`` uses it (``raw_to_mpcat40`` and the mpcat40
    list): part of the preprocess fingerprint of scenes whose raw labels it maps."""
    from ..hashing import settings_fingerprint

    d = _load()
    return settings_fingerprint({"mpcat40": d["mpcat40"], "raw_to_mpcat40": d["raw_to_mpcat40"]})


MAX_TABLE_BYTES = 16 << 20
TABLE_COLUMNS = ("raw_category", "mpcat40")


def _fields(line: str, sep: str) -> list[str]:
    return [f.strip() for f in line.split(sep)]


@lru_cache(maxsize=4)
def _read_table(path: str, stamp: tuple) -> dict[str, int]:
    names = mpcat40()
    try:
        if os.path.getsize(path) > MAX_TABLE_BYTES:
            raise DatasetError(path, f"label table larger than {MAX_TABLE_BYTES} bytes")
        with open(path, "rb") as f:
            text = f.read().decode("utf-8-sig")
    except (OSError, UnicodeError) as e:
        raise DatasetError(path, f"cannot read the label table ({type(e).__name__}: {e})") from None
    lines = text.splitlines()
    head = lines[0] if lines else ""
    sep = "\t" if "\t" in head else "    "
    cols = _fields(head, sep)
    if not all(c in cols for c in TABLE_COLUMNS):
        raise DatasetError(path, f"line 1: a label table's header names the columns {' and '.join(TABLE_COLUMNS)} "
                                 f"(habitat-sim's *_category_mappings.tsv); this one has {cols[:6]}")
    ri, mi = cols.index(TABLE_COLUMNS[0]), cols.index(TABLE_COLUMNS[1])
    out: dict[str, int] = {}
    for no, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        f = _fields(line, sep)
        if len(f) != len(cols):
            raise DatasetError(path, f"line {no}: {len(f)} fields, the header has {len(cols)}")
        raw, cat = f[ri], f[mi]
        if cat not in names:
            raise DatasetError(path, f"line {no}: {cat!r} is not an mpcat40 name")
        if raw in out:
            raise DatasetError(path, f"line {no}: raw_category {raw!r} appears twice")
        out[raw] = names.index(cat)
    if not out:
        raise DatasetError(path, "the label table has no rows")
    return out


def read_label_table(path: str | os.PathLike) -> dict[str, int]:
    """raw label -> mpcat40 index of a habitat-sim category mapping table (module docstring)."""
    p = os.fspath(path)
    try:
        st = os.stat(p)
    except OSError as e:
        raise DatasetError(p, f"cannot read the label table ({e.strerror or e})") from None
    return _read_table(p, (st.st_mtime_ns, st.st_size))


def label_mapper(path: str | os.PathLike = "") -> Callable[[str], int]:
    """``map_raw`` when ``path`` is empty, else the lookup in that file's table."""
    if not path:
        return map_raw
    table = read_label_table(path)
    lower = {}
    for k, v in table.items():
        lower.setdefault(k.lower(), v)

    def lookup(name: str) -> int:
        key = name.strip()
        return table.get(key, lower.get(key.lower(), -1))
    return lookup
