"""`bps-assets preview --episodes` reads a file with the reader of the task its keys show: an
InstanceImageNav dataset (its split file holds no episode: the keys are in ``content/``) is drawn
with its goal's view points, and a broken ObjectNav file gets the ObjectNav reader's own error,
not the PointNav reader's "goals must be a non-empty list" (both happened before)."""
from __future__ import annotations

import gzip
import json

import pytest
from click.testing import CliRunner

from bps_assets.nav.instance_imagenav_episodes import instance_imagenav_scene
from bps_assets.nav.instance_imagenav_files import write_instance_imagenav_dataset
from bps_assets.nav.objectnav_episodes import objectnav_scene
from bps_assets.nav.objectnav_files import write_objectnav_dataset
from cli.main import main
from objectnav_scenes import two_rooms

SID = "hm3d/val/00800-TEEsavR23oF/TEEsavR23oF.basis.glb"


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    s = two_rooms()
    nav = tmp_path_factory.mktemp("nav") / "TEEsavR23oF.navmesh.bps"
    s.navmesh.save(nav)
    return s, nav


def _preview(nav, png, episodes):
    return CliRunner().invoke(main, ["preview", str(nav), "-o", str(png), "--episodes", str(episodes),
                                     "--scene", "TEEsavR23oF"])


def _write_objectnav(s, root):
    """A 4-episode ObjectNav v1 dataset of ``s`` at ``root`` (split val, episodes in content/)."""
    ds = objectnav_scene(s.navmesh, s.vertices, s.triangles, s.tri_object, s.table, SID, 4, seed=2,
                         categories={"chair": 0, "table": 2, "sofa": 5, "bed": 1})
    write_objectnav_dataset(root, "val", {"TEEsavR23oF": ds}, ds.category_to_task_category_id,
                            ds.category_to_scene_annotation_category_id)


def test_an_instance_imagenav_file_is_drawn(scene, tmp_path):
    s, nav = scene
    ds = instance_imagenav_scene(s.navmesh, s.vertices, s.triangles, s.tri_object, s.table, SID, 4, seed=4)
    write_instance_imagenav_dataset(tmp_path / "iin", "val", {"TEEsavR23oF": ds})
    for episodes in (tmp_path / "iin" / "val" / "val.json.gz", tmp_path / "iin" / "val"):
        png = tmp_path / f"map_{episodes.name}.png"
        r = _preview(nav, png, episodes)
        assert r.exit_code == 0, r.output
        assert "4 episode(s)" in r.output and png.stat().st_size > 0


def test_a_broken_objectnav_file_gets_the_objectnav_error(scene, tmp_path):
    s, nav = scene
    _write_objectnav(s, tmp_path / "on")
    r = _preview(nav, tmp_path / "ok.png", tmp_path / "on" / "val" / "val.json.gz")
    assert r.exit_code == 0 and "4 episode(s)" in r.output, r.output
    for f in (tmp_path / "on" / "val").rglob("*.json.gz"):   # task ids as text: an ObjectNav-file error
        with gzip.open(f, "rt") as fh:
            doc = json.load(fh)
        doc["category_to_task_category_id"] = {k: str(v) for k, v in doc["category_to_task_category_id"].items()}
        with gzip.open(f, "wt") as fh:
            json.dump(doc, fh)
    png = tmp_path / "bad.png"
    r = _preview(nav, png, tmp_path / "on" / "val" / "val.json.gz")
    assert r.exit_code == 2, r.output
    assert "category_to_task_category_id must be an object" in r.output, r.output
    assert "goals must be a non-empty list" not in r.output and not png.exists()


def test_a_one_file_objectnav_folder_is_read_as_objectnav(scene, tmp_path):
    """A folder with no ``content/``: its own split file (``val/val.json.gz``) shows the task."""
    s, nav = scene
    _write_objectnav(s, tmp_path / "on")
    val = tmp_path / "on" / "val"
    content = val / "content" / "TEEsavR23oF.json.gz"
    with gzip.open(content, "rt") as fh:
        doc = json.load(fh)
    content.unlink()
    content.parent.rmdir()
    with gzip.open(val / "val.json.gz", "wt") as fh:   # the episodes merged into the split file
        json.dump(doc, fh)
    for episodes in (val / "val.json.gz", val):
        png = tmp_path / f"one_{episodes.name}.png"
        r = _preview(nav, png, episodes)
        assert r.exit_code == 0, r.output
        assert "4 episode(s)" in r.output and png.stat().st_size > 0


def test_the_content_folder_reads_as_its_split(scene, tmp_path):
    """--episodes SPLIT/content: was 'content/content.json.gz: no such file' (a path the tool made
    up; journey viz F12); now its split folder, read with the task its keys show."""
    s, nav = scene
    _write_objectnav(s, tmp_path / "on")
    png = tmp_path / "content.png"
    r = _preview(nav, png, tmp_path / "on" / "val" / "content")
    assert r.exit_code == 0 and "4 episode(s)" in r.output and png.exists(), r.output
