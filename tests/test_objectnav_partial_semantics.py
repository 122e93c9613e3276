"""ObjectNav over a split where only some scenes have semantic annotations (real HM3D v0.2
annotates part of each split): an episode file that uses only annotated scenes runs, through
``make`` and ``bps-train --eval``; sampled episodes leave the unannotated scenes out with a
warning; a file that uses an unannotated scene runs (refused, naming the scene's file, only
with the ``semantic`` sensor); a split with none annotated is refused naming the scene's file."""
from __future__ import annotations

import gzip
import logging
import shutil

import pytest
import torch
from click.testing import CliRunner

from bps_assets.errors import InputError
from bps_runtime import make
from cli.main import main


def _cli(*args):
    r = CliRunner().invoke(main, [str(a) for a in args])
    assert r.exit_code == 0, r.output
    return r


@pytest.fixture(scope="module")
def partial(tmp_path_factory):
    """(output folder, {scene: has semantics}, episode file over the annotated scene only,
    episode file over both train scenes): three synth MP3D scenes (train, val, train), the
    second train scene stripped of its annotations."""
    root = tmp_path_factory.mktemp("partial")
    src, out, eps, eps_all = root / "src", root / "out", root / "eps", root / "eps_all"
    _cli("synth", src, "--layout", "mp3d", "-n", 3, "--semantic")
    dirs = [src / "mp3d" / n for n in ("17DRP5sb8fy", "1LXtFkjw3qL")]   # synth's two train scenes
    plain = dirs[1].name
    for f in dirs[1].iterdir():
        if f.name.endswith("_semantic.ply") or f.suffix == ".house":
            f.unlink()
    _cli("preprocess", src, "-o", out, "--dataset", "mp3d", "--split", "benchmark", "--workers", 1,
         "--agent-radius", 0.18, "--agent-height", 0.88)
    nav = out / "navmeshes"
    _cli("episodes", nav / f"{dirs[0].name}.navmesh.bps", "--task", "objectnav", "-o", eps, "--split", "train",
         "--per-scene", 6, "--seed", 1)
    # a file naming the unannotated scene too: its episodes copied under the other scene's id
    shutil.copytree(eps, eps_all)
    content = eps_all / "train" / "content"
    only = next(content.iterdir())
    data = gzip.decompress(only.read_bytes()).replace(dirs[0].name.encode(), plain.encode())
    (content / f"{plain}.json.gz").write_bytes(gzip.compress(data))
    return out, dirs[0].name, plain, eps / "train" / "train.json.gz", eps_all / "train" / "train.json.gz"


def test_an_episode_file_on_the_annotated_scenes_runs(partial):
    out, annotated, _plain, eps, _ = partial
    with make(out, split="train", task="objectnav", episodes=str(eps), num_envs=2, resolution=(16, 16)) as env:
        env.reset()
        _obs, _r, _d, info = env.step(torch.zeros(2, dtype=torch.int64))
        assert set(info["scene_id"]) == {annotated}


def test_bps_train_eval_on_the_file_runs(partial):
    from bps_train.train import run

    out, _a, _p, eps, _ = partial
    r = run(["--dataset", str(out / "manifest.json"), "--task", "objectnav", "--eval", "random", "--eval-split",
             "train", "--eval-episodes-file", str(eps), "--eval-episodes", "2", "--resolution", "16",
             "--num-envs", "2", "--threads", "1"])
    assert r["episodes"] == 2


def test_a_file_using_an_unannotated_scene_runs_unless_the_semantic_sensor_is_asked(partial, caplog):
    """A file's goals, view points and category map are its own (habitat-lab's ObjectNav reads
    no scene annotation): its unannotated scenes are served, said in one note; the ``semantic``
    sensor needs annotations, so asking for it is refused naming the scene's file."""
    out, annotated, plain, _, eps_all = partial
    seen = set()
    with caplog.at_level(logging.INFO, logger="bps_runtime.tasks.objectnav_episodes"):
        with make(out, split="train", task="objectnav", episodes=str(eps_all), num_envs=2,
                  resolution=(16, 16)) as env:
            env.reset()
            for _ in range(6):   # STOP ends each episode: the next ones come from both scenes
                _obs, _r, _d, info = env.step(torch.zeros(2, dtype=torch.int64))
                seen |= set(info["scene_id"])
                assert (info["distance_to_goal"] >= 0).all()
    assert seen == {annotated, plain}
    notes = [r.getMessage() for r in caplog.records if "no semantic annotations" in r.getMessage()]
    assert len(notes) == 1 and plain in notes[0] and "1 of the episode file's 2 scenes" in notes[0]
    with pytest.raises(InputError, match="no semantic annotations.*'semantic' sensor") as e:
        make(out, split="train", task="objectnav", episodes=str(eps_all), num_envs=2, resolution=(16, 16),
             sensors=("depth", "semantic"))
    assert e.value.path.endswith(f"{plain}.bps") and plain in str(e.value)


def test_sampling_leaves_unannotated_scenes_out_and_says_so(partial, caplog):
    out, annotated, plain, _, _ = partial
    with caplog.at_level(logging.WARNING):
        with make(out, split="train", task="objectnav", episodes="sample", num_envs=2, resolution=(16, 16)) as env:
            env.reset()
            _obs, _r, _d, info = env.step(torch.zeros(2, dtype=torch.int64))
            assert set(info["scene_id"]) == {annotated}
    msg = " ".join(r.getMessage() for r in caplog.records)
    assert "1 of 2 scenes have no semantic annotations" in msg and f"{plain}.bps" in msg


def test_ranks_share_the_annotated_scenes_and_rank_0_says_what_is_left_out(partial, caplog):
    """Sampled episodes under ``scene_shard`` (a fake world of 2): the unannotated scenes are
    dropped before sharding, so every rank gets its share of the annotated ones (sharding first
    left a rank with the unannotated scene alone: a false 'nor has any' error); the warning
    counts the whole split, from rank 0 only. More ranks than annotated scenes: a ConfigError
    saying how many scenes the task can serve."""
    from bps_assets.errors import ConfigError
    from bps_assets.pipeline.manifest import load_manifest
    from bps_runtime.tasks.objectnav_episodes import scene_semantics_error

    out, _annotated, plain, _, _ = partial
    entries = load_manifest(out / "manifest.json").scenes(None)
    usable = [e.name for e in entries if scene_semantics_error(e.scene) is None]
    assert len(entries) == 3 and len(usable) == 2
    # the case this guards: sharding the whole split first leaves a rank without an annotated scene
    assert any(not set(e.name for e in entries[r::2]) & set(usable) for r in range(2))
    for rank in range(2):
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            with make(out, split=None, task="objectnav", episodes="sample", num_envs=2, resolution=(16, 16),
                      scene_shard=(rank, 2)) as env:
                env.reset()
                _obs, _r, _d, info = env.step(torch.zeros(2, dtype=torch.int64))
                assert set(info["scene_id"]) == {usable[rank]}
        msg = " ".join(r.getMessage() for r in caplog.records)
        assert ("1 of 3 scenes have no semantic annotations" in msg and f"{plain}.bps" in msg) == (rank == 0)
    with pytest.raises(ConfigError, match=r"scene_shard 1/2 gets no scene of split 'train' \(1 scenes task "
                                          r"'objectnav' can serve, of 2\)"):
        make(out, split="train", task="objectnav", episodes="sample", num_envs=2, resolution=(16, 16),
             scene_shard=(1, 2))


def _refuse_section_reads(monkeypatch):
    """Fail the test on any section read of a container file (the check reads headers only)."""
    from bps_assets.container import Container

    def no_section(self, name, *a, **k):
        raise AssertionError(f"section {name} read")

    monkeypatch.setattr(Container, "read", no_section)


def test_the_annotated_check_reads_the_header_only(partial, monkeypatch):
    """Every rank checks every scene of the split at start (``annotated_scenes``): the check
    decides from the header's semantics object count, reading (decompressing) no section; a
    scene without semantics still gets the reason."""
    from bps_assets.pipeline.manifest import load_manifest
    from bps_runtime.tasks.objectnav_episodes import scene_semantics_error

    out, annotated, plain, _, _ = partial
    scenes = {e.name: e.scene for e in load_manifest(out / "manifest.json").scenes(None)}

    _refuse_section_reads(monkeypatch)
    assert scene_semantics_error(scenes[annotated]) is None
    assert "no semantic annotations" in scene_semantics_error(scenes[plain])


def test_a_composed_scene_is_annotated_by_its_instances_without_reading_them(tmp_path, monkeypatch):
    """A composed scene's objects are its instances (expanded from their assets): the check
    counts them in the header, opening no asset and reading no section."""
    import sys
    from pathlib import Path

    from bps_assets.pipeline.manifest import load_manifest
    from bps_runtime.tasks.objectnav_episodes import scene_semantics_error

    sys.path.insert(0, str(Path(__file__).parent))
    from test_composed_runtime import build_composed_rooms

    manifest = build_composed_rooms(tmp_path, n_scenes=1, episodes=0)
    scene = load_manifest(manifest).scenes(None)[0].scene

    _refuse_section_reads(monkeypatch)
    assert scene_semantics_error(scene) is None


def test_an_instance_imagenav_file_using_an_unannotated_scene_runs(partial, tmp_path):
    """InstanceImageNav's goal image is an RGB render at the file's goal camera, its distance the
    file's view points: an unannotated scene serves a file too (the ``semantic`` sensor is refused)."""
    from bps_assets.nav.instance_imagenav_episodes import InstanceImageNavOptions, instance_imagenav_scene
    from bps_assets.nav.instance_imagenav_files import write_instance_imagenav_dataset
    from bps_assets.nav.objectnav_episodes import semantic_scene
    from bps_assets.nav.sources import open_navmesh
    from bps_runtime.tasks import instance_imagenav

    out, annotated, plain, _, _ = partial
    v, t, tri_object, table = semantic_scene(out / "scenes" / f"{annotated}.bps")
    ds = instance_imagenav_scene(open_navmesh(out / "navmeshes" / f"{annotated}.navmesh.bps"), v, t, tri_object,
                                 table, f"mp3d/{annotated}/{annotated}.glb", 6, seed=3,
                                 options=InstanceImageNavOptions(image_dimensions=(16, 16)))
    write_instance_imagenav_dataset(tmp_path / "eps", "train", {annotated: ds})
    content = tmp_path / "eps" / "train" / "content"
    data = gzip.decompress((content / f"{annotated}.json.gz").read_bytes())
    (content / f"{plain}.json.gz").write_bytes(gzip.compress(data.replace(annotated.encode(), plain.encode())))
    (content / f"{annotated}.json.gz").unlink()   # the file uses the unannotated scene only
    path = str(tmp_path / "eps" / "train" / "train.json.gz")
    task = instance_imagenav.TaskOptions(agent_radius=0.18, agent_height=0.88)
    with make(out, split="train", task=task, episodes=path, num_envs=2, resolution=(16, 16),
              sensors=("rgb",)) as env:
        obs = env.reset()
        _obs, _r, _d, info = env.step(torch.zeros(2, dtype=torch.int64))
        assert set(info["scene_id"]) == {plain}
        assert obs["instance_imagegoal"].float().std() > 0   # the goal camera's picture
    with pytest.raises(InputError, match="'semantic' sensor") as e:
        make(out, split="train", task=task, episodes=path, num_envs=2, resolution=(16, 16),
             sensors=("rgb", "semantic"))
    assert e.value.path.endswith(f"{plain}.bps")


def test_the_semantic_sensor_rule_is_the_envs_one_for_object_goal_tasks(partial):
    """``env.world.check_semantic_sensor``, where the env sets its sensors up: for an object-goal
    task the ``semantic`` sensor on an unannotated scene served is an InputError naming its file
    (whatever the supply); PointNav's semantic frames are 0 there (no refusal); no sensor, no read."""
    from bps_assets.pipeline.manifest import load_manifest
    from bps_runtime.env.world import check_semantic_sensor
    from bps_runtime.tasks import task_spec

    out, annotated, plain, _, _ = partial
    entries = load_manifest(out / "manifest.json").scenes("train")
    for task in ("objectnav", "instance_imagenav"):
        with pytest.raises(InputError, match=r"'semantic' sensor needs; 1 of the 2 scenes served have none") as e:
            check_semantic_sensor(entries, ("depth", "semantic"), task_spec(task))
        assert e.value.path.endswith(f"{plain}.bps")
        check_semantic_sensor([x for x in entries if x.name == annotated], ("semantic",), task_spec(task))
        check_semantic_sensor(entries, ("depth", "rgb"), task_spec(task))
    check_semantic_sensor(entries, ("semantic",), task_spec("pointnav"))
