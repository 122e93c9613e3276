"""Episode files parsed as a stream (issue 34 item 3): the same result as parsing the whole
document, at any window size; one typed error naming the file for every malformed input; the
document's text is never whole in memory; view points are kept as arrays and the runtime's
PointNav episodes as their JSON text."""
from __future__ import annotations

import gzip
import json
import math

import numpy as np
import pytest

from bps_assets.errors import InputError, ResourceLimitError
from bps_assets.nav import episode_stream, episodes as pn, objectnav_files as on
from bps_assets.nav.episode_table import EpisodeTable

Q = [0.0, 0.0, 0.0, 1.0]


def _write(tmp_path, text: str, name="val", gz=True):
    d = tmp_path / name
    d.mkdir(exist_ok=True)
    p = d / f"{name}.json.gz"
    p.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    return p


def _objectnav_doc(n=40, vps=30):
    goals = {}
    for c, cat in enumerate(("chair", "bed")):
        goals[f"a.glb_{cat}"] = [on.make_object_goal([1.0, 0.5, 1.5 + g], 10 * c + g, cat,
                                                     [on.make_view_point([0.1 * k, 0.0, 1.0 / (k + 3)], Q,
                                                                         None if k % 7 == 0 else k / vps)
                                                      for k in range(vps)]) for g in range(3)]
    eps = [on.make_objectnav_episode(i, "scene/a.glb", [0.25 * i, 0.0, 1e-7 * i], Q, ("chair", "bed")[i % 2],
                                     {"geodesic_distance": 1.0 + i}) for i in range(n)]
    return {"episodes": eps, "category_to_task_category_id": {"chair": 0, "bed": 1},
            "category_to_scene_annotation_category_id": {"chair": 3, "bed": 4}, "goals_by_category": goals}


def _pointnav_doc(n=50):
    return {"episodes": [pn.make_episode(i, f"scene/{'ab'[i % 2]}.glb", [0.1 * i, 0.0, -1.0 / (i + 1)], Q,
                                         [1.0, 0.0, 123456789.123456789 + i], 1.5) for i in range(n)]}


@pytest.mark.parametrize("chunk", [1, 7, 64, 1 << 20])
def test_any_window_reads_what_the_whole_document_holds(tmp_path, monkeypatch, chunk):
    monkeypatch.setattr(episode_stream, "_CHUNK", chunk)
    doc = _objectnav_doc()
    p = _write(tmp_path, json.dumps(doc, indent=1 if chunk == 7 else None))
    ds = on.read_objectnav_dataset(p)
    assert isinstance(ds.episodes, EpisodeTable) and ds.episodes.columns["object_category"][:2] == ["chair", "bed"]
    assert [e["episode_id"] for e in ds.episodes] == [str(i) for i in range(40)]
    assert ds.episodes[3] == dict(doc["episodes"][3], episode_id="3")
    assert ds.episodes[5]["start_position"] == doc["episodes"][5]["start_position"]
    for key, goals in doc["goals_by_category"].items():
        got = ds.goals_by_category[key]
        assert [dict(g, view_points=None) for g in got] == [dict(g, view_points=None) for g in goals]
        assert all(isinstance(g["view_points"], on.ViewPoints) for g in got)
        assert [g["view_points"] for g in got] == [g["view_points"] for g in goals]   # dicts on access
    want = np.asarray([vp["agent_state"]["position"] for g in doc["goals_by_category"]["a.glb_bed"]
                       for vp in g["view_points"]])
    assert np.array_equal(ds.view_points_of(ds.episodes[1]), want)
    pdoc = _pointnav_doc()
    pp = _write(tmp_path, json.dumps(pdoc), "pn")
    assert pn.read_pointnav_dataset(pp) == pdoc["episodes"]
    table = pn.read_pointnav_table(pp)
    assert isinstance(table, EpisodeTable) and len(table) == 50 and table == pdoc["episodes"]
    assert table[7]["goals"][0]["position"][2] == 123456789.123456789 + 7   # numbers exact across windows
    assert list(table[10:12]) == pdoc["episodes"][10:12] and table[np.int64(3)] == pdoc["episodes"][3]


@pytest.mark.parametrize("text,msg", [
    ('{"episodes": [{"episode_id": 1,}]}', "not valid JSON"),
    ('{"episodes": [{"episode_id": 1, "sc', "not valid JSON"),     # truncated
    ('{"episodes": []} []', "extra data after the document"),
    ('{"episodes": [], "episodes": []}', "'episodes' appears twice"),
    ('\ufeff{"episodes": []}', "starts with a UTF-8 byte order mark"),
    ('{"episodes": [{"a": "\\ud800 \x01"}]}', "not valid JSON"),   # control character in a string
    ('[{"episodes": []}]', "not a PointNav dataset"),
    ('{"episodes": {"a": 1}}', "not a PointNav dataset"),
    ('{"nothing": 1}', "not a PointNav dataset"),
    ('', "not a PointNav dataset"),
    ('{"episodes": [' + "[" * 100_000 + "]" * 100_000 + "]}", "nested too deeply|not valid JSON|episode 0"),
    ('{"episodes": [{"episode_id": ' + "9" * 5000 + "}]}", "not valid JSON: Exceeds the limit"),   # int() refuses
])
def test_malformed_documents_are_one_input_error_naming_the_file(tmp_path, monkeypatch, text, msg):
    monkeypatch.setattr(episode_stream, "_CHUNK", 5)
    p = _write(tmp_path, text)
    for read in (pn.read_pointnav_dataset, pn.read_pointnav_table):
        with pytest.raises(InputError, match=msg) as e:
            read(p)
        assert str(p) in str(e.value) and len(str(e.value).splitlines()) == 1


def test_bad_bytes_and_goal_tables_are_typed(tmp_path):
    p = _write(tmp_path, "x")
    p.write_bytes(gzip.compress(b'{"episodes": ["\xff\xfe"]}'))
    with pytest.raises(InputError, match="not UTF-8"):
        pn.read_pointnav_dataset(p)
    doc = _objectnav_doc(2, 2)
    doc["goals_by_category"]["a.glb_chair"] = {"not": "a list"}
    with pytest.raises(InputError, match=r"goals_by_category\['a.glb_chair'\] must be a list"):
        on.read_objectnav_dataset(_write(tmp_path, json.dumps(doc), "g"))
    doc["goals_by_category"] = ["a list"]
    with pytest.raises(InputError, match="goals_by_category must be an object"):
        on.read_objectnav_dataset(_write(tmp_path, json.dumps(doc), "h"))
    doc = _objectnav_doc(2, 2)
    doc["goals_by_category"]["a.glb_chair"][1]["view_points"][1]["agent_state"]["position"][0] = math.nan
    with pytest.raises(InputError, match=r"goals_by_category\['a.glb_chair'\]\[1\]: goal 1 view point 1"):
        on.read_objectnav_dataset(_write(tmp_path, json.dumps(doc), "n"))


def test_one_element_over_its_cap_is_refused_and_the_window_stays_small(tmp_path, monkeypatch):
    monkeypatch.setattr(episode_stream, "_CHUNK", 256)
    monkeypatch.setattr(episode_stream, "MAX_ELEMENT_CHARS", 4096)
    held = []
    fill = episode_stream._Window.fill

    def watched(self, start):
        out = fill(self, start)
        held.append(len(self.buf))
        return out

    monkeypatch.setattr(episode_stream._Window, "fill", watched)
    doc = _pointnav_doc(2000)   # ~700 KB of JSON
    p = _write(tmp_path, json.dumps(doc))
    assert len(pn.read_pointnav_table(p)) == 2000
    assert max(held) < 4096 + 2 * 256 and sum(held) > 500_000   # read in windows, never whole
    doc["episodes"][1500]["info"]["note"] = "x" * 5000
    with pytest.raises(ResourceLimitError, match="one value of more than 4096 characters") as e:
        pn.read_pointnav_dataset(_write(tmp_path, json.dumps(doc), "big"))
    assert "big.json.gz" in str(e.value)


def test_view_points_round_trip_through_the_writer(tmp_path):
    doc = _objectnav_doc(4, 5)
    ds = on.read_objectnav_dataset(_write(tmp_path, json.dumps(doc)))
    out = on.write_objectnav_dataset(tmp_path / "out", "val", {"a": ds}, ds.category_to_task_category_id,
                                     ds.category_to_scene_annotation_category_id)
    again = on.read_objectnav_dataset(out[0])
    assert again.goals_by_category == ds.goals_by_category == doc["goals_by_category"]
    vps = again.goals_by_category["a.glb_chair"][0]["view_points"]
    assert vps[0]["iou"] is None and vps[1]["iou"] == pytest.approx(1 / 5) and len(vps.subset(vps.iou > 0.5)) == 2


def test_repeated_ids_in_a_table_are_the_first_repeat_across_files(tmp_path, monkeypatch):
    from bps_assets.nav import episode_table

    eps = {s: [pn.make_episode(i, f"gibson/{s}.glb", [0.0, 0.0, 0.0], Q, [1.0, 0.0, 1.0], 1.5) for i in range(30)]
           for s in ("a", "b")}
    split = pn.write_pointnav_dataset(tmp_path / "ds", "val", eps)[0]
    assert len(pn.read_pointnav_table(split)) == 60
    eps["b"][20]["scene_id"] = eps["b"][9]["scene_id"] = "gibson/a.glb"   # b's 9th repeats a's 9th
    eps["b"][9]["episode_id"] = eps["b"][20]["episode_id"] = 3             # ... and then a's 3rd, twice
    split = pn.write_pointnav_dataset(tmp_path / "ds2", "val", eps)[0]
    msg = r"episode 9 \(id '3'\): episode_id repeats episode 3 of .*a.json.gz in scene 'gibson/a.glb'"
    for read in (pn.read_pointnav_dataset, pn.read_pointnav_table):   # the dict and the table paths agree
        with pytest.raises(InputError, match=msg) as e:
            read(split)
        assert str(e.value).startswith(str(split.parent / "content" / "b.json.gz"))
    monkeypatch.setattr(episode_table, "hash", lambda key: 7, raising=False)   # every key one hash
    with pytest.raises(InputError, match=msg):
        pn.read_pointnav_table(split)


@pytest.mark.parametrize("chunk", [3, 1 << 20])
def test_instance_imagenav_reads_the_same_at_any_window(tmp_path, monkeypatch, chunk):
    from bps_assets.nav import instance_imagenav_files as ii

    monkeypatch.setattr(episode_stream, "_CHUNK", chunk)
    cams = [ii.make_image_goal([0.2 * j, 1.2, 0.5], Q, 79.0, (64, 48), 0.5, 0.25) for j in range(3)]
    goals = {ii.goal_key("hm3d/c.basis.glb", k): ii.make_instance_goal(
        on.make_object_goal([0.5, 0.5, 1.0 + k], k, "chair",
                            [on.make_view_point([0.5 * j, 0.0, 1.0 + k], Q, 0.2) for j in range(1, 4)]), cams, 1.5)
        for k in range(3)}
    eps = [ii.make_instance_imagenav_episode(i, "hm3d/c.basis.glb", [0.1 * i, 0.0, 0.0], Q, i % 3, i % 3, "chair")
           for i in range(9)]
    doc = {"goals": goals, "episodes": eps}   # goals first: the episodes' checks wait for the file's end either way
    ds = ii.read_instance_imagenav_dataset(_write(tmp_path, json.dumps(doc)))
    assert isinstance(ds.episodes, EpisodeTable) and list(ds.episodes) == eps
    assert ds.goals == goals and ds.image_goal_of(ds.episodes[4]) == cams[1]
    assert np.array_equal(ds.view_points_of(ds.episodes[2]), [[0.5, 0.0, 3.0], [1.0, 0.0, 3.0], [1.5, 0.0, 3.0]])
    doc["episodes"][5]["goal_image_id"] = 3
    with pytest.raises(InputError, match=r"episode 5 \(id '5'\): goal_image_id 3 is not an index"):
        ii.read_instance_imagenav_dataset(_write(tmp_path, json.dumps(doc), "bad"))


def test_a_repeated_goals_by_category_key_is_refused(tmp_path, monkeypatch):
    """json.loads (habitat-lab) keeps the last list of a repeated key; merging both would give
    goals habitat never sees: the file is refused, naming the key."""
    monkeypatch.setattr(episode_stream, "_CHUNK", 7)
    doc = _objectnav_doc(2, 2)
    goals = json.dumps(doc["goals_by_category"]["a.glb_chair"])
    text = json.dumps(doc).replace('"goals_by_category": {', '"goals_by_category": {"a.glb_chair": %s, ' % goals, 1)
    assert text.count('"a.glb_chair"') == 2
    p = _write(tmp_path, text, "dup")
    with pytest.raises(InputError, match=r"key 'a.glb_chair' appears twice in 'goals_by_category'") as e:
        on.read_objectnav_dataset(p)
    assert str(p) in str(e.value)
