"""Category sets of semantic annotations, read from ``data_manifests/semantics/categories.json``.

``mpcat40()`` is the category list every packed scene's object table indexes (Matterport3D's
mpcat40, 0 void ... 40 misc, 41 unlabeled); ``map_raw(name)`` maps an annotation's raw label to
an mpcat40 index (exact, lower-cased, then its last word; -1 when nothing matches);
``objectnav_hm3d()`` is the six HM3D ObjectNav goal categories with habitat-lab's task ids;
``goal_categories(name)`` a named goal set ("hm3d", "mp3d": habitat's 21, "all": fixed ids).
The file names its sources; no category name is written in code.
"""
from __future__ import annotations

from functools import lru_cache

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
