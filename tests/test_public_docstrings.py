"""Every public class and function of bps_runtime, and the public API of bps_assets, has a
docstring (issue 15).

Read with ``ast`` only, so the check needs none of the optional dependencies (Warp, embreex)
and cannot be fooled by a decorator that swaps ``__doc__``. "Public" in bps_runtime: every module,
every top-level function and class not starting with ``_``, and every such method of a public
class (properties included). In bps_assets the public API is what a module lists in ``__all__``
(followed through ``from .x import name`` re-exports) plus every public top-level function and
class of the modules in ``API_MODULES``. And every module of bps_assets, bps_runtime, bps_train
and cli has a module docstring of at most ``MAX_MODULE_DOC_LINES`` lines (issue 21).
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


API_MODULES = (
    "bps_assets/packed_scene.py", "bps_assets/container.py", "bps_assets/readers/__init__.py",
    "bps_assets/nav/__init__.py", "bps_assets/nav/grid.py", "bps_assets/pipeline/preprocess.py",
    "bps_assets/pipeline/manifest.py", "bps_assets/pipeline/verify.py",
    "bps_assets/synth/__init__.py",
)

DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
PACKAGES = ("bps_assets", "bps_runtime", "bps_train", "cli")
# a module docstring says what the module is for and its contract; measurements and
# tried-and-dropped notes live in docs/DECISIONS.md and docs/PERFORMANCE.md
MAX_MODULE_DOC_LINES = 15


def _parse(rel: str) -> ast.Module:
    return ast.parse((ROOT / rel).read_text(encoding="utf-8"), filename=rel)


def _is_setter(fn: ast.AST) -> bool:
    # ``@x.setter`` / ``@x.deleter`` share the property's docstring (help() shows only that one)
    return any(isinstance(d, ast.Attribute) and d.attr in ("setter", "deleter")
               for d in getattr(fn, "decorator_list", ()))


def _missing_in_def(rel: str, node: ast.AST) -> list[str]:
    out = []
    if not ast.get_docstring(node):
        out.append(f"{rel}:{node.lineno} {node.name}")
    if isinstance(node, ast.ClassDef):
        for m in node.body:
            if (isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) and not m.name.startswith("_")
                    and not _is_setter(m) and not ast.get_docstring(m)):
                out.append(f"{rel}:{m.lineno} {node.name}.{m.name}")
    return out


def _public_defs(tree: ast.Module) -> list[ast.AST]:
    return [n for n in tree.body if isinstance(n, DEFS) and not n.name.startswith("_")]


def _module_missing(rel: str) -> list[str]:
    tree = _parse(rel)
    out = [] if ast.get_docstring(tree) else [f"{rel}: module"]
    for node in _public_defs(tree):
        out += _missing_in_def(rel, node)
    return out


def _resolve_from(rel: str, node: ast.ImportFrom) -> str | None:
    """Path (relative to ROOT) of the module a relative or bps_assets ``from`` import names."""
    if node.level:
        base = Path(rel).parent
        for _ in range(node.level - 1):
            base = base.parent
        parts = list(base.parts) + (node.module.split(".") if node.module else [])
    elif node.module and node.module.split(".")[0] == "bps_assets":
        parts = node.module.split(".")
    else:
        return None
    for cand in (Path(*parts).with_suffix(".py"), Path(*parts, "__init__.py")):
        if (ROOT / cand).is_file():
            return cand.as_posix()
    return None


def _all_names(tree: ast.Module) -> tuple[list[str], dict[str, str]]:
    """Names in ``__all__`` and, for lazily exported packages, the submodule of each name.

    ``__all__`` is a list literal, or ``sorted(_EXPORTS)`` over a dict literal name -> submodule
    (bps_assets/pipeline/__init__.py).
    """
    lazy: dict[str, str] = {}
    for n in tree.body:
        if (isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
                and n.targets[0].id == "_EXPORTS" and isinstance(n.value, ast.Dict)):
            lazy = ast.literal_eval(n.value)
    for n in tree.body:
        if (isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
                and n.targets[0].id == "__all__"):
            if isinstance(n.value, (ast.List, ast.Tuple)):
                return list(ast.literal_eval(n.value)), lazy
            return sorted(lazy), lazy
    return [], lazy


def _find_def(rel: str, name: str, seen: frozenset = frozenset()) -> tuple[str, ast.AST] | None:
    """(file, node) defining ``name`` as seen from module ``rel``; None for a constant."""
    if (rel, name) in seen:
        return None
    seen = seen | {(rel, name)}
    tree = _parse(rel)
    for n in tree.body:
        if isinstance(n, DEFS) and n.name == name:
            return rel, n
    for n in tree.body:
        if isinstance(n, ast.ImportFrom):
            for a in n.names:
                if (a.asname or a.name) == name:
                    src = _resolve_from(rel, n)
                    return _find_def(src, a.name, seen) if src else None
    _, lazy = _all_names(tree)
    if name in lazy:
        return _find_def((Path(rel).parent / f"{lazy[name]}.py").as_posix(), name, seen)
    return None


def missing_runtime() -> list[str]:
    out = []
    for f in sorted((ROOT / "bps_runtime").rglob("*.py")):
        rel = f.relative_to(ROOT).as_posix()
        out += _module_missing(rel)
    return out


def missing_assets() -> list[str]:
    out: set[str] = set()
    for rel in API_MODULES:
        out.update(_module_missing(rel))
    for f in sorted((ROOT / "bps_assets").rglob("*.py")):
        rel = f.relative_to(ROOT).as_posix()
        names, _ = _all_names(_parse(rel))
        for name in names:
            found = _find_def(rel, name)
            if found is not None:
                out.update(_missing_in_def(*found))
    return sorted(out)


def test_runtime_public_docstrings():
    missing = missing_runtime()
    print("\n".join(missing))
    assert not missing, f"{len(missing)} public names of bps_runtime lack a docstring:\n" + "\n".join(missing)


def test_assets_api_docstrings():
    missing = missing_assets()
    print("\n".join(missing))
    assert not missing, f"{len(missing)} public API names of bps_assets lack a docstring:\n" + "\n".join(missing)


def test_checker_sees_a_missing_docstring(tmp_path, monkeypatch):
    # the checks above must be able to fail: a module with one bare function and one bare method
    pkg = tmp_path / "bps_assets"
    pkg.mkdir()
    (pkg / "m.py").write_text('"""Doc."""\n__all__ = ["f", "C"]\ndef f():\n    pass\n'
                              'class C:\n    """Doc."""\n    def g(self):\n        pass\n'
                              '    @property\n    def p(self):\n        """Doc."""\n'
                              '    @p.setter\n    def p(self, v):\n        pass\n')
    (pkg / "__init__.py").write_text('__all__ = ["f"]\nfrom .m import f\n')
    mod = sys.modules[__name__]
    monkeypatch.setattr(mod, "ROOT", tmp_path)
    monkeypatch.setattr(mod, "API_MODULES", ())
    assert missing_assets() == ["bps_assets/m.py:3 f", "bps_assets/m.py:7 C.g"]


def module_docstring_problems() -> list[str]:
    """Modules of ``PACKAGES`` without a module docstring or with one over the line limit."""
    out = []
    for pkg in PACKAGES:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            rel = f.relative_to(ROOT).as_posix()
            doc = ast.get_docstring(_parse(rel))
            if not doc:
                out.append(f"{rel}: no module docstring")
            elif len(doc.splitlines()) > MAX_MODULE_DOC_LINES:
                out.append(f"{rel}: module docstring of {len(doc.splitlines())} lines")
    return out


def test_module_docstrings_short():
    problems = module_docstring_problems()
    assert not problems, (f"{len(problems)} modules lack a module docstring of at most "
                          f"{MAX_MODULE_DOC_LINES} lines (move measurements and history to "
                          "docs/DECISIONS.md or docs/PERFORMANCE.md):\n" + "\n".join(problems))


def test_module_docstring_check_can_fail(tmp_path, monkeypatch):
    pkg = tmp_path / "cli"
    pkg.mkdir()
    (pkg / "ok.py").write_text('"""' + "line\n" * (MAX_MODULE_DOC_LINES - 1) + 'last."""\nX = 1\n')
    (pkg / "long.py").write_text('"""' + "line\n" * MAX_MODULE_DOC_LINES + 'last."""\nX = 1\n')
    (pkg / "bare.py").write_text("X = 1\n")
    mod = sys.modules[__name__]
    monkeypatch.setattr(mod, "ROOT", tmp_path)
    monkeypatch.setattr(mod, "PACKAGES", ("cli",))
    assert module_docstring_problems() == [
        "cli/bare.py: no module docstring",
        f"cli/long.py: module docstring of {MAX_MODULE_DOC_LINES + 1} lines"]
