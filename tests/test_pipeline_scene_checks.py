"""Scenes with nothing to render or navigate are errors, not "ok" (issue 13 item 5); a
preprocess run does not silently replace another run's manifest, failed scenes leave no
outputs (item 6); an imported navmesh that does not fit its scene fails it (item 7, issue 25)."""
import json

import numpy as np
import pytest
from click.testing import CliRunner

from bps_assets.errors import EmptySceneError, OutputExistsError
from bps_assets.nav import build_navmesh
from bps_assets.pipeline.backend import Backend
from bps_assets.pipeline.manifest import load_manifest
from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess
from bps_assets.pipeline.verify import format_report, verify_manifest
from cli.main import main
from bps_assets.nav.reference_scenes import Geometry
from packed_scene_glb import write_glb
from pipeline_fakes import FakeBackend, make_source


def _zup(v):  # habitat (x, y, z) -> a Z-up scan's (x, -z, y)
    return np.stack([v[:, 0], -v[:, 2], v[:, 1]], 1)


def _room(size=6.0):
    """Floor, ceiling and two zero-thickness walls facing +-x (as in scans), habitat frame."""
    g = Geometry().quad_y(0, 0, size, size, 0.0, div=4).quad_y(0, 0, size, size, 2.5, up=False)
    g.wall_sheet(0, 0, 0, size, 0, 2.5).wall_sheet(size, 0, size, size, 0, 2.5)
    return g.arrays()


def _glb(path, v, t):
    return write_glb(path, np.asarray(v, np.float32), np.asarray(t, np.uint32))


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    """gibson/ tiny-split scenes: Beechwood a good Z-up room, Allensville the same room saved
    Y-up, Benevolence a 15 cm pole (an object)."""
    root = tmp_path_factory.mktemp("src")
    v, t = _room()
    _glb(root / "gibson" / "Beechwood.glb", _zup(v), t)
    _glb(root / "gibson" / "Allensville.glb", v, t)
    pv, pt = Geometry().box(0, 0, 0, 0.15, 1.0, 0.15).arrays()
    _glb(root / "gibson" / "Benevolence.glb", _zup(pv), pt)
    return root


OPTS = dict(workers=1, in_process=True, subsets=("train",))


def test_no_navigable_area_fails_the_scene_with_its_likely_cause(src, tmp_path):
    out = tmp_path / "out"
    res = preprocess(src, out, "gibson", "tiny", PreprocessOptions(**OPTS))
    st = {r.name: r for r in res.results if r.status != "missing"}
    assert st["Beechwood"].status == "ok" and st["Beechwood"].entry["stats"]["navigable_area"] > 20
    yup, pole = st["Allensville"], st["Benevolence"]
    assert yup.status == "failed" and pole.status == "failed" and not res.ok
    # refused before its navmesh is built (issue 35: UpAxisError), no longer an empty navmesh
    assert yup.error.startswith("UpAxisError: ") and "Allensville.glb" in yup.error
    assert "Y-up, not Z-up: pass --up y" in yup.error
    assert "Benevolence.glb" in pole.error and "an object rather than a scene" in pole.error
    # failed scenes leave no outputs behind; the good one keeps its own
    assert sorted(p.name for p in (out / "scenes").iterdir()) == ["Beechwood.bps"]
    assert sorted(p.name for p in (out / "navmeshes").iterdir()) == ["Beechwood.navmesh.bps"]
    # --up y fixes the Y-up scene (and breaks the Z-up one, whose floor now faces sideways)
    res = preprocess(src, tmp_path / "out_y", "gibson", "tiny", PreprocessOptions(up="y", **OPTS))
    st = {r.name: r for r in res.results if r.status != "missing"}
    assert st["Allensville"].status == "ok" and st["Allensville"].entry["stats"]["navigable_area"] > 20
    assert st["Beechwood"].status == "failed" and "Z-up, not Y-up: pass --up z" in st["Beechwood"].error


def test_cli_preprocess_up_and_the_summary(src, tmp_path):
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["preprocess", str(src), "-o", str(out), "--dataset", "gibson", "--split",
                                  "tiny", "--subset", "train", "--workers", "1", "--in-process", "--no-progress"])
    assert r.exit_code == 1
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("Allensville"))
    assert "failed" in line and "pass --up y" in line and "area 0.0" not in r.stdout
    r = CliRunner().invoke(main, ["preprocess", str(src), "-o", str(tmp_path / "o2"), "--dataset", "gibson",
                                  "--split", "tiny", "--subset", "train", "--workers", "1", "--in-process",
                                  "--up", "y", "--json"])
    doc = json.loads(r.stdout)
    assert {s["name"]: s["status"] for s in doc["scenes"] if s["status"] != "missing"} == \
        {"Allensville": "ok", "Beechwood": "failed", "Benevolence": "failed"}


def test_verify_flags_an_ok_scene_without_navigable_area(src, tmp_path):
    """Manifests written before the check (status ok, area 0) fail verify, --deep included."""
    out = tmp_path / "out"
    res = preprocess(src, out, "gibson", "tiny", PreprocessOptions(**OPTS))
    doc = json.loads(res.manifest_path.read_text())
    doc["scenes"] = {"Beechwood": doc["scenes"]["Beechwood"]}
    doc["scenes"]["Beechwood"]["stats"]["navigable_area"] = 0.0
    res.manifest_path.write_text(json.dumps(doc))
    for deep in (False, True):
        rep = verify_manifest(res.manifest_path, deep=deep)
        assert not rep.ok and "navmesh has no navigable area" in format_report(rep)


@pytest.mark.parametrize("name, make, match", [
    ("degenerate", lambda: (np.array([[0, 0, 0], [1, 0, 0], [2, 0, 0]], float), np.array([[0, 1, 2]])),
     "all 1 dropped: 1 of zero area"),
    ("nan", lambda: (np.full((3, 3), np.nan), np.array([[0, 1, 2]])), "NaN or infinite"),
])
def test_convert_refuses_scenes_with_no_triangles_left(tmp_path, name, make, match):
    v, t = make()
    path = _glb(tmp_path / f"{name}.glb", v, t)
    r = CliRunner().invoke(main, ["convert", str(path), "-o", str(tmp_path / "out")])
    assert r.exit_code == 2
    assert r.stderr.startswith(f"error: {path}: no triangles left after cleaning") and match in r.stderr
    assert not (tmp_path / "out" / f"{name}.bps").exists()


def test_convert_refuses_a_file_without_a_mesh(tmp_path):
    p = tmp_path / "points.obj"
    p.write_text("v 0 0 0\nv 1 0 0\nv 0 1 0\nl 1 2\n")
    r = CliRunner().invoke(main, ["convert", str(p), "-o", str(tmp_path / "out")])
    assert r.exit_code == 2 and "contains no triangle mesh" in r.stderr
    assert not (tmp_path / "out" / "points.bps").exists()


def test_empty_scene_error_is_typed(tmp_path):
    from bps_assets.packed_scene import convert_file

    p = tmp_path / "e.obj"
    p.write_text("v 0 0 0\n")
    with pytest.raises(EmptySceneError):
        convert_file(p, tmp_path / "e.bps")


# ------------------------------------------------------------------ another run's manifest (item 6)

def test_another_source_root_does_not_replace_the_manifest(tmp_path):
    a = make_source(tmp_path / "a", ["Allensville", "Beechwood", "Benevolence", "Collierville"])
    b = make_source(tmp_path / "b", ["Allensville"])
    out = tmp_path / "out"
    opts = PreprocessOptions(workers=1, in_process=True)
    preprocess(a, out, "gibson", "tiny", opts, backend=FakeBackend())
    before = (out / "manifest.json").read_bytes()
    with pytest.raises(OutputExistsError, match=r"manifest of another run \(source root .*/a -> .*/b; 3 of "
                                                r"its 4 scene\(s\) not in this run: Beechwood, Benevolence, "
                                                r"Collierville\); use another OUT_ROOT, or pass --overwrite, which "
                                                r"removes the outputs of its 3 scene\(s\) not in this run"):
        preprocess(b, out, "gibson", "tiny", opts, backend=FakeBackend(knob=2))
    with pytest.raises(OutputExistsError, match=r"\(subsets train,val,test -> train; 1 of its 4 scene\(s\) "
                                                r"not in this run: Collierville\)"):
        preprocess(a, out, "gibson", "tiny", PreprocessOptions(workers=1, in_process=True, subsets=("train",)),
                   backend=FakeBackend())
    assert (out / "manifest.json").read_bytes() == before
    # the same scenes from a moved source root: a rerun (resumed by content, nothing redone)
    import shutil

    moved = shutil.copytree(a, tmp_path / "moved")
    r = preprocess(moved, out, "gibson", "tiny", opts, backend=FakeBackend())
    assert r.ok and r.count("skipped") == 4 and load_manifest(out).doc["source_root"] == str(moved)
    before = (out / "manifest.json").read_bytes()
    r = preprocess(b, out, "gibson", "tiny", PreprocessOptions(workers=1, in_process=True, overwrite=True),
                   backend=FakeBackend(knob=2))
    assert r.ok and load_manifest(out).names() == ["Allensville"]


def test_cli_refusal_is_one_line(tmp_path):
    a = make_source(tmp_path / "a", ["Allensville", "Beechwood"])
    b = make_source(tmp_path / "b", ["Allensville"])
    out = tmp_path / "out"
    preprocess(a, out, "gibson", "tiny", PreprocessOptions(workers=1, in_process=True), backend=FakeBackend())
    r = CliRunner().invoke(main, ["preprocess", str(b), "-o", str(out), "--dataset", "gibson", "--split", "tiny"])
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1
    assert r.stderr.startswith("error: ") and "source root" in r.stderr and "--overwrite" in r.stderr


def test_failed_scene_leaves_no_outputs_even_from_an_earlier_run(tmp_path):
    src = make_source(tmp_path / "src", ["Allensville", "Beechwood"])
    out = tmp_path / "out"
    opts = PreprocessOptions(workers=1, in_process=True)
    preprocess(src, out, "gibson", "tiny", opts, backend=FakeBackend())
    assert (out / "scenes" / "Beechwood.bps").is_file()
    (src / "gibson" / "Beechwood.glb").write_bytes(b"glTF changed")  # redone, and now it fails
    r = preprocess(src, out, "gibson", "tiny", opts, backend=FakeBackend(fail={"Beechwood"}))
    assert {x.name: x.status for x in r.results if x.status != "missing"} == \
        {"Allensville": "skipped", "Beechwood": "failed"}
    assert not (out / "scenes" / "Beechwood.bps").exists()
    assert not (out / "navmeshes" / "Beechwood.navmesh.bps").exists()
    assert (out / "scenes" / "Allensville.bps").is_file()


# ------------------------------------------------------------------ a navmesh of another scene (item 7)

class ForeignNavmeshBackend(Backend):
    """The real converter; the "imported" navmesh is a floor 1.6 m below the scene's floor and
    10 m to the side (what a .navmesh of another scene looks like), or, with ``fits``, the
    scene's own floor."""

    def __init__(self, fits=False, dx=10.0):
        super().__init__()
        self.fits, self.dx = fits, dx

    def navmesh(self, mode, packed, detour_src, dst):
        dy, dx = (0.0, 0.0) if self.fits else (-1.6, self.dx)
        g = Geometry().quad_y(0.5 + dx, 0.5, 5.5 + dx, 5.5, dy, div=2)
        mesh = build_navmesh(g.arrays())
        mesh.save(dst, overwrite=True)
        return {"source": "imported", "navigable_area": float(mesh.navigable_area), "islands": 1}


def test_an_imported_navmesh_outside_its_scene_fails_the_scene(src, tmp_path):
    """Whatever backend imported it, a navmesh that does not fit its scene never becomes an ok
    scene (issue 25 item 1; the real backend builds one instead in auto mode)."""
    opts = dict(workers=1, in_process=True, subsets=("train",))
    res = preprocess(src, tmp_path / "out", "gibson", "tiny", PreprocessOptions(**opts),
                     backend=ForeignNavmeshBackend())
    bee = next(r for r in res.results if r.name == "Beechwood")
    assert bee.status == "failed" and not res.ok
    assert "does not fit the scene" in bee.error and "100% of its walkable points lie outside" in bee.error
    assert bee.error.startswith("NavError: ") and not (tmp_path / "out" / "scenes" / "Beechwood.bps").exists()
    # only 1.6 m below the floor: said so
    res = preprocess(src, tmp_path / "below", "gibson", "tiny", PreprocessOptions(**opts),
                     backend=ForeignNavmeshBackend(dx=0.0))
    err = next(r for r in res.results if r.name == "Beechwood").error
    assert "lie below the scene's bounds (up to 1.60 m along y)" in err, err
    # the scene's own navmesh fits
    res = preprocess(src, tmp_path / "out3", "gibson", "tiny", PreprocessOptions(strict=True, **opts),
                     backend=ForeignNavmeshBackend(fits=True))
    bee = next(r for r in res.results if r.name == "Beechwood")
    assert bee.status == "ok" and "warnings" not in bee.entry["stats"], bee.error


def test_verify_explains_the_file_marker(tmp_path):
    src = make_source(tmp_path / "src", ["Allensville"])
    out = tmp_path / "out"
    res = preprocess(src, out, "gibson", "tiny", PreprocessOptions(workers=1, in_process=True),
                     backend=FakeBackend())
    text = format_report(verify_manifest(res.manifest_path))
    assert "!" not in text.split("—")[0]  # all well: no marker, no legend
    with open(out / "navmeshes" / "Allensville.navmesh.bps", "ab") as f:
        f.write(b"junk")
    lines = format_report(verify_manifest(res.manifest_path)).splitlines()
    assert lines[0] == "FAIL Allensville (train) scene navmesh!"
    assert any(ln.startswith("(a file role marked ! has the problem listed under it") for ln in lines)


def test_changed_settings_redo_the_scenes_and_say_which(tmp_path):
    src = make_source(tmp_path / "src", ["Allensville"])
    out = tmp_path / "out"
    opts = PreprocessOptions(workers=1, in_process=True)
    preprocess(src, out, "gibson", "tiny", opts, backend=FakeBackend())
    lines = []
    r = preprocess(src, out, "gibson", "tiny", PreprocessOptions(workers=1, in_process=True, episodes=2),
                   backend=FakeBackend(knob=2), log=lines.append)
    assert r.count("ok") == 1
    said = [ln for ln in lines if "settings differ" in ln]
    assert len(said) == 1 and "knob 1 -> 2" in said[0] and "preprocess.episodes 0 -> 2" in said[0]


def test_a_failed_scene_says_which_partial_output_it_could_not_remove(tmp_path, monkeypatch):
    from pathlib import Path

    from bps_assets.pipeline import preprocess as pp

    out = tmp_path / "out"
    (out / "scenes").mkdir(parents=True)
    (out / "scenes" / "A.bps").write_bytes(b"partial")
    real_unlink = Path.unlink

    def unlink(self, missing_ok=False):
        if self.name == "A.bps":
            raise PermissionError(13, "Permission denied", str(self))
        return real_unlink(self, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", unlink)
    left = pp._discard_outputs(out, {"scene": "scenes/A.bps", "navmesh": "navmeshes/A.navmesh.bps"})
    assert left == [f"{out / 'scenes' / 'A.bps'}: Permission denied"]
