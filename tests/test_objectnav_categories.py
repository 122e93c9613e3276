"""ObjectNav's category sets and map: ``make(categories="hm3d" | "mp3d" | "all")`` samples goals
of that set with its ids (``env.goal_categories``); a task without category goals, an unknown
set, or an episode file whose map is not the asked set is a ConfigError; ``bps-train`` records
the map in the checkpoint, and ``--eval`` / resume refuse episodes whose map differs (naming
both), and ids beyond the policy's category embedding (naming the episode file)."""
from __future__ import annotations

import gzip
import json

import pytest
import torch
from click.testing import CliRunner

from bps_assets.errors import ConfigError
from bps_assets.readers.semantic_categories import goal_categories, objectnav_hm3d
from bps_runtime import make
from bps_train import checkpoint
from bps_train.train import run
from cli.main import main


def _episodes(out, dest, categories):
    navs = sorted((out / "navmeshes").iterdir())
    r = CliRunner().invoke(main, ["episodes", *map(str, navs), "--task", "objectnav", "-o", str(dest), "--split",
                                  "train", "--per-scene", "6", "--seed", "1", "--categories", categories])
    assert r.exit_code == 0, r.output
    return dest / "train" / "train.json.gz"


def test_make_samples_the_named_set(objectnav_dataset):
    out, _ = objectnav_dataset
    with make(out, split=None, task="objectnav", episodes="sample", categories="mp3d", num_envs=2,
              resolution=(16, 16)) as env:
        assert env.goal_categories == goal_categories("mp3d") and env.max_goal_id == 20
        obs = env.reset()
        assert set(obs["objectgoal"].ravel().tolist()) <= set(goal_categories("mp3d").values())
        assert env.config.episodes.categories == "mp3d"
    with make(out, split=None, task="objectnav", episodes="sample", num_envs=2, resolution=(16, 16)) as env:
        assert env.goal_categories == objectnav_hm3d()


def test_bad_category_requests_are_config_errors(objectnav_dataset, tmp_path):
    out, eps = objectnav_dataset   # eps: --categories hm3d
    with pytest.raises(ConfigError, match="has no category goals"):
        make(out, split=None, task="pointnav", categories="mp3d")
    with pytest.raises(ConfigError, match="choose from hm3d, mp3d, all"):
        make(out, split=None, task="objectnav", categories="mp4d")
    with pytest.raises(ConfigError, match="not categories='mp3d'") as e:
        make(out, split=None, task="objectnav", episodes=str(eps), categories="mp3d", num_envs=2, resolution=(16, 16))
    assert e.value.path == str(eps)


def test_the_checkpoint_records_the_map_and_eval_refuses_another(objectnav_dataset, tmp_path, capsys):
    out, _ = objectnav_dataset
    tiny = ["--dataset", str(out / "manifest.json"), "--task", "objectnav", "--resolution", "16", "--width", "4",
            "--hidden", "16", "--num-envs", "2", "--rollout-steps", "4", "--sim-only-steps", "0", "--threads", "1",
            "--split", "train", "--double-buffer", "false"]
    run_dir = tmp_path / "run"
    run([*tiny, "--out-dir", str(run_dir), "--total-steps", "8"])
    ckpt = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    assert ckpt["identity"]["goal_categories"] == objectnav_hm3d()
    ev = [*tiny, "--eval", str(run_dir / "checkpoint.pt"), "--eval-split", "train", "--eval-episodes", "2"]
    # an episode file of MP3D's ids: chair is 0 in both, bed 1 (hm3d) is 6 (mp3d)
    mp3d = _episodes(out, tmp_path / "mp3d", "mp3d")
    with pytest.raises(ConfigError) as e:
        run([*ev, "--eval-episodes-file", str(mp3d)])
    msg = str(e.value)
    assert str(run_dir / "checkpoint.pt") in msg and "'bed': 1" in msg and "'bed': 6" in msg and str(mp3d) in msg
    # a checkpoint saved before the map was recorded (no key): its sampled episodes had hm3d's ids
    old_dir = tmp_path / "old"
    old_dir.mkdir()
    checkpoint.save(old_dir / "checkpoint.pt", {**{k: v for k, v in ckpt.items() if k not in ("format", "version")},
                                                "identity": {k: v for k, v in ckpt["identity"].items()
                                                             if k != "goal_categories"}})
    with pytest.raises(ConfigError, match="trained on goal categories") as e:
        run([*tiny, "--eval", str(old_dir / "checkpoint.pt"), "--eval-split", "train", "--eval-episodes", "2",
             "--eval-episodes-file", str(mp3d)])
    assert "'bed': 1" in str(e.value) and "'bed': 6" in str(e.value)
    # an old one trained on an episode file that is gone: its map is unknown, not checked, and said so
    gone = {k: v for k, v in ckpt["identity"].items() if k != "goal_categories"}
    checkpoint.save(old_dir / "checkpoint.pt", {**{k: v for k, v in ckpt.items() if k not in ("format", "version")},
                                                "identity": {**gone, "episodes": str(tmp_path / "gone.json.gz")}})
    capsys.readouterr()
    assert run([*tiny, "--eval", str(old_dir / "checkpoint.pt"), "--eval-split", "train", "--eval-episodes", "2",
                "--eval-episodes-file", str(mp3d)])["episodes"] == 2
    assert "category map" in capsys.readouterr().err
    # sampled eval takes the checkpoint's set; asking for another is refused
    assert run([*ev])["episodes"] == 2
    with pytest.raises(ConfigError, match="trained on goal categories"):
        run([*ev, "--categories", "all"])
    # resume with another set: the env config's identity differs
    with pytest.raises(ConfigError, match="cannot resume"):
        run([*tiny, "--out-dir", str(run_dir), "--total-steps", "16", "--categories", "mp3d"])
    # ids beyond the category embedding (64 rows): hm3d's six are task ids 64-69 here (the file's
    # maps shifted: `episodes --categories` refuses names that are no category)
    far = _episodes(out, tmp_path / "far", "hm3d")
    for f in far.parent.rglob("*.json.gz"):
        doc = json.loads(gzip.decompress(f.read_bytes()))
        if "category_to_task_category_id" in doc:
            doc["category_to_task_category_id"] = {k: v + 64 for k, v in doc["category_to_task_category_id"].items()}
            f.write_bytes(gzip.compress(json.dumps(doc).encode()))
    with pytest.raises(ConfigError, match="outside the policy's category embedding") as e:
        run([*ev, "--eval-episodes-file", str(far)])
    assert e.value.path == str(far)


def test_an_old_checkpoint_without_a_map_has_the_one_its_run_had():
    """Before the map was saved: sampled ObjectNav had hm3d's ids; a file's map is unknown (None)."""
    ckpt = {"args": {}, "world": 1, "identity": {"task": "objectnav", "episodes": "sample"}}
    assert checkpoint.saved_identity(ckpt)["goal_categories"] == objectnav_hm3d()
    assert checkpoint.saved_identity({**ckpt, "identity": {"task": "objectnav", "episodes": "eps.json.gz"}}
                                     )["goal_categories"] is None
    assert checkpoint.saved_identity({**ckpt, "identity": {"episodes": "sample"}})["goal_categories"] is None
    recorded = {"task": "objectnav", "episodes": "sample", "goal_categories": {"chair": 0}}
    assert checkpoint.saved_identity({**ckpt, "identity": recorded})["goal_categories"] == {"chair": 0}


def test_an_old_checkpoint_trained_on_a_file_takes_that_files_map(objectnav_dataset, tmp_path):
    """Before the map was saved, a run on an episode file had that file's map: read from the file
    the checkpoint names while it is there (so a sampled eval with hm3d's ids is refused); once
    the file is gone the map is unknown (None) and ``categories_note`` says so, naming the flags."""
    from bps_assets.nav.objectnav_files import read_objectnav_dataset

    out, _ = objectnav_dataset
    mp3d = _episodes(out, tmp_path / "mp3d", "mp3d")
    ckpt = {"args": {}, "world": 1, "identity": {"task": "objectnav", "episodes": str(mp3d)}}
    ident = checkpoint.saved_identity(ckpt)
    assert ident["goal_categories"] == read_objectnav_dataset(mp3d).category_to_task_category_id
    assert ident["goal_categories"]["bed"] == 6 and checkpoint.categories_note("ck.pt", ident) == ""
    with pytest.raises(ConfigError, match="trained on goal categories"):
        checkpoint.check_goal_categories("ck.pt", ident["goal_categories"], objectnav_hm3d(), "sample")
    (tmp_path / "mp3d").rename(tmp_path / "gone")
    ident = checkpoint.saved_identity(ckpt)
    assert ident["goal_categories"] is None
    note = checkpoint.categories_note("ck.pt", ident)
    assert "ck.pt" in note and str(mp3d) in note and "unknown" in note
    assert "--eval-episodes-file" in note and "--categories" in note
    assert checkpoint.categories_note("ck.pt", checkpoint.saved_identity(
        {**ckpt, "identity": {"task": "objectnav", "episodes": "sample"}})) == ""


def test_an_old_checkpoint_trained_on_a_split_folder_takes_its_map_from_the_split_file(objectnav_dataset, tmp_path):
    """A split folder is an ``--episodes`` too: its map is the one read from the top-level maps, the
    episodes (content files) not read for it (a content file broken after the run does not hide it)."""
    from bps_assets.nav.objectnav_files import read_category_map, read_objectnav_dataset

    out, _ = objectnav_dataset
    mp3d = _episodes(out, tmp_path / "mp3d", "mp3d")
    want = read_objectnav_dataset(mp3d).category_to_task_category_id
    assert read_category_map(mp3d) == read_category_map(mp3d.parent) == want
    ckpt = {"args": {}, "world": 1, "identity": {"task": "objectnav", "episodes": str(mp3d.parent)}}
    ident = checkpoint.saved_identity(ckpt)
    assert ident["goal_categories"] == want and checkpoint.categories_note("ck.pt", ident) == ""
    content = sorted((mp3d.parent / "content").glob("*.json.gz"))
    assert content
    content[0].write_bytes(gzip.compress(b'{"episodes": [broken'))
    assert checkpoint.saved_identity(ckpt)["goal_categories"] == want
    on_file = {**ckpt, "identity": {"task": "objectnav", "episodes": str(mp3d)}}
    assert checkpoint.saved_identity(on_file)["goal_categories"] == want


def test_the_category_map_of_a_dataset_whose_maps_ride_in_the_content_files(objectnav_dataset, tmp_path):
    """No maps in the split file: the first content file's, as ``read_objectnav_dataset`` takes them."""
    from bps_assets.nav.objectnav_files import read_category_map, read_objectnav_dataset

    out, _ = objectnav_dataset
    mp3d = _episodes(out, tmp_path / "mp3d", "mp3d")
    doc = json.loads(gzip.decompress(mp3d.read_bytes()))
    for k in ("category_to_task_category_id", "category_to_scene_annotation_category_id"):
        doc.pop(k)
    mp3d.write_bytes(gzip.compress(json.dumps(doc).encode()))
    assert read_category_map(mp3d) == read_objectnav_dataset(mp3d).category_to_task_category_id
    assert read_category_map(mp3d)["bed"] == 6
