"""bps_assets/nav's shape: imports point one way (no cycle, counting imports inside
functions), NavMesh's query methods are defined in its class, and errors a user can reach from
the geodesic search are typed."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import bps_assets.nav as navpkg
from bps_assets.errors import NavError
from bps_assets.nav import geodesic
from bps_assets.nav.grid import NavMesh
from test_layering import cycles, import_graph

NAV = Path(navpkg.__file__).parent


def test_no_import_cycle_in_nav():
    # the whole-project walker (tests/test_layering.py) restricted to bps_assets.nav
    graph = {m: {d for d in deps if d.startswith("bps_assets.nav.")}
             for m, deps in import_graph().items() if m.startswith("bps_assets.nav.")}
    assert "bps_assets.nav.build" not in graph["bps_assets.nav.grid"]
    assert "bps_assets.nav.grid" not in graph["bps_assets.nav.queries"]
    assert not cycles(graph)


def test_query_methods_are_defined_in_the_class():
    names = ("locate", "is_navigable", "snap_point", "island_of", "island_radius", "distance_field",
             "distance_at", "geodesic_distance", "sample_navigable_point", "try_step")
    for n in names:
        assert n in NavMesh.__dict__, n
        assert NavMesh.__dict__[n].__qualname__ == f"NavMesh.{n}" and NavMesh.__dict__[n].__doc__
    src = (NAV / "queries.py").read_text()
    assert "NavMesh." not in src.replace("``NavMesh``", "")  # nothing attached from outside


def test_geodesic_search_failures_are_typed(monkeypatch):
    v = np.array([[0, 0, 0], [2, 0, 0], [2, 0, 2], [0, 0, 2]], float)
    nav = NavMesh.from_walkable_triangles(v, np.array([[0, 2, 1], [0, 3, 2]]))
    g = nav.distance_field  # warm the graph
    from bps_assets.nav.queries import geodesic_graph

    gg = geodesic_graph(nav)
    if gg.indices.dtype != np.int32:
        pytest.skip("graph not in the compiled Dijkstra's layout")
    for rc, msg in ((-1, "ran out of memory"), (-2, "corrupt")):
        monkeypatch.setattr(geodesic, "_native_dijkstra", lambda rc=rc: (lambda *a: rc))
        with pytest.raises(NavError, match=msg):
            g(np.array([0.5, 0.0, 0.5]))
