import pytest

from bps_assets.errors import ConfigError, DatasetError
from bps_assets.pipeline.datasets import load_dataset
from bps_assets.pipeline.plan import Shard, make_plan

from pipeline_fakes import make_source


def test_plan_classifies_every_file(tmp_path):
    g = load_dataset("gibson")
    make_source(tmp_path, ["Allensville", "Collierville", "Adrian"], navmesh=["Allensville"],
                extra=["gibson/notes.txt", "gibson/Nowhere.glb", "gibson/Allensville_semantic.ply",
                       "gibson/sub/x.glb"])
    p = make_plan(tmp_path, g, "tiny")
    assert [(s.name, s.subset) for s in p.scenes] == [("Allensville", "train"), ("Collierville", "val")]
    assert p.scenes[0].navmesh == tmp_path / "gibson" / "Allensville.navmesh"
    assert p.scenes[0].rel_navmesh == "gibson/Allensville.navmesh" and p.scenes[1].navmesh is None
    assert len(p.missing) == 35 - 2 and ("Ihlen", "test") in p.missing
    assert p.other_split == ["Adrian"]                      # a Gibson scene, not in tiny
    assert p.unknown == ["gibson/Nowhere.glb"]              # not a Gibson scene at all
    assert p.stray == ["gibson/notes.txt", "gibson/sub/x.glb"]  # companions are not stray
    # subsets limit the selection; the layout directory itself is accepted as the root
    p2 = make_plan(tmp_path / "gibson", g, "tiny", subsets=("val",))
    assert p2.subsets == ("val",) and [s.name for s in p2.scenes] == ["Collierville"]
    assert len(p2.selected) == 5


def test_synth_semantic_annotations_are_companions_and_unknown_scans_advice_works(tmp_path):
    """`synth --semantic` writes HM3D-Semantics pairs in the gibson layout (NAME.semantic.glb /
    .txt), which preprocess reads: they are the scene's companions, neither unknown nor stray
    (also for a scene of another split). A source holding only scans gibson does not list is
    refused with advice that works: their own folder, given without --dataset."""
    from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess

    from cli.cmd_pipeline import _source_and_dataset
    from pipeline_fakes import FakeBackend

    pair = [f"gibson/{n}.semantic.{x}" for n in ("Allensville", "Adrian") for x in ("glb", "txt")]
    make_source(tmp_path / "s", ["Allensville", "Adrian"], extra=pair)
    p = make_plan(tmp_path / "s", load_dataset("gibson"), "tiny")
    assert [s.name for s in p.scenes] == ["Allensville"] and p.other_split == ["Adrian"]
    assert p.unknown == [] and p.stray == []
    assert p.held == {"Allensville": "train"}

    make_source(tmp_path / "u", ["MyScan"])
    with pytest.raises(DatasetError, match="not gibson scenes \\(e.g. gibson/MyScan.glb\\): .*move them to a "
                                           "folder of their own .*without --dataset") as e:
        preprocess(tmp_path / "u", tmp_path / "o", "gibson", "tiny", PreprocessOptions(), Shard(1, 2),
                   backend=FakeBackend())
    assert "give the folder without" not in str(e.value)  # the old advice: a usage error once followed
    mine = tmp_path / "myscans"
    (tmp_path / "u" / "gibson").rename(mine)
    src, ds = _source_and_dataset(str(mine), None)   # no UsageError: a folder of scans
    r = preprocess(src, tmp_path / "o2", ds, None, PreprocessOptions(workers=1, in_process=True),
                   backend=FakeBackend())
    assert [x.name for x in r.results] == ["MyScan"] and r.count("ok") == 1


def test_mp3d_layout(tmp_path):
    m = load_dataset("mp3d")
    d = tmp_path / "mp3d" / "17DRP5sb8fy"
    d.mkdir(parents=True)
    for f in ("17DRP5sb8fy.glb", "17DRP5sb8fy.navmesh", "17DRP5sb8fy.house", "17DRP5sb8fy_semantic.ply"):
        (d / f).write_bytes(b"x")
    (tmp_path / "mp3d" / "x1").mkdir()
    (tmp_path / "mp3d" / "x1" / "x2.glb").write_bytes(b"x")  # {scene}/{scene} must agree
    p = make_plan(tmp_path, m)
    assert [s.name for s in p.scenes] == ["17DRP5sb8fy"] and p.scenes[0].navmesh is not None
    assert p.stray == ["mp3d/x1/x2.glb"] and p.unknown == []
    assert len(p.missing) == 89


def test_bad_roots_and_splits(tmp_path):
    g = load_dataset("gibson")
    with pytest.raises(DatasetError, match="no gibson/ directory"):
        make_plan(tmp_path, g)
    with pytest.raises(DatasetError, match="not a directory"):
        make_plan(tmp_path / "nope", g)
    (tmp_path / "gibson").mkdir()
    with pytest.raises(DatasetError, match="no split 'tiniest'.*'tiny'"):
        make_plan(tmp_path, g, "tiniest")


def test_shards_partition_the_split_deterministically(tmp_path):
    g = load_dataset("gibson")
    (tmp_path / "gibson").mkdir()
    names = sorted(g.scene_subsets("full+"))
    parts = [make_plan(tmp_path, g, "full+", Shard(i, 7)).selected for i in range(7)]
    flat = [n for p in parts for n in p]
    assert sorted(flat) == names and len(set(flat)) == len(names)      # a partition
    assert max(map(len, parts)) - min(map(len, parts)) <= 1             # balanced
    assert parts[3] == make_plan(tmp_path, g, "full+", Shard(3, 7)).selected  # deterministic
    # independent of which files this node sees
    make_source(tmp_path, names[:10])
    assert make_plan(tmp_path, g, "full+", Shard(3, 7)).selected == parts[3]


def test_shard_parse(monkeypatch):
    assert Shard.parse("2/8") == Shard(2, 8) and Shard.parse(None) is None
    for bad in ("8/8", "-1/4", "x", "1/0"):
        with pytest.raises(ConfigError):
            Shard.parse(bad)
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "5")
    monkeypatch.setenv("SLURM_ARRAY_TASK_MIN", "1")
    monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "16")
    assert Shard.parse("slurm") == Shard(4, 16)
    monkeypatch.delenv("SLURM_ARRAY_TASK_ID")
    with pytest.raises(ConfigError, match="not inside a SLURM job array"):
        Shard.parse("slurm")
