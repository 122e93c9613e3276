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
from ..readers.semantic_files import PAIR_SUFFIXES, candidates

LAYOUTS = ("gibson", "mp3d")
ORDER_SPLIT = {"gibson": "tiny", "mp3d": "benchmark"}  # the split whose lists give the order
# whose object-annotation pair a layout's scans get: gibson -> HM3D-Semantics (semantic.write_hm3d),
# mp3d -> MP3D (semantic.write_mp3d); the files are named by the readers' rule (PAIR_SUFFIXES)
SEMANTIC_FORMAT = {"gibson": "hm3d", "mp3d": "mp3d"}
SEMANTIC_SUFFIXES = {layout: PAIR_SUFFIXES[f] for layout, f in SEMANTIC_FORMAT.items()}


def semantic_paths(scene_path: str | os.PathLike, layout: str) -> list[Path]:
    """[mesh, table]: the paths of the annotation pair of ``layout``'s format beside the scan
    ``scene_path``, where ``readers.semantic_files.find_semantic`` looks for it."""
    src = next(c for c in candidates(scene_path) if c.format == SEMANTIC_FORMAT[layout])
    return [Path(src.mesh), Path(src.table)]


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
