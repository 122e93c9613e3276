"""`bps-assets preprocess` / `synth` / `verify` on what a user gives them (issue 25 items 2, 3,
5): output modes under the umask, navmesh and converter settings taken and recorded, a run that
finds no scene, a manifest without a usable scene, synth's printed command, a folder of scans of
no known dataset."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import main

ROOT = Path(__file__).resolve().parents[1]


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def cli(*args, umask=None, cwd=None):
    """``bps-assets ARGS`` in a subprocess (under ``umask``)."""
    pre = (lambda: os.umask(umask)) if umask is not None else None
    return subprocess.run([sys.executable, "-m", "cli.main", *map(str, args)], cwd=cwd or ROOT,
                          capture_output=True, text=True, preexec_fn=pre,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o027, 0o640)])
def test_outputs_get_the_mode_of_a_plain_open_under_the_umask(synth_pair, tmp_path, umask, mode):
    out = tmp_path / "out"
    r = cli("preprocess", synth_pair, "-o", out, "--dataset", "gibson", "--split", "tiny", "--workers", "1",
            "--episodes", "2", umask=umask)
    assert r.returncode == 0, r.stderr + r.stdout
    r = cli("preview", out / "navmeshes" / "Allensville.navmesh.bps", "-o", out / "a.png", umask=umask)
    assert r.returncode == 0, r.stderr
    files = [out / "manifest.json", out / "a.png", *out.glob("scenes/*.bps"), *out.glob("navmeshes/*.bps"),
             *out.glob("episodes/**/*.json.gz")]
    assert len(files) >= 8
    for f in files:
        assert f.stat().st_mode & 0o777 == mode, (f, oct(f.stat().st_mode))


def test_preprocess_takes_navmesh_and_converter_settings_and_records_them(synth_pair, tmp_path):
    from bps_assets.pipeline.manifest import agent_mismatch, load_manifest, navmesh_settings

    out = tmp_path / "out"
    common = ("--dataset", "gibson", "--split", "tiny", "--subset", "train", "--workers", "1")
    r = run("preprocess", synth_pair, "-o", out, *common)
    assert r.exit_code == 0, r.output
    m = load_manifest(out)
    assert navmesh_settings(m).agent_radius == 0.1 and navmesh_settings(m).agent_height == 1.5
    assert "radius 0.1 m, not 0.18 m; height 1.5 m, not 0.88 m" in agent_mismatch(m, 0.18, 0.88)
    area = m.scene("Allensville").stats["navigable_area"]
    r = run("preprocess", synth_pair, "-o", out, *common, "--agent-radius", "0.18", "--agent-height", "0.88",
            "--cell-size", "0.04", "--max-texture", "256", "--texture-format", "bc7")
    assert r.exit_code == 0 and "1 processed, 0 up to date" in r.output, r.output  # resume redid it
    m = load_manifest(out)
    nav = navmesh_settings(m)
    assert (nav.agent_radius, nav.agent_height, nav.cell_size) == (0.18, 0.88, 0.04)
    assert agent_mismatch(m, 0.18, 0.88) is None and agent_mismatch(m, 0.1, 1.5) is not None
    assert m.settings["convert"]["max_texture"] == 256 and m.settings["convert"]["texture_format"] == "bc7"
    assert m.settings["convert"]["dataset"] == "gibson"  # on top of the dataset's preset
    assert m.scene("Allensville").stats["navigable_area"] < area  # the wider agent
    from bps_assets.nav import load_navmesh
    from bps_assets.packed_scene import read_packed_scene

    assert load_navmesh(m.scene("Allensville").navmesh).settings.agent_radius == pytest.approx(0.18)
    tex = read_packed_scene(m.scene("Allensville").scene).header["textures"]
    assert max(t["width"] for t in tex) <= 256 and {t["format"] for t in tex} == {"bc7"}
    r = run("preprocess", synth_pair, "-o", out, *common, "--agent-radius", "0.18", "--agent-height", "0.88",
            "--cell-size", "0.04", "--max-texture", "256", "--texture-format", "bc7")
    assert "0 processed, 1 up to date" in r.output
    from test_pipeline_preprocess import validate_schema

    validate_schema(out / "manifest.json")


def test_a_run_that_finds_no_scene_fails_with_the_split_to_pass(synth_pair, tmp_path):
    r = run("preprocess", synth_pair, "-o", tmp_path / "out", "--dataset", "gibson")  # default split 4+
    assert r.exit_code == 2, r.output
    assert "no scene of gibson split '4+' (train/val/test) found (106 missing)" in r.output
    assert "the 2 scene file(s) found belong to split(s) tiny (2)" in r.output and "pass --split tiny" in r.output
    assert not (tmp_path / "out" / "manifest.json").exists()
    r = run("preprocess", synth_pair, "-o", tmp_path / "out", "--dataset", "gibson", "--split", "tiny", "--subset", "test")
    assert r.exit_code == 2 and "found are in its train/val subset(s): drop or change --subset" in r.output


def test_verify_fails_a_manifest_without_any_usable_scene(synth_pair, tmp_path):
    from bps_assets.pipeline.manifest import new_manifest, write_manifest

    doc = new_manifest(dataset="gibson", split="4+", subsets=["train"], settings={}, shard=None,
                       source_root=str(synth_pair), scenes={}, missing=[{"name": "Adrian", "subset": "train"}],
                       episodes={})
    write_manifest(doc, tmp_path / "manifest.json")
    r = run("verify", tmp_path / "manifest.json")
    assert r.exit_code == 1 and "FAIL manifest: no usable scene" in r.output, r.output


def test_synth_prints_the_preprocess_command_that_fits_and_adds_missing_scenes(tmp_path):
    ds = tmp_path / "ds"
    r = run("synth", ds, "-n", "1")
    assert r.exit_code == 0, r.output
    r = run("synth", ds, "-n", "2")  # an existing folder: the missing scene is added
    assert r.exit_code == 0, r.output
    assert "1 scene(s) already in" in r.output and "1 scenes," in r.output
    assert (ds / "gibson" / "Collierville.glb").is_file()
    cmd = r.output.splitlines()[-1].split("preprocess them: ", 1)[1]
    assert cmd == f"bps-assets preprocess {ds} -o {ds}-out --dataset gibson --split tiny"
    r = run(*cmd.split()[1:], "--workers", "1")
    assert r.exit_code == 0 and "2 processed" in r.output, r.output


def test_a_folder_of_scans_of_no_known_dataset_preprocesses(synth_pair, tmp_path):
    from bps_assets.pipeline.manifest import load_manifest

    scans = tmp_path / "my scans"
    for rel, name in (("a/room.glb", "Allensville"), ("b/room.glb", "Collierville"), ("house.glb", "Allensville")):
        (scans / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(synth_pair / "gibson" / f"{name}.glb", scans / rel)
    r = run("preprocess", scans, "-o", tmp_path / "out", "--up", "z", "--workers", "1")
    assert r.exit_code == 0, r.output
    m = load_manifest(tmp_path / "out")
    assert m.names("train") == ["a__room", "b__room", "house"] and m.dataset.startswith("scans:")
    assert m.doc["scenes"]["a__room"]["sources"]["scene"]["path"] == "a/room.glb"
    assert not list(scans.rglob("*.json"))  # no scene dataset config written
    r = run("verify", tmp_path / "out" / "manifest.json")
    assert r.exit_code == 0, r.output
    # a habitat tree without --dataset is still a usage error naming the dataset
    r = run("preprocess", synth_pair, "-o", tmp_path / "out2")
    assert r.exit_code == 2 and "--dataset gibson" in r.output
