"""bps-train streams scenes through its cache: training with more of a rank's scenes than cache
slots swaps one slot every ceil(N / K) rounds (``--scene-repeat-steps`` N, habitat-lab's
``max_scene_repeat_steps``; 0: never, the behaviour before it), and ``--eval`` over more scenes
than slots reaches every scene (docs/TRAINING.md, "Scene rotation")."""
from __future__ import annotations

import pytest

import bps_runtime
from bps_train.args import parse
from bps_train.train import Args, env_config, run, scene_rotation
from cli.main import main

TINY = ["--resolution", "16", "--width", "4", "--hidden", "16", "--num-envs", "4", "--rollout-steps", "16",
        "--sim-only-steps", "0", "--threads", "1", "--cache-slots", "1", "--no-resume"]


def _watch(monkeypatch) -> list:
    """Each recv's / step's scene ids, in order (one list per env step of the batch)."""
    seen: list = []
    make = bps_runtime.make

    def watched(*a, **k):
        env = make(*a, **k)
        for name in ("recv", "step"):
            def call(*args, _f=getattr(env, name)):
                out = _f(*args)
                seen.append([str(s) for s in out[3]["scene_id"]])
                return out
            setattr(env, name, call)
        return env
    monkeypatch.setattr(bps_runtime, "make", watched)
    return seen


def test_rotation_is_ceil_steps_over_slots_only_with_more_scenes_than_slots(dataset):
    def rot(*argv, shard=None, envs=4):
        return scene_rotation(parse(Args, ["--dataset", str(dataset), *argv]), "train", envs, shard)

    assert parse(Args, []).scene_repeat_steps == 10_000   # habitat-lab's max_scene_repeat_steps
    assert rot("--cache-slots", "1", "--scene-repeat-steps", "10") == {"swap_every": 10}
    assert rot("--cache-slots", "1") == {"swap_every": 10_000}
    assert rot("--cache-slots", "1", "--scene-repeat-steps", "0") == {}     # 0: never swap
    assert rot("--cache-slots", "2", "--scene-repeat-steps", "10") == {}    # 2 scenes, 2 slots
    assert rot("--scene-repeat-steps", "10") == {}                          # the default 8 slots
    assert rot("--cache-slots", "1", "--scene-repeat-steps", "10", shard=(0, 2)) == {}   # 1 scene on the rank
    assert rot("--cache-slots", "2", "--scene-repeat-steps", "10", envs=1) == {"swap_every": 10}   # K = 1 env
    args = parse(Args, ["--dataset", str(dataset), "--cache-slots", "1", "--scene-repeat-steps", "7"])
    c = env_config(args, "train", 4, 1, "sample", True, swaps=scene_rotation(args, "train", 4))
    assert (c.cache.slots, c.cache.swap_every, c.cache.swap_after_episodes) == (1, 7, None)
    assert env_config(args, "train", 4, 1, "sample", True).cache.swap_every is None


@pytest.mark.parametrize("repeat", [24, 0])
def test_training_visits_every_scene_of_the_rank(dataset, tmp_path, monkeypatch, repeat, capsys):
    seen = _watch(monkeypatch)
    # 4 envs, 1 slot, 2 train scenes; 64 rounds (each env steps once per round)
    run(["--dataset", str(dataset), "--out-dir", str(tmp_path / "run"), "--total-steps", "256",
         "--scene-repeat-steps", str(repeat), *TINY])
    rounds = len(seen) // 2   # two groups of 2 envs: two recvs a round
    assert rounds >= 64
    first = {}
    for t, ids in enumerate(seen):
        for s in ids:
            first.setdefault(s, t // 2)
    if repeat:
        # the slot swaps after round 24; new episodes start on the next scene (random-policy
        # episodes are short, and two more are queued per env)
        assert len(first) == 2 and max(first.values()) <= 24 + 16, first
        assert "scene rotation: one cache slot swaps to its next scene every 24 rounds" in capsys.readouterr().out
    else:   # 0: the cache never swaps, as before the flag
        assert len(first) == 1, first
        assert "scene rotation" not in capsys.readouterr().out


def test_eval_reaches_every_scene_with_fewer_slots(dataset, tmp_path, monkeypatch):
    from bps_runtime.episodes.dataset_info import scene_and_episode_counts

    scenes, total = scene_and_episode_counts(dataset, "train")
    assert scenes == 2
    argv = ["--dataset", str(dataset), "--out-dir", str(tmp_path / "ev"), "--eval", "random", "--eval-split", "train",
            "--cache-slots", "1", "--resolution", "16", "--threads", "1"]
    seen = _watch(monkeypatch)
    res = run(argv)
    assert res["episodes"] == total and "episodes_wanted" not in res, res
    assert len({s for ids in seen for s in ids}) == 2
    again = run(argv)   # the swaps follow from the seed and the steps: the same report
    assert {k: v for k, v in again.items() if k != "seconds"} == {k: v for k, v in res.items() if k != "seconds"}


def test_a_resume_may_change_the_rotation_as_it_may_the_cache_slots(dataset, tmp_path):
    out = str(tmp_path / "run")
    base = ["--dataset", str(dataset), "--out-dir", out, *TINY[:-1]]
    run([*base, "--total-steps", "64", "--scene-repeat-steps", "0"])
    res = run([*base, "--total-steps", "128", "--scene-repeat-steps", "8"])   # the cache is no part of the identity
    assert res["updates"] == 2


def _claimed(monkeypatch) -> list:
    """The (scene id, episode id) of each episode the eval counts, in order."""
    from bps_train.episode_claims import EpisodeClaims

    got: list = []
    claim = EpisodeClaims.claim

    def watched(self, key):
        ok = claim(self, key)
        if ok and key is not None:
            got.append(key)
        return ok
    monkeypatch.setattr(EpisodeClaims, "claim", watched)
    return got


def test_a_sampled_eval_spreads_its_episodes_over_every_scene(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from bps_assets.pipeline.manifest import load_manifest

    src, out = tmp_path / "src", tmp_path / "out"
    r = CliRunner().invoke(main, ["synth", str(src), "--layout", "mp3d", "-n", "3", "--semantic"])
    assert r.exit_code == 0, r.output   # 2 scenes of the split: mp3d-layout semantic scans
    r = CliRunner().invoke(main, ["preprocess", str(src), "-o", str(out), "--dataset", "mp3d", "--split", "benchmark",
                                  "--workers", "1", "--agent-radius", "0.18", "--agent-height", "0.88"])
    assert r.exit_code == 0, r.output
    split = load_manifest(out / "manifest.json").subsets[0]
    scenes = load_manifest(out / "manifest.json").scenes(split)
    assert len(scenes) == 2
    seen = _watch(monkeypatch)
    claimed = _claimed(monkeypatch)
    made = []
    make = bps_runtime.make

    def counted(*a, **k):
        made.append(k["config"].num_envs)
        return make(*a, **k)
    monkeypatch.setattr(bps_runtime, "make", counted)

    def ev(episodes):
        return run([str(a) for a in ("--dataset", out / "manifest.json", "--out-dir", tmp_path / "ev", "--task",
                                     "objectnav", "--eval", "stop", "--eval-split", split, "--eval-episodes",
                                     episodes, "--cache-slots", 1, "--resolution", 16, "--threads", 1)])

    # ObjectNav without a file samples its eval episodes (they never repeat): 1 slot, 2 scenes; the
    # slot swaps after ceil(80 / 2) episodes, and 1 x 40 envs start together on the first scene
    res = ev(80)
    assert res["episodes"] == 80 and "episodes_wanted" not in res, res
    assert len({s for ids in seen for s in ids}) == 2
    assert made == [40]
    # <= 64 episodes (until 2026-11-28 all started together on the slot's first scene): 2 envs,
    # 2 episodes on each scene
    claimed.clear()
    res = ev(4)
    assert res["episodes"] == 4 and made == [40, 2], (res, made)
    per_scene = {}
    for scene, _ in claimed:
        per_scene[scene] = per_scene.get(scene, 0) + 1
    assert sorted(per_scene.values()) == [2, 2] and len(per_scene) == 2, claimed
