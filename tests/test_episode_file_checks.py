"""Episode files that are wrong but parse: repeated episode ids, category ids out of range or
shared, huge goal object ids, and files over the episode / view-point caps are one typed error
naming the file and the episode (bps_assets.nav readers, which the runtime calls)."""
from __future__ import annotations

import copy
import gzip
import json

import pytest

from bps_assets.errors import InputError, ResourceLimitError
from bps_assets.nav import episodes as pn
from bps_assets.nav import objectnav_files as on

Q = [0.0, 0.0, 0.0, 1.0]
BIG = 10 ** 400   # a JSON integer beyond float range: float() of it raises OverflowError


def _objectnav_doc(n=3):
    vp = on.make_view_point([1.0, 0.0, 1.0], Q, 0.5)
    goal = on.make_object_goal([1.0, 0.5, 1.5], 7, "chair", [vp])
    eps = [on.make_objectnav_episode(i, "scene/a.glb", [0.0, 0.0, 0.0], Q, "chair") for i in range(n)]
    return {"episodes": eps, "goals_by_category": {"a.glb_chair": [goal]},
            "category_to_task_category_id": {"chair": 0, "bed": 1},
            "category_to_scene_annotation_category_id": {"chair": 3, "bed": 4}}


def _write(tmp_path, doc, name="val"):
    d = tmp_path / name
    d.mkdir(exist_ok=True)
    p = d / f"{name}.json.gz"
    p.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return p


def test_a_good_file_reads(tmp_path):
    ds = on.read_objectnav_dataset(_write(tmp_path, _objectnav_doc()))
    assert len(ds.episodes) == 3


@pytest.mark.parametrize("edit,msg", [
    (lambda d: d["category_to_task_category_id"].update(bed=-1), r"category_to_task_category_id\['bed'\] = -1"),
    (lambda d: d["category_to_task_category_id"].update(bed=10**30), r"= 10{30}"),
    (lambda d: d["category_to_task_category_id"].update(bed=0), "gives two categories one task id"),
    (lambda d: d["category_to_scene_annotation_category_id"].update(bed=-3), r"scene_annotation_category_id\['bed'\] = -3"),
    (lambda d: d["goals_by_category"]["a.glb_chair"][0].update(object_id=2**70), "object_id 1180591620717411303424"),
    (lambda d: d["goals_by_category"]["a.glb_chair"][0].update(object_id=-2), "object_id -2"),
    (lambda d: d["episodes"][1].update(start_position=[0, 0, BIG]), r"episode 1 .*start_position"),
    (lambda d: d["goals_by_category"]["a.glb_chair"][0].update(position=[BIG, 0, 0]), "goal position must be 3"),
    (lambda d: d["goals_by_category"]["a.glb_chair"][0]["view_points"][0]["agent_state"].update(
        position=[0, BIG, 0]), "view point 0: agent_state.position"),
    (lambda d: d["goals_by_category"]["a.glb_chair"][0]["view_points"][0].update(iou=BIG),
     "view point 0: iou must be a number"),
])
def test_objectnav_file_problems_are_one_typed_error(tmp_path, edit, msg):
    doc = _objectnav_doc()
    edit(doc)
    p = _write(tmp_path, doc)
    with pytest.raises(InputError, match=msg) as e:
        on.read_objectnav_dataset(p)
    assert str(p) in str(e.value) and len(str(e.value).splitlines()) == 1


def test_view_points_per_goal_are_capped(tmp_path, monkeypatch):
    monkeypatch.setattr(on, "MAX_VIEW_POINTS_PER_GOAL", 4)
    doc = _objectnav_doc()
    g = doc["goals_by_category"]["a.glb_chair"][0]
    g["view_points"] = g["view_points"] * 5
    with pytest.raises(ResourceLimitError, match="5 view points, more than the cap of 4"):
        on.read_objectnav_dataset(_write(tmp_path, doc))


def test_episode_and_view_point_counts_are_refused_before_parsing(tmp_path, monkeypatch):
    """The counts are checked on each piece of the file as it is read, before the piece is
    decoded (one read of the file: no pass of its own): a file over a cap within one piece
    becomes no Python object; a longer one, at most a cap's worth."""
    import bps_assets.nav.episode_stream as stream
    import bps_assets.nav.episodes as module

    monkeypatch.setattr(module, "MAX_EPISODES_PER_FILE", 2)
    calls = []
    real = stream._Window.value
    monkeypatch.setattr(stream._Window, "value", lambda self: calls.append(1) or real(self))
    p = _write(tmp_path, _objectnav_doc(3))
    with pytest.raises(ResourceLimitError, match="3 episodes in one file, more than the cap of 2"):
        on.read_objectnav_dataset(p)
    assert calls == []   # refused before the JSON became Python objects
    monkeypatch.setattr(module, "MAX_EPISODES_PER_FILE", 10)
    monkeypatch.setattr(module, "MAX_VIEW_POINTS_PER_FILE", 0)
    with pytest.raises(ResourceLimitError, match="1 view points in one file"):
        on.read_objectnav_dataset(p)
    # pieces of 64 bytes: the count passes the cap within the episodes list, none past it decoded
    monkeypatch.setattr(stream, "_CHUNK", 64)
    monkeypatch.setattr(module, "MAX_EPISODES_PER_FILE", 20)
    monkeypatch.setattr(module, "MAX_VIEW_POINTS_PER_FILE", 10)
    decoded = []
    monkeypatch.setattr(on, "validate_episode", lambda e, i, path, **k: decoded.append(i) or e)
    q = _write(tmp_path, _objectnav_doc(40), "long")
    with pytest.raises(ResourceLimitError, match="21 episodes in one file, more than the cap of 20"):
        on.read_objectnav_dataset(q)
    assert 0 < len(calls) and len(decoded) <= 20


def test_objectnav_ids_are_the_index_in_the_file(tmp_path):
    """habitat's ObjectNavDatasetV1.from_json sets each episode_id to str(its index in the file):
    so do we, and a file's repeated ids (refused before, issue A5) no longer matter."""
    doc = _objectnav_doc()
    doc["episodes"][2].update(episode_id="0")
    doc["episodes"][1].update(episode_id=17)
    ds = on.read_objectnav_dataset(_write(tmp_path, doc))
    assert [e["episode_id"] for e in ds.episodes] == ["0", "1", "2"]


def test_pointnav_repeated_ids_are_refused(tmp_path):
    eps = [pn.make_episode(i, "scene/a.glb", [0.0, 0.0, 0.0], Q, [1.0, 0.0, 1.0], 1.5) for i in range(3)]
    ok = _write(tmp_path, {"episodes": eps}, "ok")
    assert len(pn.read_pointnav_dataset(ok)) == 3
    dup = copy.deepcopy(eps)
    dup[1]["episode_id"] = 0   # an int and the string "0" are one id once read
    p = _write(tmp_path, {"episodes": dup}, "dup")
    with pytest.raises(InputError, match=r"episode 1 \(id '0'\): episode_id repeats episode 0 in scene"):
        pn.read_pointnav_dataset(p)
    other = copy.deepcopy(eps)
    other[1].update(episode_id=eps[0]["episode_id"], scene_id="scene/b.glb")   # same id, other scene: fine
    assert len(pn.read_pointnav_dataset(_write(tmp_path, {"episodes": other}, "other"))) == 3


@pytest.mark.parametrize("edit,msg", [
    (lambda e: e.update(start_position=[BIG, 0, 0]), "start_position must be 3 finite numbers"),
    (lambda e: e.update(start_rotation=[0, 0, 0, BIG]), "start_rotation must be 4 finite numbers"),
    (lambda e: e["goals"][0].update(position=[0, BIG, 0]), "each goal needs a position of 3 finite numbers"),
    (lambda e: e["goals"][0].update(radius=BIG), "goal radius must be null or a number"),
    (lambda e: e["info"].update(geodesic_distance=BIG), "info.geodesic_distance must be a number"),
])
def test_pointnav_ints_beyond_float_range_are_input_errors(tmp_path, edit, msg):
    eps = [pn.make_episode(i, "scene/a.glb", [0.0, 0.0, 0.0], Q, [1.0, 0.0, 1.0], 1.5) for i in range(2)]
    edit(eps[1])
    p = _write(tmp_path, {"episodes": eps})
    for read in (pn.read_pointnav_dataset, pn.read_pointnav_table):   # the env's and the CLI's readers
        with pytest.raises(InputError, match=r"episode 1 \(id '1'\): " + msg) as e:
            read(p)
        assert str(p) in str(e.value)


def _write_escaped(tmp_path, doc, key, gz, name="esc"):
    """``doc`` written with every ``key`` spelled with a JSON escape (``\\u005f`` for ``_``): the
    same document once decoded, but not the bytes the raw count looks for."""
    text = json.dumps(doc).replace(f'"{key}"', '"' + key.replace("_", "\\u005f") + '"')
    assert f'"{key}"' not in text
    d = tmp_path / name
    d.mkdir()
    p = d / f"{name}.json{'.gz' if gz else ''}"
    p.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    return p


@pytest.mark.parametrize("gz", [False, True])
def test_caps_hold_on_keys_written_with_json_escapes(tmp_path, monkeypatch, gz):
    """The raw count misses a key written with escapes; what is decoded is counted again, exactly:
    past a cap is the same ResourceLimitError naming the file, at most a cap's worth kept."""
    from test_instance_imagenav_files import CONTENT, G

    from bps_assets.nav import instance_imagenav_files as iin

    monkeypatch.setattr(pn, "MAX_EPISODES_PER_FILE", 2)
    eps = [pn.make_episode(i, "scene/a.glb", [0.0, 0.0, 0.0], Q, [1.0, 0.0, 1.0], 1.5) for i in range(5)]
    p = _write_escaped(tmp_path, {"episodes": eps}, "episode_id", gz, "pointnav")
    kept = []
    real = pn.validate_episode
    monkeypatch.setattr(pn, "validate_episode", lambda e, i, path, **k: kept.append(i) or real(e, i, path, **k))
    for read in (pn.read_pointnav_dataset, pn.read_pointnav_table, pn.read_json):
        with pytest.raises(ResourceLimitError, match="3 episodes in one file, more than the cap of 2") as e:
            read(p)
        assert str(p) in str(e.value)
    assert set(kept) == {0, 1}   # none past the cap reached the reader
    with pytest.raises(ResourceLimitError, match="3 episodes in one file"):   # other members streamed
        pn.read_json(p, "PointNav", {"other": ("list", lambda i, v: None)})
    monkeypatch.setattr(pn, "MAX_EPISODES_PER_FILE", 5)
    assert len(pn.read_json(p, "PointNav", {"other": ("list", lambda i, v: None)})["episodes"]) == 5
    assert len(pn.read_pointnav_dataset(p)) == 5   # at the cap: read
    # ObjectNav: 3 view points in goals_by_category; in goals inside the episodes (one episode's
    # goals with 3; three episodes' copies of one goal with 1: habitat keeps the first, all decoded)
    monkeypatch.setattr(pn, "MAX_VIEW_POINTS_PER_FILE", 2)
    doc = _objectnav_doc()
    copies = copy.deepcopy(doc)
    g = doc["goals_by_category"]["a.glb_chair"][0]
    g["view_points"] = g["view_points"] * 3
    inline = copy.deepcopy(doc)
    inline["episodes"] = inline["episodes"][:1]
    for d in (inline, copies):
        goals = d.pop("goals_by_category")["a.glb_chair"]
        for ep in d["episodes"]:
            ep["goals"] = goals
    for name, d in (("objectnav", doc), ("inline", inline), ("copies", copies)):
        q = _write_escaped(tmp_path, d, "agent_state", gz, name)
        with pytest.raises(ResourceLimitError, match="3 view points in one file, more than the cap of 2") as e:
            on.read_objectnav_dataset(q)
        assert str(q) in str(e.value)
    # InstanceImageNav: its goals' view points
    c = copy.deepcopy(CONTENT)
    c["goals"][G]["view_points"] = c["goals"][G]["view_points"] * 3
    q = _write_escaped(tmp_path, c, "agent_state", gz, "iin")
    with pytest.raises(ResourceLimitError, match="3 view points in one file, more than the cap of 2") as e:
        iin.read_instance_imagenav_dataset(q)
    assert str(q) in str(e.value)
    monkeypatch.setattr(pn, "MAX_VIEW_POINTS_PER_FILE", 3)   # at the cap: read
    for name in ("objectnav", "inline", "copies"):
        f = tmp_path / name / f"{name}.json{'.gz' if gz else ''}"
        assert len(on.read_objectnav_dataset(f).episodes) == (1 if name == "inline" else 3)
    assert len(iin.read_instance_imagenav_dataset(q).episodes) == 1
