"""`bps-assets episodes`: scene names from navmesh file names, and one scene that cannot give
episodes does not cost the others theirs."""
import json

import pytest
from click.testing import CliRunner

from bps_assets.nav import build_navmesh
from bps_assets.nav import episodes as ep
from bps_assets.habitat_names import habitat_scene_name as scene_name
from cli.main import main
from bps_assets.nav.reference_scenes import Geometry


def _floor_navmesh(path, size):
    """A packed navmesh of one square floor of ``size`` m (habitat frame)."""
    g = Geometry().quad_y(0, 0, size, size, 0.0, div=4)
    build_navmesh(g.arrays()).save(path)
    return path


@pytest.fixture(scope="module")
def navs(tmp_path_factory):
    d = tmp_path_factory.mktemp("navs")
    return {"big": _floor_navmesh(d / "Allensville.navmesh.bps", 8.0),
            "big2": _floor_navmesh(d / "Bolton.navmesh.bps", 6.0),
            "tiny": _floor_navmesh(d / "Tiny.navmesh.bps", 2.0)}  # island radius < 1.5 m: no episode


@pytest.mark.parametrize("file, name", [
    ("Allensville.navmesh.bps", "Allensville"), ("Allensville.navmesh", "Allensville"),
    ("17DRP5sb8fy.navm", "17DRP5sb8fy"), ("x.BIN", "x"), ("scene.json", "scene"), ("a.b.navmesh.bps", "a"),
    ("TEEsavR23oF.basis.navmesh.bps", "TEEsavR23oF"), ("TEEsavR23oF.basis.navmesh", "TEEsavR23oF")])
def test_scene_name_drops_the_navmesh_suffixes(tmp_path, file, name):
    assert scene_name(tmp_path / file) == name


def test_scene_id_and_file_name_come_from_the_scene_name(tmp_path, navs):
    out = tmp_path / "pointnav"
    r = CliRunner().invoke(main, ["episodes", str(navs["big"]), "-o", str(out), "--split", "train",
                                  "--per-scene", "3", "--dataset", "gibson"])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (out / "train" / "content").iterdir()) == ["Allensville.json.gz"]
    eps = ep.read_pointnav_dataset(out / "train" / "train.json.gz")
    assert len(eps) == 3 and {e["scene_id"] for e in eps} == {"gibson/Allensville.glb"}


def test_a_scene_without_episodes_is_reported_and_the_others_are_written(tmp_path, navs):
    out = tmp_path / "pointnav"
    args = ["episodes", str(navs["big"]), str(navs["tiny"]), str(navs["big2"]), "-o", str(out),
            "--split", "val", "--per-scene", "2", "--dataset", "gibson"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code != 0
    err_lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(err_lines) == 1 and "Tiny" in err_lines[0] and "only 0 of 2 episodes" in err_lines[0]
    assert "1 scene(s) failed: Tiny" in r.stderr
    content = sorted(p.name for p in (out / "val" / "content").iterdir())
    assert content == ["Allensville.json.gz", "Bolton.json.gz"]
    assert len(ep.read_pointnav_dataset(out / "val" / "val.json.gz")) == 4
    # --json: the failures are listed too
    r = CliRunner().invoke(main, args + ["--overwrite", "--json"])
    assert r.exit_code != 0
    doc = json.loads(r.stdout)
    assert [s["scene"] for s in doc["scenes"]] == ["Allensville", "Bolton"]
    assert [f["scene"] for f in doc["failed"]] == ["Tiny"] and "only 0 of 2" in doc["failed"][0]["error"]


def test_all_scenes_failing_writes_nothing(tmp_path, navs):
    out = tmp_path / "pointnav"
    r = CliRunner().invoke(main, ["episodes", str(navs["tiny"]), "-o", str(out), "--split", "val",
                                  "--per-scene", "2"])
    assert r.exit_code != 0 and "no episodes written" in r.stderr
    assert not out.exists()


def test_split_takes_only_the_manifest_scenes_of_that_subset(tmp_path, navs):
    """Issue 35 item 7: `episodes OUT/navmeshes/*.bps --split val` on a preprocess output makes
    val episodes on the manifest's val scenes only (the train scenes are left out, and said so)."""
    import shutil

    from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess
    from pipeline_fakes import FakeBackend, make_source

    src = make_source(tmp_path / "src", ["Allensville", "Beechwood", "Collierville"])
    out = tmp_path / "out"
    preprocess(src, out, "gibson", "tiny", PreprocessOptions(workers=1, in_process=True), backend=FakeBackend())
    for name in ("Allensville", "Beechwood", "Collierville"):  # real navmeshes where the manifest says
        shutil.copy(navs["big"], out / "navmeshes" / f"{name}.navmesh.bps")
    files = [str(p) for p in sorted((out / "navmeshes").glob("*.bps"))]
    assert len(files) == 3
    r = CliRunner().invoke(main, ["episodes", *files, "-o", str(tmp_path / "eps"), "--split", "val",
                                  "--per-scene", "2"])
    assert r.exit_code == 0, r.output
    assert "left out 2 scene(s)" in r.stderr and "Allensville (train)" in r.stderr, r.stderr
    eps = ep.read_pointnav_dataset(tmp_path / "eps" / "val" / "val.json.gz")
    assert {e["scene_id"] for e in eps} == {"gibson/Collierville.glb"}
    # --any-subset keeps them all; a split with none of its scenes is an error
    r = CliRunner().invoke(main, ["episodes", *files, "-o", str(tmp_path / "eps"), "--split", "val",
                                  "--per-scene", "2", "--overwrite", "--any-subset"])
    assert r.exit_code == 0 and len(ep.read_pointnav_dataset(tmp_path / "eps" / "val" / "val.json.gz")) == 6
    r = CliRunner().invoke(main, ["episodes", files[2], "-o", str(tmp_path / "eps"), "--split", "train",
                                  "--per-scene", "2", "--overwrite"])
    assert r.exit_code == 2 and "no NAVFILE belongs to the train subset" in r.output
