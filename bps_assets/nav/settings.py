"""Navmesh build settings: habitat's NavMeshSettings defaults (spec: docs/NAVMESH.md §5).

``MIN_CELL_SIZE`` / ``MAX_CELL_SIZE``: the cell sizes a navmesh may have, for the builder (a
setting outside them is refused before any build) and every reader (``validate``) alike.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields

from ..errors import ConfigError, NavError

MIN_CELL_SIZE = 1e-3   # m; 1 mm: 50x finer than habitat's 5 cm
MAX_CELL_SIZE = 10.0   # m; no agent walks on a coarser grid
# metres: two agents' radius / height are the same within this (a .navmesh stores float32)
AGENT_TOLERANCE = 1e-3

@dataclass(frozen=True)
class NavSettings:
    """Navmesh build settings (lengths in metres, slope in degrees); habitat's defaults.
    ConfigError on a cell size outside [MIN_CELL_SIZE, MAX_CELL_SIZE] (what readers accept), a
    non-positive cell or agent height, a negative radius/climb, or a slope outside [0, 90)."""
    cell_size: float = 0.05        # m, x/z cell side
    cell_height: float = 0.2       # m, vertical tolerance when merging spans
    agent_height: float = 1.5      # m, head room needed above a walkable surface
    agent_radius: float = 0.1      # m, walkable area is eroded by this
    max_climb: float = 0.2         # m, largest step between neighbouring spans
    max_slope: float = 45.0        # degrees, steepest walkable triangle
    region_min_size: float = 20.0  # cells; islands under region_min_size^2 cells are dropped
    filter_low_hanging_obstacles: bool = True
    filter_ledge_spans: bool = True
    filter_walkable_low_height_spans: bool = True
    # False: erode by the exact radius in metres, obstacle coverage measured inside cells.
    # True: Recast's rounding (radius up, agent height up, max climb down to whole voxels;
    # obstacles block every cell they touch), for navmeshes like habitat's.
    recast_compat: bool = False

    def __post_init__(self):
        for name in ("cell_size", "cell_height", "agent_height"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and v > 0):
                raise ConfigError(None, f"navmesh setting {name} must be > 0, got {v!r}")
        for name in ("agent_radius", "max_climb", "region_min_size"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and v >= 0):
                raise ConfigError(None, f"navmesh setting {name} must be >= 0, got {v!r}")
        if not MIN_CELL_SIZE <= self.cell_size <= MAX_CELL_SIZE:  # a navmesh every reader refuses
            raise ConfigError(None, f"navmesh setting cell_size must be in [{MIN_CELL_SIZE:g}, "
                                    f"{MAX_CELL_SIZE:g}] m, got {self.cell_size!r}")
        if not 0 <= self.max_slope < 90:
            raise ConfigError(None, f"navmesh setting max_slope must be in [0, 90), got {self.max_slope!r}")

    def to_dict(self) -> dict:
        """The settings as a plain dict (what navmesh headers record)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "NavSettings":
        """Settings from a dict, ignoring keys this version does not know (older or newer files)."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})

    def replace(self, **kw) -> "NavSettings":
        """A copy with the given fields changed; a None value keeps the current one."""
        return dataclasses.replace(self, **{k: v for k, v in kw.items() if v is not None})


DEFAULT_SETTINGS = NavSettings()


def agent_diffs(has_radius: float, has_height: float, want_radius: float, want_height: float,
                tolerance: float = AGENT_TOLERANCE) -> list[tuple[str, float, float]]:
    """``(what, has, want)`` for each of the agent's radius and height (m), in that order, that
    differs from the wanted one by more than ``tolerance``; [] when the agents match."""
    return [(what, has, want) for what, has, want in
            (("radius", has_radius, want_radius), ("height", has_height, want_height))
            if abs(has - want) > tolerance]


def refuse_other_agent(path, has: NavSettings, want: NavSettings) -> None:
    """NavError naming ``path`` and each of radius and height (both values) where the navmesh
    ``path`` holds, built for ``has``' agent (its polygons already eroded by that radius), is
    not for ``want``'s: every differing parameter at once, so one rerun fixes them all."""
    diffs = agent_diffs(has.agent_radius, has.agent_height, want.agent_radius, want.agent_height)
    if diffs:
        raise NavError(path, "built for an agent " + ", and ".join(
            f"of {what} {h:g} m, not the {w:g} m of the settings (--agent-{what})" for what, h, w in diffs))
