"""The import graph points down the data flow and has no cycles (docs/ARCHITECTURE.md).

Layers, lowest first: scene model and errors -> readers / transforms / writers -> container and
packed files -> synth -> nav -> pipeline -> runtime (its rooms: threads / warp_init -> render,
nav -> scenes, episodes -> step -> tasks -> env) -> trainer -> cli. Every import counts:
module level, inside functions, and module names written as strings (``importlib``), so a lazy
import cannot hide an upward edge. The module map of docs/ARCHITECTURE.md is checked against the
tree too: every module it names exists; every runtime and trainer module is named.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("bps_assets", "bps_runtime", "bps_train", "cli")
# (module prefix, rank); the longest matching prefix wins
LAYERS = [
    ("bps_assets.errors", 0), ("bps_assets.scene", 0), ("bps_assets.manifests_location", 0),
    ("bps_assets.safe_paths", 0), ("bps_assets.semantics", 0), ("bps_assets.json_input", 0),
    ("bps_assets.memory", 0), ("bps_assets.raycast", 0),
    ("bps_assets.host", 0), ("bps_assets.hashing", 0), ("bps_assets.habitat_names", 0),
    ("bps_assets.argv_paths", 0),
    ("bps_assets.native", 0),
    ("bps_assets.readers", 1), ("bps_assets.transforms", 1), ("bps_assets.empty_scene", 1),
    ("bps_assets.container", 2), ("bps_assets.writers", 2), ("bps_assets.packed_scene", 2),
    ("bps_assets.semantic_section", 2), ("bps_assets.composed_section", 2), ("bps_assets.lod_section", 2),
    ("bps_assets.scene_dataset", 3),
    ("bps_assets.synth", 3),
    ("bps_assets.nav", 4),
    ("bps_assets.pipeline", 5),
    # the runtime's rooms, in the order of the flow (imports point down this list)
    ("bps_runtime.threads", 6.0), ("bps_runtime.warp_init", 6.0), ("bps_runtime.grouping", 6.0),
    ("bps_runtime.render", 6.1), ("bps_runtime.nav", 6.1), ("bps_runtime.noise", 6.1),
    ("bps_runtime.scenes", 6.2), ("bps_runtime.episodes", 6.2),
    ("bps_runtime.step", 6.3),
    ("bps_runtime.tasks", 6.4),
    ("bps_runtime.env", 6.5),
    ("bps_train", 7),
    ("cli", 8),
]
MODULE_STRING = re.compile(r"(bps_assets|bps_runtime|bps_train|cli)(\.\w+)+(:\w+)?")


def modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for f in (ROOT / pkg).rglob("*.py"):
            parts = f.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = f
    return out


def _absolute(mod: str, is_pkg: bool, level: int, name: str | None) -> str:
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    graph = {}
    for mod, f in mods.items():
        is_pkg = f.name == "__init__.py"
        out: set[str] = set()
        tree = ast.parse(f.read_text(), str(f))
        for node in ast.walk(tree):  # ``if TYPE_CHECKING:`` imports never run: not dependencies
            if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
                node.body = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                out.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                target = _absolute(mod, is_pkg, node.level, node.module) if node.level else node.module
                subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in mods]
                out.update(subs)
                if len(subs) < len(node.names):  # some names are attributes of the package itself
                    out.add(target)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and MODULE_STRING.fullmatch(node.value):
                out.add(node.value.split(":")[0])
        # a package's own submodules importing the package (its __init__) is not a dependency
        graph[mod] = {o for o in out if o in mods and o != mod and not mod.startswith(o + ".")}
    return graph


def rank(mod: str) -> int:
    best = max((p for p, _ in LAYERS if mod == p or mod.startswith(p + ".")), key=len, default=None)
    if best is None:
        # package roots (``bps_assets``) hold only re-exports and the version
        return -1
    return dict(LAYERS)[best]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_upward_imports():
    graph = import_graph()
    up = sorted(f"{a} (layer {rank(a)}) -> {b} (layer {rank(b)})"
                for a, deps in graph.items() for b in deps if rank(b) > rank(a) >= 0)
    assert not up, "imports against the data flow:\n" + "\n".join(up)


def test_no_import_cycles():
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_every_module_has_a_layer():
    unplaced = sorted(m for m in import_graph() if rank(m) < 0 and m not in PACKAGES)
    assert not unplaced, f"modules with no layer in LAYERS: {unplaced}"


def test_package_roots_import_nothing_heavy():
    # rank -1 modules are package roots; they may re-export only from their own package
    graph = import_graph()
    for root in PACKAGES:
        if root in graph:
            assert all(d.split(".")[0] == root for d in graph[root]), (root, graph[root])


@pytest.mark.parametrize("src, dst, expect", [
    ("import bps_runtime.env\n", "bps_runtime.env", True),
    ("def f():\n    from bps_runtime import env\n", "bps_runtime.env", True),
    ("X = 'bps_runtime.env:make'\n", "bps_runtime.env", True),
    ("import json\n", "bps_runtime.env", False),
    ("if TYPE_CHECKING:\n    from bps_runtime import env\n", "bps_runtime.env", False),
])
def test_graph_sees_lazy_and_string_imports(tmp_path, monkeypatch, src, dst, expect):
    # the checker itself must see every kind of import, or the two tests above prove nothing
    (tmp_path / "bps_assets").mkdir()
    (tmp_path / "bps_assets" / "__init__.py").write_text("")
    (tmp_path / "bps_assets" / "scene.py").write_text(src)
    (tmp_path / "bps_runtime").mkdir()
    (tmp_path / "bps_runtime" / "__init__.py").write_text("")
    (tmp_path / "bps_runtime" / "env.py").write_text("")
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    graph = import_graph()
    assert (dst in graph["bps_assets.scene"]) is expect
    if expect:
        with pytest.raises(AssertionError, match="bps_assets.scene .layer 0. -> bps_runtime.env .layer 6.5."):
            test_no_upward_imports()


# --- the module map of docs/ARCHITECTURE.md names the modules that exist, and all of them ---

def map_sections() -> list[tuple[str, str]]:
    """The map (the first fenced block of docs/ARCHITECTURE.md) cut at its labels ('layer 3',
    '6.2'): [(label, text)], the text up to the next label."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    block = text.split("```", 2)[1]
    out: list[tuple[str, str]] = []
    for line in block.splitlines():
        m = re.match(r"(layer \d|   6\.\d)\s", line)
        if m:
            out.append((m.group(1).strip(), ""))
        if out:
            out[-1] = (out[-1][0], out[-1][1] + line + "\n")
    return out


def _runtime_text() -> str:
    return "".join(t for label, t in map_sections() if label.startswith("6") or label == "layer 6")


def _train_text() -> str:
    return "".join(t for label, t in map_sections() if label == "layer 7")


def map_names() -> set[str]:
    """Module names the map writes: dotted (bps_assets.nav), layer 0's '.name' list, the runtime's
    room/name paths, and in the trainer's entry a lowercase word before ' (' or ','."""
    sections = dict(map_sections())
    names = {m.group(0) for m in re.finditer(r"\b(bps_assets|bps_runtime|bps_train)(\.\w+)+", "".join(sections.values()))}
    names |= {"bps_assets" + m.group(0) for m in re.finditer(r"(?<![\w.`])\.\w+", sections["layer 0"])}
    for m in re.finditer(r"(?<![\w/])([a-z_]+)/(\w*)", _runtime_text()):
        names.add(".".join(["bps_runtime", m.group(1)] + ([m.group(2)] if m.group(2) else [])))
    names |= {"bps_train." + w for w in re.findall(r"\b([a-z_]+)(?= \(|,)", _train_text())}
    return names


def test_module_map_names_only_modules_that_exist():
    stale = sorted(n for n in map_names() if n not in modules())
    assert not stale, f"docs/ARCHITECTURE.md's map names modules that do not exist: {stale}"


def test_module_map_names_every_runtime_and_trainer_module():
    runtime, train = _runtime_text(), _train_text()
    missing = [m for m in modules() if m.startswith(("bps_runtime.", "bps_train."))
               and not re.search(rf"\b{m.split('.')[-1]}\b", runtime if m.startswith("bps_runtime") else train)]
    missing += [m for m in modules() if m.count(".") == 1 and m.startswith("bps_assets.") and m not in map_names()]
    assert not missing, f"modules docs/ARCHITECTURE.md's map does not name: {sorted(missing)}"
