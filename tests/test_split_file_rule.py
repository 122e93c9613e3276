"""One rule (``nav.episodes.split_file_of``) says which file a habitat v1 episode dataset given as
a folder is read from: a split folder its own ``SPLIT/SPLIT.json.gz``; its ``content/`` folder the
split folder's (habitat's layout), unless that folder holds a ``content.json.gz`` of its own.
It was written in three places (``episodes.dataset_files``, ``objectnav_files.read_category_map``,
``preview --episodes``) and the content-folder case only in the CLI: the readers (and the
runtime's ``make(episodes=...)``, which reads through them) failed on a content folder with
"content/content.json.gz" not found. Each caller is checked through its public entry."""
from __future__ import annotations

import gzip

import pytest

from bps_assets.nav.episodes import make_episode, read_pointnav_dataset, split_file_of, write_pointnav_dataset

SID = "hm3d/val/00800-TEEsavR23oF/TEEsavR23oF.basis.glb"


def _pointnav(root, split="val"):
    eps = [make_episode(i, "gibson/Room.glb", [0.0, 0.0, float(i)], [0.0, 0.0, 0.0, 1.0], [1.0, 0.0, 0.0], 1.0)
           for i in range(3)]
    write_pointnav_dataset(root, split, {"Room": eps})
    return root / split


def test_the_rule(tmp_path, monkeypatch):
    val = _pointnav(tmp_path)
    content = val / "content"
    assert split_file_of(val / "val.json.gz") == val / "val.json.gz"
    assert split_file_of(content / "Room.json.gz") == content / "Room.json.gz"
    assert split_file_of(val) == val / "val.json.gz"
    assert split_file_of(content) == val / "val.json.gz"
    monkeypatch.chdir(content)   # typed inside the folder: the folder's own name, not ".json.gz"
    assert split_file_of("..") == val / "val.json.gz"
    monkeypatch.chdir(val)
    assert split_file_of(".") == val / "val.json.gz" and split_file_of("content") == val / "val.json.gz"
    monkeypatch.chdir(content)   # "." inside content/: made absolute before the content rule
    assert split_file_of(".") == val / "val.json.gz"
    (content / "sub").mkdir()
    monkeypatch.chdir(content / "sub")   # ".." names content/: its split's file
    assert split_file_of("..") == val / "val.json.gz"
    # a folder named content that is itself a split (holds content.json.gz): its own file
    own = tmp_path / "other" / "content"
    own.mkdir(parents=True)
    (own / "content.json.gz").write_bytes(gzip.compress(b'{"episodes": []}'))
    assert split_file_of(own) == own / "content.json.gz"


def test_pointnav_reader_takes_the_split_folder_and_its_content_folder(tmp_path):
    val = _pointnav(tmp_path)
    want = read_pointnav_dataset(val / "val.json.gz")
    assert len(want) == 3
    assert read_pointnav_dataset(val) == want
    assert read_pointnav_dataset(val / "content") == want


def test_objectnav_readers_take_the_split_folder_and_its_content_folder(tmp_path):
    from bps_assets.nav.objectnav_episodes import objectnav_scene
    from bps_assets.nav.objectnav_files import read_category_map, read_objectnav_dataset, write_objectnav_dataset
    from objectnav_scenes import two_rooms

    s = two_rooms()
    ds = objectnav_scene(s.navmesh, s.vertices, s.triangles, s.tri_object, s.table, SID, 4, seed=2,
                         categories={"chair": 0, "table": 2, "sofa": 5, "bed": 1})
    write_objectnav_dataset(tmp_path, "val", {"TEEsavR23oF": ds}, ds.category_to_task_category_id,
                            ds.category_to_scene_annotation_category_id)
    val = tmp_path / "val"
    want = read_objectnav_dataset(val / "val.json.gz")
    assert len(want.episodes) == 4
    maps = read_category_map(val / "val.json.gz")
    assert maps == {"chair": 0, "table": 2, "sofa": 5, "bed": 1}
    for given in (val, val / "content"):
        got = read_objectnav_dataset(given)
        assert [dict(e) for e in got.episodes] == [dict(e) for e in want.episodes]
        assert read_category_map(given) == maps   # the content folder


def test_runtime_episodes_take_the_content_folder(dataset):
    """``make(episodes=SPLIT/content)`` resolves through the readers: the split's episodes."""
    from bps_assets.pipeline.manifest import load_manifest
    from bps_runtime.episodes.files import resolve_episodes

    m = load_manifest(dataset)
    split = m.episodes_path("val")
    names = [s.name for s in m.scenes("val")]
    _, want = resolve_episodes(m, "val", names, str(split))
    mode, got = resolve_episodes(m, "val", names, str(split.parent / "content"))
    assert mode == "dataset" and sorted(got) == sorted(want) and sum(len(t) for t in want.values()) > 0
    assert all(got[k] == want[k] for k in want)
    assert resolve_episodes(m, "val", names, str(split.parent))[1] == want


def test_preview_reads_a_split_folder_and_its_content_folder(tmp_path):
    """``preview --episodes`` reads every form through the same rule (its own copy is gone)."""
    from click.testing import CliRunner

    from bps_assets.nav.build import build_navmesh, scene_triangles
    from cli.main import main

    val = _pointnav(tmp_path / "pn")
    room = tmp_path / "Room.obj"   # a 6 x 6 m floor the episodes stand on
    room.write_text("v -1 0 -1\nv 5 0 -1\nv 5 0 5\nv -1 0 5\nf 1 3 2\nf 1 4 3\n")
    nav = tmp_path / "Room.navmesh.bps"
    v, t, _ = scene_triangles(room)
    build_navmesh((v, t)).save(nav)
    for given in (val / "val.json.gz", val, val / "content"):
        png = tmp_path / f"{given.name}.png"
        r = CliRunner().invoke(main, ["preview", str(nav), "-o", str(png), "--episodes", str(given)])
        assert r.exit_code == 0 and "3 episode(s)" in r.output and png.exists(), (given, r.output)


def test_a_resume_names_the_split_file_any_way_the_rule_reads_it(tmp_path, monkeypatch):
    """``checkpoint.episodes_id`` goes through the rule: ``--episodes SPLIT``, ``SPLIT/content`` and
    ``SPLIT/SPLIT.json.gz`` read one file, so they are one run (a resume switching between them was
    refused). A checkpoint saved with the old id (the typed path resolved as is: the split folder)
    still resumes with the same command, and with the others; another split is still refused."""
    from test_train_smoke import _run_id

    from bps_assets.errors import ConfigError
    from bps_train import checkpoint

    val = _pointnav(tmp_path)
    _pointnav(tmp_path, "train")
    monkeypatch.chdir(tmp_path)
    forms = ("val", "val/content", "val/val.json.gz", str(val), "./val/content/")
    assert {checkpoint.episodes_id(f) for f in forms} == {str((val / "val.json.gz").resolve())}
    for saved_as in forms:
        saved = {"args": {"episodes": saved_as}, "world": 1, "identity": _run_id(saved_as)}
        for other in forms:
            checkpoint.check_same_run("ck.pt", checkpoint.saved_identity(saved), _run_id(other))
    old = _run_id("val")   # as saved before: the folder's resolved path, in the identity and the env config
    old["episodes"] = old["env"]["episodes"]["source"] = str(val.resolve())
    for typed in ({"episodes_typed": "val"}, {}):   # with the typed path, and from before it was kept
        ident = {**{k: v for k, v in old.items() if k != "episodes_typed"}, **typed}
        saved = {"args": {}, "world": 1, "identity": ident}
        for other in forms:
            checkpoint.check_same_run("ck.pt", checkpoint.saved_identity(saved), _run_id(other))
        with pytest.raises(ConfigError, match="--episodes"):
            checkpoint.check_same_run("ck.pt", checkpoint.saved_identity(saved), _run_id("train"))
