"""bps_assets/nav's shape: imports point one way (no cycle, counting imports inside
functions), NavMesh's query methods are defined in its class, and errors a user can reach from
the geodesic search are typed."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import bps_assets.nav as navpkg
from bps_assets.errors import NavError
from bps_assets.nav import geodesic
from bps_assets.nav.grid import NavMesh

NAV = Path(navpkg.__file__).parent


def _nav_imports(path: Path) -> set[str]:
    """Modules of bps_assets.nav that ``path`` imports, anywhere in the file (functions
    included; ``if TYPE_CHECKING:`` blocks, which never run, excluded)."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            node.body = []
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level == 1:  # from .x import y / from . import x
                out |= {mod.split(".")[0]} if mod else {a.name for a in node.names}
            elif mod.startswith("bps_assets.nav."):
                out.add(mod.split(".")[2])
        elif isinstance(node, ast.Import):
            out |= {a.name.split(".")[2] for a in node.names if a.name.startswith("bps_assets.nav.")}
    return out - {path.stem}


def test_no_import_cycle_in_nav():
    mods = {p.stem: p for p in NAV.glob("*.py") if p.stem != "__init__"}
    graph = {m: _nav_imports(p) & set(mods) for m, p in mods.items()}
    assert "build" not in graph["grid"] and "grid" not in graph["queries"]
    state: dict[str, int] = {}

    def visit(m, stack):
        state[m] = 1
        for n in graph[m]:
            if state.get(n) == 1:
                raise AssertionError(f"import cycle: {' -> '.join(stack + [m, n])}")
            if n not in state:
                visit(n, stack + [m])
        state[m] = 2

    for m in graph:
        if m not in state:
            visit(m, [])


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
