"""Journey L6: an ``--overwrite`` preprocess run removes the outputs of scenes it no longer holds
(their scan gone from the source), so habitat-lab's PointNav dataset no longer loads their
episodes; user files and what another shard's manifest lists stay."""
from __future__ import annotations

import errno
import json
import pathlib
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from bps_assets.errors import OutputExistsError, OutputWriteError
from bps_assets.pipeline.manifest import merge_manifests
from bps_assets.pipeline.plan import Shard
from bps_assets.pipeline.preprocess import STATE_DIR, PreprocessOptions, output_paths, preprocess
from bps_assets.pipeline.stale_outputs import run_dropping_stale
from habitat_lab_stub import habitat_lab  # noqa: F401 - the fixture
from pipeline_fakes import FakeBackend, make_source

NAMES = ["Allensville", "Beechwood", "Benevolence"]
OPTS = PreprocessOptions(workers=1, in_process=True, episodes=3, subsets=("train",))


def _run(src, out, shard=None, **kw):
    return preprocess(src, out, "gibson", "tiny", PreprocessOptions(**{**OPTS.__dict__, **kw}), shard,
                      backend=FakeBackend(), log=lambda s: None)


def _files(out, name):
    return [out / "scenes" / f"{name}.bps", out / "navmeshes" / f"{name}.navmesh.bps",
            out / "episodes" / "pointnav" / "train" / "content" / f"{name}.json.gz"]


def test_overwrite_removes_a_dropped_scenes_outputs_and_habitat_stops_loading_them(tmp_path, habitat_lab):
    src, out = make_source(tmp_path / "src", NAMES), tmp_path / "out"
    assert _run(src, out).ok and all(p.is_file() for p in _files(out, "Beechwood"))
    (out / "scenes" / "notes.txt").write_text("mine")          # a user's file beside ours
    (src / "gibson" / "Beechwood.glb").unlink()
    r = _run(src, out, overwrite=True)
    assert r.ok and r.count("missing") >= 1 and "Beechwood" not in json.loads((out / "manifest.json").read_text())["scenes"]
    assert not any(p.exists() for p in _files(out, "Beechwood"))
    assert not (out / STATE_DIR / "scenes" / "Beechwood.json").exists()
    assert all(p.is_file() for n in ("Allensville", "Benevolence") for p in _files(out, n))
    assert (out / "scenes" / "notes.txt").read_text() == "mine"
    cfg = SimpleNamespace(data_path=str(out / "episodes" / "pointnav" / "{split}" / "{split}.json.gz"),
                          split="train", scenes_dir="data/scene_datasets", content_scenes=["*"])
    eps = habitat_lab.PointNavDatasetV1(cfg).episodes
    assert len(eps) == 6 and not any("Beechwood" in e.scene_id for e in eps)


def test_without_overwrite_or_when_another_shard_lists_them_nothing_is_removed(tmp_path):
    src, out = make_source(tmp_path / "src", NAMES), tmp_path / "out"
    assert _run(src, out).ok
    # another run's shard manifests that list Beechwood's files (all subsets, split into shards
    # later); a shard of this very run vouches for nothing its split no longer holds (S2 below)
    for i in range(2):
        _run(src, out, Shard(i, 2), subsets=None)
    shards = [json.loads((out / f"manifest.shard-{i}-of-2.json").read_text())["scenes"] for i in range(2)]
    assert any("Beechwood" in s for s in shards)
    (src / "gibson" / "Beechwood.glb").unlink()
    with pytest.raises(OutputExistsError, match="not in this run: Beechwood"):   # no --overwrite: refused
        _run(src, out)
    assert _run(src, out, overwrite=True).ok
    assert all(p.is_file() for p in _files(out, "Beechwood"))

# ---------------------------------------------------------------- review r2: S1, S2, S3, S4

def _stale_run(out, manifest, plan=None, log=None):
    """run_dropping_stale after a run that processed nothing (every earlier scene is dropped)."""
    res = SimpleNamespace(results=[])
    return run_dropping_stale(out, manifest, True, lambda: res, log, output_paths,
                              lambda n: out / STATE_DIR / "scenes" / f"{n}.json", plan)


def test_a_manifest_naming_a_path_outside_out_root_deletes_nothing_there(tmp_path):
    out = tmp_path / "a" / "out"
    (out / "scenes").mkdir(parents=True)
    victim = tmp_path / "thesis.bps"
    victim.write_text("precious")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "Linked.bps").write_text("mine")
    (out / "navmeshes").symlink_to(elsewhere)   # a user's folder linked in: not ours to empty
    (elsewhere / "Linked.navmesh.bps").write_text("mine too")
    m = out / "manifest.json"
    scenes = {name: {"subset": sub, "outputs": {"scene": {"path": output_paths(name, sub)["scene"]},
                                                "navmesh": {"path": output_paths(name, sub)["navmesh"]}}}
              for name, sub in (("../../thesis", "train"), ("..", "train"), ("Linked", "train"))}
    scenes["Sub"] = {"subset": "../..", "outputs": {"episodes": {"path": output_paths("Sub", "../..")["episodes"]}}}
    m.write_text(json.dumps({"scenes": scenes}))
    lines = []
    _stale_run(out, m, log=lines.append)
    assert victim.read_text() == "precious"
    assert (elsewhere / "Linked.navmesh.bps").read_text() == "mine too"
    text = "\n".join(lines)
    assert "bad scene name '../../thesis'" in text and "bad split name '../..'" in text
    assert "outside" in text and "Linked.navmesh.bps" in text

def _shard_manifest(out, i, n=2):
    return json.loads((out / f"manifest.shard-{i}-of-{n}.json").read_text())["scenes"]


def test_a_merged_manifest_of_the_split_does_not_keep_a_dropped_scenes_outputs(tmp_path):
    names = ["Allensville", "Beechwood", "Benevolence", "Coffeen"]
    src, out = make_source(tmp_path / "src", names), tmp_path / "out"
    for i in range(2):
        assert _run(src, out, Shard(i, 2)).ok
    merge_manifests(sorted(out.glob("manifest.shard-*")), out / "manifest.json")   # docs/PIPELINE.md's workflow
    (src / "gibson" / "Beechwood.glb").unlink()
    i = next(i for i in range(2) if "Beechwood" in _shard_manifest(out, i))
    assert _run(src, out, Shard(i, 2), overwrite=True).ok
    assert not any(p.exists() for p in _files(out, "Beechwood"))
    assert all(p.is_file() for n in names if n != "Beechwood" for p in _files(out, n))


def test_a_scene_moved_to_another_shard_keeps_its_outputs_when_a_scan_is_dropped(tmp_path):
    names = ["Allensville", "Beechwood", "Benevolence", "Coffeen"]
    src, out = make_source(tmp_path / "src", names), tmp_path / "out"
    dataset = f"scans:{src}"   # scenes found, not listed: the shards follow the files found
    run = lambda shard, **kw: preprocess(src, out, dataset, None, PreprocessOptions(**{**OPTS.__dict__, **kw}),
                                         shard, backend=FakeBackend(), log=lambda s: None)
    for i in range(2):
        assert run(Shard(i, 2)).ok
    assert set(_shard_manifest(out, 0)) == {"Allensville", "Benevolence"}
    (src / "gibson" / "Allensville.glb").unlink()   # Benevolence moves to shard 1
    r = run(Shard(0, 2), overwrite=True)
    assert r.ok and {x.name for x in r.results if x.status != "missing"} == {"Beechwood", "Coffeen"}
    assert not any(p.exists() for p in _files(out, "Allensville"))
    assert all(p.is_file() for n in names[1:] for p in _files(out, n))

def test_a_file_that_cannot_be_removed_is_named_and_the_others_are_removed(tmp_path, monkeypatch):
    src, out = make_source(tmp_path / "src", NAMES), tmp_path / "out"
    assert _run(src, out).ok
    for n in ("Beechwood", "Benevolence"):
        (src / "gibson" / f"{n}.glb").unlink()
    real = pathlib.Path.unlink

    def unlink(self, missing_ok=False):
        if self.name == "Beechwood.bps":
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real(self, missing_ok=missing_ok)

    monkeypatch.setattr(pathlib.Path, "unlink", unlink)
    with pytest.raises(OutputWriteError, match=r"could not be removed.*scenes/Beechwood\.bps \(Permission denied\)"):
        _run(src, out, overwrite=True)
    assert "Beechwood" not in json.loads((out / "manifest.json").read_text())["scenes"]
    assert (out / "scenes" / "Beechwood.bps").is_file()
    assert not any(p.exists() for p in _files(out, "Beechwood")[1:] + _files(out, "Benevolence"))

def test_a_scene_moved_to_another_subset_loses_only_its_old_episodes(tmp_path):
    out = tmp_path / "out"
    m = out / "manifest.json"
    outs = {}
    for name in ("Beechwood", "Coffeen"):
        paths = output_paths(name, "train")
        for rel in paths.values():
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            (out / rel).write_text(name)
        outs[name] = {"subset": "train", "outputs": {r: {"path": p} for r, p in paths.items()}}
    m.write_text(json.dumps({"scenes": outs}))
    plan = SimpleNamespace(held={"Beechwood": "val"}, dataset=SimpleNamespace(name="gibson"), split="tiny",
                           subsets=("train", "val"), src_root=tmp_path)
    _stale_run(out, m, plan)
    beech = output_paths("Beechwood", "train")
    assert (out / beech["scene"]).is_file() and (out / beech["navmesh"]).is_file()
    assert not (out / beech["episodes"]).exists()
    assert not any((out / p).exists() for p in output_paths("Coffeen", "train").values())



def test_the_overwrite_refusal_and_help_say_that_outputs_are_removed(tmp_path):
    src, out = make_source(tmp_path / "src", NAMES), tmp_path / "out"
    assert _run(src, out).ok
    (src / "gibson" / "Beechwood.glb").unlink()
    with pytest.raises(OutputExistsError, match=r"pass --overwrite, which removes the outputs of its 1 "
                                                r"scene\(s\) not in this run"):
        _run(src, out)
    from cli.cmd_pipeline import preprocess_cmd

    help_text = " ".join(CliRunner().invoke(preprocess_cmd, ["--help"]).output.split())
    assert "--overwrite" in help_text and "remove the outputs of the scenes that manifest lists" in help_text
