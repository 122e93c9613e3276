"""Episodes a run leaves out are reported, as ObjectNav's navmesh check reports its drops (a
log warning naming the file and the scenes; counts on the supply, ``env.world.episodes``):
episodes of scenes the manifest lacks (``unmatched``: scene_id -> episodes) and PointNav /
ImageNav episodes dropped when prepared (``dropped``: scene -> {reason: distinct episodes}).
Which episodes run does not change. Files: the user-journey tester's ``mixed`` and ``off``."""
from __future__ import annotations

import gzip
import json
import logging

import torch

import bps_runtime
from bps_assets.pipeline.manifest import load_manifest


def _val(dataset):
    m = load_manifest(dataset)
    content = next((m.episodes_path("val").parent / "content").iterdir())
    return content, json.loads(gzip.decompress(content.read_bytes()))["episodes"]


def _write(root, files: dict) -> str:
    (root / "content").mkdir(parents=True)
    for name, eps in files.items():
        (root / "content" / f"{name}.json.gz").write_bytes(gzip.compress(json.dumps({"episodes": eps}).encode()))
    (root / "val.json.gz").write_bytes(gzip.compress(json.dumps({"episodes": []}).encode()))
    return str(root / "val.json.gz")


def _served(dataset, path, n=25, **kw) -> tuple[list, object]:
    """The episode ids of ``n`` STOP-ended episodes in one env, and the env's supply."""
    with bps_runtime.make(dataset, split="val", num_envs=1, episodes=path, **kw) as env:
        env.reset()
        ids = []
        for _ in range(n):
            *_, info = env.step(torch.zeros(1, dtype=torch.long))
            ids.append(info["episode"]["episode_id"][0])
        return ids, env.world.episodes


def test_episodes_of_scenes_not_in_the_manifest_are_counted_and_logged(dataset, tmp_path, caplog):
    content, eps = _val(dataset)
    scene = content.name.split(".")[0]
    nowhere = [dict(e, scene_id=e["scene_id"].replace(scene, "Nowhere")) for e in eps[:4]]
    plain = _write(tmp_path / "plain", {scene: eps})
    mixed = _write(tmp_path / "mixed", {scene: eps, "Nowhere": nowhere})
    want, sup = _served(dataset, plain)
    assert sup.unmatched == {}
    with caplog.at_level(logging.WARNING):
        got, sup = _served(dataset, mixed)
    assert got == want   # the same episodes run
    sid = nowhere[0]["scene_id"]
    assert sup.unmatched == {sid: 4}
    msg = [r.getMessage() for r in caplog.records if "does not have" in r.getMessage()]
    assert len(msg) == 1 and mixed in msg[0] and sid in msg[0] and "4 episode(s)" in msg[0], msg


def test_point_goal_episodes_dropped_on_the_navmesh_are_counted_and_logged(dataset, tmp_path, caplog):
    content, eps = _val(dataset)
    scene = content.name.split(".")[0]
    off = json.loads(json.dumps(eps))
    off[1]["goals"][0]["position"][0] += 50.0   # the tester's case: a goal 50 m away, off every island
    off[2]["goals"][0]["position"][0] -= 50.0
    path = _write(tmp_path / "off", {scene: off})
    with caplog.at_level(logging.WARNING):
        ids, sup = _served(dataset, path, n=3 * len(off))   # every episode prepared, some twice
    assert off[1]["episode_id"] not in ids and off[2]["episode_id"] not in ids
    assert set(ids) == {e["episode_id"] for e in off} - {off[1]["episode_id"], off[2]["episode_id"]}
    assert sup.dropped == {scene: {"goal_unreachable": 2}}   # distinct episodes, not preparations
    msg = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert len(msg) == 1 and path in msg[0] and scene in msg[0], msg


def test_objectnav_episodes_of_scenes_not_in_the_manifest_are_counted(objectnav_dataset, tmp_path, caplog):
    import shutil

    out, eps = objectnav_dataset
    root = tmp_path / "eps"
    shutil.copytree(eps.parent.parent, root)
    content = next((root / "val" / "content").iterdir())
    scene = content.name.split(".")[0]
    text = gzip.decompress(content.read_bytes()).decode()
    (content.parent / "Nowhere.json.gz").write_bytes(gzip.compress(text.replace(scene, "Nowhere").encode()))
    n = len(json.loads(text)["episodes"])
    with caplog.at_level(logging.WARNING):
        with bps_runtime.make(out, split=None, task="objectnav", episodes=str(root / "val" / "val.json.gz"),
                              num_envs=1, resolution=(16, 16)) as env:
            env.reset()
            unmatched = env.world.episodes.unmatched
    assert sum(unmatched.values()) == n and all("Nowhere" in sid for sid in unmatched)
    assert any("does not have" in r.getMessage() and "Nowhere" in r.getMessage() for r in caplog.records)
