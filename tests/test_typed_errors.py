"""Library code of bps_assets and bps_train raises typed errors (bps_assets.errors), never a
bare ValueError / TypeError, except inside a ``try`` of the same function that turns it into
one (docs/ARCHITECTURE.md "Shared rules"): a built-in error reaches the CLI as "internal error"."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BUILTIN = {"ValueError", "TypeError"}


def _caught_here(node, parents) -> bool:
    """Is ``node`` inside a try body whose handlers catch ValueError / TypeError / Exception?"""
    child = node
    for p in reversed(parents):
        if isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return False
        if isinstance(p, ast.Try) and child in p.body:
            names = set()
            for h in p.handlers:
                t = h.type
                elts = t.elts if isinstance(t, ast.Tuple) else [t] if t is not None else []
                names |= {e.id for e in elts if isinstance(e, ast.Name)}
            if names & (BUILTIN | {"Exception"}):
                return True
        child = p
    return False


def _escaping(path: Path):
    tree = ast.parse(path.read_text())
    out = []

    def walk(node, parents):
        if isinstance(node, ast.Raise) and node.exc is not None:
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(exc, ast.Name) and exc.id in BUILTIN and not _caught_here(node, parents):
                out.append(f"{path.relative_to(ROOT)}:{node.lineno} raise {exc.id}")
        for c in ast.iter_child_nodes(node):
            walk(c, parents + [node])
    walk(tree, [])
    return out


@pytest.mark.parametrize("package", ["bps_assets", "bps_train"])
def test_no_builtin_value_or_type_error_escapes(package):
    found = [x for p in sorted((ROOT / package).rglob("*.py")) for x in _escaping(p)]
    assert found == []


def test_the_check_can_fail(tmp_path):
    p = ROOT / "bps_assets" / "_probe_typed_errors.py"
    try:
        p.write_text("def f(x):\n    if x:\n        raise ValueError('x')\n"
                     "def g(x):\n    try:\n        raise TypeError('y')\n    except TypeError:\n        pass\n")
        assert _escaping(p) == ["bps_assets/_probe_typed_errors.py:3 raise ValueError"]
    finally:
        p.unlink()
