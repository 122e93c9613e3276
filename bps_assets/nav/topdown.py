"""Top-down maps of a NavMesh with episodes on them (habitat's TopDownMap measure, from positions).

Contract (checked by tests/test_topdown.py): one panel per shown floor (``preview.floor_levels``;
a point belongs to the highest floor at most 0.5 m above it), side by side, below a header strip
of ``HEADER`` px. Panel ``f``'s pixel (u, v) covers x in [x0 + u*mpp, x0 + (u+1)*mpp) and z in
[z0 + v*mpp, z0 + (v+1)*mpp) (x right, z down, habitat's orientation); panel ``f`` starts at
image column ``MARGIN + f * (panel_w + GAP)``. ``mpp`` (metres per pixel) is the stated one, or,
when None, the smallest of 0.01/0.02/0.05 x 10^k that fits ``max_size``. ``Canvas.image()``
adds a footer with the scale bar (its length in px is exactly its metres / mpp), the m/px and a
legend of what was drawn. Drawing is from recorded positions (no renderer, nothing batched).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from .paths import shortest_path
from .indoor import episode_islands, is_indoor
from .preview import _PALETTE, PLAIN, floor_levels

HEADER, MARGIN, GAP = 14, 4, 6
NAVIGABLE, BLOCKED, BACKGROUND = PLAIN, (88, 88, 88), (250, 250, 250)
# kind -> (colour, legend label, glyph); the drawing order in a legend
KINDS = {
    "shortest_path": ((20, 160, 60), "shortest path", "line"),
    "agent_path": ((30, 100, 240), "agent path", "line"),
    "start": ((30, 100, 240), "start", "square"),
    "goal": ((220, 30, 30), "goal", "disc"),
    "view_point": ((250, 150, 0), "view point", "dot"),
    "agent": ((250, 210, 0), "agent", "triangle"),
}
_NICE = (0.01, 0.02, 0.05)
MAX_PIXELS = 64_000_000   # a map's cap, checked before anything is allocated
FLOOR_BAND = 1.0   # m: spans higher than this above their floor (wall and cupboard tops) are not drawn


@dataclass(frozen=True)
class MapOptions:
    """How a top-down map is laid out; ``metres_per_pixel=None`` fits ``max_size``."""

    metres_per_pixel: float | None = None
    max_size: int = 1600          # largest side of all panels together (px), when mpp is None
    margin_m: float = 0.25        # around the navigable bounds
    floors: tuple | None = None   # floor indices to show (None: all)
    islands: bool = False         # colour the islands, the episodes' ones grey, with a legend (``preview``)
    line_width: int = 2


DEFAULTS = MapOptions()


def nice_mpp(extent_m: float, pixels: int) -> float:
    """The smallest of 0.01/0.02/0.05 x 10^k metres per pixel with extent_m / mpp <= pixels."""
    need = max(extent_m, 1e-6) / max(pixels, 1)
    k = math.floor(math.log10(need)) - 1
    while True:
        for base in _NICE:
            m = round(base * 10 ** (k + 2), 12)
            if m >= need:
                return m
        k += 1


class TopDownMap:
    """The frame and the navigable-area picture of one navmesh; ``canvas()`` to draw on it."""

    def __init__(self, nav, options: MapOptions = DEFAULTS):
        self.nav, self.options = nav, options
        self.levels = floor_levels(nav)
        self.shown = list(range(len(self.levels))) if options.floors is None else [int(f) for f in options.floors]
        bad = [f for f in self.shown if not 0 <= f < len(self.levels)]
        if bad or not self.shown:
            raise ConfigError(nav.source or None,
                              f"floors {options.floors}: the navmesh has {len(self.levels)} floor(s)")
        lo, hi = nav.bounds()
        m = options.margin_m
        ext_x, ext_z = hi[0] - lo[0] + 2 * m, hi[2] - lo[2] + 2 * m
        F = len(self.shown)
        if options.metres_per_pixel is None:
            budget = options.max_size - 2 * MARGIN - (F - 1) * GAP
            self.mpp = max(nice_mpp(ext_x, budget // F), nice_mpp(ext_z, options.max_size - HEADER - MARGIN))
        else:
            self.mpp = float(options.metres_per_pixel)
            if not self.mpp > 0:
                raise ConfigError(None, f"metres_per_pixel={options.metres_per_pixel}: must be > 0")
        self.x0, self.z0 = float(lo[0] - m), float(lo[2] - m)
        self.panel_w = max(1, int(math.ceil(ext_x / self.mpp)))
        self.panel_h = max(1, int(math.ceil(ext_z / self.mpp)))
        self.width = 2 * MARGIN + F * self.panel_w + (F - 1) * GAP
        self.height = HEADER + self.panel_h + MARGIN
        if self.width * self.height > MAX_PIXELS:
            raise ConfigError(nav.source or None, f"a map of {self.width} x {self.height} px at {self.mpp:g} "
                                                  f"m/px is over the cap of {MAX_PIXELS} pixels: use a larger "
                                                  "metres per pixel")
        self._base = None
        # islands episodes use (nav.indoor): drawn grey, the marks' colours stay clear on them
        self.episode_islands = episode_islands(nav) if options.islands else None

    def island_colour(self, i: int) -> tuple:
        """Map colour of island ``i``: grey for the episodes' islands (every island when they
        use all), else a light palette colour."""
        used = self.episode_islands
        if used is None or i in used:
            return NAVIGABLE
        return tuple(int(x) for x in (_PALETTE[i % len(_PALETTE)] * 0.45 + 135))

    # ------------------------------------------------------------------ frame
    def floor_of(self, points) -> np.ndarray:
        """Floor index of each point [N, 3] (the highest floor at most 0.5 m above it)."""
        y = np.asarray(points, float).reshape(-1, 3)[:, 1]
        return np.clip(np.searchsorted(self.levels, y + 0.5, side="right") - 1, 0, len(self.levels) - 1)

    def to_image(self, points, floors=None) -> tuple[np.ndarray, np.ndarray]:
        """(continuous image coordinates [N, 2] (u right, v down; pixel i spans [i, i+1)), shown
        [N] bool: False for points on a floor not drawn)."""
        p = np.asarray(points, float).reshape(-1, 3)
        f = self.floor_of(p) if floors is None else np.asarray(floors).reshape(-1)
        slot_of = np.full(len(self.levels), -1, np.int64)
        slot_of[self.shown] = np.arange(len(self.shown))
        slot = slot_of[np.asarray(f, np.int64)]
        u = MARGIN + np.maximum(slot, 0) * (self.panel_w + GAP) + (p[:, 0] - self.x0) / self.mpp
        v = HEADER + (p[:, 2] - self.z0) / self.mpp
        return np.stack([u, v], 1), slot >= 0

    def pixel_of(self, points) -> np.ndarray:
        """Integer (column, row) [N, 2] of the pixel holding each point."""
        return np.floor(self.to_image(points)[0]).astype(np.int64)

    # ------------------------------------------------------------------ picture
    def base(self) -> np.ndarray:
        """RGB uint8 [height, width, 3]: navigable area per floor (the top-most span of a cell on
        that floor, up to ``FLOOR_BAND`` above it), the rest dark; labels come in ``Canvas.image``."""
        if self._base is not None:
            return self._base
        nav = self.nav
        img = np.full((self.height, self.width, 3), BACKGROUND, np.uint8)
        lvl = self.floor_of(nav.span_pos)
        _, D, W = nav.shape
        xs = self.x0 + (np.arange(self.panel_w) + 0.5) * self.mpp
        zs = self.z0 + (np.arange(self.panel_h) + 0.5) * self.mpp
        cc = np.floor((xs - nav.origin[0]) / nav.cell_size).astype(np.int64)
        rr = np.floor((zs - nav.origin[1]) / nav.cell_size).astype(np.int64)
        okc, okr = (cc >= 0) & (cc < W), (rr >= 0) & (rr < D)
        for slot, f in enumerate(self.shown):
            cell = np.full((D, W), -1, np.int64)
            m = np.nonzero((lvl == f) & (nav.span_pos[:, 1] <= self.levels[f] + FLOOR_BAND))[0]
            m = m[np.argsort(nav.span_pos[m, 1], kind="stable")]   # the top-most span wins
            r, c = nav.span_lrc[m, 1], nav.span_lrc[m, 2]
            cell[r, c] = nav.span_island[m]
            isl = np.full((self.panel_h, self.panel_w), -1, np.int64)
            isl[np.ix_(okr, okc)] = cell[np.ix_(rr[okr], cc[okc])]
            panel = np.empty(isl.shape + (3,), np.uint8)
            panel[:] = BLOCKED
            walk = isl >= 0
            panel[walk] = NAVIGABLE
            if self.options.islands:
                for i in np.unique(isl[walk]):
                    panel[isl == i] = self.island_colour(int(i))
            x = MARGIN + slot * (self.panel_w + GAP)
            img[HEADER:HEADER + self.panel_h, x:x + self.panel_w] = panel
        self._base = img
        return img

    def canvas(self) -> "Canvas":
        """A fresh picture of the navigable area to draw episodes on."""
        return Canvas(self)


class Canvas:
    """A map picture being drawn on: ``path``, ``point``, ``episode``; ``image()`` adds the
    header labels, scale bar and legend. ``copy()`` keeps what was drawn (for video frames)."""

    def __init__(self, tdm: TopDownMap, _im=None, _used=None):
        from PIL import Image

        self.map = tdm
        self.im = _im if _im is not None else Image.fromarray(tdm.base())
        self.used: list = list(_used or [])

    def copy(self) -> "Canvas":
        """An independent canvas with everything drawn so far."""
        return Canvas(self.map, self.im.copy(), self.used)

    def _note(self, kind):
        if kind not in KINDS:
            raise ConfigError(None, f"unknown map mark {kind!r}: one of {', '.join(KINDS)}")
        if kind not in self.used:
            self.used.append(kind)

    def path(self, points, kind: str = "agent_path", width: int | None = None, floor: int | None = None):
        """A polyline [K, 3]; broken where it changes floor or leaves the shown floors. ``floor``:
        every point drawn on that floor's panel whatever its height (habitat's TopDownMap draws
        the agent so, on the map of its start's height)."""
        from PIL import ImageDraw

        self._note(kind)
        p = np.asarray(points, float).reshape(-1, 3)
        if len(p) == 0:
            return self
        fl = self.map.floor_of(p) if floor is None else np.full(len(p), int(floor))
        uv, shown = self.map.to_image(p, fl)
        d = ImageDraw.Draw(self.im)
        col, w = KINDS[kind][0], width or self.map.options.line_width
        start = 0
        for i in range(1, len(p) + 1):
            if i == len(p) or fl[i] != fl[start] or not shown[i]:
                seg = uv[start:i] - 0.5    # PIL's coordinate i is pixel i's centre
                if shown[start] and len(seg) > 1:
                    d.line([tuple(q) for q in seg], fill=col, width=w, joint="curve")
                elif shown[start]:
                    d.point(tuple(seg[0]), fill=col)
                start = i
        return self

    def point(self, p, kind: str = "goal", yaw: float | None = None, size: float = 4.0, floor: int | None = None):
        """A marker at [3]; ``kind="agent"`` draws a triangle pointing along ``yaw`` (habitat's
        rotation about +Y: forward is (-sin yaw, 0, -cos yaw)); other kinds with a ``yaw`` get a
        heading tick of 2.5 ``size`` along it (ImageNav's goal camera). ``floor``: as ``path``'s."""
        from PIL import ImageDraw

        self._note(kind)
        uv, shown = self.map.to_image(np.asarray(p, float).reshape(1, 3), None if floor is None else [int(floor)])
        if not shown[0]:
            return self
        u, v = uv[0] - 0.5
        col, _, glyph = KINDS[kind]
        d = ImageDraw.Draw(self.im)
        s = size
        if yaw is not None and glyph != "triangle":
            fx, fz = -math.sin(float(yaw)), -math.cos(float(yaw))
            d.line([(u, v), (u + 2.5 * s * fx, v + 2.5 * s * fz)], fill=col, width=2)
        if glyph == "square":
            d.rectangle([u - s, v - s, u + s, v + s], fill=col, outline=(255, 255, 255))
        elif glyph == "disc":
            d.ellipse([u - s, v - s, u + s, v + s], fill=col, outline=(255, 255, 255))
        elif glyph == "dot":
            d.ellipse([u - s / 2, v - s / 2, u + s / 2, v + s / 2], fill=col)
        else:
            a = 0.0 if yaw is None else float(yaw)
            fx, fz = -math.sin(a), -math.cos(a)   # forward in x/z = image u/v
            pts = [(u + 1.6 * s * fx, v + 1.6 * s * fz), (u - s * fx - s * fz, v - s * fz + s * fx),
                   (u - s * fx + s * fz, v - s * fz - s * fx)]
            d.polygon(pts, fill=col, outline=(0, 0, 0))
        return self

    def episode(self, start=None, goal=None, shortest=None, agent_path=None, view_points=None,
                goal_yaw: float | None = None):
        """One episode: shortest path (points, or True to compute it on the navmesh), the agent's
        path, view points, then start and goal(s) on top (``goal``: [3], or [K, 3] for several
        goal objects; ``goal_yaw``: a heading tick on it)."""
        goals = None if goal is None else np.asarray(goal, float).reshape(-1, 3)
        if shortest is True and start is not None and goals is not None:
            shortest = shortest_path(self.map.nav, start, goals[0])
        if shortest is not None and shortest is not False:
            self.path(shortest, "shortest_path")
        if agent_path is not None:
            self.path(agent_path, "agent_path")
        for vp in ([] if view_points is None else np.asarray(view_points, float).reshape(-1, 3)):
            self.point(vp, "view_point", size=2)
        if start is not None:
            self.point(start, "start")
        for g in () if goals is None else goals:
            self.point(g, "goal", yaw=goal_yaw)
        return self

    def image(self, legend: bool = True, scale_bar: bool = True, kinds=None, title: str | None = None):
        """The finished PIL image: floor labels, and a footer with the scale bar and a legend of
        ``kinds`` (default: what was drawn)."""
        from PIL import Image, ImageDraw, ImageFont

        tdm = self.map
        font = ImageFont.load_default()
        im = self.im.copy()
        d = ImageDraw.Draw(im)
        for slot, f in enumerate(tdm.shown):
            label = f"floor {f}: y={round(float(tdm.levels[f]), 2) + 0.0:.2f} m" if title is None else title
            room = (tdm.panel_w if slot < len(tdm.shown) - 1 else im.width - 2 * MARGIN - slot * (tdm.panel_w + GAP)) - 2
            d.text((MARGIN + slot * (tdm.panel_w + GAP) + 1, 1), fit_text(d, label, room, font), fill=(0, 0, 0), font=font)
        if not (legend or scale_bar):
            return im
        items = []   # (width px, draw function)
        if scale_bar:
            metres = scale_bar_metres(tdm.mpp, max(8, tdm.width // 3))
            px = int(round(metres / tdm.mpp))
            label = f"{metres:g} m  ({tdm.mpp:.3g} m/px)"

            def bar(d, x, y, px=px, label=label):
                d.rectangle([x, y + 4, x + px - 1, y + 7], fill=(0, 0, 0))
                d.text((x + px + 4, y), label, fill=(0, 0, 0), font=font)
            items.append((px + 8 + int(d.textlength(label, font=font)), bar))
        entries = [KINDS[k] for k in (kinds if kinds is not None else self.used)] if legend else []
        if legend and tdm.options.islands:
            entries += island_legend(tdm)
        for col, label, glyph in entries:

            def entry(d, x, y, col=col, label=label, glyph=glyph):
                if glyph == "line":
                    d.line([x, y + 6, x + 14, y + 6], fill=col, width=2)
                elif glyph == "triangle":
                    d.polygon([(x + 12, y + 6), (x + 2, y + 1), (x + 2, y + 11)], fill=col, outline=(0, 0, 0))
                elif glyph == "square":
                    d.rectangle([x + 3, y + 2, x + 11, y + 10], fill=col)
                elif glyph == "swatch":
                    d.rectangle([x + 1, y + 1, x + 13, y + 11], fill=col, outline=(0, 0, 0))
                else:
                    d.ellipse([x + 3, y + 2, x + 11, y + 10], fill=col)
                d.text((x + 18, y), label, fill=(0, 0, 0), font=font)
            items.append((18 + int(d.textlength(label, font=font)), entry))
        rows, x = [[]], MARGIN
        for w, fn in items:
            if rows[-1] and x + w > im.width - MARGIN:
                rows.append([])
                x = MARGIN
            rows[-1].append((x, fn))
            x += w + 12
        out = Image.new("RGB", (im.width, im.height + 14 * len(rows) + 2), BACKGROUND)
        out.paste(im, (0, 0))
        d = ImageDraw.Draw(out)
        for k, row in enumerate(rows):
            for x, fn in row:
                fn(d, x, im.height + 14 * k)
        return out


def fit_text(draw, text: str, width: float, font) -> str:
    """``text``, or its longest head + "..." that is at most ``width`` px wide in ``font`` (a panel's
    label is cut where the reader sees it is, not clipped mid-glyph at the picture's edge)."""
    if draw.textlength(text, font=font) <= width:
        return text
    n = len(text)
    while n > 0 and draw.textlength(text[:n] + "...", font=font) > width:
        n -= 1
    return text[:n] + "..."


def island_legend(tdm: TopDownMap, most: int = 8) -> list[tuple]:
    """(colour, label, glyph) legend entries of the islands: area, outdoor when the indoor test
    says so, and which ones episodes use."""
    nav, used = tdm.nav, tdm.episode_islands
    indoor = is_indoor(nav)
    out = []
    for i in range(min(nav.num_islands, most)):
        tags = [] if indoor is None or indoor[i] else ["outdoor"]
        if used is not None and i in used:
            tags.append("episodes")
        label = f"island {i}: {float(nav.island_area[i]):.1f} m2" + (f" ({', '.join(tags)})" if tags else "")
        out.append((tdm.island_colour(i), label, "swatch"))
    if nav.num_islands > most:
        out.append((BACKGROUND, f"+{nav.num_islands - most} smaller islands", "swatch"))
    if used is None and nav.num_islands > 1:
        out.append((NAVIGABLE, "episodes: every island", "swatch"))
    return out


def scale_bar_metres(mpp: float, max_px: int) -> float:
    """The longest 1/2/5 x 10^k metres whose bar is at most ``max_px`` pixels."""
    best = None
    for k in range(-3, 6):
        for b in (1, 2, 5):
            m = b * 10.0 ** k
            if m / mpp <= max_px:
                best = m
    return round(best if best is not None else mpp, 12)


# ---------------------------------------------------------------------------------- files
MAX_PATH_POINTS = 1_000_000   # cap on an agent-path file's points, checked before converting


def read_agent_path(path) -> np.ndarray:
    """Positions [K, 3] from an agent-path file: JSON (a list of [x, y, z], or an object whose
    ``positions`` is one: what ``bps_train.video`` writes beside each video) or text lines of
    ``x y z`` / ``x,y,z``. ``InputError`` naming the file when it is none of these. The scene a
    recorder JSON names: ``read_agent_path_scene``, checked by ``check_map_scene``."""
    return read_agent_path_scene(path)[0]


def read_agent_path_scene(path) -> tuple[np.ndarray, str | None]:
    """``read_agent_path``'s positions and the scene its recorder JSON names (habitat's scene
    name of its ``scene_id``; None: none recorded), the file read once, nothing checked against
    a map: a caller tells a bad file (this raises) from another scene's (``check_map_scene``)."""
    import os

    from ..errors import InputError
    from ..habitat_names import habitat_scene_name
    from ..json_input import parse_json

    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            raw = f.read(64 * MAX_PATH_POINTS + 1)
    except OSError as e:
        raise InputError(path, f"cannot read the agent path: {e.strerror or e}") from None
    if len(raw) > 64 * MAX_PATH_POINTS:
        raise InputError(path, f"agent path file over {64 * MAX_PATH_POINTS} bytes")
    text = raw.decode("utf-8", errors="replace").strip()
    try:
        if text[:1] in "[{":
            doc = parse_json(text, path, prefix="not an agent path")
            rows = doc.get("positions") if isinstance(doc, dict) else doc
            sid = doc.get("scene_id") if isinstance(doc, dict) else None
            recorded = habitat_scene_name(sid) if isinstance(sid, str) and sid else None
        else:
            recorded = None
            rows = [[float(x) for x in line.replace(",", " ").split()] for line in text.splitlines()
                    if line.strip() and not line.lstrip().startswith("#")]
        pts = np.asarray(rows, dtype=np.float64)
    except (ValueError, TypeError, AttributeError) as e:
        raise InputError(path, f"not an agent path (JSON list of [x, y, z] or 'x y z' lines): {e}") from None
    if pts.ndim != 2 or pts.shape[1] != 3 or len(pts) == 0 or not np.isfinite(pts).all():
        raise InputError(path, f"not an agent path: expected [K, 3] finite positions, got shape {list(pts.shape)}")
    return pts, recorded


def check_map_scene(path, recorded: str | None, scenes, what: str = "an episode") -> None:
    """THE refusal of another scene's file on a map: InputError naming ``path`` (``what`` it is:
    an agent path's recorded episode, a packed scene) when the scene it records (``recorded``,
    e.g. from ``read_agent_path_scene``; None: none) is none of ``scenes`` (the map's scene
    names; None: no check)."""
    from ..errors import InputError

    if scenes is None or recorded is None or recorded in scenes:
        return
    raise InputError(path, f"is {what} of scene {recorded!r}, not of the map's "
                           f"({' / '.join(repr(s) for s in sorted(scenes))}): give that scene's navmesh")


def view_points(episode: dict):
    """An episode's view points [N, 3] or None: its ``view_points`` list, else habitat ObjectNav's
    ``goals[i].view_points[j].agent_state.position``."""
    if episode.get("view_points") is not None:
        return np.asarray(episode["view_points"], float).reshape(-1, 3)
    pts = [vp["agent_state"]["position"] for g in episode.get("goals") or ()
           for vp in (g.get("view_points") or ()) if isinstance(vp, dict) and "agent_state" in vp]
    return np.asarray(pts, float).reshape(-1, 3) if pts else None


def draw_episode(c: Canvas, episode: dict, goal_yaw: float | None = None) -> np.ndarray:
    """Draw a habitat episode dict (``start_position``, ``goals[i].position``, ObjectNav's view
    points: ``view_points``) on ``c``: start, every goal, view points and the geodesic shortest
    path to the goal, or ObjectNav's to the nearest view point (what distance_to_goal measures).
    Returns that path ([0, 3]: unreachable)."""
    nav = c.map.nav
    start = np.asarray(episode["start_position"], float).reshape(3)
    goals = np.asarray([g["position"] for g in episode["goals"]], float).reshape(-1, 3)
    vps = view_points(episode)
    end = goals[0] if vps is None else vps[int(np.argmin(nav.geodesic_distance(np.repeat(start[None], len(vps), 0),
                                                                                 vps)))]
    sp = shortest_path(nav, start, end)
    c.episode(start, goals, shortest=sp, view_points=vps, goal_yaw=goal_yaw)
    return sp


def write_map(nav, path, *, episodes=(), agent_paths=(), options: MapOptions = DEFAULTS,
              overwrite: bool = False) -> dict:
    """PNG of ``nav`` with ``episodes`` (``draw_episode``: dicts with ``start_position``, ``goals[i].position``,
    view points if any (``view_points``): start, goal and geodesic shortest path each) and ``agent_paths``
    ([K, 3] arrays); atomic, refuses to replace ``path`` unless ``overwrite``. Returns sizes and
    counts."""
    import io

    from ..container import atomic_write

    tdm = TopDownMap(nav, options)
    c = tdm.canvas()
    unreachable = 0
    for e in episodes:
        unreachable += len(draw_episode(c, e)) == 0
    for p in agent_paths:
        c.path(p, "agent_path")
        c.point(p[0], "start")
    im = c.image()
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    atomic_write(path, lambda fh: fh.write(buf.getvalue()), overwrite=overwrite)
    return {"width": im.width, "height": im.height, "floors": len(tdm.shown), "islands": nav.num_islands,
            "metres_per_pixel": tdm.mpp, "episodes": len(episodes), "unreachable": unreachable,
            "agent_paths": len(agent_paths)}
