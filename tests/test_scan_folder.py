"""A folder of scans of no known dataset (``datasets.load_scan_folder``): every scan gets a
scene name of its own, or the folder is refused naming both scans (journey f item 1); symlinked
folders are followed like a dataset layout's, without loops or duplicates (journey f item 5)."""
import os
import shutil

import pytest
from click.testing import CliRunner

from bps_assets.errors import DatasetError
from bps_assets.pipeline.datasets import load_scan_folder


def scans(root, *rels):
    for r in rels:
        (root / r).parent.mkdir(parents=True, exist_ok=True)
        (root / r).write_bytes(b"")   # listing only: the files are not read
    return root


def named(root):
    ds = load_scan_folder(root)
    assert sorted(ds.split()["train"]) == sorted(ds.scene_files)
    return {n: rel for n, (rel, _nav) in ds.scene_files.items()}


def test_two_formats_of_one_scan_are_both_scenes(tmp_path):
    """Journey f 1a: ``level.glb`` + ``level.obj`` gave one scene, the .glb silently dropped."""
    assert named(scans(tmp_path, "level.glb", "level.obj")) == {"level_glb": "level.glb", "level_obj": "level.obj"}


def test_a_path_name_never_takes_another_scans_own_name(tmp_path):
    """Journey f 1b: ``a/room.glb``'s path name ``a__room`` overwrote the scan ``a__room.glb``."""
    got = named(scans(tmp_path, "a/room.glb", "a__room.glb", "room.glb"))
    assert got == {"a__room": "a__room.glb", "room": "room.glb", "a__room_glb": "a/room.glb"}


def test_unique_names_and_path_names_stay_as_they_were(tmp_path):
    """Manifests made before the fix keep their scene names."""
    got = named(scans(tmp_path, "a/room.glb", "b/room.glb", "house.glb", "x/y.basis.glb"))
    assert got == {"a__room": "a/room.glb", "b__room": "b/room.glb", "house": "house.glb", "y": "x/y.basis.glb"}


def test_scans_no_rule_can_tell_apart_are_refused_naming_both(tmp_path):
    root = scans(tmp_path, "a/b.glb", "a__b.glb", "c/a__b.glb", "c/b.glb")
    with pytest.raises(DatasetError) as e:
        load_scan_folder(root)
    msg = str(e.value)
    assert str(root / "a" / "b.glb") in msg and str(root / "a__b.glb") in msg and "rename" in msg, msg


def test_a_symlinked_folder_is_followed(tmp_path):
    """Journey f 5: a folder holding only ``gibson_scans -> elsewhere`` had 'no scan'."""
    data = scans(tmp_path / "data", "Allensville.glb", "Collierville.glb")
    (tmp_path / "s").mkdir()
    os.symlink(data, tmp_path / "s" / "gibson_scans")
    assert named(tmp_path / "s") == {"Allensville": "gibson_scans/Allensville.glb",
                                     "Collierville": "gibson_scans/Collierville.glb"}
    scans(tmp_path / "s", "own.glb")
    assert sorted(named(tmp_path / "s")) == ["Allensville", "Collierville", "own"]


def test_symlink_loops_and_links_inside_the_folder_give_each_scan_once(tmp_path):
    root = scans(tmp_path / "s", "sub/a.glb")
    os.symlink(root, root / "sub" / "loop")           # back to the top: a loop
    os.symlink(root / "sub", root / "again")          # inside the folder: found by its real path
    data = scans(tmp_path / "data", "deep/b.glb")
    os.symlink(data, root / "l1")                     # two links to one folder outside
    os.symlink(data, root / "l2")
    os.symlink(data / "deep", root / "l3")            # and one to a folder under it
    os.symlink(tmp_path / "data", data / "deep" / "up")  # a loop outside the folder
    assert named(root) == {"a": "sub/a.glb", "b": "l3/b.glb"}   # l3 is met (at the top) before l1/deep


def test_preprocess_through_a_symlinked_folder_warns_as_a_dataset_layout_does(synth_pair, tmp_path):
    from cli.main import main

    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(synth_pair / "gibson" / "Allensville.glb", data)
    (tmp_path / "s").mkdir()
    os.symlink(data, tmp_path / "s" / "gibson_scans")
    r = CliRunner().invoke(main, ["preprocess", str(tmp_path / "s"), "-o", str(tmp_path / "o"), "--up", "z",
                                  "--workers", "1", "--episodes", "0"])
    assert r.exit_code == 0, r.output
    assert "1 processed" in r.output and "resolves through a symlink outside the source folder" in r.output, r.output
