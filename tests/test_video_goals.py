"""The goal in episode videos: ``env.episode_goals`` answers each env's running episode's goal
as the episode file has it (ObjectNav: category, goal objects, view points; ImageNav: the goal
point and the heading its image was rendered at), and the recorder draws it where the map's own
world-to-pixel transform puts it (within 1 px): ObjectNav's goal objects, their view points and
the shortest path to the nearest one; ImageNav's goal with its heading tick and the goal image
panel (the observation, exactly)."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch


from bps_assets.nav.topdown import KINDS
from bps_train.video import GOAL_IMAGE, EpisodeRecorder, FrameLayout, manifest_navmeshes
from bps_train.video_io import VideoOptions


@pytest.fixture(scope="module")
def objnav(objectnav_dataset):   # conftest.py's, shared with test_objectnav_make
    return objectnav_dataset


def _mask(frame, layout, tdm, kind):
    """Pixels of the map panel (the navigable-area part, no legend) in ``kind``'s colour, in
    map coordinates (the frame's map starts at column ``layout.map_x``, row 0)."""
    area = frame[:tdm.height - 4, layout.map_x:layout.map_x + tdm.width]   # HEADER + panel rows
    return (area == np.array(KINDS[kind][0], np.uint8)).all(axis=2)


def _centroid_near(mask, uv, radius=6.0, heading=None):
    """Centre of the ``mask`` pixels within ``radius`` of uv (pixel i covers [i, i + 1)), leaving
    out a heading tick's pixels (more than 3.5 px from uv along ``heading``, (du, dv))."""
    vs, us = np.nonzero(mask)
    c = np.stack([us + 0.5, vs + 0.5], 1)
    d = c - uv
    keep = np.linalg.norm(d, axis=1) <= radius
    if heading is not None:
        keep &= d @ np.asarray(heading) <= 3.5
    assert keep.sum() >= 9, ("no marker at", uv)
    return c[keep].mean(0)


def _record_one(env, manifest, out, stop_after=6):
    """Env 0's first episode as PNG frames: a few random moves, then STOP."""
    rec = EpisodeRecorder(out, 1, manifest_navmeshes(manifest), watch=1, video=VideoOptions(format="png"),
                          background=False, goals_for=env.episode_goals, action_names=env.ACTIONS)
    sent = []
    gen = torch.Generator().manual_seed(0)
    try:
        obs = env.reset()
        rec.reset(obs, env.last_info)
        first = {k: v[0].clone().numpy() for k, v in obs.items()}
        goal = env.episode_goals([0])[0]
        for t in range(50):
            a = torch.randint(1, 4, (env.batch_size,), generator=gen)
            a[0] = 0 if t == stop_after else a[0]
            obs, _, done, info = env.step(a)
            rec.step(obs, done, info, actions=a)
            sent.append(env.ACTIONS[int(a[0])])
            if done[0]:
                break
    finally:
        env.close()
        rec.close()
    assert rec.finished and len(rec.written) == 1
    from PIL import Image

    folder = rec.written[0]
    frames = [np.asarray(Image.open(p).convert("RGB")) for p in sorted(folder.glob("frame_*.png"))]
    doc = json.loads(folder.with_name(folder.name + ".json").read_text())
    assert doc["actions"] == sent and len(sent) == len(frames)   # one action taken per frame
    return rec, goal, first, frames, doc


def test_objectnav_goal_query_and_video_map(objnav, tmp_path):
    from bps_assets.nav.objectnav_files import read_objectnav_dataset
    from bps_runtime import make

    out, eps = objnav
    ds = read_objectnav_dataset(eps)
    env = make(out, split=None, task="objectnav", episodes=str(eps), num_envs=2, resolution=(16, 16))
    env.reset()
    for g in env.episode_goals():   # every env: the file's goal of the episode it runs
        (e,) = [e for e in ds.episodes if str(e["episode_id"]) == g["episode_id"]]
        assert g["object_category"] == e["object_category"]
        want = ds.goals_of(e)
        assert [x["position"] for x in g["goals"]] == [x["position"] for x in want] and len(want) > 0
        assert [vp["agent_state"]["position"] for x in g["goals"] for vp in x["view_points"]] == \
            ds.view_points_of(e).tolist()
    manifest = out / "manifest.json"
    rec, goal, first, frames, doc = _record_one(env, manifest, tmp_path)
    assert doc["episode_id"] == goal["episode_id"] and doc["goals"]["object_category"] == goal["object_category"]
    assert len(frames) == doc["frames"]

    layout = FrameLayout(("depth",), (16, 16))
    tdm = rec.episode_map(doc["scene_id"], doc["start"], layout)
    # issue 35 item 11: a map of a useful size, the goal category and the action in the strip
    from bps_assets.nav.topdown import HEADER, MARGIN

    assert layout.panel_h == 256 and max(tdm.width - 2 * MARGIN, tdm.height - HEADER - MARGIN) >= 256
    ep = type("Ep", (), {})()
    ep.obs, ep.dist, ep.actions, ep.goal_image, ep.goal = [0, 0], [1.5, 1.0], [1, 0], None, None
    ep.goals = {"object_category": goal["object_category"]}
    meta = {"episode_id": "3", "distance_to_goal": 0.9, "success": 0.0, "spl": 0.0}
    assert rec.strip_lines(ep, meta, 0) == ["episode 3  step 1/2", f"goal: {goal['object_category']}  distance 1.50 m",
                                            "action: MOVE_FORWARD", "success -  SPL -  (at the end)"]
    assert rec.strip_lines(ep, meta, 1)[2:] == ["action: STOP", "success 0  SPL 0.00"]
    f0 = frames[0]
    goals = np.array([x["position"] for x in goal["goals"]], float)
    vps = np.array([vp["agent_state"]["position"] for x in goal["goals"] for vp in x["view_points"]], float)
    on = tdm.floor_of(goals) == tdm.shown[0]
    assert on.any()
    uv_goals = tdm.to_image(goals[on])[0]
    red = _mask(f0, layout, tdm, "goal")
    for uv in uv_goals:   # each goal object's disc is centred on its position
        alone = np.sort(np.linalg.norm(uv_goals - uv, axis=1))[1:2]
        if alone.size == 0 or alone[0] > 12:
            assert np.abs(_centroid_near(red, uv) - uv).max() <= 1.0, uv
    vs, us = np.nonzero(red)   # and nothing else is drawn in the goal's colour
    assert np.linalg.norm(np.stack([us + 0.5, vs + 0.5], 1)[:, None] - uv_goals[None], axis=2).min(1).max() <= 6
    # view points: a dot at each (or under a goal / the start / the agent drawn on top of it)
    orange = _mask(f0, layout, tdm, "view_point")
    vp_on = vps[tdm.floor_of(vps) == tdm.shown[0]]
    covers = np.vstack([uv_goals, tdm.to_image(np.array(doc["start"])[None])[0]])
    seen = 0
    for uv in tdm.to_image(vp_on)[0]:
        u, v = np.floor(uv).astype(int)
        if orange[v - 1:v + 2, u - 1:u + 2].any():
            seen += 1
        else:
            assert np.linalg.norm(covers - uv, axis=1).min() <= 8, uv
    assert seen >= len(vp_on) // 2 > 0
    # the shortest path ends at the nearest view point (by geodesic distance from the start)
    nav = manifest_navmeshes(manifest)(doc["scene_id"])
    start = np.array(doc["start"])
    near = vps[int(np.argmin(nav.geodesic_distance(np.repeat(start[None], len(vps), 0), vps)))]
    green = _mask(f0, layout, tdm, "shortest_path")
    vs, us = np.nonzero(green)
    uv = tdm.to_image(near[None])[0][0]
    # within 3 px at the old 256 px panel's scale (~0.034 m/px): 0.1 m, however large the map now is
    assert green.any() and np.linalg.norm(np.stack([us + 0.5, vs + 0.5], 1) - uv, axis=1).min() <= max(3, 0.1 / tdm.mpp)


def test_imagenav_goal_query_heading_and_goal_image_panel(dataset, tmp_path):
    import math

    from bps_assets.nav.episodes import read_pointnav_dataset
    from bps_assets.nav.imagenav import goal_heading
    from bps_assets.pipeline.manifest import load_manifest
    from bps_runtime import make

    file_eps = {str(e["episode_id"]): e for e in read_pointnav_dataset(load_manifest(dataset).episodes_path("val"))}
    env = make(dataset, split="val", task="imagenav", episodes="dataset", num_envs=2, sensors=("rgb",),
               resolution=(16, 16), threads=1)
    env.reset()
    for g in env.episode_goals(torch.arange(2)):
        e = file_eps[g["episode_id"]]
        assert g["goals"][0]["position"] == e["goals"][0]["position"]
        assert np.allclose(g["goal_position"], e["goals"][0]["position"], atol=1e-5)
        assert g["goal_heading"] == goal_heading(g["episode_id"]) and "object_category" not in g
    rec, goal, first, frames, doc = _record_one(env, dataset, tmp_path)
    assert doc["goals"]["goal_heading"] == goal["goal_heading"]
    layout = FrameLayout(("rgb", GOAL_IMAGE), (16, 16))
    for f in frames:   # the goal image panel: the episode's imagegoal observation, exactly
        assert np.array_equal(layout.read_sensor(f, GOAL_IMAGE), first[GOAL_IMAGE])
    tdm = rec.episode_map(doc["scene_id"], doc["start"], layout)
    yaw = goal["goal_heading"]
    heading = np.array([-math.sin(yaw), -math.cos(yaw)])   # habitat's forward, in map (u, v)
    uv = tdm.to_image(np.array(goal["goal_position"])[None])[0][0]
    red = _mask(frames[0], layout, tdm, "goal")
    assert np.abs(_centroid_near(red, uv, heading=heading) - uv).max() <= 1.0
    # the tick: goal-coloured pixels 5-10 px out lie along the heading
    vs, us = np.nonzero(red)
    d = np.stack([us + 0.5, vs + 0.5], 1) - uv
    r = np.linalg.norm(d, axis=1)
    tick = d[(r >= 5) & (r <= 10)]
    assert len(tick) >= 3
    direction = tick.mean(0) / np.linalg.norm(tick.mean(0))
    assert direction @ heading > math.cos(math.radians(15))


def test_objectnav_sampled_goals_are_what_distance_to_goal_measures(objnav):
    """Episodes generated per scene visit: the query's view points are the ones the step measures
    ``distance_to_goal`` to (at the start, the geodesic distance to the nearest of them; the step
    reads a distance field, the check the navmesh's geodesic graph)."""
    from bps_runtime import make

    out, _ = objnav
    nav = manifest_navmeshes(out / "manifest.json")
    with make(out, split=None, task="objectnav", episodes="sample", num_envs=3, resolution=(16, 16), seed=5) as env:
        env.reset()
        info = env.last_info
        for g in env.episode_goals():
            e = g["env_id"]
            vps = np.array([vp["agent_state"]["position"] for x in g["goals"] for vp in x["view_points"]], float)
            assert g["object_category"] and len(vps) > 0
            start = info["position"][e].numpy().astype(float)
            d = nav(g["scene_id"]).geodesic_distance(np.repeat(start[None], len(vps), 0), vps).min()
            # the step's distance field against the exact geodesic graph: within 5 % (measured 0-3 %)
            assert abs(float(info["distance_to_goal"][e]) - d) <= 0.05 * d + 0.01, (e, info["distance_to_goal"][e], d)
