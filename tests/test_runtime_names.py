"""One name per concept in bps_runtime (docs/ARCHITECTURE.md, "Glossary"): the retired names of a
resident scene's small integer (now ``scene_index`` everywhere) and of the kernels' task
parameters (now ``params``; ``task`` is the task's options) appear nowhere as identifiers.
``bps_runtime/scenes/`` is checked too once its split lands (helper "scenes"), see SKIP."""
from __future__ import annotations

import io
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "bps_runtime"
RETIRED = {"scene_ids", "resident_ids", "sid", "sids", "g_sid", "idx", "idxs", "slot", "uk", "key_of_scene"}
SKIP = ("scenes",)   # being split in another branch (issue 30 item 4); its names follow the same glossary


def _names(path: Path):
    for t in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if t.type == tokenize.NAME:
            yield t.string, t.start[0]


def test_retired_names_are_gone():
    bad = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in SKIP:
            continue
        bad += [f"bps_runtime/{rel}:{line}: {name}" for name, line in _names(path) if name in RETIRED]
    assert not bad, "retired names (see the glossary in docs/ARCHITECTURE.md):\n" + "\n".join(bad)


def test_kernel_parameters_are_params_not_task():
    """In the task modules' Warp kernels the constants are ``params``; ``task`` means options."""
    bad = [p.name for p in sorted((ROOT / "tasks").glob("*.py")) if "task: Params" in p.read_text()]
    assert not bad, bad
