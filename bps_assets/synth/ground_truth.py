"""Ground truth of a synthetic scan, in the habitat frame: what tests and benchmarks compare
the packed scene and the navmesh against (rooms, storeys, the closed room, table tops, stairs).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from . import layout as _layout

@dataclass(frozen=True)
class HRect:
    """Axis-aligned rectangle on the habitat floor plane (x right, z towards the viewer)."""

    xmin: float
    zmin: float
    xmax: float
    zmax: float

    @property
    def area(self) -> float:
        """Area in m^2."""
        return (self.xmax - self.xmin) * (self.zmax - self.zmin)

    def contains(self, x: float, z: float) -> bool:
        """True when habitat point (x, z) lies in the rectangle, edges included."""
        return self.xmin <= x <= self.xmax and self.zmin <= z <= self.zmax


def _hrect(r: _layout.Rect) -> HRect:
    # file (x, y, z) -> habitat (x, z, -y): plan y in [y0, y1] becomes habitat z in [-y1, -y0]
    return HRect(round(r.x0, 6), round(-r.y1, 6), round(r.x1, 6), round(-r.y0, 6))


def _hpoint(x: float, y: float, z: float) -> tuple[float, float, float]:
    return (round(x, 6), round(z, 6), round(-y, 6))


@dataclass(frozen=True)
class RoomInfo:
    """One generated room: its interior, storey, floor and ceiling heights, doors and a
    free point on its floor (habitat frame, metres)."""
    id: int
    storey: int
    rect: HRect                 # the room's interior (inside faces of its walls)
    floor_y: float
    ceiling_y: float
    closed: bool                # no door at all
    hall: bool                  # the stair hall of a two-storey scene
    doors: int
    free_point: tuple           # habitat (x, y, z) on the floor, clear of furniture, reachable from its doors


@dataclass(frozen=True)
class FurnitureInfo:
    """One generated piece of furniture: kind, room, footprint and top height (habitat frame)."""
    kind: str                   # table, chair, box, sofa, cabinet, shelf, platform, rail
    storey: int
    room: int
    rect: HRect                 # footprint
    top_y: float                # habitat height of its top surface


@dataclass(frozen=True)
class StairsInfo:
    """The flight of stairs of a two-storey scene (habitat frame, metres)."""
    rect: HRect                 # flight footprint (the stairwell hole in the upper floor is the same)
    y0: float                   # lower floor
    y1: float                   # upper floor
    n_steps: int                # rises, the last one onto the upper floor
    rise: float
    tread: float
    bottom: tuple               # habitat point on the lower floor just before the first step
    top: tuple                  # habitat point on the upper floor just past the last step


@dataclass
class SceneInfo:
    """Ground truth of one generated scene (habitat frame, metres): what the generator built,
    for tests to check navmeshes and episodes against."""
    name: str
    layout: str                 # gibson | mp3d
    split: str                  # train | val | test | other (in the manifest split named below)
    manifest_split: str         # tiny (gibson) | benchmark (mp3d)
    size: str                   # small | gibson
    seed: int                   # the seed passed to generate()
    relpath: str                # path inside OUT: gibson/NAME.glb or mp3d/ID/ID.glb
    path: Path | None           # absolute path once written (None from describe())
    triangles: int
    vertices: int
    floor_area: float           # m^2 of floor surfaces (all storeys; not furniture tops or steps)
    storeys: list               # [(floor_y, ceiling_y)] per storey, habitat heights
    rooms: list                 # [RoomInfo]
    closed_room: int | None     # RoomInfo.id of the room without doors, or None
    furniture: list             # [FurnitureInfo]
    stairs: StairsInfo | None
    bounds: tuple               # ((xmin, ymin, zmin), (xmax, ymax, zmax)) habitat, before the <= 5 mm noise
    textures: int
    materials: int
    bytes: int = 0
    seconds: float = 0.0
    roof_y: float | None = None  # habitat y of the walkable roof (generate(roof=True)), else None

    @property
    def floor_heights(self) -> list[float]:
        """Floor height of each storey (habitat y)."""
        return [s[0] for s in self.storeys]

    @property
    def table_tops(self) -> list[FurnitureInfo]:
        """Tops of tables: separate walkable islands (too high to climb, too low to walk under)."""
        return [f for f in self.furniture if f.kind == "table"]

    def to_dict(self) -> dict:
        """The scene info as JSON-ready data (``path`` as a string, floor heights added)."""
        d = asdict(self)
        d["path"] = None if self.path is None else str(self.path)
        d["floor_heights"] = self.floor_heights
        return d
