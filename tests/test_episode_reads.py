"""Each habitat episode file is opened, decompressed and parsed once per ``make()`` and once per
``bps-train --eval`` (PointNav: the manifest's split files and ``episodes=PATH``; ObjectNav's
file), counted on generated datasets (conftest's ``manifest`` and ``objectnav_dataset``). The
cap on episodes per file is checked in the same pass: no second read to count them."""
from __future__ import annotations

import collections
import gzip
import os

import pytest

import bps_assets.nav.episodes as episodes_mod
import bps_assets.readers.guard as guard
from bps_assets.pipeline.manifest import load_manifest
from bps_runtime import make


@pytest.fixture
def reads(monkeypatch):
    """path -> Counter of its opens, gzip streams opened for reading and JSON parses."""
    counts = collections.defaultdict(collections.Counter)
    real_open, real_parse = open, episodes_mod.stream_document

    def counted_open(path, *a, **k):
        counts[os.path.realpath(path)]["open"] += 1
        return real_open(path, *a, **k)

    class CountedGzip(gzip.GzipFile):
        def __init__(self, filename=None, mode=None, compresslevel=9, fileobj=None, mtime=None):
            name = getattr(fileobj, "name", filename)
            if name is not None and "w" not in str(mode or getattr(fileobj, "mode", "rb")):
                counts[os.path.realpath(name)]["gunzip"] += 1
            super().__init__(filename, mode, compresslevel, fileobj, mtime)

    def counted_parse(path, *a, **k):
        counts[os.path.realpath(path)]["parse"] += 1
        return real_parse(path, *a, **k)

    monkeypatch.setattr(guard, "open", counted_open, raising=False)   # iter_limited's open
    monkeypatch.setattr(gzip, "GzipFile", CountedGzip)
    monkeypatch.setattr(episodes_mod, "stream_document", counted_parse)
    return counts


def _episode_files(folder) -> set[str]:
    return {os.path.realpath(p) for p in folder.rglob("*.json.gz")}


def _assert_once(counts, files):
    assert files and files <= set(counts), (sorted(files), sorted(counts))
    for f in files:
        assert counts[f] == {"open": 1, "gunzip": 1, "parse": 1}, (f, dict(counts[f]))


@pytest.mark.parametrize("source", ["dataset", "path"])
def test_make_reads_each_pointnav_file_once(manifest, reads, source):
    m = load_manifest(manifest)
    split_file = m.episodes_path("train")
    episodes = "dataset" if source == "dataset" else str(split_file)
    with make(manifest, split="train", num_envs=2, resolution=(16, 16), episodes=episodes) as env:
        env.reset()
        assert sum(len(v) for v in env.world.episodes.episodes_by_scene.values()) > 0
    _assert_once(reads, _episode_files(split_file.parent))


def test_eval_reads_each_pointnav_file_once(manifest, reads, tmp_path):
    """``--eval`` counts the split's episodes (to size its batch) and then makes its envs: one
    read of each file serves both (``episodes_read_once``)."""
    from bps_train import train   # --eval random builds no policy: not one of scripts/test.sh's AVX2_FILES

    res = train.run(["--dataset", str(manifest), "--out-dir", str(tmp_path / "run"), "--eval", "random",
               "--eval-split", "val", "--eval-episodes", "2", "--resolution", "16", "--threads", "1"])
    assert res["episodes"] == 2
    _assert_once(reads, _episode_files(load_manifest(manifest).episodes_path("val").parent))


def test_make_reads_the_objectnav_file_once(objectnav_dataset, reads):
    out, eps = objectnav_dataset
    with make(out, split=None, task="objectnav", episodes=str(eps), num_envs=2, resolution=(16, 16)) as env:
        env.reset()
    _assert_once(reads, _episode_files(eps.parent))


def test_eval_reads_the_objectnav_file_once(objectnav_dataset, reads, tmp_path):
    """``--eval --eval-episodes-file`` counts the file's episodes (its env count) with the task's
    reader and then makes its envs: one read of each file serves both."""
    from bps_assets.pipeline.manifest import load_manifest as load
    from bps_train import train

    out, eps = objectnav_dataset
    split = load(out / "manifest.json").subsets[0]
    res = train.run(["--dataset", str(out / "manifest.json"), "--out-dir", str(tmp_path / "run"), "--task",
                     "objectnav", "--eval", "random", "--eval-split", split, "--eval-episodes-file", str(eps),
                     "--eval-episodes", "2", "--resolution", "16", "--threads", "1"])
    assert res["episodes"] == 2
    _assert_once(reads, _episode_files(eps.parent))
