"""One name per concept in ``bps_runtime.scenes`` (docs/ARCHITECTURE.md, "scenes"): the resident
scene integer is ``scene_index``, never one of its retired names; no test-only hooks; no
getattr / hasattr probes for in-memory fakes (the fakes implement the protocols)."""
from __future__ import annotations

import ast
from pathlib import Path

SCENES = Path(__file__).resolve().parents[1] / "bps_runtime" / "scenes"
RETIRED = {"idx", "idxs", "sid", "keys", "resident_ids", "generation", "stage_hook", "take_events",
           "SceneEvent", "loading_id"}
PROBES = {"getattr", "hasattr"}


def _names(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            yield node.id, node.lineno
        elif isinstance(node, ast.Attribute):
            yield node.attr, node.lineno
        elif isinstance(node, ast.arg):
            yield node.arg, node.lineno
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            yield node.name, node.lineno


def test_scenes_use_one_name_per_concept_and_no_probes():
    files = sorted(SCENES.glob("*.py"))
    assert len(files) >= 8   # loader, checks, cache and the modules it is made of
    found = []
    for f in files:
        for name, line in _names(ast.parse(f.read_text(), str(f))):
            if name in RETIRED or name in PROBES:
                found.append(f"{f.name}:{line}: {name}")
    assert not found, found


def test_the_check_sees_a_retired_name():
    bad = ast.parse("def f(idx):\n    return getattr(idx, 'x')\n")
    assert {"idx", "getattr"} <= {n for n, _ in _names(bad)}
