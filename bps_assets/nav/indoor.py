"""Indoor islands: which navmesh islands episodes use (habitat's newer generators' rule).

habitat-lab's ``get_largest_island_index(allow_outdoor=False)`` takes the largest island that is
not outdoor: an island is indoor when more than 95 % of 100 points on it have scene geometry
straight above. Here a point is indoor when a ray straight up from 5 cm above it hits the scene
within ``ceiling_within`` metres, over ``samples`` spans spread evenly over the island (so the
answer is reproducible). ``island_indoor(nav, vertices, triangles) -> f4 [I]`` (each island's
indoor share; stored in the navmesh header, docs/NAVMESH.md 3) and ``episode_islands(nav,
all_islands=False) -> [ids] | None`` (None: every island). Without ``island_indoor`` the largest
island is used; when no island is indoor, every island is; islands narrower than habitat's island
radius limit (1.5 m) do not count. Rules and measurements: docs/NAVMESH.md section 9.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class IndoorOptions:
    """The indoor test's parameters."""
    ceiling_within: float = 6.0    # m: geometry above a point within this makes it indoor
    indoor_share: float = 0.95     # habitat's indoor_ratio_threshold (share must exceed it)
    samples: int = 100             # points per island (habitat's num_samples)
    lift: float = 0.05             # m: rays start this far above the walkable surface
    min_radius: float = 1.5        # m: islands narrower cannot hold an episode (habitat's island radius limit)


DEFAULTS = IndoorOptions()


def island_indoor(nav, vertices, triangles, options: IndoorOptions = DEFAULTS) -> np.ndarray:
    """Share (0..1) of each island's sample points that have scene geometry above them within
    ``ceiling_within`` metres, float32 [num_islands]."""
    from ..raycast import RayCaster

    n = nav.num_islands
    if n == 0:
        return np.zeros(0, np.float32)
    pick = []
    order = np.argsort(nav.span_island, kind="stable")
    counts = np.bincount(nav.span_island, minlength=n)
    starts = np.r_[0, np.cumsum(counts)[:-1]]
    for i in range(n):
        k = min(int(counts[i]), options.samples)
        pick.append(order[starts[i] + np.linspace(0, counts[i] - 1, k).round().astype(np.int64)])
    spans = np.concatenate(pick)
    org = nav.span_pos[spans] + [0.0, options.lift, 0.0]
    dirs = np.tile([0.0, 1.0, 0.0], (len(org), 1))
    d = RayCaster(np.asarray(vertices, np.float32), np.asarray(triangles, np.int64),
                  "the indoor test").distance(org, dirs)
    hit = (d <= options.ceiling_within).astype(np.float64)
    isl = nav.span_island[spans]
    return (np.bincount(isl, hit, minlength=n) / np.maximum(np.bincount(isl, minlength=n), 1)).astype(np.float32)


def is_indoor(nav, options: IndoorOptions = DEFAULTS) -> np.ndarray | None:
    """bool [num_islands]: the islands the indoor test calls indoor; None when the navmesh
    has no ``island_indoor`` (not known)."""
    share = getattr(nav, "island_indoor", None)
    if share is None:
        return None
    return np.asarray(share, np.float64) > options.indoor_share


def episode_islands(nav, all_islands: bool = False, options: IndoorOptions = DEFAULTS) -> list[int] | None:
    """The islands episodes start and end on: the largest indoor one at least ``min_radius``
    wide (islands are numbered in decreasing area); the largest one when indoor is not known;
    None (every island) with ``all_islands``, for a navmesh without island ids, or when no
    island that wide is indoor (a stage without a ceiling: only the floor under a table is)."""
    n = getattr(nav, "num_islands", 0)
    if all_islands or not isinstance(n, int) or n == 0:
        return None
    indoor = is_indoor(nav, options)
    if indoor is None:
        return [0]
    ids = np.flatnonzero(indoor & (np.asarray(nav.island_radius_m) >= options.min_radius))
    return [int(ids[0])] if ids.size else None


def describe_islands(nav, used: list[int] | None, all_islands: bool = False) -> str:
    """One line: which islands episodes use (``episode_islands``' answer), with area, indoor
    share and heights."""
    if used is None:
        n = nav.num_islands
        why = "" if all_islands or getattr(nav, "island_indoor", None) is None else \
            f" (none indoor and {DEFAULTS.min_radius:g} m wide)"
        return f"all {n} island{'s' * (n != 1)}{why}"
    parts = []
    share = getattr(nav, "island_indoor", None)
    for i in used:
        y = nav.span_pos[nav.span_island == i, 1]
        ind = "" if share is None else f", {float(share[i]):.0%} indoor"
        parts.append(f"island {i} ({float(nav.island_area[i]):.1f} m^2{ind}, y {y.min():.2f}..{y.max():.2f} m)")
    return ", ".join(parts)


__all__ = ["IndoorOptions", "DEFAULTS", "island_indoor", "is_indoor", "episode_islands", "describe_islands"]
