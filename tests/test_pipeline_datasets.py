import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bps_assets.errors import DatasetError
from bps_assets.pipeline import datasets as D

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO.parent / "shared" / "reference"


def test_known_datasets_and_habitat_counts():
    assert {"gibson", "mp3d"} <= set(D.list_datasets())
    g = D.load_dataset("gibson")
    counts = {s: {k: len(v) for k, v in sub.items()} for s, sub in g.splits.items()}
    assert counts["4+"] == {"train": 72, "val": 14, "test": 20}
    assert counts["2+"]["train"] == 332
    assert counts["tiny"] == {"train": 25, "val": 5, "test": 5}
    assert counts["full+"] == {"train": 412, "val": 80, "test": 80}
    assert len(g.scenes) == 572
    m = D.load_dataset("mp3d")
    assert {k: len(v) for k, v in m.split().items()} == {"train": 61, "val": 11, "test": 18}
    # the layouts habitat uses
    assert g.layout.scene_path("Adrian") == "gibson/Adrian.glb"
    assert m.layout.navmesh_path("17DRP5sb8fy") == "mp3d/17DRP5sb8fy/17DRP5sb8fy.navmesh"
    # splits are disjoint inside a split, and 4+ is a subset of full+ with quality >= 4
    for sub in g.split("4+").values():
        for n in sub:
            assert g.scenes[n]["qual"] >= 4 and g.scenes[n]["splits"]["full+"] != "none"
    assert not set(g.split("tiny")["train"]) & set(g.split("tiny")["val"])


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="../shared/reference absent")
def test_gibson_splits_match_the_reference_list():
    ref = json.loads((REFERENCE / "gibson_dset_with_qual.json").read_text())
    g = D.load_dataset("gibson")
    for split in ("tiny", "medium", "full", "full+"):
        for sub in ("train", "val", "test"):
            want = sorted(k for k, v in ref.items() if v[f"split_{split}"] == sub)
            assert sorted(g.splits[split][sub]) == want, (split, sub)
    for sub in ("train", "val", "test"):
        want = sorted(k for k, v in ref.items() if v["split_full+"] == sub and (v["qual"] or 0) >= 4)
        assert sorted(g.splits["4+"][sub]) == want
    mp = json.loads((REFERENCE / "mp3d_splits.json").read_text())
    m = D.load_dataset("mp3d")
    for sub in ("train", "val", "test"):
        assert m.splits["benchmark"][sub] == mp[sub]


def test_unknown_names_suggest_known_ones():
    with pytest.raises(DatasetError, match="did you mean 'gibson'"):
        D.load_dataset("gibsn")
    with pytest.raises(DatasetError, match="known: .*gibson.*mp3d"):
        D.load_dataset("replica")
    with pytest.raises(DatasetError, match="did you mean '4\\+'"):
        D.load_dataset("gibson").split("4")


def test_env_override_and_malformed_file(tmp_path, monkeypatch):
    (tmp_path / "mine.json").write_text(json.dumps({
        "name": "mine", "layout": {"scene": "mine/{scene}.glb", "navmesh": "mine/{scene}.navmesh"},
        "default_split": "all", "splits": {"all": {"train": ["a", "b"], "val": ["c"]}}}))
    (tmp_path / "broken.json").write_text("{nope")
    monkeypatch.setenv(D.ENV_VAR, str(tmp_path))
    assert D.list_datasets() == ["broken", "mine"]
    assert D.load_dataset("mine").scene_subsets() == {"a": "train", "b": "train", "c": "val"}
    with pytest.raises(DatasetError, match="broken.json: not valid JSON"):
        D.load_dataset("broken")


@pytest.mark.slow
def test_data_manifests_ship_in_the_wheel(tmp_path):
    """A wheel install (no repo checkout beside it) still finds data_manifests."""
    wheel_dir, target, tree = tmp_path / "wheel", tmp_path / "site", tmp_path / "tree"
    # build from a copy: an in-tree build would leave build/ and *.egg-info in the checkout
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", ".venv", "demo_out")
    tree.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, tree / name)
    for d in ("bps_assets", "bps_runtime", "bps_train", "cli", "data_manifests"):
        if (REPO / d).is_dir():
            shutil.copytree(REPO / d, tree / d, ignore=ignore)
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                        "-w", str(wheel_dir), str(tree)], capture_output=True, text=True, cwd=tmp_path)
    if r.returncode != 0:
        pytest.skip(f"cannot build a wheel here: {r.stderr[-300:]}")
    whl = next(wheel_dir.glob("*.whl"))
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target),
                        str(whl)], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    # -S: no site-packages, so the editable install of this checkout cannot answer the import
    code = (f"import sys; sys.path.insert(0, {str(target)!r}); "
            "from bps_assets.pipeline import datasets as D; d = D.load_dataset('gibson'); "
            "print(D.manifests_dir(), len(d.split('4+')['train']))")
    env = {k: v for k, v in os.environ.items() if k not in (D.ENV_VAR, "PYTHONPATH")}
    r = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    where, n = r.stdout.split()
    assert n == "72"
    assert Path(where).resolve() != (REPO / "data_manifests").resolve()
    assert str(target) in where


def test_package_exports_are_the_objects_not_submodules():
    import types

    import bps_assets.pipeline as P
    import bps_assets.pipeline.preprocess  # noqa: F401  (a submodule import must not shadow them)

    for name in P.__all__:
        assert not isinstance(getattr(P, name), types.ModuleType), name
