"""A navmesh from the user's side (issue 25 items 1, 4, 5, 9): preprocess, verify and make()
refuse a navmesh that does not fit its scene or agent; `bps-assets navmesh` goes on after a bad
input and names the setting that lifts its cell cap; `nav info|distance` on habitat's own file."""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from cli.main import main

ROOT = Path(__file__).resolve().parents[1]
FOREIGN = ROOT.parent / "shared" / "assets" / "habitat_test_scenes_navmesh" / "apartment_1.navmesh"  # not a synth scene's
needs_foreign = pytest.mark.skipif(not FOREIGN.is_file(), reason="../shared/assets absent")


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _copy(synth_pair, tmp_path) -> Path:
    dst = tmp_path / "ds"
    shutil.copytree(synth_pair, dst)
    return dst


@needs_foreign
def test_a_foreign_navmesh_is_replaced_in_auto_mode_and_fails_the_scene_under_import(synth_pair, tmp_path):
    ds = _copy(synth_pair, tmp_path)
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


def _misplaced_navmesh_manifest(synth_pair, tmp_path) -> Path:
    """A preprocessed dataset whose Allensville navmesh lies 40 m away from the scene (what a
    bps before this check wrote for another scene's .navmesh), manifest hashes updated."""
    from bps_assets.nav import build_navmesh
    from bps_assets.nav.reference_scenes import Geometry
    from bps_assets.hashing import sha256_file

    out = tmp_path / "out"
    r = run("preprocess", synth_pair, "-o", out, "--dataset", "gibson", "--split", "tiny", "--workers", "1")
    assert r.exit_code == 0, r.output
    nav = out / "navmeshes" / "Allensville.navmesh.bps"
    build_navmesh(Geometry().quad_y(40, 40, 46, 46, 0.0, div=2).arrays()).save(nav, overwrite=True)
    doc = json.loads((out / "manifest.json").read_text())
    rec = doc["scenes"]["Allensville"]["outputs"]["navmesh"]
    rec["sha256"], rec["size"] = sha256_file(nav)
    (out / "manifest.json").write_text(json.dumps(doc))
    return out / "manifest.json"


def test_verify_refuses_a_scene_whose_navmesh_lies_outside_it(synth_pair, tmp_path):
    manifest = _misplaced_navmesh_manifest(synth_pair, tmp_path)
    for deep in ((), ("--deep",)):
        r = run("verify", manifest, *deep)
        assert r.exit_code == 1, r.output
        assert "FAIL Allensville" in r.output and "the navmesh does not fit the scene" in r.output
        assert "FAIL Collierville" not in r.output


def test_make_refuses_a_scene_whose_navmesh_lies_outside_it(synth_pair, tmp_path):
    from bps_assets.errors import NavError
    from bps_runtime import make

    manifest = _misplaced_navmesh_manifest(synth_pair, tmp_path)
    with pytest.raises(NavError, match="does not fit the scene"):
        env = make(manifest, split=None, num_envs=2, resolution=(8, 8))
        env.reset()
        for _ in range(4):
            env.step(np.ones(2, np.int64))


@needs_foreign
def test_a_habitat_navmesh_for_another_agent_is_rebuilt_for_the_agent_given(synth_pair, tmp_path):
    ds = _copy(synth_pair, tmp_path)
    shutil.copy(FOREIGN, ds / "gibson" / "Allensville.navmesh")  # habitat's 0.1 m / 1.5 m agent
    r = run("preprocess", ds, "-o", tmp_path / "out", "--dataset", "gibson", "--split", "tiny", "--workers", "1",
            "--agent-radius", "0.18", "--agent-height", "0.88", "--navmesh", "import")
    assert r.exit_code == 1
    assert "built for an agent of radius 0.1 m, not the 0.18 m of the settings (--agent-radius)" in r.output
    # both differences in the one error, so one rerun fixes them
    assert "and of height 1.5 m, not the 0.88 m of the settings (--agent-height)" in r.output, r.output


def test_navmesh_command_goes_on_after_a_bad_input(synth_pair, tmp_path):
    bad = tmp_path / "tile.bin"
    tset = (ord("T") << 24) | (ord("S") << 16) | (ord("E") << 8) | ord("T")  # a DetourTileCache set
    bad.write_bytes(tset.to_bytes(4, "little") + (1).to_bytes(4, "little") + bytes(72))
    scans = sorted(synth_pair.glob("gibson/*.glb"))
    r = run("navmesh", bad, *scans, "-o", tmp_path / "nav", "--dataset", "gibson")
    assert r.exit_code == 2, r.output
    assert r.output.count("error:") == 1 and "tile.bin: not supported: tile-cache" in r.output
    assert "2 navmeshes written, 1 failed" in r.output
    assert sorted(p.name for p in (tmp_path / "nav").iterdir()) == [
        "Allensville.navmesh.bps", "Collierville.navmesh.bps"]


def test_the_cell_cap_message_names_the_setting_that_fixes_it(tmp_path):
    from bps_assets.nav.reference_scenes import Geometry
    from packed_scene_glb import write_glb

    v, t = Geometry().quad_y(0, 0, 420, 420, 0.0, div=8).arrays()  # 8,400^2 cells of 5 cm
    write_glb(tmp_path / "tile.glb", np.asarray(v, np.float32), np.asarray(t, np.uint32))
    r = run("navmesh", tmp_path / "tile.glb", "-o", tmp_path / "nav")
    assert r.exit_code != 0 and "over the cap" in r.output and "--cell-size 0.058" in r.output, r.output
    r = run("navmesh", tmp_path / "tile.glb", "-o", tmp_path / "nav", "--cell-size", "1", "--json")
    assert r.exit_code == 0 and json.loads(r.output)["navigable_area"] > 150_000


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


def _quad_glb(path: Path, side: float) -> Path:
    from bps_assets.nav.reference_scenes import Geometry
    from packed_scene_glb import write_glb

    v, t = Geometry().quad_y(0, 0, side, side, 0.0, div=4).arrays()
    write_glb(path, np.asarray(v, np.float32), np.asarray(t, np.uint32))
    return path


def test_navmesh_settings_readers_refuse_are_refused_and_no_area_is_a_failure(tmp_path):
    """One set of cell-size limits for the builder and every reader; `bps-assets navmesh`
    fails (exit 2, nothing written) on a navmesh without navigable area, naming the likely
    cause as preprocess does: an object, or a cell size too coarse for the scene."""
    from bps_assets.errors import ConfigError
    from bps_assets.nav import settings, validate

    assert (validate.MIN_CELL_SIZE, validate.MAX_CELL_SIZE) == (settings.MIN_CELL_SIZE, settings.MAX_CELL_SIZE)
    settings.NavSettings(cell_size=settings.MAX_CELL_SIZE)
    for bad in (11, 5e-4):
        with pytest.raises(ConfigError, match="cell_size must be in \\[0.001, 10\\] m"):
            settings.NavSettings(cell_size=bad)
    room, obj = _quad_glb(tmp_path / "room.glb", 6.0), _quad_glb(tmp_path / "cup.glb", 0.3)
    out = tmp_path / "nav"
    r = run("navmesh", room, "-o", out, "--cell-size", "11")
    assert r.exit_code == 2 and "cell_size must be in [0.001, 10] m, got 11" in r.output and not out.exists()
    r = run("navmesh", obj, "-o", out)
    assert r.exit_code == 2, r.output
    assert "cup.glb: the navmesh has no navigable area (it is 0.30 x 0.00 x 0.30 m: an object" in r.output
    assert not (out / "cup.navmesh.bps").exists()
    r = run("navmesh", room, "-o", out, "--cell-size", "1", "--json")
    assert r.exit_code == 2 and not (out / "room.navmesh.bps").exists()
    err = json.loads(r.output)["error"]
    assert "the cell size 1 m is too coarse for it" in err and "smaller --cell-size" in err, err
    r = run("navmesh", room, "-o", out)
    assert r.exit_code == 0 and (out / "room.navmesh.bps").is_file(), r.output
    # preprocess names the same cause for the scene it fails (a folder of scans, Y-up)
    (tmp_path / "scans").mkdir()
    room.rename(tmp_path / "scans" / "room.glb")
    r = run("preprocess", tmp_path / "scans", "-o", tmp_path / "pp", "--cell-size", "1", "--workers", "1")
    assert r.exit_code == 1 and "EmptySceneError" in r.output, r.output
    assert "the cell size 1 m is too coarse for it" in r.output


@pytest.mark.skipif(not (FOREIGN.parent.parent / "replicacad").is_dir(), reason="../shared/assets absent")
def test_a_detour_settings_block_outside_the_limits_is_a_corrupt_file():
    """habitat's version-2 .navmesh carries its settings: a cellSize outside the limits every
    navmesh keeps is the file's fault (CorruptFileError naming it), not a setting's."""
    from bps_assets.errors import CorruptFileError
    from bps_assets.nav.detour import read_detour_navmesh

    path = FOREIGN.parent.parent / "replicacad" / "navmeshes_default" / "apt_0.navmesh"
    m = read_detour_navmesh(path)
    assert m.nav_settings().cell_size == pytest.approx(0.05)
    m.settings["cellSize"] = 20.0
    with pytest.raises(CorruptFileError, match="apt_0.navmesh.*settings block is unusable.*cell_size must be in"):
        m.nav_settings()
