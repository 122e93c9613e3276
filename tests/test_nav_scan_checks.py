"""A scan read with the wrong up axis is refused (issue 35 item 1) and a navmesh without a floor
is a warning (item 2), on synth scans: Z-up as made, Y-up rewritten, and one without its floor."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
from click.testing import CliRunner

from bps_assets import synth
from bps_assets.errors import UpAxisError
from bps_assets.nav.build import scene_triangles
from bps_assets.nav.scan_checks import floor_problem, up_axis_problem
from packed_scene_glb import write_glb


@pytest.fixture(scope="module")
def scans(tmp_path_factory):
    """Allensville as synth writes it (Z-up), the same in Y-up, and the Y-up one without floor."""
    root = tmp_path_factory.mktemp("scans")
    info = synth.generate(root / "zup", "gibson", ["Allensville"], seed=0, size="small")[0]
    v, t, _ = scene_triangles(info.path, "gibson")   # habitat frame = a Y-up file
    write_glb(root / "yup" / "Allensville.glb", v.astype(np.float32), t.astype(np.uint32))
    p = v[t]
    n = np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0])
    floor = (n[:, 1] > 0.9 * np.linalg.norm(n, axis=1)) & (p[:, :, 1].max(1) < 0.05)
    write_glb(root / "nofloor" / "gibson" / "Allensville.glb", v.astype(np.float32), t[~floor].astype(np.uint32))
    return info, root


def _navmesh(args):
    from cli.cmd_navmesh import navmesh_cmd

    return CliRunner().invoke(navmesh_cmd, [str(a) for a in args])


def test_up_axis_rule_on_both_readings(scans):
    info, root = scans
    v, t, _ = scene_triangles(info.path, "gibson")
    assert up_axis_problem(v, t, "z") is None
    w, tw, _ = scene_triangles(info.path, "generic")   # the Z-up scan read as Y-up
    why = up_axis_problem(w, tw, "y")
    assert why is not None and "pass --up z" in why and "Z-up" in why


def test_navmesh_refuses_a_wrong_up_axis_both_ways_and_force_accepts(scans, tmp_path):
    info, root = scans
    r = _navmesh([info.path, "-o", tmp_path / "a", "--dataset", "generic"])   # Z-up scan read Y-up
    assert r.exit_code != 0 and "pass --up z" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "a" / "Allensville.navmesh.bps").exists()
    r = _navmesh([root / "yup" / "Allensville.glb", "-o", tmp_path / "b", "--dataset", "gibson"])  # Y-up read Z-up
    assert r.exit_code != 0 and "pass --up y" in r.stderr
    r = _navmesh([root / "yup" / "Allensville.glb", "-o", tmp_path / "c", "--dataset", "gibson", "--up", "y"])
    assert r.exit_code == 0 and r.stderr == "", r.stderr
    r = _navmesh([info.path, "-o", tmp_path / "d", "--dataset", "generic", "--force"])
    assert r.exit_code == 0 and (tmp_path / "d" / "Allensville.navmesh.bps").exists()


def test_convert_refuses_a_wrong_up_axis_like_navmesh_and_force_accepts(scans, tmp_path):
    """`convert` makes navmesh's up-axis check (same message, same --up escape) before writing."""
    from cli.cmd_convert import convert_cmd

    info, root = scans
    conv = lambda *a: CliRunner().invoke(convert_cmd, [str(x) for x in a])  # noqa: E731
    r = conv(info.path, "-o", tmp_path / "a", "--dataset", "generic")   # Z-up scan read Y-up
    nav = _navmesh([info.path, "-o", tmp_path / "n", "--dataset", "generic"])
    assert r.exit_code == nav.exit_code == 2 and r.stderr == nav.stderr, (r.stderr, nav.stderr)
    assert "pass --up z" in r.stderr and str(info.path) in r.stderr
    assert not (tmp_path / "a").exists() or not any((tmp_path / "a").iterdir())
    shutil.copy(root / "yup" / "Allensville.glb", tmp_path / "Yup.glb")   # Y-up: converts as generic
    r = conv(info.path, "-o", tmp_path / "b", "--dataset", "generic", "-j", "2", tmp_path / "Yup.glb")
    assert r.exit_code == 2 and "pass --up z" in r.stderr and "1 converted, 1 failed" in r.stderr
    r = conv(info.path, "-o", tmp_path / "c", "--dataset", "generic", "--up", "z")
    assert r.exit_code == 0 and (tmp_path / "c" / "Allensville.bps").exists(), r.stderr
    r = conv(info.path, "-o", tmp_path / "d", "--dataset", "generic", "--force")
    assert r.exit_code == 0 and (tmp_path / "d" / "Allensville.bps").exists(), r.stderr


def test_preprocess_refuses_a_wrong_up_axis_and_force_accepts(scans, tmp_path):
    from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess

    info, root = scans
    res = preprocess(root / "zup", tmp_path / "o", "gibson", "tiny",
                     PreprocessOptions(up="y", workers=1, in_process=True, subsets=("train",)), log=lambda s: None)
    bad = [r for r in res.results if r.name == "Allensville"][0]
    assert bad.status == "failed" and "UpAxisError" in bad.error and "pass --up z" in bad.error
    res = preprocess(root / "zup", tmp_path / "o", "gibson", "tiny",
                     PreprocessOptions(up="y", workers=1, in_process=True, subsets=("train",), force=True),
                     log=lambda s: None)
    assert [r for r in res.results if r.name == "Allensville"][0].status == "ok"
    with pytest.raises(UpAxisError):
        from bps_assets.nav.sources import navmesh_from_file
        navmesh_from_file(info.path, dataset="generic")


def test_no_floor_is_a_warning_in_navmesh_preprocess_verify_and_episodes(scans, tmp_path):
    from bps_assets.nav import load_navmesh
    from bps_assets.nav.episodes import generate_episodes
    from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess, summary_table
    from bps_assets.pipeline.verify import verify_manifest

    info, root = scans
    src = root / "nofloor" / "gibson" / "Allensville.glb"
    r = _navmesh([src, "-o", tmp_path / "n", "--up", "y"])
    assert r.exit_code == 0 and "warning: Allensville.glb: no floor?" in r.stderr, r.stderr
    nav = load_navmesh(tmp_path / "n" / "Allensville.navmesh.bps")
    assert nav.navigable_area < 10 and nav.island_area[0] < 2.0
    res = preprocess(root / "nofloor", tmp_path / "o", "gibson", "tiny",
                     PreprocessOptions(up="y", workers=1, in_process=True, subsets=("train",)), log=lambda s: None)
    ok = [r for r in res.results if r.name == "Allensville"][0]
    assert ok.status == "ok" and "no floor?" in ok.entry["stats"]["floor_warning"]
    assert "warning: no floor?" in summary_table(res)
    rep = verify_manifest(res.manifest_path)
    assert any("scene Allensville: no floor?" in w for w in rep.warnings)
    # episodes (if any can be made on the tops) say where they start: at table height
    st: dict = {}
    try:
        generate_episodes(nav, "x.glb", 2, seed=0, stats=st)
    except Exception:   # noqa: BLE001 - tops under the island radius limit give none
        return
    assert "starts at y = 0." in st["where"]


def test_floor_rule_thresholds():
    assert floor_problem(40.0, 30.0, 60.0) is None
    assert "largest walkable island is 1.5" in floor_problem(7.7, 1.5, 60.0)
    assert "(17% < 30%)" in floor_problem(10.0, 5.0, 60.0)
    # a real floor: the synth scenes' figures pass
    assert floor_problem(35.9, 21.9, 52.0) is None


def test_an_ambiguous_box_room_is_not_refused_either_way():
    """The van Gogh room (a Z-up scan, one room about as deep as high) sits under the threshold
    both ways: the rule refuses only what it can tell."""
    from pathlib import Path

    ply = Path(__file__).resolve().parents[1].parent / "shared" / "assets" / "habitat-sim" / \
        "deleted_history" / "van-gogh-room.mesh.ply"
    if not ply.exists():
        pytest.skip("shared assets absent")
    for ds, up in (("gibson", "z"), ("generic", "y")):
        v, t, _ = scene_triangles(ply, ds)
        assert up_axis_problem(v, t, up) is None


def _box_obj(path, lo, hi):
    """A closed box (12 outward triangles) as an OBJ file, Y-up as glTF and habitat expect."""
    v = [(x, y, z) for x in (lo[0], hi[0]) for y in (lo[1], hi[1]) for z in (lo[2], hi[2])]
    f = [(1, 3, 7), (1, 7, 5), (2, 6, 8), (2, 8, 4), (1, 5, 6), (1, 6, 2), (3, 4, 8), (3, 8, 7),
         (1, 2, 4), (1, 4, 3), (5, 7, 8), (5, 8, 6)]
    path.write_text("".join(f"v {a} {b} {c}\n" for a, b, c in v) + "".join(f"f {a} {b} {c}\n" for a, b, c in f))
    return path


def test_convert_does_not_judge_furniture_but_still_refuses_a_z_up_scan(scans, tmp_path):
    """Review r2 S5: a closed Y-up wardrobe (2.5 x 2.2 x 0.6 m) and cabinet (1.6 x 1.8 x 0.7 m) have
    more area lying flat if Z were up, but they are objects, not rooms: converted as given. The
    Z-up scan read as Y-up is still refused."""
    from cli.cmd_convert import convert_cmd

    for name, lo, hi in (("wardrobe", (-1.25, 0, -0.3), (1.25, 2.2, 0.3)),
                         ("cabinet", (-0.8, 0, -0.35), (0.8, 1.8, 0.35))):
        obj = _box_obj(tmp_path / f"{name}.obj", lo, hi)
        v, t, _ = scene_triangles(obj, "generic")
        assert "pass --up z" in up_axis_problem(v, t, "y")   # what navmesh / preprocess would say
        r = CliRunner().invoke(convert_cmd, [str(obj), "-o", str(tmp_path / "out")])
        assert r.exit_code == 0 and (tmp_path / "out" / f"{name}.bps").is_file(), r.stderr
    info, _ = scans
    r = CliRunner().invoke(convert_cmd, [str(info.path), "-o", str(tmp_path / "z"), "--dataset", "generic"])
    assert r.exit_code == 2 and "pass --up z" in r.stderr
