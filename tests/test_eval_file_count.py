"""``bps-train --eval --eval-episodes-file`` counts the file's episodes from the file, not from the
env's per-scene table: an ObjectNav file's scenes are mapped only as they load, so with more
scenes than cache slots that table is partial when the eval starts (docs/TRAINING.md)."""
from __future__ import annotations

from click.testing import CliRunner

from bps_assets.pipeline.manifest import load_manifest
from bps_runtime.episodes.dataset_info import file_episode_count
from bps_runtime.tasks import task_spec
from cli.main import main


def _cli(*args):
    r = CliRunner().invoke(main, [str(a) for a in args])
    assert r.exit_code == 0, r.output


def test_an_objectnav_file_over_more_scenes_than_slots_is_evaluated_whole(tmp_path):
    from bps_train import train   # --eval stop builds no policy: not one of scripts/test.sh's AVX2_FILES

    src, out, eps = tmp_path / "src", tmp_path / "out", tmp_path / "eps"
    _cli("synth", src, "--layout", "mp3d", "-n", 3, "--semantic")
    _cli("preprocess", src, "-o", out, "--dataset", "mp3d", "--split", "benchmark", "--workers", 1,
         "--agent-radius", 0.18, "--agent-height", 0.88)
    _cli("episodes", *sorted((out / "navmeshes").iterdir()), "--task", "objectnav", "-o", eps, "--split", "val",
         "--per-scene", 2, "--seed", 1, "--any-subset")
    manifest, file = out / "manifest.json", eps / "val" / "val.json.gz"
    split = load_manifest(manifest).subsets[0]
    assert len(load_manifest(manifest).scenes(split)) == 2
    total = file_episode_count(manifest, split, file, task_spec("objectnav").episode_file)
    assert total == 4
    res = train.run([str(a) for a in ("--dataset", manifest, "--out-dir", tmp_path / "run", "--task", "objectnav",
                                      "--eval", "stop", "--eval-split", split, "--eval-episodes-file", file,
                                      "--cache-slots", 1, "--resolution", 16, "--threads", 1)])
    # the eval's cache moves its slot on when the first scene's episodes are spent, so every
    # episode of the file runs (was: the second scene's never ran and the eval stopped at its
    # frame cap saying so; before that, want was lowered to the resident scene's 2, said nowhere)
    assert (res["episodes"], res.get("episodes_wanted")) == (total, None)
