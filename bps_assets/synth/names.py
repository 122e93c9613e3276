"""Synthetic scans carry real dataset scene names, read from ``data_manifests/``.

The rule: position i takes the next *val* scene when
i % 4 == 1 and the next *train* scene otherwise; when one list runs out the other continues,
then the split's test scenes, then the rest of the manifest's scenes in sorted order.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from ..errors import ConfigError, DatasetError
from ..manifests_location import manifests_dir

LAYOUTS = ("gibson", "mp3d")
ORDER_SPLIT = {"gibson": "tiny", "mp3d": "benchmark"}  # the split whose lists give the order
# the object-annotation pair beside a scan, per layout, as the real datasets name it (the scan's
# stem + suffix): gibson -> HM3D-Semantics (semantic.write_hm3d), mp3d -> MP3D (semantic.write_mp3d)
SEMANTIC_SUFFIXES = {"gibson": (".semantic.glb", ".semantic.txt"), "mp3d": ("_semantic.ply", ".house")}


def semantic_paths(scene_path: str | os.PathLike, layout: str) -> list[Path]:
    """The annotation pair's paths beside the scan ``scene_path``: its name up to the first dot
    + each of ``SEMANTIC_SUFFIXES[layout]``, in that order."""
    p = Path(scene_path)
    stem = p.name.split(".")[0]
    return [p.with_name(stem + suffix) for suffix in SEMANTIC_SUFFIXES[layout]]


def _check_layout(layout: str):
    if layout not in LAYOUTS:
        raise ConfigError(None, f"unknown layout {layout!r} (choose from {', '.join(LAYOUTS)})")


def _manifest(layout: str) -> dict:
    p = manifests_dir() / f"{layout}.json"
    try:
        with open(p, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise DatasetError(p, "dataset manifest not found") from None
    except json.JSONDecodeError as e:
        raise DatasetError(p, f"invalid JSON: {e}") from None


def scene_names(layout: str, n: int | None = None) -> list[tuple[str, str]]:
    """[(name, split)] in generation order (see the module docstring for the rule)."""
    _check_layout(layout)
    man = _manifest(layout)
    try:
        sp = man["splits"][ORDER_SPLIT[layout]]
        train, val, test = list(sp["train"]), list(sp["val"]), list(sp["test"])
    except (KeyError, TypeError):
        raise DatasetError(manifests_dir() / f"{layout}.json",
                           f"no splits.{ORDER_SPLIT[layout]}.train/val/test lists") from None
    out: list[tuple[str, str]] = []
    ti = vi = 0
    while ti < len(train) or vi < len(val):
        want_val = len(out) % 4 == 1
        if (want_val and vi < len(val)) or ti >= len(train):
            out.append((val[vi], "val"))
            vi += 1
        else:
            out.append((train[ti], "train"))
            ti += 1
    out += [(t, "test") for t in test]
    seen = {name for name, _ in out}
    others = man.get("scenes") or {}
    out += [(s, "other") for s in sorted(others) if s not in seen]
    if n is not None:
        if n > len(out):
            raise ConfigError(None, f"{layout} has {len(out)} scene names in its manifest; asked for {n}")
        out = out[:n]
    return out


def scene_relpath(layout: str, name: str) -> str:
    """Where scene ``name`` goes inside the output folder: ``gibson/NAME.glb`` or
    ``mp3d/NAME/NAME.glb``."""
    return f"gibson/{name}.glb" if layout == "gibson" else f"mp3d/{name}/{name}.glb"
