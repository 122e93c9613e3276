"""Objects of a packed scene's semantic section drawn on the navmesh floor map
(``bps-assets preview --semantic SCENE.bps``).

Each object is its AABB's footprint (x right, z down, as the floor map), outlined in its
category's colour (``category_colours``: one colour per category of a legend, fixed for the
mpcat40 names) on the panel of the floor it stands on (the highest floor at most 0.5 m above
its box's bottom and not above its top: a ceiling lamp is the floor's below), labelled with its
category name (``(unmatched)``, grey, for an object of no category; the six ObjectNav goal
categories outlined thicker). Walls, floors, ceilings are
left out. Under the map: a scale bar and a legend of the categories drawn, colour and count.
The map is ``preview.render`` with a grey floor (no island colours a category could match).
"""
from __future__ import annotations

import colorsys
import io
import os
import zlib

import numpy as np

from ..container import atomic_write
from ..readers.semantic_categories import mpcat40, objectnav_hm3d
from ..semantics import SemanticTable
from .grid import NavMesh
from .preview import floor_levels, render
from .topdown import scale_bar_metres

SKIP = {"wall", "floor", "ceiling", "void", "unlabeled"}
UNMATCHED = "(unmatched)"        # an object whose raw label has no category (category -1)
UNMATCHED_RGB = (128, 128, 128)
RIM_M = 0.5   # m of map around the navigable grid: objects against the outer walls (a TV, a cupboard) lie there


def _palette(n: int = 64) -> np.ndarray:
    """``n`` saturated colours, each as far from those before it as the candidates allow (greedy
    farthest point over an HSV grid), none near the map's greys (floor, obstacles, unmatched)."""
    cand = np.array([colorsys.hsv_to_rgb(h / 48, s, v) for h in range(48) for s in (1.0, 0.7, 0.45)
                     for v in (1.0, 0.8)]) * 255
    luma = cand @ np.array([0.2126, 0.7152, 0.0722])   # mid luminance: seen on the dark and the light grey
    cand = np.round(cand[(np.linalg.norm(cand - 60, axis=1) > 120) & (np.linalg.norm(cand - 228, axis=1) > 90)
                         & (luma > 80) & (luma < 200)])
    pick, dist = [0], np.linalg.norm(cand - cand[0], axis=1)
    for _ in range(n - 1):
        pick.append(int(dist.argmax()))
        dist = np.minimum(dist, np.linalg.norm(cand - cand[pick[-1]], axis=1))
    return cand[pick].astype(np.uint8)


PALETTE = _palette()


def category_colours(names) -> dict[str, tuple]:
    """Each of ``names`` (a legend's categories) -> an RGB colour, no two alike while the palette
    lasts: an mpcat40 name always its own (the same in every scene and run; the six ObjectNav goal
    categories the first, most distinct colours), another name the first free colour from a slot
    fixed by its CRC-32; ``(unmatched)`` grey."""
    goals = list(objectnav_hm3d())
    fixed = {n: i for i, n in enumerate(goals + [n for n in mpcat40() if n not in goals and n not in SKIP])}
    out, used = {}, set()
    for n in names:
        if n in fixed:
            out[n] = fixed[n]
            used.add(fixed[n])
    for n in sorted(set(names) - set(fixed) - {UNMATCHED}):
        k = len(fixed) + zlib.crc32(n.encode()) % (len(PALETTE) - len(fixed))
        for step in range(len(PALETTE)):
            if (k + step) % len(PALETTE) not in used:
                k = (k + step) % len(PALETTE)
                break
        out[n] = k
        used.add(k)
    cols = {n: tuple(int(c) for c in PALETTE[k % len(PALETTE)]) for n, k in out.items()}
    return {**cols, **({UNMATCHED: UNMATCHED_RGB} if UNMATCHED in names else {})}


def write_semantic_preview(nav: NavMesh, table: SemanticTable, path: str | os.PathLike,
                           overwrite: bool = False, max_size: int = 1600) -> dict:
    """Write the floor map with ``table``'s objects to ``path`` (PNG, atomically); returns
    ``{"width", "height", "floors", "objects"}`` (objects drawn), ``labels`` (boxes labelled),
    ``outside`` (objects wholly off their floor's panel, not drawn; a box is clipped to its panel),
    ``legend`` (``[(category, count, rgb)]``), ``metres_per_pixel`` and the scale bar's
    ``scale_bar_m`` / ``scale_bar_px`` / ``scale_bar_row`` (the bar's first pixel row, black)."""
    from PIL import Image, ImageDraw

    rim = int(np.ceil(RIM_M / nav.cell_size))
    img, n_f = render(nav, max_size, islands=False, margin=rim)
    levels = floor_levels(nav)
    pad = 2
    _, d, w = nav.shape
    d, w = d + 2 * rim, w + 2 * rim
    panel_w = (img.shape[1] - (n_f + 1) * pad) // n_f
    scale = panel_w / max(w, 1)
    im = Image.fromarray(img)
    draw = ImageDraw.Draw(im)
    goals = set(objectnav_hm3d())
    drawn = labels = outside = 0
    counts: dict[str, int] = {}
    colours = category_colours({table.category_name(i) or UNMATCHED for i in range(len(table))} - SKIP)
    for i in range(len(table)):
        name = table.category_name(i) or UNMATCHED
        box = table.aabb[i]
        if name in SKIP or not np.isfinite(box).all():
            continue
        # not above its top: a lamp hanging under the next floor's slab is the lower floor's
        f = int(np.clip(np.searchsorted(levels, min(box[1] + 0.5, box[4]), side="right") - 1, 0, n_f - 1))
        x0 = pad + f * (panel_w + pad)
        y0 = pad + 14

        def px(x, z):
            return (x0 + ((x - nav.origin[0]) / nav.cell_size + rim) * scale,
                    y0 + ((z - nav.origin[1]) / nav.cell_size + rim) * scale)
        a, b = px(box[0], box[2]), px(box[3], box[5])
        # clipped to its floor's panel (past it lies the next floor's); wholly off it (more than
        # RIM_M past the navigable grid): counted, not drawn
        a = (max(a[0], x0), max(a[1], y0))
        b = (min(b[0], x0 + panel_w - 1), min(b[1], y0 + d * scale - 1))
        if a[0] > b[0] or a[1] > b[1]:
            outside += 1
            continue
        colour = colours[name]
        draw.rectangle([a, b], outline=colour, width=2 if name in goals else 1)
        tag = draw.textbbox((a[0] + 2, a[1] + 2), name)
        draw.rectangle([tag[0] - 1, tag[1] - 1, tag[2] + 1, tag[3] + 1], fill=(20, 20, 20))
        draw.text((a[0] + 2, a[1] + 2), name, fill=(255, 255, 255))
        labels += 1
        counts[name] = counts.get(name, 0) + 1
        drawn += 1
    n_un = counts.get(UNMATCHED, 0)
    notes = [f"{n_un} unmatched"] * bool(n_un) + [f"{outside} off the map, not drawn"] * bool(outside)
    draw.text((pad + 2, 1), f"{drawn} objects in {len(counts) - bool(n_un)} categories"
              + (f" ({', '.join(notes)})" if notes else ""), fill=(0, 0, 0))
    mpp = nav.cell_size / scale
    if max(im.size) > max_size:
        k = max_size / max(im.size)
        im = im.resize((max(1, int(im.width * k)), max(1, int(im.height * k))), Image.Resampling.BOX)
        mpp /= im.width / img.shape[1]
    legend = [(n, counts[n], colours[n]) for n in sorted(counts)]
    im, bar = _foot(im, mpp, legend)
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    atomic_write(path, lambda fh: fh.write(buf.getvalue()), overwrite=overwrite)
    return {"width": im.width, "height": im.height, "floors": n_f, "objects": drawn, "labels": labels, "outside": outside,
            "legend": legend, "metres_per_pixel": mpp, **bar}


def _foot(im, mpp: float, legend: list):
    """``im`` with a scale bar and the legend rows under it; (image, the bar's figures)."""
    from PIL import Image, ImageDraw

    row_h, swatch = 14, 10
    probe = ImageDraw.Draw(im)
    rows, x = [[]], 4
    for name, n, colour in legend:   # swatch + "name n", wrapped at the image's width
        w = swatch + 4 + int(probe.textlength(f"{name} {n}")) + 12
        if x + w > im.width and rows[-1]:
            rows.append([])
            x = 4
        rows[-1].append((x, name, n, colour))
        x += w
    out = Image.new("RGB", (im.width, im.height + row_h * (1 + len(rows)) + 4), (250, 250, 250))
    out.paste(im, (0, 0))
    d = ImageDraw.Draw(out)
    metres = scale_bar_metres(mpp, max(8, im.width // 4))
    px, y = max(1, round(metres / mpp)), im.height + 4
    d.rectangle([4, y, 4 + px - 1, y + 3], fill=(0, 0, 0))
    d.text((10 + px, y - 3), f"{metres:g} m ({mpp:.4f} m/px)", fill=(0, 0, 0))
    for k, row in enumerate(rows):
        ry = im.height + row_h * (k + 1) + 4
        for x, name, n, colour in row:
            d.rectangle([x, ry + 1, x + swatch - 1, ry + swatch], fill=colour, outline=(0, 0, 0))
            d.text((x + swatch + 4, ry), f"{name} {n}", fill=(0, 0, 0))
    return out, {"scale_bar_m": metres, "scale_bar_px": px, "scale_bar_row": y}
