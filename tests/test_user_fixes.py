"""What a user hits (issue 25), from the user's side: the bps-assets CLI (click's CliRunner or
a subprocess) and make(). Each test fails on 307ac4b."""
import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from cli.main import main

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT.parent / "shared" / "assets"
FOREIGN = ASSETS / "habitat_test_scenes_navmesh" / "apartment_1.navmesh"  # not a synth scene's


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def cli(*args, umask=None, cwd=None):
    """``bps-assets ARGS`` in a subprocess (under ``umask``)."""
    pre = (lambda: os.umask(umask)) if umask is not None else None
    return subprocess.run([sys.executable, "-m", "cli.main", *map(str, args)], cwd=cwd or ROOT,
                          capture_output=True, text=True, preexec_fn=pre,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    """Two synth gibson scenes of the tiny split (Allensville train, Collierville val)."""
    root = tmp_path_factory.mktemp("synth") / "ds"
    r = run("synth", root, "-n", "2")
    assert r.exit_code == 0, r.output
    return root


def _copy(src, tmp_path) -> Path:
    dst = tmp_path / "ds"
    shutil.copytree(src, dst)
    return dst


# ------------------------------------------------------------------------------ item 1

needs_foreign = pytest.mark.skipif(not FOREIGN.is_file(), reason="../shared/assets absent")


@needs_foreign
def test_a_foreign_navmesh_is_replaced_in_auto_mode_and_fails_the_scene_under_import(src, tmp_path):
    ds = _copy(src, tmp_path)
    shutil.copy(FOREIGN, ds / "gibson" / "Allensville.navmesh")
    common = ("--dataset", "gibson", "--split", "tiny", "--workers", "1")
    r = run("preprocess", ds, "-o", tmp_path / "auto", *common)
    assert r.exit_code == 0, r.output
    row = next(line for line in r.output.splitlines() if line.startswith("Allensville"))
    assert " built " in row and "not imported (the navmesh does not fit the scene" in row, row
    assert "built one instead" in row
    st = json.loads((tmp_path / "auto" / "manifest.json").read_text())["scenes"]["Allensville"]["stats"]
    assert st["navmesh_source"] == "built" and st["navigable_area"] > 10
    r = run("verify", tmp_path / "auto" / "manifest.json", "--deep")
    assert r.exit_code == 0, r.output
    # --navmesh import: the scene fails, the run exits 1
    r = run("preprocess", ds, "-o", tmp_path / "imp", *common, "--navmesh", "import")
    assert r.exit_code == 1
    assert "Allensville.navmesh: the navmesh does not fit the scene" in r.output
    assert not (tmp_path / "imp" / "scenes" / "Allensville.bps").exists()
    # --strict in auto mode: fails instead of building
    r = run("preprocess", ds, "-o", tmp_path / "strict", *common, "--strict")
    assert r.exit_code == 1 and "does not fit the scene" in r.output


def _misplaced_navmesh_manifest(src, tmp_path) -> Path:
    """A preprocessed dataset whose Allensville navmesh lies 40 m away from the scene (what a
    bps before this check wrote for another scene's .navmesh), manifest hashes updated."""
    from bps_assets.nav import build_navmesh
    from bps_assets.nav.reference_scenes import Geometry
    from bps_assets.hashing import sha256_file

    out = tmp_path / "out"
    r = run("preprocess", src, "-o", out, "--dataset", "gibson", "--split", "tiny", "--workers", "1")
    assert r.exit_code == 0, r.output
    nav = out / "navmeshes" / "Allensville.navmesh.bps"
    build_navmesh(Geometry().quad_y(40, 40, 46, 46, 0.0, div=2).arrays()).save(nav, overwrite=True)
    doc = json.loads((out / "manifest.json").read_text())
    rec = doc["scenes"]["Allensville"]["outputs"]["navmesh"]
    rec["sha256"], rec["size"] = sha256_file(nav)
    (out / "manifest.json").write_text(json.dumps(doc))
    return out / "manifest.json"


def test_verify_refuses_a_scene_whose_navmesh_lies_outside_it(src, tmp_path):
    manifest = _misplaced_navmesh_manifest(src, tmp_path)
    for deep in ((), ("--deep",)):
        r = run("verify", manifest, *deep)
        assert r.exit_code == 1, r.output
        assert "FAIL Allensville" in r.output and "the navmesh does not fit the scene" in r.output
        assert "FAIL Collierville" not in r.output


def test_make_refuses_a_scene_whose_navmesh_lies_outside_it(src, tmp_path):
    from bps_assets.errors import NavError
    from bps_runtime import make

    manifest = _misplaced_navmesh_manifest(src, tmp_path)
    with pytest.raises(NavError, match="does not fit the scene"):
        env = make(manifest, split=None, num_envs=2, resolution=(8, 8))
        env.reset()
        for _ in range(4):
            env.step(np.ones(2, np.int64))


# ------------------------------------------------------------------------------ item 3

@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o027, 0o640)])
def test_outputs_get_the_mode_of_a_plain_open_under_the_umask(src, tmp_path, umask, mode):
    out = tmp_path / "out"
    r = cli("preprocess", src, "-o", out, "--dataset", "gibson", "--split", "tiny", "--workers", "1",
            "--episodes", "2", umask=umask)
    assert r.returncode == 0, r.stderr + r.stdout
    r = cli("preview", out / "navmeshes" / "Allensville.navmesh.bps", "-o", out / "a.png", umask=umask)
    assert r.returncode == 0, r.stderr
    files = [out / "manifest.json", out / "a.png", *out.glob("scenes/*.bps"), *out.glob("navmeshes/*.bps"),
             *out.glob("episodes/**/*.json.gz")]
    assert len(files) >= 8
    for f in files:
        assert f.stat().st_mode & 0o777 == mode, (f, oct(f.stat().st_mode))


# ------------------------------------------------------------------------------ item 4

def test_navmesh_command_goes_on_after_a_bad_input(src, tmp_path):
    bad = tmp_path / "tile.bin"
    tset = (ord("T") << 24) | (ord("S") << 16) | (ord("E") << 8) | ord("T")  # a DetourTileCache set
    bad.write_bytes(tset.to_bytes(4, "little") + (1).to_bytes(4, "little") + bytes(72))
    scans = sorted(src.glob("gibson/*.glb"))
    r = run("navmesh", bad, *scans, "-o", tmp_path / "nav", "--dataset", "gibson")
    assert r.exit_code == 2, r.output
    assert r.output.count("error:") == 1 and "tile.bin: not supported: tile-cache" in r.output
    assert "2 navmeshes written, 1 failed" in r.output
    assert sorted(p.name for p in (tmp_path / "nav").iterdir()) == [
        "Allensville.navmesh.bps", "Collierville.navmesh.bps"]


# ------------------------------------------------------------------------------ item 5 (+ issue 23 item 3)

def test_preprocess_takes_navmesh_and_converter_settings_and_records_them(src, tmp_path):
    from bps_assets.pipeline.manifest import agent_mismatch, load_manifest, navmesh_settings

    out = tmp_path / "out"
    common = ("--dataset", "gibson", "--split", "tiny", "--subset", "train", "--workers", "1")
    r = run("preprocess", src, "-o", out, *common)
    assert r.exit_code == 0, r.output
    m = load_manifest(out)
    assert navmesh_settings(m).agent_radius == 0.1 and navmesh_settings(m).agent_height == 1.5
    assert "radius 0.1 m, not 0.18 m; height 1.5 m, not 0.88 m" in agent_mismatch(m, 0.18, 0.88)
    area = m.scene("Allensville").stats["navigable_area"]
    r = run("preprocess", src, "-o", out, *common, "--agent-radius", "0.18", "--agent-height", "0.88",
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
    r = run("preprocess", src, "-o", out, *common, "--agent-radius", "0.18", "--agent-height", "0.88",
            "--cell-size", "0.04", "--max-texture", "256", "--texture-format", "bc7")
    assert "0 processed, 1 up to date" in r.output
    from test_pipeline_preprocess import validate_schema

    validate_schema(out / "manifest.json")


@needs_foreign
def test_a_habitat_navmesh_for_another_agent_is_rebuilt_for_the_agent_given(src, tmp_path):
    ds = _copy(src, tmp_path)
    shutil.copy(FOREIGN, ds / "gibson" / "Allensville.navmesh")  # habitat's 0.1 m / 1.5 m agent
    r = run("preprocess", ds, "-o", tmp_path / "out", "--dataset", "gibson", "--split", "tiny", "--workers", "1",
            "--agent-radius", "0.18", "--agent-height", "0.88", "--navmesh", "import")
    assert r.exit_code == 1
    assert "built for an agent of radius 0.1 m, not the 0.18 m of the settings (--agent-radius)" in r.output


def test_the_cell_cap_message_names_the_setting_that_fixes_it(tmp_path):
    from bps_assets.nav.reference_scenes import Geometry
    from packed_scene_glb import write_glb

    v, t = Geometry().quad_y(0, 0, 420, 420, 0.0, div=8).arrays()  # 8,400^2 cells of 5 cm
    write_glb(tmp_path / "tile.glb", np.asarray(v, np.float32), np.asarray(t, np.uint32))
    r = run("navmesh", tmp_path / "tile.glb", "-o", tmp_path / "nav")
    assert r.exit_code != 0 and "over the cap" in r.output and "--cell-size 0.058" in r.output, r.output
    r = run("navmesh", tmp_path / "tile.glb", "-o", tmp_path / "nav", "--cell-size", "1", "--json")
    assert r.exit_code == 0 and json.loads(r.output)["navigable_area"] > 150_000


# ------------------------------------------------------------------------------ item 2

def test_a_run_that_finds_no_scene_fails_with_the_split_to_pass(src, tmp_path):
    r = run("preprocess", src, "-o", tmp_path / "out", "--dataset", "gibson")  # default split 4+
    assert r.exit_code == 2, r.output
    assert "no scene of gibson split '4+' (train/val/test) found (106 missing)" in r.output
    assert "the 2 scene file(s) found belong to split(s) tiny (2)" in r.output and "pass --split tiny" in r.output
    assert not (tmp_path / "out" / "manifest.json").exists()
    r = run("preprocess", src, "-o", tmp_path / "out", "--dataset", "gibson", "--split", "tiny", "--subset", "test")
    assert r.exit_code == 2 and "found are in its train/val subset(s): drop or change --subset" in r.output


def test_verify_fails_a_manifest_without_any_usable_scene(src, tmp_path):
    from bps_assets.pipeline.manifest import new_manifest, write_manifest

    doc = new_manifest(dataset="gibson", split="4+", subsets=["train"], settings={}, shard=None,
                       source_root=str(src), scenes={}, missing=[{"name": "Adrian", "subset": "train"}],
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


def test_a_folder_of_scans_of_no_known_dataset_preprocesses(src, tmp_path):
    from bps_assets.pipeline.manifest import load_manifest

    scans = tmp_path / "my scans"
    for rel, name in (("a/room.glb", "Allensville"), ("b/room.glb", "Collierville"), ("house.glb", "Allensville")):
        (scans / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src / "gibson" / f"{name}.glb", scans / rel)
    r = run("preprocess", scans, "-o", tmp_path / "out", "--up", "z", "--workers", "1")
    assert r.exit_code == 0, r.output
    m = load_manifest(tmp_path / "out")
    assert m.names("train") == ["a__room", "b__room", "house"] and m.dataset.startswith("scans:")
    assert m.doc["scenes"]["a__room"]["sources"]["scene"]["path"] == "a/room.glb"
    assert not list(scans.rglob("*.json"))  # no scene dataset config written
    r = run("verify", tmp_path / "out" / "manifest.json")
    assert r.exit_code == 0, r.output
    # a habitat tree without --dataset is still a usage error naming the dataset
    r = run("preprocess", src, "-o", tmp_path / "out2")
    assert r.exit_code == 2 and "--dataset gibson" in r.output


# ------------------------------------------------------------------------------ items 9, 10

@needs_foreign
def test_nav_info_and_distance_from_the_command_line(tmp_path):
    r = run("nav", "info", FOREIGN)
    assert r.exit_code == 0, r.output
    assert "agent (tile headers): agent_height=1.5, agent_radius=0.1" in r.output
    assert "other settings (not in the file" in r.output and "\nsettings:" not in r.output
    assert " 1 islands" not in r.output
    pts = json.loads(run("nav", "sample", FOREIGN, "-n", "2", "--json").output)
    a, b = (",".join(map(str, p)) for p in pts)
    r = run("nav", "distance", FOREIGN, "--from", a, "--to", b)
    assert r.exit_code == 0, r.output
    pairs = tmp_path / "pairs.json"
    pairs.write_text(json.dumps([{"a": pts[0], "b": pts[1]}]))
    assert run("nav", "distance", FOREIGN, "--pairs", pairs).output == r.output
    r = run("nav", "distance", FOREIGN, "--from", a)
    assert r.exit_code == 2 and "--from and --to go together" in r.output


def test_info_on_a_scan_suggests_convert(src):
    glb = src / "gibson" / "Allensville.glb"
    r = run("info", glb)
    assert r.exit_code == 2 and "bad magic" in r.output
    assert f"bps-assets convert {glb} -o OUTDIR" in r.output


BASIS = ASSETS / "magnum-plugins" / "GltfImporter" / "image.basis"


@pytest.mark.skipif(not BASIS.is_file(), reason="../shared/assets absent")
def test_a_google_texture_basis_image_is_named_as_such(monkeypatch):
    from bps_assets.errors import MissingDependencyError
    from bps_assets.readers.images import decode_image

    monkeypatch.setitem(sys.modules, "opengl_basisu", None)  # the optional package absent
    with pytest.raises(MissingDependencyError) as ei:
        decode_image(BASIS.read_bytes(), "scene.gltf", "image 0")
    assert "GOOGLE_texture_basis" in str(ei.value) and "KHR_texture_basisu" not in str(ei.value)
    assert "pip install" in str(ei.value)


# ------------------------------------------------------------------------------ item 8

def test_bps_train_help_answers_without_importing_torch_and_report_help_is_whole():
    code = ("import sys, contextlib, io\nfrom bps_train.train import main\n"
            "with contextlib.redirect_stdout(io.StringIO()) as f:\n"
            "    try: main(['--help'])\n    except SystemExit: pass\n"
            "print('torch' in sys.modules, '--num-envs' in f.getvalue())")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.stdout.split() == ["False", "True"], r.stderr
    r = subprocess.run([sys.executable, "-m", "bps_train.report", "--help"], cwd=ROOT, capture_output=True,
                       text=True)
    import bps_train.report as report

    first_paragraph = " ".join(report.__doc__.split("\n\n")[0].split())
    assert first_paragraph.endswith("vs frames)."), first_paragraph  # the paragraph, not a cut line
    assert r.returncode == 0 and first_paragraph in " ".join(r.stdout.split())


# ------------------------------------------------------------------------------ item 7

def test_bench_says_what_runs_and_that_it_still_runs(src, tmp_path, monkeypatch):
    import cli.cmd_runtime as cmd

    r = run("preprocess", src, "-o", tmp_path / "out", "--dataset", "gibson", "--split", "tiny", "--workers", "1")
    assert r.exit_code == 0, r.output
    monkeypatch.setattr(cmd, "HEARTBEAT_S", 0.05)
    r = run("bench", tmp_path / "out" / "manifest.json", "--num-envs", "4", "--steps", "4", "--scenes", "1",
            "--resolution", "16", "--threads", "1", "--count-steps", "0", "--split", "train")
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0] == "bench: 4 envs x 4 timed steps on cpu, then 0 counted steps ..."
    assert "still running" in r.output and any(line.startswith("  done in ") for line in lines)
    # the phases as they happen: the env built, the timed steps by fifths, before the report
    ready = next(i for i, line in enumerate(lines) if line.startswith("  env ready in "))
    timed = [i for i, line in enumerate(lines) if line.startswith("  timed steps ")]
    assert [lines[i].split()[2] for i in timed] == ["1/4", "2/4", "3/4", "4/4"], r.output
    assert ready < timed[0] and timed[-1] < next(i for i, line in enumerate(lines) if line.startswith("env step:"))
