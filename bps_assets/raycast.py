"""Rays against one triangle mesh with Embree (embreex): the one ray caster that conversion
(annotation ids onto render triangles), the ObjectNav view-point scorer and the runtime's
embreex fallback (``bps_runtime.render.embree.EmbreeAccel``) share.

Contract: ``RayCaster(vertices [V,3], triangles [T,3])`` builds and commits the BVH at
construction (holding the GIL). ``intersect(org [N,3], dirs [N,3])`` returns embreex's hit dict:
``tfar``, ``primID`` (-1: miss), ``u``, ``v`` (weights of the triangle's 2nd and 3rd corner) and
the unnormalized geometric normal ``Ng``; ``first_hit`` the int64 triangle per ray (-1: none);
``distance`` the hit distance per ray (1e37: none), in units of each direction's length. A mesh
without triangles hits nothing. Without embreex: ``MissingDependencyError`` naming ``what``.
"""
from __future__ import annotations

import numpy as np

from .errors import MissingDependencyError

NO_HIT = np.float32(1e37)  # embreex's tfar where a ray hits nothing


class RayCaster:
    """One committed embreex scene over a triangle mesh."""

    def __init__(self, vertices: np.ndarray, triangles: np.ndarray, what: str = "ray casting"):
        try:
            from embreex import mesh_construction, rtcore_scene
        except ImportError as e:  # pragma: no cover - core dependency
            raise MissingDependencyError(None, what, "embreex") from e
        self.scene = rtcore_scene.EmbreeScene()
        self.num_triangles = int(len(triangles))
        if self.num_triangles:
            self._mesh = mesh_construction.TriangleMesh(self.scene, np.ascontiguousarray(vertices, np.float32),
                                                        np.ascontiguousarray(triangles, np.int32))
            # commit now (embreex commits lazily on the first run): the BVH build belongs here
            self.scene.run(np.zeros((1, 3), np.float32), np.array([[0, 0, -1]], np.float32), query="DISTANCE")

    def distance(self, org: np.ndarray, dirs: np.ndarray) -> np.ndarray:
        """Hit distance per ray (float32 [n]; ``NO_HIT`` where nothing is hit)."""
        if not self.num_triangles:
            return np.full(len(org), NO_HIT, np.float32)
        return self.scene.run(np.ascontiguousarray(org, np.float32), np.ascontiguousarray(dirs, np.float32),
                              query="DISTANCE")

    def intersect(self, org: np.ndarray, dirs: np.ndarray) -> dict:
        """embreex's hits of the rays (module docstring)."""
        if not self.num_triangles:
            n = len(org)
            return {"tfar": np.full(n, NO_HIT, np.float32), "primID": np.full(n, -1, np.int32),
                    "u": np.zeros(n, np.float32), "v": np.zeros(n, np.float32),
                    "Ng": np.zeros((n, 3), np.float32)}
        return self.scene.run(np.ascontiguousarray(org, np.float32), np.ascontiguousarray(dirs, np.float32),
                              output=1)

    def first_hit(self, org: np.ndarray, dirs: np.ndarray) -> np.ndarray:
        """int64 [N]: the triangle each ray hits first, -1 for none."""
        if not self.num_triangles or len(org) == 0:
            return np.full(len(org), -1, np.int64)
        return np.asarray(self.scene.run(np.ascontiguousarray(org, np.float32),
                                         np.ascontiguousarray(dirs, np.float32)), np.int64)
