"""ObjectNav v1 files whose goals ride in the episodes (no ``goals_by_category``: habitat's
``dedup_goals`` input) are read as habitat-lab reads them: each episode's category is its
goals[0]'s whatever the episode says (datasets/object_nav/object_nav_dataset.py, ``dedup_goals``),
and the first episode of a key gives that key's goals. A file with ``goals_by_category`` keeps
each episode's own category. Compared with habitat-lab's own ``ObjectNavDatasetV1`` when it is
installed (tests/habitat_lab_stub.py); the expected values are spelled out too."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from bps_assets.nav.objectnav_episodes import objectnav_scene
from bps_assets.nav.objectnav_files import read_objectnav_dataset
from episode_files import write_gz
from habitat_lab_stub import load_habitat, unload
from objectnav_scenes import two_rooms

SID = "hm3d/val/00800-TEEsavR23oF/TEEsavR23oF.basis.glb"
CATS = {"chair": 0, "table": 2, "sofa": 5, "bed": 1}


@pytest.fixture(scope="module")
def generated():
    s = two_rooms()
    return objectnav_scene(s.navmesh, s.vertices, s.triangles, s.tri_object, s.table, SID, 9, seed=2, categories=CATS)


def _dedup_file(tmp_path, ds, goals_by_category: bool):
    """``ds`` written with every episode carrying its goals; the first chair episode carries the
    sofa goals while saying "chair"."""
    eps = [dict(e, goals=ds.goals_of(e)) for e in ds.episodes]
    first_chair = next(i for i, e in enumerate(eps) if e["object_category"] == "chair")
    eps[first_chair]["goals"] = ds.goals_of(next(e for e in ds.episodes if e["object_category"] == "sofa"))
    maps = {"category_to_task_category_id": ds.category_to_task_category_id,
            "category_to_scene_annotation_category_id": ds.category_to_scene_annotation_category_id}
    doc = {"episodes": eps, **maps}
    if goals_by_category:
        doc["goals_by_category"] = ds.goals_by_category
    write_gz(tmp_path / "val" / "content" / "TEEsavR23oF.json.gz", doc)
    write_gz(tmp_path / "val" / "val.json.gz", {"episodes": [], **maps})
    return first_chair


def _categories(ds):
    return [e["object_category"] for e in ds.episodes]


def test_a_dedup_file_takes_each_category_from_goals0(generated, tmp_path):
    ds = generated
    i = _dedup_file(tmp_path, ds, goals_by_category=False)
    ours = read_objectnav_dataset(tmp_path / "val")
    want = _categories(ds)
    want[i] = "sofa"
    assert _categories(ours) == want
    # the chair key holds chairs (the first episode that really is a chair's), not the sofas
    chairs = ours.goals_by_category[f"{SID.rsplit('/', 1)[1]}_chair"]
    assert {g["object_category"] for g in chairs} == {"chair"}
    for e in ours.episodes:
        assert {g["object_category"] for g in ours.goals_of(e)} == {e["object_category"]}
    h = load_habitat()
    if h is None:
        return
    try:
        theirs = h.ObjectNavDatasetV1(SimpleNamespace(data_path=str(tmp_path / "{split}" / "{split}.json.gz"),
                                                      split="val", scenes_dir="", content_scenes=["*"]))
        assert _categories(ours) == [e.object_category for e in theirs.episodes]
        assert {k: [g.object_id for g in v] for k, v in theirs.goals_by_category.items()} == \
            {k: [g["object_id"] for g in v] for k, v in ours.goals_by_category.items()}
    finally:
        unload(h)


def test_with_goals_by_category_the_episodes_category_stays(generated, tmp_path):
    ds = generated
    _dedup_file(tmp_path, ds, goals_by_category=True)
    ours = read_objectnav_dataset(tmp_path / "val")
    assert _categories(ours) == _categories(ds)   # habitat runs no dedup_goals then: goals_by_category rules
