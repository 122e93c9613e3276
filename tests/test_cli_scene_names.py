"""``convert``, ``navmesh`` and ``episodes`` name a scene as ``preprocess`` does (habitat's rule,
``habitat_names.habitat_scene_name``: the file name up to its first dot), so an HM3D scan
``X.basis.glb`` becomes scene ``X`` in each and the three chain: convert -> X.bps, navmesh ->
X.navmesh.bps, episodes on X.navmesh.bps finds X.bps."""
from __future__ import annotations

import gzip
import json
import os

from click.testing import CliRunner

from cli.main import main


def _cli(*args):
    r = CliRunner().invoke(main, [str(a) for a in args])
    assert r.exit_code == 0, r.output
    return r


def test_a_basis_glb_is_scene_x_in_convert_navmesh_and_episodes(tmp_path):
    src = tmp_path / "src"
    _cli("synth", src, "-n", 1, "--semantic")
    glb = next((src / "gibson").glob("*.glb"))
    name = glb.name.split(".")[0]
    glb = src / "gibson" / f"{name}.glb"   # not its semantic mesh NAME.semantic.glb
    scan = glb.rename(glb.with_name(f"{name}.basis.glb"))   # HM3D's naming; NAME.semantic.* stay beside
    conv, nav, eps = tmp_path / "conv", tmp_path / "nav", tmp_path / "eps"
    _cli("convert", scan, "-o", conv, "--up", "z")
    assert [p.name for p in conv.iterdir()] == [f"{name}.bps"]
    _cli("navmesh", scan, "-o", nav, "--up", "z", "--agent-radius", 0.18, "--agent-height", 0.88)
    assert [p.name for p in nav.iterdir()] == [f"{name}.navmesh.bps"]
    _cli("episodes", nav / f"{name}.navmesh.bps", "--task", "objectnav", "--scenes", conv, "-o", eps,
         "--split", "train", "--per-scene", 3, "--seed", 1)
    assert [p.name for p in (eps / "train" / "content").iterdir()] == [f"{name}.json.gz"]
    doc = json.loads(gzip.decompress((eps / "train" / "content" / f"{name}.json.gz").read_bytes()))
    assert doc["episodes"] and {e["scene_id"].split("/")[-1].split(".")[0] for e in doc["episodes"]} == {name}


FLOOR = "v 0 0 0\nv 4 0 0\nv 4 0 -4\nv 0 0 -4\nf 1 2 3\nf 1 3 4\n"   # a 4 m floor, Y up


def _obj(path, text=FLOOR):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _fails(*args):
    r = CliRunner().invoke(main, [str(a) for a in args])
    assert r.exit_code != 0, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    return r


def test_a_name_starting_with_a_dot_is_named_without_it_everywhere(tmp_path):
    """``.room.obj``: up to the first dot is empty, so the name is ``room`` (the dots dropped,
    then up to the next) in convert, navmesh, episodes and preprocess's scan names alike: never
    an empty name (``out/.bps``, scene id "") nor a hidden output."""
    from bps_assets.container import read_header
    from bps_assets.habitat_names import habitat_scene_name
    from bps_assets.pipeline.datasets import scan_names

    assert habitat_scene_name("a/.room.obj") == "room" and habitat_scene_name("X.basis.glb") == "X"
    assert habitat_scene_name(".room.navmesh.bps") == "room"
    assert scan_names([".room.obj", "b.obj"]) == {"room": ".room.obj", "b": "b.obj"}
    scan = _obj(tmp_path / "src" / ".room.obj")
    _cli("convert", scan, "-o", tmp_path / "out")
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["room.bps"]
    assert read_header(tmp_path / "out" / "room.bps")[0]["scene_id"] == "room"
    _cli("navmesh", scan, "-o", tmp_path / "nav")
    assert [p.name for p in (tmp_path / "nav").iterdir()] == ["room.navmesh.bps"]
    nav = (tmp_path / "nav" / "room.navmesh.bps").rename(tmp_path / "nav" / ".room.navmesh.bps")
    _cli("episodes", nav, "-o", tmp_path / "eps", "--split", "train", "--per-scene", 2, "--seed", 1)
    assert [p.name for p in (tmp_path / "eps" / "train" / "content").iterdir()] == ["room.json.gz"]


def test_overwrite_never_replaces_an_output_made_from_another_scan_of_that_name(tmp_path):
    """``scan.v1.glb`` and ``scan.v2.glb`` are both scene ``scan``: in one call the second is
    refused (as before); across calls ``--overwrite`` replaces scan.v1's outputs only with
    scan.v1's (its path, or its bytes), and refuses scan.v2 (other bytes) naming both files."""
    v1, v2 = _obj(tmp_path / "scan.v1.obj"), _obj(tmp_path / "scan.v2.obj", FLOOR.replace("v 4 0 0", "v 5 0 0"))
    out, nav = tmp_path / "out", tmp_path / "nav"
    r = _fails("convert", v1, v2, "-o", out)
    assert "scene id 'scan' already used" in r.output
    _cli("convert", v1, "-o", out, "--overwrite")      # its own output: replaced
    before = (out / "scan.bps").read_bytes()
    r = _fails("convert", v2, "-o", out, "--overwrite")
    assert "scan.v1.obj" in r.output and "scan.v2.obj" in r.output and "another folder" in r.output
    assert (out / "scan.bps").read_bytes() == before
    _cli("navmesh", v1, "-o", nav)
    _cli("navmesh", v1, "-o", nav, "--overwrite")
    before = (nav / "scan.navmesh.bps").read_bytes()
    r = _fails("navmesh", v2, "-o", nav, "--overwrite")
    assert "scan.v1.obj" in r.output and "scan.v2.obj" in r.output
    assert (nav / "scan.navmesh.bps").read_bytes() == before


def test_episodes_finds_a_packed_scene_under_the_name_an_older_convert_gave(tmp_path):
    """Outputs made before the first-dot rule (``X.basis.bps`` + ``X.basis.navmesh.bps``): the
    semantic tasks find the packed scene under its old name, with a one-line note."""
    src = tmp_path / "src"
    _cli("synth", src, "-n", 1, "--semantic")
    glb = next(p for p in (src / "gibson").glob("*.glb") if p.name.count(".") == 1)
    name = glb.name.split(".")[0]
    conv, nav = tmp_path / "out" / "scenes", tmp_path / "out" / "navmeshes"
    _cli("convert", glb, "-o", conv, "--up", "z")
    _cli("navmesh", glb, "-o", nav, "--up", "z", "--agent-radius", 0.18, "--agent-height", 0.88)
    old_scene, old_nav = conv / f"{name}.basis.bps", nav / f"{name}.basis.navmesh.bps"
    (conv / f"{name}.bps").rename(old_scene)
    (nav / f"{name}.navmesh.bps").rename(old_nav)
    r = CliRunner().invoke(main, [str(a) for a in ("episodes", old_nav, "--task", "objectnav", "-o",
                                                   tmp_path / "eps", "--split", "train", "--per-scene", 3,
                                                   "--seed", 1)])
    assert r.exit_code == 0, r.output
    assert f"using {old_scene.name}" in r.output and f"{name}.bps" in r.output
    assert [p.name for p in (tmp_path / "eps" / "train" / "content").iterdir()] == [f"{name}.json.gz"]


def test_the_recorded_source_is_compared_by_resolved_path_and_sha256(tmp_path, monkeypatch):
    """--overwrite replaces an output of the same source: the same resolved path (re-converted
    after the file changed) or the same bytes (a moved folder, a renamed copy). Another file of
    the same scene name is refused naming both and how to proceed: Replica's ``*/mesh.ply``,
    ``X.v1.glb`` / ``X.v2.glb``, and HM3D's ``X.glb`` / ``X.basis.glb`` (other bytes). A file
    without a recorded source is left to --overwrite."""
    import numpy as np
    import pytest

    from bps_assets.container import refuse_other_source, write_container
    from bps_assets.errors import OutputExistsError
    from bps_assets.hashing import sha256_file

    for d, body in (("apt0", b"ply A"), ("room0", b"ply B")):
        (tmp_path / d).mkdir()
        (tmp_path / d / "mesh.ply").write_bytes(body)
    apt, room = tmp_path / "apt0" / "mesh.ply", tmp_path / "room0" / "mesh.ply"
    dst = tmp_path / "mesh.bps"
    write_container(dst, "TEST", {"source": {"path": str(apt), "sha256": sha256_file(apt)[0]}},
                    {"a": np.zeros(4, np.uint8)})
    with pytest.raises(OutputExistsError) as e:
        refuse_other_source(dst, room)
    assert all(s in str(e.value) for s in (str(dst), f"made from {apt}, not from {room}", "(-o)", "delete"))
    (tmp_path / "apt0").rename(tmp_path / "moved")   # the same bytes elsewhere: the same source
    refuse_other_source(dst, tmp_path / "moved" / "mesh.ply")
    apt.parent.mkdir()
    apt.write_bytes(b"ply A, edited")                # the same path, changed: the same source
    refuse_other_source(dst, apt)
    monkeypatch.chdir(tmp_path)
    refuse_other_source(dst, "apt0/../apt0/mesh.ply")
    (tmp_path / "X.glb").write_bytes(b"glb")
    (tmp_path / "X.basis.glb").write_bytes(b"glb, basis textures")
    write_container(dst, "TEST", {"source": {"path": "X.glb", "sha256": sha256_file("X.glb")[0]}},
                    {"a": np.zeros(4, np.uint8)}, overwrite=True)
    with pytest.raises(OutputExistsError, match="made from X.glb, not from X.basis.glb"):
        refuse_other_source(dst, "X.basis.glb")
    write_container(dst, "TEST", {"source": "X.basis.glb"}, {"a": np.zeros(4, np.uint8)}, overwrite=True)
    refuse_other_source(dst, tmp_path / "X.basis.glb")   # a recorded path alone: compared resolved
    with pytest.raises(OutputExistsError, match="made from X.basis.glb, not from X.v2.glb"):
        refuse_other_source(dst, "X.v2.glb")
    write_container(dst, "TEST", {}, {"a": np.zeros(4, np.uint8)}, overwrite=True)
    refuse_other_source(dst, "X.v2.glb")
    (tmp_path / "plain.bps").write_bytes(b"not a packed file")
    refuse_other_source(tmp_path / "plain.bps", "X.v2.glb")


def test_a_recorded_relative_path_with_sha256_is_decided_by_the_sha256(tmp_path, monkeypatch):
    """An older header's relative ``mesh.ply`` says nothing of its folder: resolved against the
    current folder it matched room0's file, and apt0's output was replaced silently."""
    import numpy as np
    import pytest

    from bps_assets.container import refuse_other_source, write_container
    from bps_assets.errors import OutputExistsError
    from bps_assets.hashing import sha256_file

    for d, body in (("apt0", b"ply A"), ("room0", b"ply B")):
        (tmp_path / d).mkdir()
        (tmp_path / d / "mesh.ply").write_bytes(body)
    dst = tmp_path / "mesh.bps"
    write_container(dst, "TEST", {"source": {"path": "mesh.ply", "sha256": sha256_file(tmp_path / "apt0" / "mesh.ply")[0]}},
                    {"a": np.zeros(4, np.uint8)})
    monkeypatch.chdir(tmp_path / "room0")
    with pytest.raises(OutputExistsError, match="made from mesh.ply, not from mesh.ply"):
        refuse_other_source(dst, "mesh.ply")
    monkeypatch.chdir(tmp_path / "apt0")
    refuse_other_source(dst, "mesh.ply")                 # the same bytes: the same source
    (tmp_path / "apt0" / "mesh.ply").write_bytes(b"ply A, edited")
    with pytest.raises(OutputExistsError):               # changed: no way to tell, refused
        refuse_other_source(dst, "mesh.ply")


def test_a_re_pointed_symlink_is_refused_naming_the_file_it_resolves_to(tmp_path, monkeypatch):
    """scans/current.obj re-pointed from v1.obj to v2.obj: a new scan, refused; the message
    named the recorded resolved path beside the typed link alone."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "scans").mkdir()
    for n, side in (("v1", 4), ("v2", 5)):
        (tmp_path / "scans" / f"{n}.obj").write_text(
            f"v 0 0 0\nv {side} 0 0\nv {side} 0 -{side}\nv 0 0 -{side}\nf 1 2 3\nf 1 3 4\n")
    os.symlink("v1.obj", "scans/current.obj")
    r = CliRunner().invoke(main, ["convert", "scans/current.obj", "-o", "out"])
    assert r.exit_code == 0, r.output
    before = (tmp_path / "out" / "current.bps").read_bytes()
    os.remove("scans/current.obj")
    os.symlink("v2.obj", "scans/current.obj")
    r = CliRunner().invoke(main, ["convert", "scans/current.obj", "-o", "out", "--overwrite"])
    assert r.exit_code != 0, r.output
    v1, v2 = (os.path.realpath(tmp_path / "scans" / f"{n}.obj") for n in ("v1", "v2"))
    assert f"made from {v1}, not from scans/current.obj (which resolves to {v2})" in r.output, r.output
    assert (tmp_path / "out" / "current.bps").read_bytes() == before


def test_convert_overwrite_keeps_another_folder_s_scan_of_the_same_name(tmp_path):
    """Replica's layout (``apt_0/mesh.ply``, ``room_0/mesh.ply``: scene ``mesh`` each):
    ``convert room0/mesh.glb -o out --overwrite`` does not replace apt0's out/mesh.bps (exit 2,
    both named, the file unchanged); the same scan from a moved folder, and the same path after
    the file changed, do replace it."""
    import shutil

    src = tmp_path / "src"
    _cli("synth", src, "-n", 2)
    a, b = sorted(p for p in (src / "gibson").glob("*.glb") if p.name.count(".") == 1)[:2]
    for d, glb in (("apt0", a), ("room0", b)):
        (tmp_path / d).mkdir()
        shutil.copy(glb, tmp_path / d / "mesh.glb")
    out = tmp_path / "out"
    _cli("convert", tmp_path / "apt0" / "mesh.glb", "-o", out, "--up", "z")
    before = (out / "mesh.bps").read_bytes()
    r = CliRunner().invoke(main, [str(x) for x in ("convert", tmp_path / "room0" / "mesh.glb", "-o", out,
                                                   "--up", "z", "--overwrite")])
    assert r.exit_code == 2 and "room0" in r.output and "apt0" in r.output and "delete" in r.output, r.output
    assert (out / "mesh.bps").read_bytes() == before
    shutil.copytree(tmp_path / "apt0", tmp_path / "moved")
    _cli("convert", tmp_path / "moved" / "mesh.glb", "-o", out, "--up", "z", "--overwrite")
    shutil.copy(b, tmp_path / "moved" / "mesh.glb")   # the same path, another scan now
    _cli("convert", tmp_path / "moved" / "mesh.glb", "-o", out, "--up", "z", "--overwrite")
    assert (out / "mesh.bps").read_bytes() != before


def _ply(path, side=4):
    """A ``side`` m square floor (Y up) as an ASCII PLY: Replica's scans are all ``mesh.ply``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("ply\nformat ascii 1.0\nelement vertex 4\nproperty float x\nproperty float y\n"
                    "property float z\nelement face 2\nproperty list uchar int vertex_indices\nend_header\n"
                    f"0 0 0\n{side} 0 0\n{side} 0 -{side}\n0 0 -{side}\n3 0 1 2\n3 0 2 3\n")
    return path


def test_navmesh_overwrite_keeps_another_folder_s_scan_of_the_same_name(tmp_path, monkeypatch):
    """A navmesh records its source's resolved path and sha256 (header ``source_file``), so
    ``navmesh room0/mesh.ply -o nav --overwrite`` does not replace apt0's nav/mesh.navmesh.bps
    (non-zero exit naming both, the file byte-identical); the same scan moved or copied elsewhere
    (same bytes), or the same path after the file changed (typed relative, from another working
    folder), does replace it. A navmesh written before the key (its file name alone) is
    compared by name, as before."""
    from bps_assets.container import read_header
    from bps_assets.hashing import sha256_file
    from bps_assets.nav.sources import navmesh_from_file

    apt, room = _ply(tmp_path / "apt0" / "mesh.ply"), _ply(tmp_path / "room0" / "mesh.ply", side=5)
    nav, out = tmp_path / "nav", tmp_path / "nav" / "mesh.navmesh.bps"
    _cli("navmesh", apt, "-o", nav)
    before = out.read_bytes()
    r = _fails("navmesh", room, "-o", nav, "--overwrite")
    assert out.read_bytes() == before
    assert str(apt.resolve()) in r.output and str(room) in r.output and "delete" in r.output, r.output
    h = read_header(out)[0]
    assert h["source"] == "mesh.ply"
    assert h["source_file"] == {"path": str(apt.resolve()), "sha256": sha256_file(apt)[0]}
    _ply(tmp_path / "moved" / "mesh.ply")   # apt0's bytes in another folder: the same source
    _cli("navmesh", tmp_path / "moved" / "mesh.ply", "-o", nav, "--overwrite")
    assert read_header(out)[0]["source_file"]["path"] == str((tmp_path / "moved" / "mesh.ply").resolve())
    _ply(tmp_path / "moved" / "mesh.ply", side=6)   # the same path, changed, typed from elsewhere
    monkeypatch.chdir(tmp_path / "moved")
    _cli("navmesh", "mesh.ply", "-o", nav, "--overwrite")
    assert out.read_bytes() != before
    assert read_header(out)[0]["source_file"]["sha256"] == sha256_file(tmp_path / "moved" / "mesh.ply")[0]
    old = navmesh_from_file(apt)   # as written before source_file: the name alone
    old.source_file = None
    old.save(out, overwrite=True)
    assert "source_file" not in read_header(out)[0]
    _cli("navmesh", room, "-o", nav, "--overwrite")   # same name: replaced, as before
    assert read_header(out)[0]["source_file"]["path"] == str(room.resolve())


def test_convert_records_the_resolved_source_path(tmp_path, monkeypatch):
    """``convert`` records its source's resolved absolute path: a scan typed as a relative path,
    changed, then re-converted with ``--overwrite`` from another working folder is the same
    file and replaces its output. A file written when the path was recorded as typed (relative)
    is compared as before: resolved against the current folder, or by sha256."""
    from bps_assets.container import read_header

    scan = _obj(tmp_path / "apt0" / "mesh.obj")
    monkeypatch.chdir(tmp_path)
    _cli("convert", "apt0/mesh.obj", "-o", "out")
    out = tmp_path / "out" / "mesh.bps"
    before = out.read_bytes()
    _obj(scan, FLOOR.replace("v 4 0 0", "v 5 0 0"))
    monkeypatch.chdir(tmp_path / "apt0")
    _cli("convert", "mesh.obj", "-o", "../out", "--overwrite")
    assert out.read_bytes() != before and read_header(out)[0]["source"]["path"] == str(scan.resolve())
