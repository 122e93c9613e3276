"""Shortest paths on a NavMesh: the polyline whose length ``geodesic_distance`` reports.

``shortest_path(nav, a, b)`` snaps both ends (habitat's rule), returns the straight segment when
they see each other, and otherwise runs Dijkstra over the navmesh's geodesic graph
(bps_assets/nav/geodesic.py: span centres and reflex-corner nodes joined by line-of-sight
edges) from the start, keeping predecessors, and enters the goal through the span it sees
directly that gives the least total, as ``GeodesicGraph.read_field`` does. So the path's length
equals ``nav.geodesic_distance(a, b)`` (to float rounding), and it bends only at graph nodes.
Used by the top-down maps (bps_assets/nav/topdown.py) and ``bps-assets preview --episodes``.
"""
from __future__ import annotations

import numpy as np

from .geodesic import DEFAULT_RADIUS, line_of_sight
from .queries import geodesic_graph, snap_spans


def shortest_path(nav, a, b, radius: int = DEFAULT_RADIUS) -> np.ndarray:
    """Points [K, 3] (habitat frame) from snapped ``a`` to snapped ``b``; ``[0, 3]`` when either
    end cannot be snapped or they lie on different islands."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import dijkstra

    (qa, qb), (ia, ib) = snap_spans(nav, np.stack([np.asarray(a, float).reshape(3), np.asarray(b, float).reshape(3)]))
    if ia < 0 or ib < 0 or nav.span_island[ia] != nav.span_island[ib]:
        return np.zeros((0, 3))
    if line_of_sight(nav, np.array([ia]), qa[None], np.array([ib]), qb[None])[0]:
        return np.stack([qa, qb])
    g = geodesic_graph(nav, radius)
    S, N = g.S, g.N
    pos = np.vstack([nav.span_pos, g.corner_pos]) if g.C else nav.span_pos
    seeds = g.seen_from(np.array([ia]))[0]
    seeds = seeds[seeds < S]
    # a private copy of the graph with the start as node N (the shared virtual row is not touched)
    end = int(g._indptr64[N])
    indptr = np.r_[g._indptr64[:N + 1], end + seeds.size]
    indices = np.r_[g.indices[:end].astype(np.int64), seeds]
    data = np.r_[g.data[:end], np.maximum(np.linalg.norm(pos[seeds] - qa, axis=1), 1e-9)]
    graph = csr_matrix((data, indices, indptr), shape=(N + 1, N + 1))
    dist, pred = dijkstra(graph, directed=True, indices=N, return_predecessors=True)
    last = g.seen_from(np.array([ib]))[0]
    last = last[last < S]
    total = dist[last] + np.linalg.norm(pos[last] - qb, axis=1)
    node = int(last[np.argmin(total)])
    if not np.isfinite(total.min()):
        return np.zeros((0, 3))
    nodes = []
    while node != N and node >= 0:
        nodes.append(node)
        node = int(pred[node])
    return np.vstack([qa[None], pos[np.array(nodes[::-1])], qb[None]])


def path_length(points) -> float:
    """Summed Euclidean length of a polyline [K, 3] (0 for fewer than two points)."""
    p = np.asarray(points, float).reshape(-1, 3)
    return float(np.linalg.norm(np.diff(p, axis=0), axis=1).sum()) if len(p) > 1 else 0.0
