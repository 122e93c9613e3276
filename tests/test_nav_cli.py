"""`bps-assets navmesh`, `nav info|distance|sample|step`, `preview` end to end."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from cli.main import main
from bps_assets.nav.reference_scenes import house

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "assets"


def write_obj(path: Path, v, t):
    lines = [f"v {x:.6f} {y:.6f} {z:.6f}" for x, y, z in v]
    lines += [f"f {a + 1} {b + 1} {c + 1}" for a, b, c in t]
    path.write_text("\n".join(lines) + "\n")


def run(*args):
    r = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    return r.exit_code, r.output


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    d = tmp_path_factory.mktemp("navcli")
    v, t = house().arrays()
    write_obj(d / "house.obj", v, t)
    zup = np.stack([v[:, 0], -v[:, 2], v[:, 1]], 1)
    write_obj(d / "house_zup.obj", zup, t)
    code, out = run("navmesh", d / "house.obj", d / "house_zup.obj", "-o", d / "out", "--json")
    assert code == 0, out
    recs = [json.loads(line) for line in out.strip().splitlines()]
    return d, recs


def test_navmesh_build_prints_area_islands_seconds(built):
    d, recs = built
    a, z = recs
    assert Path(a["output"]) == d / "out" / "house.navmesh.bps" and Path(a["output"]).exists()
    assert a["islands"] == 3 and 60 < a["navigable_area"] < 75 and a["seconds"] > 0
    # the Z-up copy read as generic (Y-up) is a different, wrong surface...
    assert abs(z["navigable_area"] - a["navigable_area"]) > 5
    code, out = run("navmesh", d / "house.obj", "-o", d / "out")
    assert code != 0 and "exists" in out  # ...and outputs are not overwritten silently
    code, out = run("navmesh", d / "house_zup.obj", "-o", d / "out", "--dataset", "gibson",
                    "--overwrite")
    assert code == 0 and "3 islands" in out and "m^2" in out and " s" in out


def test_settings_options(built):
    d, _ = built
    code, out = run("navmesh", d / "house.obj", "-o", d / "fat", "--agent-radius", "0.3", "--json")
    assert code == 0
    rec = json.loads(out)
    code, out = run("nav", "info", rec["output"], "--json")
    info = json.loads(out)
    assert info["settings"]["agent_radius"] == 0.3
    code, out = run("navmesh", d / "house.obj", "-o", d / "bad", "--cell-size", "0")
    assert code != 0 and "cell_size" in out


def test_nav_info(built):
    d, _ = built
    f = d / "out" / "house.navmesh.bps"
    code, out = run("nav", "info", f, "--json")
    info = json.loads(out)
    assert code == 0 and info["num_islands"] == 3 and len(info["islands"]) == 3
    assert abs(sum(i["area"] for i in info["islands"]) - info["navigable_area"]) < 1e-3
    assert info["bounds"]["max"][1] == pytest.approx(2.0, abs=1e-3)  # the mezzanine
    code, out = run("nav", "info", f)
    assert code == 0 and "island 0" in out and "agent_height=1.5" in out


def test_nav_distance(built, tmp_path):
    d, _ = built
    f = d / "out" / "house.navmesh.bps"
    pairs = [{"a": [1, 0, 4], "b": [3.5, 0, 3.2]},      # straight line
             {"a": [1, 0, 4], "b": [1.5, 0, 7.5]},      # closed room: unreachable
             {"a": [1, 0, 4], "b": [100, 0, 0]}]        # not snappable
    p = tmp_path / "pairs.json"
    p.write_text(json.dumps(pairs))
    code, out = run("nav", "distance", f, "--pairs", p, "--json")
    vals = json.loads(out)
    assert code == 0 and vals[1] is None and vals[2] is None
    assert vals[0] == pytest.approx(np.hypot(2.5, 0.8), abs=1e-5)
    p.write_text('[{"a": [1, 0]}]')
    code, out = run("nav", "distance", f, "--pairs", p)
    assert code != 0 and "pairs" in out


def test_nav_sample_and_step(built):
    d, _ = built
    f = d / "out" / "house.navmesh.bps"
    code, out = run("nav", "sample", f, "-n", "5", "--seed", "3", "--json")
    pts = json.loads(out)
    code2, out2 = run("nav", "sample", f, "-n", "5", "--seed", "3", "--json")
    assert code == 0 and len(pts) == 5 and out == out2
    code, out = run("nav", "step", f, "--from", "4.7,0,1", "--to", "5.0,0,1.2", "--json")
    r = json.loads(out)
    assert code == 0 and r["collided"] and r["position"][2] == pytest.approx(1.2, abs=1e-3)
    code, out = run("nav", "step", f, "--from", "4.7,0,1", "--to", "5.0,0,1.2", "--no-sliding", "--json")
    r = json.loads(out)
    assert r["collided"] and r["position"][2] < 1.15
    code, out = run("nav", "step", f, "--from", "4.7,0", "--to", "5.0,0,1.2")
    assert code != 0


def test_nav_step_up_a_stair_is_no_collision(built):
    """Journey L4: habitat-sim's rule (collided iff the filter shortened the move), not 'the end
    moved': a step onto the house's first stair (0.18 m up) lands higher than --to, uncollided."""
    d, _ = built
    f = d / "out" / "house.navmesh.bps"
    code, out = run("nav", "step", f, "--from", "5.50,0,3.6", "--to", "5.75,0,3.6", "--json")
    r = json.loads(out)
    assert code == 0 and r["position"][1] > 0.1 and not r["collided"], r
    code, out = run("nav", "step", f, "--from", "5.50,0,3.6", "--to", "5.75,0,3.6")
    assert "collided" not in out


def test_preview(built):
    d, _ = built
    from PIL import Image

    png = d / "map.png"
    code, out = run("preview", d / "out" / "house.navmesh.bps", "-o", png)
    assert code == 0 and "2 floor(s)" in out
    im = np.asarray(Image.open(png).convert("RGB"))
    assert im.shape[1] > im.shape[0]  # two panels side by side
    colours = {tuple(c) for c in im.reshape(-1, 3)[::7]}
    assert len(colours) > 5  # islands in different colours, background, shading
    code, out = run("preview", d / "out" / "house.navmesh.bps", "-o", png)
    assert code != 0  # no silent overwrite


def test_preview_refuses_a_name_that_is_not_png_and_a_file_for_a_folder(built, tmp_path):
    """Journey L5: -o map.jpg / -o map wrote PNG bytes under that name; -o afile/map.png said
    "File exists" instead of naming the file in the way."""
    d, _ = built
    nav = d / "out" / "house.navmesh.bps"
    for name in ("map.jpg", "map"):
        r = CliRunner().invoke(main, ["preview", str(nav), "-o", str(tmp_path / name)])
        assert r.exit_code == 2 and "give a name ending in .png" in r.output and not (tmp_path / name).exists()
    (tmp_path / "x.txt").write_text("keep")
    r = CliRunner().invoke(main, ["preview", str(nav), "-o", str(tmp_path / "x.txt" / "map.png")])
    assert r.exit_code == 2 and r.stderr.strip() == \
        f"error: {tmp_path / 'x.txt'}: cannot create the folder: it is a file, not a folder", r.stderr
    r = CliRunner().invoke(main, ["preview", str(nav), "-o", str(tmp_path / "x.txt" / "sub" / "map.png")])
    assert r.exit_code == 2 and f"{tmp_path / 'x.txt'} is a file, not a folder" in r.stderr, r.stderr
    assert (tmp_path / "x.txt").read_text() == "keep"


def test_missing_navfile_and_bad_navfile(tmp_path):
    code, out = run("nav", "info", tmp_path / "nope.navmesh.bps")
    assert code != 0
    bad = tmp_path / "bad.navmesh.bps"
    bad.write_bytes(b"not a navmesh at all")
    code, out = run("nav", "info", bad)
    assert code != 0 and "bad.navmesh.bps" in out


@pytest.mark.shared_assets
def test_import_habitat_navmesh(tmp_path):
    src = SHARED / "habitat_test_scenes_navmesh" / "van-gogh-room.navmesh"
    if not src.exists():
        pytest.skip("shared assets absent")
    code, out = run("navmesh", src, "-o", tmp_path, "--json")
    assert code == 0, out
    rec = json.loads(out)
    assert rec["method"] == "detour" and rec["navigable_area"] > 1
    code, out = run("nav", "sample", rec["output"], "-n", "3", "--seed", "0", "--json")
    assert code == 0 and len(json.loads(out)) == 3


@pytest.mark.shared_assets
def test_import_keeps_the_files_agent_unless_overridden(tmp_path):
    src = SHARED / "replicacad" / "navmeshes" / "apt_0.navmesh"  # built for radius 0.3
    if not src.exists():
        pytest.skip("shared assets absent")
    code, out = run("navmesh", src, "-o", tmp_path / "a", "--json")
    assert code == 0, out
    info = json.loads(run("nav", "info", json.loads(out)["output"], "--json")[1])
    assert info["settings"]["agent_radius"] == pytest.approx(0.3) and info["method"] == "detour"
    # its polygons are eroded for 0.3 m: another agent is refused (as preprocess refuses it),
    # the file's own is taken, and other settings alone keep the file's agent
    code, out = run("navmesh", src, "-o", tmp_path / "b", "--json", "--agent-radius", "0.25")
    assert code == 2 and "radius 0.3 m, not the 0.25 m" in out and str(src) in out, out
    assert not (tmp_path / "b" / "apt_0.navmesh.bps").exists()
    code, out = run("navmesh", src, "-o", tmp_path / "b", "--json", "--agent-radius", "0.3")
    assert code == 0, out
    code, out = run("navmesh", src, "-o", tmp_path / "c", "--json", "--cell-size", "0.05")
    info = json.loads(run("nav", "info", json.loads(out)["output"], "--json")[1])
    assert info["settings"]["agent_radius"] == pytest.approx(0.3)


@pytest.mark.shared_assets
def test_import_refuses_agent_flags_its_navmesh_was_not_built_for(tmp_path):
    """van-gogh-room.navmesh is eroded for radius 0.1, height 1.5: --agent-radius 0.18
    --agent-height 0.88 wrote those in the header over the file's surface, exit 0, no word."""
    src = SHARED / "habitat_test_scenes_navmesh" / "van-gogh-room.navmesh"
    if not src.exists():
        pytest.skip("shared assets absent")
    code, out = run("navmesh", src, "-o", tmp_path, "--agent-radius", "0.18", "--agent-height", "0.88")
    assert code == 2, out
    assert all(s in out for s in (str(src), "radius 0.1 m, not the 0.18 m", "height 1.5 m, not the 0.88 m")), out
    assert not list(tmp_path.iterdir())


def test_recast_compat_flag(built, tmp_path):
    d, recs = built
    code, out = run("navmesh", d / "house.obj", "-o", tmp_path / "rc", "--agent-radius", "0.18",
                    "--recast-compat", "--json")
    assert code == 0, out
    rc = json.loads(out)
    code, out = run("navmesh", d / "house.obj", "-o", tmp_path / "ex", "--agent-radius", "0.18", "--json")
    ex = json.loads(out)
    code, out = run("nav", "info", rc["output"], "--json")
    assert json.loads(out)["settings"]["recast_compat"] is True
    # Recast rounds 0.18 m up to 4 cells (0.2 m) and blocks whole cells: less area
    assert rc["navigable_area"] < ex["navigable_area"] - 1.0


def test_preview_draws_episodes_and_an_agent_path(built, tmp_path):
    """--episodes draws each episode's start, goal and geodesic path; --agent-path a path; the
    legend names them; bad inputs are typed errors naming the file, with nothing written."""
    from PIL import Image

    from bps_assets.nav.topdown import KINDS

    d, _ = built
    nav = d / "out" / "house.navmesh.bps"
    code, out = run("episodes", nav, "-o", tmp_path / "pn", "--split", "val", "--per-scene", "4")
    assert code == 0, out
    path = tmp_path / "agent.json"
    path.write_text(json.dumps({"positions": [[1, 0, 4], [2, 0, 4], [3, 0, 3.5]]}))
    png = tmp_path / "map.png"
    code, out = run("preview", nav, "-o", png, "--episodes", tmp_path / "pn" / "val" / "val.json.gz",
                    "--agent-path", path, "--mpp", "0.05")
    assert code == 0, out
    assert "0.05 m/px" in out and "4 episode(s)" in out and "1 agent path(s)" in out
    im = np.asarray(Image.open(png).convert("RGB"))
    for kind in ("shortest_path", "start", "goal", "agent_path"):
        assert np.all(im == KINDS[kind][0], axis=-1).sum() > 5, kind
    # plain preview: no episode marks, but still a scale bar
    plain = tmp_path / "plain.png"
    assert run("preview", nav, "-o", plain, "--mpp", "0.05")[0] == 0
    im2 = np.asarray(Image.open(plain).convert("RGB"))
    assert not np.all(im2 == KINDS["goal"][0], axis=-1).any()
    # a bad agent path, a dataset without this scene: errors naming the file, no output
    bad = tmp_path / "bad.json"
    bad.write_text('[[1, 2]]')
    code, out = run("preview", nav, "-o", tmp_path / "x.png", "--agent-path", bad)
    assert code != 0 and "bad.json" in out and not (tmp_path / "x.png").exists()
    code, out = run("preview", nav, "-o", tmp_path / "x.png", "--episodes", tmp_path / "pn" / "val" / "val.json.gz",
                    "--scene", "nowhere")
    assert code != 0 and "nowhere" in out and "house" in out and not (tmp_path / "x.png").exists()


def test_preview_refuses_a_map_over_its_pixel_cap(built, tmp_path):
    d, _ = built
    code, out = run("preview", d / "out" / "house.navmesh.bps", "-o", tmp_path / "huge.png", "--mpp", "0.0001")
    assert code != 0 and "pixels" in out and not (tmp_path / "huge.png").exists()


@pytest.mark.parametrize("extra", [["--mpp", "0.05"], ["--max-episodes", "3"],
                                   ["--agent-path", "AGENT"], ["--episodes", "AGENT"]])
def test_preview_semantic_refuses_the_floor_map_options(built, tmp_path, extra):
    """--semantic draws another map (objects): an option it would ignore is a usage error naming
    it (exit 2), nothing written. (--scene applies to it since 2026-11-28: the scene a packed
    scene may be of, tests/test_preview_scene_checks.py.)"""
    d, _ = built
    nav = d / "out" / "house.navmesh.bps"
    agent = tmp_path / "agent.json"
    agent.write_text("[[1, 0, 4], [2, 0, 4]]")
    extra = [str(agent) if x == "AGENT" else x for x in extra]
    code, out = run("preview", nav, "-o", tmp_path / "s.png", "--semantic", nav, *extra)
    assert code == 2 and extra[0] in out and "--semantic" in out and not (tmp_path / "s.png").exists()
