"""The bps-assets dataset commands, and the real converters behind preprocess."""
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from bps_assets.pipeline.manifest import load_manifest
from bps_assets.pipeline.plan import Shard
from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess
from cli.main import main

from pipeline_fakes import FakeBackend, make_source
from test_pipeline_preprocess import validate_schema

ASSETS = Path(__file__).resolve().parents[1].parent / "shared" / "assets"
ROOM = ASSETS / "habitat-sim" / "scenes" / "simple_room.glb"
NAVMESH = ASSETS / "habitat_test_scenes_navmesh" / "van-gogh-room.navmesh"


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_datasets_command():
    r = run("datasets")
    assert r.exit_code == 0 and "gibson" in r.output and "4+ (72/14/20)" in r.output
    assert "benchmark (61/11/18)" in r.output
    r = run("datasets", "gibson", "--split", "2+", "--json")
    assert len(json.loads(r.output)["train"]) == 332
    r = run("datasets", "gibsn")
    assert r.exit_code != 0 and "did you mean 'gibson'" in r.output


def test_verify_merge_and_source_commands(tmp_path):
    src = make_source(tmp_path / "src", ["Allensville", "Beechwood", "Collierville"], extra=["gibson/x.txt"])
    for i in range(2):
        preprocess(src, tmp_path / "out", "gibson", "tiny", PreprocessOptions(workers=1, in_process=True), Shard(i, 2),
                   backend=FakeBackend())
    shards = sorted((tmp_path / "out").glob("manifest.shard-*.json"))
    r = run("manifest", "merge", *shards, "-o", tmp_path / "out" / "manifest.json")
    assert r.exit_code == 0 and "3 ok scenes" in r.output
    r = run("manifest", "merge", shards[0], "-o", tmp_path / "out" / "m1.json")
    assert r.exit_code != 0 and "shard(s) [1] of 2 missing" in r.output
    r = run("verify", tmp_path / "out" / "manifest.json", "--deep")
    assert r.exit_code == 0 and r.output.splitlines()[-1].startswith("OK: 3 scenes")
    r = run("verify", tmp_path / "out" / "manifest.json", "--json")
    assert json.loads(r.output)["ok"] is True
    (tmp_path / "out" / "scenes" / "Beechwood.bps").write_bytes(b"gone")
    r = run("verify", tmp_path / "out" / "manifest.json")
    assert r.exit_code == 1 and "FAIL Beechwood" in r.output
    r = run("verify", "--source", src, "--dataset", "gibson", "--split", "tiny")
    assert r.exit_code == 1 and "missing scenes (32)" in r.output and "gibson/x.txt" in r.output
    r = run("verify", "--source", src, "--dataset", "gibson", "--split", "tiny", "--json")
    assert json.loads(r.output)["stray"] == ["gibson/x.txt"]
    r = run("verify")
    assert r.exit_code != 0 and "give a MANIFEST" in r.output
    r = run("manifest", "show", tmp_path / "out")
    assert "train 2, val 1" in r.output


@pytest.mark.shared_assets
@pytest.mark.skipif(not ROOM.is_file() or not NAVMESH.is_file(), reason="../shared/assets absent")
def test_preprocess_command_with_the_real_converters(tmp_path):
    """Real packed_scene / nav / episodes behind the CLI, on a real habitat stage and .navmesh."""
    g = tmp_path / "src" / "gibson"
    g.mkdir(parents=True)
    shutil.copy(ROOM, g / "Allensville.glb")
    shutil.copy(NAVMESH, g / "Allensville.navmesh")
    shutil.copy(ROOM, g / "Collierville.glb")
    (g / "Collierville.navmesh").write_bytes(b"MSET" + bytes(60))  # unreadable: auto builds instead
    out = tmp_path / "out"
    r = run("preprocess", tmp_path / "src", "-o", out, "--dataset", "gibson", "--split", "tiny",
            "--subset", "train", "--subset", "val", "--episodes", "3", "--workers", "2", "--json")
    assert r.exit_code == 0, r.output
    res = json.loads(r.output[r.output.index("{"):])
    assert res["counts"] == {"ok": 2, "skipped": 0, "failed": 0, "missing": 28}
    validate_schema(out / "manifest.json")
    m = load_manifest(out / "manifest.json")
    a, c = m.scene("Allensville"), m.scene("Collierville")
    assert a.stats["navmesh_source"] == "imported" and c.stats["navmesh_source"] == "built"
    assert "not imported" in c.stats["navmesh_note"] and "navmesh" in c.outputs
    assert m.doc["scenes"]["Collierville"]["sources"]["navmesh"]["size"] == 64  # still an input
    assert a.stats["triangles"] > 0 and a.stats["islands"] >= 1 and a.stats["navigable_area"] > 0
    assert a.outputs["scene"]["content_version"] >= 1 and a.outputs["navmesh"]["format"] == "NAVM"
    from bps_assets.nav import load_navmesh
    from bps_assets.nav.episodes import read_pointnav_dataset
    from bps_assets.packed_scene import read_packed_scene

    assert read_packed_scene(a.scene).indices.shape[0] == a.stats["triangles"]
    assert load_navmesh(a.navmesh).num_islands == a.stats["islands"]
    eps = read_pointnav_dataset(m.episodes_path("train"))
    assert len(eps) == 3 and all(e["scene_id"] == "gibson/Allensville.glb" for e in eps)
    r = run("verify", out / "manifest.json", "--deep")
    assert r.exit_code == 0, r.output
    # rerun: nothing to do; --navmesh build changes the settings: everything is redone
    r = run("preprocess", tmp_path / "src", "-o", out, "--dataset", "gibson", "--split", "tiny",
            "--subset", "train", "--subset", "val", "--episodes", "3", "--workers", "1")
    assert r.exit_code == 0 and "0 processed, 2 up to date" in r.output
    # a kept scene replaced by zeros of the same size is redone, and said so (issue 14 item 2)
    (out / "scenes" / "Allensville.bps").write_bytes(bytes((out / "scenes" / "Allensville.bps").stat().st_size))
    r = run("preprocess", tmp_path / "src", "-o", out, "--dataset", "gibson", "--split", "tiny",
            "--subset", "train", "--subset", "val", "--episodes", "3", "--workers", "1", "--verify-kept")
    assert r.exit_code == 0 and "1 processed, 1 up to date" in r.output, r.output
    assert "redoing Allensville: kept output failed the resume check" in r.output
    r = run("preprocess", tmp_path / "src", "-o", out, "--dataset", "gibson", "--split", "tiny",
            "--subset", "train", "--subset", "val", "--navmesh", "build", "--workers", "1")
    assert r.exit_code == 0 and "2 processed, 0 up to date" in r.output
    assert load_manifest(out).scene("Allensville").stats["navmesh_source"] == "built"


def test_preprocess_says_when_src_is_missing_or_a_file(tmp_path):
    """Issue 35 item 6: the first error names the real problem, not `--dataset is required`."""
    for extra in ((), ("--dataset", "gibson")):
        r = run("preprocess", tmp_path / "nonexistent_scans", "-o", tmp_path / "x", *extra)
        assert r.exit_code == 2 and "no such file or folder" in r.output, r.output
        assert "--dataset is required" not in r.output and "a folder of scans" in r.output
    scan = tmp_path / "room.glb"
    scan.write_bytes(b"glTF")
    r = run("preprocess", scan, "-o", tmp_path / "x")
    assert r.exit_code == 2 and "is a file" in r.output and "bps-assets convert" in r.output, r.output
    assert not (tmp_path / "x").exists()
    (tmp_path / "gibson").mkdir()   # a dataset's layout still asks for --dataset by name
    r = run("preprocess", tmp_path, "-o", tmp_path / "x")
    assert r.exit_code == 2 and "--dataset is required (SRC has the gibson layout" in r.output


def test_preprocess_prints_a_line_per_scene_without_a_terminal(tmp_path):
    """Issue 35 item 10: with no progress bar (a log file, SLURM), each finished scene is a line."""
    src = make_source(tmp_path / "src", ["Allensville", "Beechwood", "Collierville"])
    lines = []
    preprocess(src, tmp_path / "out", "gibson", "tiny", PreprocessOptions(workers=1, in_process=True),
               backend=FakeBackend(), progress=False, log=lines.append)
    done = [ln for ln in lines if ln.lstrip().startswith("[")]
    assert [ln.split()[0] for ln in done] == ["[1/3]", "[2/3]", "[3/3]"], lines
    assert all(" ok; " in ln and "s left" in ln for ln in done)
    assert {ln.split()[1] for ln in done} == {"Allensville", "Beechwood", "Collierville"}
