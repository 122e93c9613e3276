"""Objects of a packed scene's semantic section drawn on the navmesh floor map
(``bps-assets preview --semantic SCENE.bps``).

Each object is its AABB's footprint (x right, z down, as the floor map), outlined in its
category's colour on the panel of the floor it stands on (the highest floor at most 0.5 m
below its box's bottom), with the category name for the six ObjectNav goal categories. Walls,
floors and ceilings (mpcat40 1, 2, 17) are left out: they would cover the map. The map itself
is ``preview.render``; this module only adds the objects and a per-category count line.
"""
from __future__ import annotations

import io
import os

import numpy as np

from ..container import atomic_write
from ..readers.semantic_categories import objectnav_hm3d
from ..semantics import SemanticTable
from .grid import NavMesh
from .preview import _PALETTE, floor_levels, render

SKIP = {"wall", "floor", "ceiling", "void", "unlabeled"}


def write_semantic_preview(nav: NavMesh, table: SemanticTable, path: str | os.PathLike,
                           overwrite: bool = False, max_size: int = 1600) -> dict:
    """Write the floor map with ``table``'s objects to ``path`` (PNG, atomically); returns
    ``{"width", "height", "floors", "objects"}`` (objects drawn)."""
    from PIL import Image, ImageDraw

    img, n_f = render(nav, max_size)
    levels = floor_levels(nav)
    pad = 2
    _, d, w = nav.shape
    panel_w = (img.shape[1] - (n_f + 1) * pad) // n_f
    scale = panel_w / max(w, 1)
    im = Image.fromarray(img)
    draw = ImageDraw.Draw(im)
    goals = set(objectnav_hm3d())
    drawn = 0
    counts: dict[str, int] = {}
    for i in range(len(table)):
        name = table.category_name(i)
        box = table.aabb[i]
        if name in SKIP or not np.isfinite(box).all():
            continue
        f = int(np.clip(np.searchsorted(levels, box[1] + 0.5, side="right") - 1, 0, n_f - 1))
        x0 = pad + f * (panel_w + pad)
        y0 = pad + 14

        def px(x, z):
            return (x0 + (x - nav.origin[0]) / nav.cell_size * scale, y0 + (z - nav.origin[1]) / nav.cell_size * scale)
        a, b = px(box[0], box[2]), px(box[3], box[5])
        colour = tuple(int(c) for c in _PALETTE[max(int(table.category[i]), 0) % len(_PALETTE)])
        draw.rectangle([a, b], outline=colour, width=2 if name in goals else 1)
        if name in goals:
            draw.text((a[0] + 2, a[1] + 1), name, fill=(255, 255, 255))
        counts[name] = counts.get(name, 0) + 1
        drawn += 1
    line = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    draw.text((pad + 2, 1), f"objects: {line}"[: max(10, im.width // 6)], fill=(0, 0, 0))
    if max(im.size) > max_size:
        k = max_size / max(im.size)
        im = im.resize((max(1, int(im.width * k)), max(1, int(im.height * k))), Image.Resampling.BOX)
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    atomic_write(path, lambda fh: fh.write(buf.getvalue()), overwrite=overwrite)
    return {"width": im.width, "height": im.height, "floors": n_f, "objects": drawn}
