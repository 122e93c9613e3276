"""docs/HABITAT_LAB.md's example, run: its overrides are fields of habitat-lab's own
``DatasetConfig`` (read from habitat-lab's source), its benchmark config exists and names the
dataset type, and habitat-lab's real ``PointNavDatasetV1`` reads a preprocess output through
those keys, giving the episodes and ``scene_id`` the example prints. ``habitat.get_config`` is
hydra's (not installed here): a stand-in applies the overrides to the benchmark's dataset yaml."""
from __future__ import annotations

import ast
import contextlib
import io
import re
from pathlib import Path
from types import SimpleNamespace

from habitat_lab_stub import habitat_lab  # noqa: F401 - the fixture

DOC = Path(__file__).resolve().parents[1] / "docs" / "HABITAT_LAB.md"


def _example() -> str:
    return DOC.read_text().split("```python\n", 1)[1].split("```", 1)[0]


def _dataset_fields(root: Path) -> set[str]:
    tree = ast.parse((root / "config" / "default_structured_configs.py").read_text())
    cls = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "DatasetConfig")
    return {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign)}


def _yaml_scalars(path: Path) -> dict:
    """``key: value`` lines at the top level of a small habitat config yaml."""
    return dict(m.groups() for m in re.finditer(r"^(\w+): (\S+)$", path.read_text(), re.M))


def _stand_in(h, root: Path):
    """``habitat.get_config`` / ``make_dataset`` of the example, on habitat-lab's files."""
    fields = _dataset_fields(root)
    assert {"data_path", "split", "scenes_dir", "type", "content_scenes"} <= fields

    def get_config(benchmark, overrides=()):
        text = (root / "config" / benchmark).read_text()
        name = re.search(r"^\s*- /habitat/dataset/pointnav: (\w+)$", text, re.M).group(1)
        ds = {"scenes_dir": "data/scene_datasets", "content_scenes": ["*"],
              **_yaml_scalars(root / "config" / "habitat" / "dataset" / "pointnav" / f"{name}.yaml")}
        for o in overrides:
            key, value = o.split("=", 1)
            assert key.startswith("habitat.dataset.") and key.split(".", 2)[2] in fields, key
            ds[key.split(".", 2)[2]] = value
        return SimpleNamespace(habitat=SimpleNamespace(dataset=SimpleNamespace(**ds)))

    def make_dataset(kind, config):
        return {"PointNav-v1": h.PointNavDatasetV1, "ObjectNav-v1": h.ObjectNavDatasetV1}[kind](config)

    return SimpleNamespace(get_config=get_config, make_dataset=make_dataset)


def test_the_documented_example_reads_a_preprocess_output(habitat_lab, tmp_path, monkeypatch):
    import sys

    from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess
    from pipeline_fakes import FakeBackend, make_source

    make_source(tmp_path / "SRC", ["Allensville", "Beechwood", "Collierville"])
    preprocess(tmp_path / "SRC", tmp_path / "OUT", "gibson", "tiny",
               PreprocessOptions(workers=1, in_process=True, episodes=4), backend=FakeBackend())
    root = Path(sys.modules["habitat"].__path__[0])   # the installed habitat-lab's package folder
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "habitat", _stand_in(habitat_lab, root))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(_example(), str(DOC), "exec"), {})
    n, scene_id = out.getvalue().split()
    assert n == "4" and scene_id == "SRC/gibson/Collierville.glb"   # the val scene, as the comment says
    assert "# SRC/gibson/Collierville.glb" in _example()
