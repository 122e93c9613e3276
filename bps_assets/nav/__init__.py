"""Navmeshes: build from scans (voxel recipe), read habitat ``.navmesh``, batched queries.

Runtime representation and file format: docs/NAVMESH.md. ``NavMesh`` methods (defined in
grid.py on the functions of queries.py): snap_point, is_navigable, geodesic_distance,
distance_field, distance_field_to_any, distance_at, try_step, sample_navigable_point, island_of, island_radius,
navigable_area. Imports point one way: settings, raster, geodesic <- queries <- grid <- build.
"""
from .settings import DEFAULT_SETTINGS, NavSettings  # noqa: F401
from .grid import NavMesh, load_navmesh, is_navmesh_file  # noqa: F401
from .build import build_navmesh  # noqa: F401

__all__ = ["NavSettings", "DEFAULT_SETTINGS", "NavMesh", "build_navmesh", "load_navmesh", "is_navmesh_file"]
