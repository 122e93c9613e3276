"""Floor plans for the synthetic scans: rooms, doors, stairs, furniture. No meshing here.

Everything is in the file frame of the real Gibson / MP3D GLBs: metres, Z up; plan coordinates
are (x, y). A room's ``cell`` runs between wall centre lines; its ``interior`` is the cell
shrunk by half the wall thickness, so walls have real thickness ``WALL_T`` between two rooms'
interiors. All draws come from one numpy Generator, so a seed fixes the plan:
- footprint W x D, split recursively (BSP) into rooms; two-storey plans first reserve a hall
  strip along x-min holding a straight stair flight against the exterior wall, and both
  storeys share the partition (walls stack);
- doors: a random spanning tree over walls long enough for a door (sometimes one extra door,
  giving loops); with ``closed_room`` one room on storey 0 whose removal keeps the rest
  connected gets no door at all;
- furniture by rejection sampling on a 5 cm grid per room, never in a door's approach zone or
  the stair zones; an obstacle is kept only if a grid search (obstacles inflated by ``CLEAR``,
  a bit more than the agent radius) still connects every door and stair end of the room.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import ndimage

from ..errors import ConfigError

WALL_T = 0.15          # wall thickness
SLAB = 0.25            # storey-1 ceiling to storey-2 floor
MAX_RISE = 0.18        # stair rise (navmesh max climb is 0.2)
TREAD = 0.26
STAIR_W = 1.0
STAIR_CLEAR = 1.0      # free floor before the first step and after the last one
RAIL_T, RAIL_H = 0.05, 1.0
CLEAR = 0.15           # obstacle inflation for connectivity checks (agent radius 0.1 + margin)
GRID = 0.05
MIN_ROOM = 2.5         # smallest room side (cell)
HALL_W = (2.4, 2.7)


@dataclass(frozen=True)
class Rect:
    """Axis-aligned rectangle in plan (file x, y)."""

    x0: float
    y0: float
    x1: float
    y1: float

    @property
    def w(self) -> float:
        return self.x1 - self.x0

    @property
    def h(self) -> float:
        return self.y1 - self.y0

    @property
    def area(self) -> float:
        return max(0.0, self.w) * max(0.0, self.h)

    def shrink(self, d: float) -> "Rect":
        return Rect(self.x0 + d, self.y0 + d, self.x1 - d, self.y1 - d)

    def grow(self, d: float) -> "Rect":
        return self.shrink(-d)

    def overlaps(self, o: "Rect", eps: float = 1e-9) -> bool:
        return self.x0 < o.x1 - eps and o.x0 < self.x1 - eps and self.y0 < o.y1 - eps and o.y0 < self.y1 - eps

    def minus(self, o: "Rect") -> list["Rect"]:
        """This rectangle minus ``o``, as up to four disjoint rectangles."""
        if not self.overlaps(o):
            return [self]
        out = []
        if o.y0 > self.y0:
            out.append(Rect(self.x0, self.y0, self.x1, o.y0))
        if o.y1 < self.y1:
            out.append(Rect(self.x0, o.y1, self.x1, self.y1))
        my0, my1 = max(self.y0, o.y0), min(self.y1, o.y1)
        if o.x0 > self.x0:
            out.append(Rect(self.x0, my0, o.x0, my1))
        if o.x1 < self.x1:
            out.append(Rect(o.x1, my0, self.x1, my1))
        return [r for r in out if r.w > 1e-6 and r.h > 1e-6]


@dataclass
class Room:
    id: int
    storey: int
    cell: Rect
    interior: Rect
    floor_z: float
    ceil_z: float
    closed: bool = False
    hall: bool = False
    floor_kind: str = "wood"          # texture kind of the floor
    wall_tint: tuple = (1.0, 1.0, 1.0)
    free_point: tuple = (0.0, 0.0)    # plan point well clear of furniture, reachable from doors


@dataclass
class Door:
    storey: int
    a: int                 # room ids
    b: int
    axis: str              # "x": wall line is x = c (wall runs along y); "y": line y = c
    c: float
    s0: float              # opening along the wall
    s1: float
    height: float

    def threshold(self) -> Rect:
        h = WALL_T / 2
        if self.axis == "x":
            return Rect(self.c - h, self.s0, self.c + h, self.s1)
        return Rect(self.s0, self.c - h, self.s1, self.c + h)


@dataclass
class Box:
    """A solid part of a piece of furniture (absolute z); ``kind`` picks the material."""

    rect: Rect
    z0: float
    z1: float
    kind: str


@dataclass
class Furniture:
    kind: str              # table, chair, box, sofa, cabinet, shelf, platform, rail
    storey: int
    room: int
    rect: Rect             # footprint
    top_z: float           # absolute height of its top surface
    parts: list[Box] = field(default_factory=list)


@dataclass
class Stairs:
    rect: Rect             # flight footprint; it climbs towards +y
    n_steps: int           # rises, the last one onto the upper floor
    rise: float
    tread: float
    z0: float
    z1: float
    room: int              # the hall room on storey 0


@dataclass
class Plan:
    footprint: Rect
    storeys: list[tuple[float, float]]   # (floor_z, ceil_z) per storey
    rooms: list[Room]
    doors: list[Door]
    furniture: list[Furniture]
    stairs: Stairs | None
    closed_room: int | None

    def doors_of(self, room_id: int) -> list[Door]:
        return [d for d in self.doors if room_id in (d.a, d.b)]


# ------------------------------------------------------------------------------ partition

def _q(v: float) -> float:
    return round(v / GRID) * GRID


def _bsp(rect: Rect, rng, max_area: float) -> list[Rect]:
    out, stack = [], [rect]
    while stack:
        r = stack.pop()
        can_x, can_y = r.w >= 2 * MIN_ROOM, r.h >= 2 * MIN_ROOM
        if r.area <= max_area or not (can_x or can_y):
            out.append(r)
            continue
        along_x = can_x and (r.w >= r.h or not can_y)
        lo, hi = (r.x0, r.x1) if along_x else (r.y0, r.y1)
        f = rng.uniform(0.35, 0.65)
        cut = _q(min(max(lo + f * (hi - lo), lo + MIN_ROOM), hi - MIN_ROOM))
        if along_x:
            stack += [Rect(r.x0, r.y0, cut, r.y1), Rect(cut, r.y0, r.x1, r.y1)]
        else:
            stack += [Rect(r.x0, r.y0, r.x1, cut), Rect(r.x0, cut, r.x1, r.y1)]
    out.sort(key=lambda r: (r.y0, r.x0))
    return out


def _shared_walls(cells: list[Rect], min_len: float):
    """[(i, j, axis, c, s0, s1)] for cell pairs sharing a wall of at least ``min_len``."""
    eps = 1e-6
    out = []
    for i, a in enumerate(cells):
        for j in range(i + 1, len(cells)):
            b = cells[j]
            for ca, cb, axis in ((a.x1, b.x0, "x"), (b.x1, a.x0, "x"), (a.y1, b.y0, "y"), (b.y1, a.y0, "y")):
                if abs(ca - cb) > eps:
                    continue
                if axis == "x":
                    s0, s1 = max(a.y0, b.y0), min(a.y1, b.y1)
                else:
                    s0, s1 = max(a.x0, b.x0), min(a.x1, b.x1)
                if s1 - s0 >= min_len:
                    out.append((i, j, axis, ca, s0, s1))
    return out


def _connected(n: int, edges, skip: int | None = None) -> bool:
    nodes = [i for i in range(n) if i != skip]
    if not nodes:
        return True
    adj = {i: set() for i in nodes}
    for i, j, *_ in edges:
        if i != skip and j != skip:
            adj[i].add(j)
            adj[j].add(i)
    seen, todo = {nodes[0]}, [nodes[0]]
    while todo:
        for k in adj[todo.pop()]:
            if k not in seen:
                seen.add(k)
                todo.append(k)
    return len(seen) == len(nodes)


def _doors_for_storey(storey, ids, walls, rng, skip_local, door_wmax, heights):
    """Random spanning tree (+ maybe one loop) over ``walls``; ids map local -> room ids."""
    parent = list(range(len(ids)))

    def find(k):
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    order = rng.permutation(len(walls))
    chosen, rest = [], []
    for k in order:
        i, j = walls[k][0], walls[k][1]
        if skip_local in (i, j):
            continue
        ri, rj = find(i), find(j)
        if ri != rj:
            parent[ri] = rj
            chosen.append(walls[k])
        else:
            rest.append(walls[k])
    if rest and rng.random() < 0.5:
        chosen.append(rest[0])
    doors = []
    for i, j, axis, c, s0, s1 in chosen:
        w = _q(rng.uniform(0.85, door_wmax))
        m = WALL_T / 2 + 0.3 + w / 2
        lo, hi = s0 + m, s1 - m
        mid = _q(rng.uniform(lo, max(lo, hi)))
        doors.append(Door(storey, ids[i], ids[j], axis, c, mid - w / 2, mid + w / 2,
                          _q(rng.uniform(*heights))))
    return doors


# ------------------------------------------------------------------------------ furniture

class _RoomGrid:
    """Occupancy of one room's interior on a GRID raster, for placement and connectivity."""

    def __init__(self, interior: Rect):
        self.r = interior
        self.nx = max(1, int(interior.w / GRID))
        self.ny = max(1, int(interior.h / GRID))
        self.used = np.zeros((self.ny, self.nx), bool)      # anything placed or reserved
        self.block = np.zeros((self.ny, self.nx), bool)     # inflated obstacles
        b = int(math.ceil(CLEAR / GRID))
        self.block[:b, :] = self.block[-b:, :] = True
        self.block[:, :b] = self.block[:, -b:] = True
        self.keys: list[tuple[int, int]] = []

    def _idx(self, rect: Rect):
        i0 = int(math.floor((rect.x0 - self.r.x0) / GRID))
        i1 = int(math.ceil((rect.x1 - self.r.x0) / GRID))
        j0 = int(math.floor((rect.y0 - self.r.y0) / GRID))
        j1 = int(math.ceil((rect.y1 - self.r.y0) / GRID))
        return slice(max(0, j0), max(0, min(self.ny, j1))), slice(max(0, i0), max(0, min(self.nx, i1)))

    def cell(self, x, y):
        return (min(self.ny - 1, max(0, int((y - self.r.y0) / GRID))),
                min(self.nx - 1, max(0, int((x - self.r.x0) / GRID))))

    def free(self, rect: Rect) -> bool:
        return not self.used[self._idx(rect)].any()

    def reserve(self, rect: Rect):
        self.used[self._idx(rect)] = True

    def try_obstacle(self, rect: Rect) -> bool:
        """Place an obstacle if it keeps all key cells connected; returns whether placed."""
        sl = self._idx(rect.grow(CLEAR))
        old = self.block[sl].copy()
        self.block[sl] = True
        if self.connected():
            self.used[self._idx(rect.grow(0.05))] = True
            return True
        self.block[sl] = old
        return False

    def connected(self) -> bool:
        if not self.keys:
            return True
        lab, _ = ndimage.label(~self.block)
        ls = {int(lab[k]) for k in self.keys}
        return len(ls) == 1 and 0 not in ls

    def best_point(self) -> tuple[float, float]:
        lab, n = ndimage.label(~self.block)
        if n == 0:
            j, i = self.ny // 2, self.nx // 2
        else:
            if self.keys and lab[self.keys[0]]:
                main = lab == lab[self.keys[0]]
            else:
                sizes = ndimage.sum(np.ones_like(lab), lab, index=np.arange(1, n + 1))
                main = lab == (int(np.argmax(sizes)) + 1)
            dist = ndimage.distance_transform_edt(main)
            j, i = np.unravel_index(int(np.argmax(dist)), dist.shape)
        return (self.r.x0 + (i + 0.5) * GRID, self.r.y0 + (j + 0.5) * GRID)


def _door_zone(d: Door, room: Room, depth: float = 0.9) -> tuple[Rect, tuple[float, float]]:
    """The approach zone of door ``d`` inside ``room`` and a key point in it."""
    ri = room.interior
    pad = 0.1
    if d.axis == "x":
        if abs(d.c - room.cell.x1) < 1e-6:
            z = Rect(ri.x1 - depth, d.s0 - pad, ri.x1, d.s1 + pad)
            key = (ri.x1 - CLEAR - 0.1, (d.s0 + d.s1) / 2)
        else:
            z = Rect(ri.x0, d.s0 - pad, ri.x0 + depth, d.s1 + pad)
            key = (ri.x0 + CLEAR + 0.1, (d.s0 + d.s1) / 2)
    else:
        if abs(d.c - room.cell.y1) < 1e-6:
            z = Rect(d.s0 - pad, ri.y1 - depth, d.s1 + pad, ri.y1)
            key = ((d.s0 + d.s1) / 2, ri.y1 - CLEAR - 0.1)
        else:
            z = Rect(d.s0 - pad, ri.y0, d.s1 + pad, ri.y0 + depth)
            key = ((d.s0 + d.s1) / 2, ri.y0 + CLEAR + 0.1)
    return z, key


def _rand_rect_in(rng, ri: Rect, w, h, margin=0.0) -> Rect | None:
    if rng.random() < 0.5:
        w, h = h, w
    if w > ri.w - 2 * margin - 1e-6 or h > ri.h - 2 * margin - 1e-6:
        return None
    x = _q(rng.uniform(ri.x0 + margin, ri.x1 - margin - w))
    y = _q(rng.uniform(ri.y0 + margin, ri.y1 - margin - h))
    return Rect(x, y, x + w, y + h)


def _against_wall(rng, ri: Rect, length, depth, gap=0.02):
    """A rect of ``length`` x ``depth`` touching a random wall of interior ``ri``: (rect, side)."""
    side = int(rng.integers(4))
    if side in (0, 1):  # walls at y0 / y1, run along x
        if length > ri.w - 0.1 - 1e-6:
            return None, side
        x = _q(rng.uniform(ri.x0 + 0.05, ri.x1 - 0.05 - length))
        y = ri.y0 + gap if side == 0 else ri.y1 - gap - depth
        return Rect(x, y, x + length, y + depth), side
    if length > ri.h - 0.1 - 1e-6:
        return None, side
    y = _q(rng.uniform(ri.y0 + 0.05, ri.y1 - 0.05 - length))
    x = ri.x0 + gap if side == 2 else ri.x1 - gap - depth
    return Rect(x, y, x + depth, y + length), side


def _furnish(room: Room, plan: Plan, rng, grid: _RoomGrid, want_platform: bool,
             want_table: bool = False) -> list[Furniture]:
    out: list[Furniture] = []
    fz = room.floor_z
    ri = room.interior

    def add(kind, rect, top, parts):
        out.append(Furniture(kind, room.storey, room.id, rect, top, parts))

    # (tops of >= 1.6 x 1.0 m keep > 1 m^2 after the agent-radius erosion: Recast / habitat drop
    # isolated regions under region_min_size 20 = 400 cells = 1 m^2, and tops must stay islands)
    if ri.w >= 2.0 and ri.h >= 2.0 and (rng.random() < 0.8 or want_table):
        for _ in range(30):
            tw, td = _q(rng.uniform(1.6, 2.0)), _q(rng.uniform(1.0, 1.2))
            r = _rand_rect_in(rng, ri, tw, td, margin=0.5)
            if r is None or not grid.free(r.grow(0.1)):
                continue
            if not grid.try_obstacle(r):
                continue
            h = round(rng.uniform(0.72, 0.78), 3)
            top = Box(r, fz + h - 0.04, fz + h, "darkwood")
            legs = []
            for lx, ly in ((r.x0, r.y0), (r.x1 - 0.05, r.y0), (r.x0, r.y1 - 0.05), (r.x1 - 0.05, r.y1 - 0.05)):
                legs.append(Box(Rect(lx, ly, lx + 0.05, ly + 0.05), fz, fz + h - 0.04, "darkwood"))
            add("table", r, fz + h, [top] + legs)
            # chairs beside the long sides
            for _c in range(int(rng.integers(0, 4))):
                s = 0.45
                if r.w >= r.h:
                    cx = _q(rng.uniform(r.x0, r.x1 - s))
                    below = rng.random() < 0.5
                    cy = r.y0 - 0.15 - s if below else r.y1 + 0.15
                    cr = Rect(cx, cy, cx + s, cy + s)
                    back = Rect(cx, cy, cx + s, cy + 0.05) if below else Rect(cx, cy + s - 0.05, cx + s, cy + s)
                else:
                    cy = _q(rng.uniform(r.y0, r.y1 - s))
                    left = rng.random() < 0.5
                    cx = r.x0 - 0.15 - s if left else r.x1 + 0.15
                    cr = Rect(cx, cy, cx + s, cy + s)
                    back = Rect(cx, cy, cx + 0.05, cy + s) if left else Rect(cx + s - 0.05, cy, cx + s, cy + s)
                if ri.shrink(0.05).x0 <= cr.x0 and cr.x1 <= ri.x1 - 0.05 and ri.y0 + 0.05 <= cr.y0 \
                        and cr.y1 <= ri.y1 - 0.05 and grid.free(cr) and grid.try_obstacle(cr):
                    add("chair", cr, fz + 0.9, [Box(cr, fz, fz + 0.45, "fabric"), Box(back, fz + 0.45, fz + 0.9, "fabric")])
            break

    # a low platform (one step, <= 0.2 m): walkable, so not an obstacle, but nothing goes on it
    if want_platform:
        for _ in range(30):
            w, d = _q(rng.uniform(1.0, 1.8)), _q(rng.uniform(0.8, 1.4))
            r = _rand_rect_in(rng, ri, w, d, margin=0.3)
            if r is None or not grid.free(r.grow(0.1)):
                continue
            h = round(rng.uniform(0.10, 0.18), 3)
            grid.reserve(r.grow(0.1))
            add("platform", r, fz + h, [Box(r, fz, fz + h, "carpet")])
            break

    # table with chairs
    # sofa or cabinet against a wall
    if rng.random() < 0.6:
        for _ in range(10):
            sofa = ri.w * ri.h > 9 and rng.random() < 0.5
            length = _q(rng.uniform(1.7, 2.1) if sofa else rng.uniform(0.8, 1.3))
            depth = 0.85 if sofa else _q(rng.uniform(0.4, 0.5))
            r, side = _against_wall(rng, ri, length, depth)
            if r is None or not grid.free(r) or not grid.try_obstacle(r):
                continue
            if sofa:
                seat = Box(r, fz, fz + 0.42, "fabric")
                if side == 0:
                    back = Rect(r.x0, r.y0, r.x1, r.y0 + 0.2)
                elif side == 1:
                    back = Rect(r.x0, r.y1 - 0.2, r.x1, r.y1)
                elif side == 2:
                    back = Rect(r.x0, r.y0, r.x0 + 0.2, r.y1)
                else:
                    back = Rect(r.x1 - 0.2, r.y0, r.x1, r.y1)
                add("sofa", r, fz + 0.8, [seat, Box(back, fz + 0.42, fz + 0.8, "fabric")])
            else:
                h = round(rng.uniform(0.8, 1.9), 2)
                add("cabinet", r, fz + h, [Box(r, fz, fz + h, "darkwood")])
            break

    # boxes
    for _ in range(int(rng.integers(0, 4))):
        for _t in range(6):
            w, d = _q(rng.uniform(0.3, 0.7)), _q(rng.uniform(0.3, 0.7))
            r = _rand_rect_in(rng, ri, w, d, margin=0.05)
            if r is None or not grid.free(r) or not grid.try_obstacle(r):
                continue
            h = round(rng.uniform(0.3, 0.9), 2)
            parts = [Box(r, fz, fz + h, "cardboard")]
            top = fz + h
            if rng.random() < 0.3:  # a smaller box stacked on top
                s = r.shrink(min(r.w, r.h) * 0.2)
                h2 = round(rng.uniform(0.2, 0.4), 2)
                parts.append(Box(s, top, top + h2, "cardboard"))
                top += h2
            add("box", r, top, parts)
            break

    # wall shelves: above agent height, so the floor below stays walkable; never over a door
    ceil = room.ceil_z
    for _ in range(int(rng.integers(0, 3))):
        for _t in range(6):
            length, depth = _q(rng.uniform(0.8, 1.5)), _q(rng.uniform(0.25, 0.3))
            r, side = _against_wall(rng, ri, length, depth, gap=0.0)
            if r is None or not grid.free(r):  # nothing under it: the floor below stays walkable
                continue
            if any(r.grow(0.05).overlaps(_door_zone(d, room, depth=0.5)[0]) for d in plan.doors_of(room.id)):
                continue
            if plan.stairs is not None and room.hall and r.overlaps(plan.stairs.rect.grow(0.1)):
                continue
            z0 = fz + round(rng.uniform(1.8, 1.95), 2)
            if z0 + 0.03 > ceil - 0.2:
                continue
            parts = [Box(r, z0, z0 + 0.03, "darkwood")]
            if z0 + 0.4 + 0.03 < ceil - 0.15 and rng.random() < 0.5:
                parts.append(Box(r, z0 + 0.4, z0 + 0.43, "darkwood"))
            add("shelf", r, parts[-1].z1, parts)
            break

    return out


# ------------------------------------------------------------------------------ plan

def make_plan(rng: np.random.Generator, floor_area: float, max_room_area: float,
              two_storey: bool, closed_room: bool) -> Plan:
    """A random plan with about ``floor_area`` m^2 of floor in total (over all storeys)."""
    n_st = 2 if two_storey else 1
    gross = max(floor_area / n_st, 38.0) * 1.08
    attempts = 50
    for _attempt in range(attempts):
        aspect = rng.uniform(1.0, 1.5)
        d = math.sqrt(gross / aspect)
        w = gross / d
        if two_storey and d < 7.2:
            d = 7.2
            w = gross / d
        w, d = _q(max(w, 5.0)), _q(max(d, 5.0))
        fp = Rect(_q(-w / 2), _q(-d / 2), _q(-w / 2) + w, _q(-d / 2) + d)
        h1 = _q(rng.uniform(2.5, 2.9))
        storeys = [(0.0, h1)]
        stairs = None
        cells: list[Rect] = []
        hall_idx = None
        if two_storey:
            f2 = round(h1 + SLAB, 4)
            storeys.append((f2, round(f2 + _q(rng.uniform(2.5, 2.8)), 4)))
            hw = _q(rng.uniform(*HALL_W))
            hall = Rect(fp.x0, fp.y0, fp.x0 + hw, fp.y1)
            rest = Rect(fp.x0 + hw, fp.y0, fp.x1, fp.y1)
            if rest.w < MIN_ROOM:
                continue
            cells = [hall] + _bsp(rest, rng, max_room_area)
            hall_idx = 0
            n = math.ceil(f2 / MAX_RISE - 1e-9)
            rise = f2 / n
            run = (n - 1) * TREAD
            hi = hall.shrink(WALL_T / 2)
            if hi.h < STAIR_CLEAR + run + STAIR_CLEAR + 0.2:
                continue
            y0 = _q(hi.y0 + STAIR_CLEAR)
            stairs = Stairs(Rect(hi.x0, y0, hi.x0 + STAIR_W, y0 + run), n, rise, TREAD, 0.0, f2, 0)
        else:
            cells = _bsp(fp, rng, max_room_area)
        if len(cells) < 2:
            continue
        walls = _shared_walls(cells, min_len=WALL_T + 0.6 + 1.0 + 0.1)
        if not _connected(len(cells), walls):
            continue
        skip = None
        if closed_room:
            cand = [i for i in range(len(cells)) if i != hall_idx and _connected(len(cells), walls, skip=i)
                    and cells[i].area < 0.5 * fp.area]
            if not cand:
                continue
            skip = int(rng.choice(cand))
        break
    else:  # the size presets always admit a plan within a few attempts; other sizes may not
        raise ConfigError(None, f"synth: no floor plan of {floor_area:.0f} m^2 with rooms of at most "
                                f"{max_room_area:.0f} m^2 in {attempts} attempts (try another size or seed)")

    rooms: list[Room] = []
    floor_kinds = ("wood", "tile", "carpet")
    for s, (fz, cz) in enumerate(storeys):
        for i, c in enumerate(cells):
            tint = tuple(float(v) for v in np.clip(1.0 - 0.12 * rng.random(3), 0, 1))
            rooms.append(Room(len(rooms), s, c, c.shrink(WALL_T / 2), fz, cz,
                              closed=(s == 0 and i == skip), hall=(i == hall_idx),
                              floor_kind=floor_kinds[int(rng.integers(3))], wall_tint=tint))
    doors: list[Door] = []
    for s in range(n_st):
        ids = [r.id for r in rooms if r.storey == s]
        doors += _doors_for_storey(s, ids, walls, rng, skip if s == 0 else None, 1.0, (2.0, 2.1))
    plan = Plan(fp, storeys, rooms, doors, [], stairs,
                closed_room=(rooms[skip].id if skip is not None else None))

    # furniture, with keep-clear zones at doors and stairs
    platform_from = int(rng.integers(len(rooms)))  # rooms are furnished from here on; the first that fits it gets the low platform
    table_room = max((r for r in rooms if r.storey == 0 and not r.closed and not r.hall),
                     key=lambda r: r.interior.area).id  # every scene has a table top island
    for room in rooms[platform_from:] + rooms[:platform_from]:
        grid = _RoomGrid(room.interior)
        for d in plan.doors_of(room.id):
            zone, key = _door_zone(d, room)
            grid.reserve(zone)
            grid.keys.append(grid.cell(*key))
        if stairs is not None and room.hall:
            st = stairs.rect
            if room.storey == 0:
                # the flight is an obstacle; its bottom approach and the space past its top stay clear
                grid.block[grid._idx(st.grow(CLEAR))] = True
                grid.reserve(Rect(st.x0, room.interior.y0, st.x1 + 0.9, st.y0))
                grid.reserve(st.grow(0.1))
                grid.keys.append(grid.cell(st.x0 + STAIR_W / 2, st.y0 - 0.4))
                # railing-free side passage must connect both ends
                grid.keys.append(grid.cell(st.x1 + 0.6, st.y1 + 0.3))
            else:
                # storey 2: the hole and its railing are obstacles; the arrival zone stays clear
                hole = Rect(st.x0, st.y0 - RAIL_T, st.x1 + RAIL_T, st.y1)
                grid.block[grid._idx(hole.grow(CLEAR))] = True
                grid.reserve(hole.grow(0.1))
                arrive = Rect(st.x0, st.y1, st.x1 + 0.6, min(room.interior.y1, st.y1 + 1.0))
                grid.reserve(arrive)
                grid.keys.append(grid.cell(st.x0 + STAIR_W / 2, st.y1 + 0.4))
        if not grid.connected():  # nothing placed yet: only a degenerate room could fail
            grid.keys = grid.keys[:1]
        want = not any(f.kind == "platform" for f in plan.furniture)
        plan.furniture += _furnish(room, plan, rng, grid, want_platform=want, want_table=room.id == table_room)
        room.free_point = grid.best_point()

    plan.furniture.sort(key=lambda f: f.room)  # stable: per room in placement order
    if stairs is not None:  # railing around the stairwell on storey 1 (open at the top end)
        fz = storeys[1][0]
        st = stairs.rect
        hall2 = next(r for r in rooms if r.storey == 1 and r.hall)
        long_rail = Box(Rect(st.x1, st.y0 - RAIL_T, st.x1 + RAIL_T, st.y1), fz, fz + RAIL_H, "rail")
        end_rail = Box(Rect(st.x0, st.y0 - RAIL_T, st.x1, st.y0), fz, fz + RAIL_H, "rail")
        plan.furniture.append(Furniture("rail", 1, hall2.id, Rect(st.x0, st.y0 - RAIL_T, st.x1 + RAIL_T, st.y1),
                                        fz + RAIL_H, [long_rail, end_rail]))
    return plan
