"""Episode videos (bps_train.video, video_io): a file written by one library is decoded by
another, has one frame per step of the episode, and its sensor panels are the env's
observations at those steps; fallbacks, the goal read back from pointgoal, `--eval --video`."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch


from bps_train.video import EpisodeRecorder, FrameLayout, goal_from_pointgoal, manifest_navmeshes, sensor_rgb
from bps_train.video_io import VideoOptions, resolve_format

# Tolerance of the MP4 check, in levels (0-255) per channel of each panel block's mean: H.264
# with crf 0 is lossless in YUV, so what is left is the RGB -> limited-range (16-235) YUV 4:2:0
# -> RGB rounding (each 2x2 chroma block covers one observation pixel, as the panels are scaled
# by an even factor); measured 1.4 mean / 3.75 max. Neighbouring steps differ by tens of levels.
MEAN_TOL, MAX_TOL = 2.0, 6.0


def _decode_imageio(path):
    """Frames of a video through imageio-ffmpeg's ffmpeg executable (not PyAV)."""
    imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg")
    gen = imageio_ffmpeg.read_frames(str(path), pix_fmt="rgb24")
    meta = next(gen)
    w, h = meta["size"]
    return [np.frombuffer(f, np.uint8).reshape(h, w, 3) for f in gen]


def _record(manifest, out, video: VideoOptions, n_steps=14):
    """Env 0 walks a fixed action sequence ending in STOP; returns (recorder, its observations
    per step as the test saw them, the episode length the env reported)."""
    import bps_runtime

    env = bps_runtime.make(manifest, split="val", num_envs=2, sensors=("depth", "rgb"), episodes="dataset",
                           threads=1, resolution=(32, 32))
    rec = EpisodeRecorder(out, 1, manifest_navmeshes(manifest), watch=1, video=video)
    seen, length = [], None
    try:
        obs = env.reset()
        rec.reset(obs, env.last_info)
        seq = [1, 1, 2, 1, 1, 3, 3, 1, 1, 2, 1, 1, 1, 1][:n_steps - 1] + [0]
        for t, a in enumerate(seq):
            seen.append({k: obs[k][0].clone().numpy() for k in ("depth", "rgb")})
            obs, _, done, info = env.step(torch.tensor([a, 1]))
            rec.step(obs, done, info)
            if done[0]:
                length = int(info["episode"]["length"][0])
                break
    finally:
        env.close()
        rec.close()
    assert rec.finished and length == len(seen) and len(rec.written) == 1
    return rec, seen, length


def test_mp4_decodes_elsewhere_with_the_observations_in_its_panels(dataset, tmp_path):
    pytest.importorskip("av")
    rec, seen, length = _record(dataset, tmp_path, VideoOptions(format="mp4", crf=0))
    path = rec.written[0]
    assert path.suffix == ".mp4"
    frames = _decode_imageio(path)
    assert len(frames) == length
    layout = FrameLayout(("depth", "rgb"), (32, 32))
    assert frames[0].shape == (layout.height, layout.width, 3)
    for t, f in enumerate(frames):
        for name in ("rgb", "depth"):
            want = sensor_rgb(name, seen[t][name]).astype(np.float64)
            diff = np.abs(layout.read_sensor(f, name) - want)
            assert diff.mean() <= MEAN_TOL and diff.max() <= MAX_TOL, (t, name, diff.mean(), diff.max())
    # a different step's observation does not pass: the check can fail
    other = sensor_rgb("rgb", seen[0]["rgb"]).astype(np.float64)
    assert any(np.abs(layout.read_sensor(f, "rgb") - other).mean() > 5 for f in frames[1:]) or \
        all(np.array_equal(s["rgb"], seen[0]["rgb"]) for s in seen)
    doc = json.loads(path.with_suffix(".json").read_text())
    assert doc["frames"] == length == doc["length"] and len(doc["positions"]) == length
    assert doc["video"] == path.name


def test_png_frames_are_exact_and_gif_has_every_frame(dataset, tmp_path):
    rec, seen, length = _record(dataset, tmp_path / "png", VideoOptions(format="png"), n_steps=6)
    folder = rec.written[0]
    assert folder.is_dir() and len(list(folder.glob("frame_*.png"))) == length
    frames = _decode_imageio(folder / "frame_%05d.png")   # ffmpeg's image2 reader, not Pillow
    layout = FrameLayout(("depth", "rgb"), (32, 32))
    assert len(frames) == length
    for t, f in enumerate(frames):
        for name in ("rgb", "depth"):
            assert np.array_equal(layout.read_sensor(f, name), sensor_rgb(name, seen[t][name])), (t, name)
    av = pytest.importorskip("av")
    rec, _, length = _record(dataset, tmp_path / "gif", VideoOptions(format="gif"), n_steps=6)
    with av.open(str(rec.written[0])) as c:   # PyAV reads what Pillow wrote
        assert rec.written[0].suffix == ".gif" and sum(1 for _ in c.decode(video=0)) == length


def test_png_frame_folder_mode_follows_the_umask(tmp_path):
    """A png frame folder gets the mode a plain mkdir gives (it was mkdtemp's 0700: other users
    could not read the frames)."""
    import os

    from bps_train.video_io import write_video

    frames = [np.zeros((4, 4, 3), np.uint8)] * 2
    old = os.umask(0o022)
    try:
        for mask, want in ((0o022, 0o755), (0o027, 0o750)):
            os.umask(mask)
            out = write_video(tmp_path / f"m{mask:o}", frames, VideoOptions(format="png"))
            assert out.is_dir() and (out.stat().st_mode & 0o777) == want, oct(out.stat().st_mode)
            assert all((p.stat().st_mode & 0o777) == want & 0o666 for p in out.iterdir())
    finally:
        os.umask(old)


def test_auto_format_falls_back_without_the_encoder(monkeypatch):
    from bps_assets.errors import ConfigError, MissingDependencyError
    from bps_train import video_io

    monkeypatch.setattr(video_io, "has_encoder", lambda: False)
    assert resolve_format("auto") == "gif"
    with pytest.raises(MissingDependencyError, match="pip install av"):
        resolve_format("mp4")
    with pytest.raises(ConfigError, match="webm"):
        resolve_format("webm")


def test_goal_from_pointgoal_inverts_the_observation():
    from pointnav_reference import pointgoal_polar

    g = torch.Generator().manual_seed(0)
    pos = torch.rand(32, 3, generator=g, dtype=torch.float64) * 10 - 5
    goal = torch.rand(32, 3, generator=g, dtype=torch.float64) * 10 - 5
    goal[:, 1] = pos[:, 1]
    yaw = torch.rand(32, generator=g, dtype=torch.float64) * 2 * math.pi - math.pi
    pg = pointgoal_polar(pos, yaw, goal)
    quat = torch.stack([0 * yaw, torch.sin(yaw / 2), 0 * yaw, torch.cos(yaw / 2)], 1)
    for i in range(32):
        got = goal_from_pointgoal(pos[i].numpy(), quat[i].numpy(), pg[i].numpy())
        assert np.allclose(got, goal[i].numpy(), atol=1e-4), i


def test_eval_video_end_to_end(dataset, tmp_path, capsys):
    from bps_train.train import main, run

    out = tmp_path / "run"
    res = run(["--dataset", str(dataset), "--out-dir", str(out), "--eval", "random", "--eval-episodes", "3",
               "--video", "2", "--video-format", "png", "--resolution", "32", "--threads", "1"])
    assert len(res["videos"]) == 2
    for v in res["videos"]:
        doc = json.loads((out / "videos" / (v.rsplit("/", 1)[1] + ".json")).read_text())
        assert len(list((out / "videos" / doc["video"]).glob("*.png"))) == doc["length"] == doc["frames"]
    assert main(["--dataset", str(dataset), "--video", "1"]) == 2   # --video needs --eval
    assert "--video" in capsys.readouterr().err


def test_eval_videos_are_named_by_what_was_evaluated_and_never_replaced(dataset, tmp_path, capsys):
    """Each file says what was evaluated (eval=random-..., eval=stop-...); a second eval of the same
    into the same folder is refused before any work, the first one's files untouched (was:
    replaced silently, with unrelated old videos left mixed in)."""
    from bps_train.train import main

    out = tmp_path / "run"
    args = ["--dataset", str(dataset), "--out-dir", str(out), "--eval-episodes", "2", "--video", "1",
            "--video-format", "png", "--resolution", "32", "--threads", "1"]
    assert main([*args, "--eval", "random"]) == 0
    def files():
        return {str(p.relative_to(out)): p.stat().st_mtime_ns for p in (out / "videos").rglob("*")}

    first = files()
    assert first and all(p.name.startswith("eval=random-") for p in (out / "videos").iterdir())
    capsys.readouterr()
    assert main([*args, "--eval", "random"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "earlier eval of random" in err[0] and "--out-dir" in err[0], err
    assert files() == first
    assert main([*args, "--eval", "stop"]) == 0
    assert any(p.name.startswith("eval=stop-") for p in (out / "videos").iterdir())
    assert all(files()[k] == v for k, v in first.items())


def test_eval_video_writes_distinct_episodes_and_counts_each_first_run(dataset, tmp_path):
    """A 3-episode file on 3 envs: an env that ends early draws an episode still running elsewhere
    (its scene's cycle). --video 3 writes the 3 episodes once each (no file written twice), and
    the metrics count each episode on the run that started it first: the runs the videos show."""
    import gzip

    from bps_train.train import run

    content = dataset.parent / "episodes" / "pointnav" / "val" / "content"
    doc = json.loads(gzip.open(next(content.glob("*.json.gz"))).read())
    doc["episodes"] = doc["episodes"][:3]
    split = tmp_path / "three.json.gz"
    split.write_bytes(gzip.compress(json.dumps(doc).encode()))
    out = tmp_path / "run"
    res = run(["--dataset", str(dataset), "--out-dir", str(out), "--eval", "random", "--eval-episodes-file",
               str(split), "--video", "3", "--video-format", "png", "--resolution", "32", "--threads", "1",
               "--seed", "1"])
    assert res["episodes"] == 3 and len(set(res["videos"])) == 3
    docs = [json.loads(p.read_text()) for p in (out / "videos").glob("*.json")]
    assert sorted(d["episode_id"] for d in docs) == sorted(str(e["episode_id"]) for e in doc["episodes"])
    assert res["frames"] > 3 * res["mean_length"]   # repeats ran (the case): 3 envs, more frames than counted
    for m in ("success", "spl", "length"):
        assert res["mean_length" if m == "length" else m] == pytest.approx(np.mean([d[m] for d in docs])), m


def test_sensor_pictures():
    depth = np.array([[[0.0], [0.5], [1.0], [1.5]]], np.float32)
    assert sensor_rgb("depth", depth)[0, :, 0].tolist() == [0, 128, 255, 255]
    assert sensor_rgb("depth", depth * 10, normalized_depth=False)[0, :, 1].tolist() == [0, 128, 255, 255]
    ids = np.arange(40).reshape(1, 40, 1)
    sem = sensor_rgb("semantic", ids)
    assert sem[0, 0].tolist() == [0, 0, 0] and len({tuple(c) for c in sem[0, 1:]}) == 39


def test_a_scenes_no_object_id_is_drawn_black_as_0_is(tmp_path):
    """MP3D's faces of no object read 65535 (the header's ``no_object_id``): the semantic panel
    draws them black, as 0, not in an object's colour; where the scene names no such id 65535 is
    an id like any other."""
    from bps_train.video_io import VideoOptions

    ids = np.array([[[0], [7], [65535]]], np.int32)
    assert sensor_rgb("semantic", ids, no_object=65535)[0].tolist()[::2] == [[0, 0, 0], [0, 0, 0]]
    assert sensor_rgb("semantic", ids)[0, 2].tolist() != [0, 0, 0]
    assert sensor_rgb("semantic", ids, no_object=65535)[0, 1].tolist() == sensor_rgb("semantic", ids)[0, 1].tolist()
    rec = EpisodeRecorder(tmp_path, 1, video=VideoOptions(format="png"), background=False,
                          no_object_for=lambda scene_id: 65535 if scene_id == "mp3d_scene" else 0)
    seen = {"semantic": np.tile(ids, (4, 1, 1))}
    from bps_train.video import _Episode

    ep = _Episode("mp3d_scene")
    ep.obs, ep.pos, ep.rot, ep.dist = [seen] * 2, [np.zeros(3)] * 2, [np.array([0.0, 0, 0, 1])] * 2, [1.0] * 2
    layout = FrameLayout(["semantic"], seen["semantic"].shape[:2], rec.frame_options)
    frame = next(iter(rec.frames(ep, {"scene_id": "mp3d_scene", "episode_id": "0"})))
    assert layout.read_sensor(frame, "semantic")[0, 2].tolist() == [0, 0, 0]


NO_VIDEO_RUN = r"""
import json, sys
from bps_runtime.env.env import BatchNavEnv
calls, query = [], BatchNavEnv.episode_goals
BatchNavEnv.episode_goals = lambda self, *a: calls.append(a) or query(self, *a)   # counted
from bps_train.train import run
common = ["--dataset", sys.argv[1], "--resolution", "16", "--threads", "1", "--width", "4", "--hidden", "16"]
run([*common, "--out-dir", sys.argv[2], "--num-envs", "4", "--rollout-steps", "8", "--total-steps", "32",
     "--sim-only-steps", "0"])
run([*common, "--out-dir", sys.argv[2], "--eval", sys.argv[2] + "/checkpoint.pt", "--eval-episodes", "2"])
print(json.dumps({"video_modules": sorted(m for m in sys.modules if m.startswith("bps_train.video")),
                  "goal_queries": len(calls)}))
"""


@pytest.mark.slow
def test_training_and_eval_without_video_run_no_video_code(dataset, tmp_path):
    """``--video`` unused costs nothing by construction: a training run and an eval in a fresh
    process never import bps_train.video / video_io (so no recorder is built and no per-step hook
    exists) and never query the episodes' goals; with ``--video 1`` the same eval does both."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]

    def run(script, *args):
        p = subprocess.run([sys.executable, "-c", script, str(dataset), str(tmp_path / "run"), *args], cwd=root,
                           capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stderr[-3000:]
        return json.loads(p.stdout.strip().splitlines()[-1])

    assert run(NO_VIDEO_RUN) == {"video_modules": [], "goal_queries": 0}
    with_video = NO_VIDEO_RUN.replace('"--eval-episodes", "2"]', '"--eval-episodes", "2", "--video", "1", '
                                                                 '"--video-format", "png"]')
    assert with_video != NO_VIDEO_RUN
    got = run(with_video)
    assert got["video_modules"] == ["bps_train.video", "bps_train.video_io"] and got["goal_queries"] >= 1


def test_episode_claims_take_the_first_distinct_episodes_once():
    """The rule the eval counts by and the recorder records by: a key once, at most ``want``;
    a place held for a key known at the end (``claim(None)`` + ``settle``) frees itself on a
    repeat; a release gives a claim back."""
    from bps_train.episode_claims import EpisodeClaims

    c = EpisodeClaims(3)
    assert not c.taken(("s", "1"))
    assert c.claim(("s", "1")) and not c.claim(("s", "1"))          # a repeat
    assert c.taken(("s", "1")) and not c.taken(("s", "2"))
    assert c.claim(None) and c.room == 1                             # key known only at the end
    assert not c.settle(("s", "1")) and c.room == 2                  # ... a repeat: the place is freed
    assert c.claim(("s", "2")) and c.claim(None) and c.room == 0
    assert not c.claim(("s", "3"))                                   # no room
    c.release(None)
    assert c.claim(("s", "3")) and not c.claim(None)
    c.release(("s", "3"))
    assert not c.taken(("s", "3")) and c.taken(("s", "2"))
    c.want = 2                                                       # a cap below the claims held
    assert c.room == 0 and not c.claim(("s", "4"))


def test_the_eval_recorder_reads_each_scenes_no_object_id_from_its_header(tmp_path):
    """``manifest_no_objects``: a preprocessed MP3D scene's header names 65535; a scene without
    semantics, or one the manifest does not name, only 0."""
    from bps_assets import synth
    from bps_assets.synth import semantic as ssem
    from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess
    from bps_train.video import manifest_no_objects

    infos = synth.generate(tmp_path / "src", layout="mp3d", scenes=2)
    ssem.write_mp3d(infos[0].path, "mp3d", infos[0].name)
    assert preprocess(tmp_path / "src", tmp_path / "out", "mp3d", "benchmark",
                      PreprocessOptions(workers=1, in_process=True)).ok
    no_object_for = manifest_no_objects(tmp_path / "out" / "manifest.json")
    assert no_object_for(infos[0].name) == 65535
    assert no_object_for(infos[1].name) == 0 and no_object_for("no_such_scene") == 0
