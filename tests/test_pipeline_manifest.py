import json
import shutil

import pytest

from bps_assets.errors import ConfigError, CorruptFileError, FormatVersionError, OutputExistsError
from bps_assets.pipeline.manifest import load_manifest, merge_manifests
from bps_assets.pipeline.plan import Shard
from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess
from bps_assets.pipeline.verify import verify_manifest

from pipeline_fakes import FakeBackend, make_source
from test_pipeline_preprocess import TRAIN, VAL, validate_schema

OPTS = PreprocessOptions(workers=1, in_process=True, episodes=2)


def _shards(tmp_path, n=3, outs=None, backend=None):
    src = make_source(tmp_path / "src", TRAIN + VAL)
    paths = []
    for i in range(n):
        out = outs[i] if outs else tmp_path / "out"
        r = preprocess(src, out, "gibson", "tiny", OPTS, Shard(i, n), backend=backend or FakeBackend())
        paths.append(r.manifest_path)
    return src, paths


def test_merge_same_root(tmp_path):
    _, paths = _shards(tmp_path)
    m = merge_manifests(paths, tmp_path / "out" / "manifest.json")
    validate_schema(m.path)
    assert m.names() == sorted(TRAIN + VAL) and m.shard is None
    assert len(m.missing) == 35 - 7
    assert [x["shard"]["index"] for x in m.doc["merged_from"]] == [0, 1, 2]
    assert verify_manifest(m.path, deep=True).ok
    with pytest.raises(OutputExistsError):
        merge_manifests(paths, m.path)


def test_merge_rebases_paths_across_directories(tmp_path):
    outs = [tmp_path / f"node{i}" / "out" for i in range(2)]
    _, paths = _shards(tmp_path, 2, outs)
    with pytest.raises(ConfigError, match="must be in a directory containing every shard"):
        merge_manifests(paths, tmp_path / "all" / "manifest.json")
    m = merge_manifests(paths, tmp_path / "manifest.json")
    validate_schema(m.path)
    a = m.scenes()[0]
    assert a.scene.is_file() and m.doc["scenes"][a.name]["outputs"]["scene"]["path"].startswith("node")
    assert m.episodes_path("train").is_file() and m.doc["episodes"]["train"]["sha256"]
    assert verify_manifest(m.path).ok
    # moving the whole tree keeps relative paths valid
    moved = tmp_path.parent / (tmp_path.name + "_moved")
    shutil.move(str(tmp_path), str(moved))
    assert verify_manifest(moved / "manifest.json").ok


def test_merge_refuses_inconsistent_shards(tmp_path):
    _, paths = _shards(tmp_path)
    with pytest.raises(ConfigError, match=r"shard\(s\) \[2\] of 3 missing"):
        merge_manifests(paths[:2], tmp_path / "m.json")
    assert merge_manifests(paths[:2], tmp_path / "m.json", allow_partial=True).names()
    with pytest.raises(ConfigError, match=r"given twice"):
        merge_manifests([paths[0], paths[0], paths[1]], tmp_path / "m2.json")
    # a shard made with other settings
    src = tmp_path / "src"
    other = preprocess(src, tmp_path / "other", "gibson", "tiny", OPTS, Shard(2, 3),
                       backend=FakeBackend(knob=9)).manifest_path
    with pytest.raises(ConfigError, match="settings_fingerprint .* differs"):
        merge_manifests([paths[0], paths[1], other], tmp_path / "m3.json")
    # another tool version
    doc = json.loads(paths[2].read_text())
    doc["tool"]["version"] = "0.0.1"
    bad = tmp_path / "v.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match="made by bps 0.0.1"):
        merge_manifests([paths[0], paths[1], bad], tmp_path / "m4.json")


def test_load_rejects_bad_manifests(tmp_path):
    _, paths = _shards(tmp_path, 1)
    good = json.loads(paths[0].read_text())

    def write(doc):
        p = tmp_path / "bad.json"
        p.write_text(json.dumps(doc))
        return p

    with pytest.raises(FormatVersionError, match="version 2 is not supported"):
        load_manifest(write({**good, "format_version": 2}))
    esc = json.loads(json.dumps(good))
    next(iter(esc["scenes"].values()))["outputs"]["scene"]["path"] = "../../etc/passwd"
    with pytest.raises(CorruptFileError, match="must be relative and stay inside"):
        load_manifest(write(esc))
    (tmp_path / "trunc.json").write_text(paths[0].read_text()[:-20])
    with pytest.raises(CorruptFileError, match="invalid JSON"):
        load_manifest(tmp_path / "trunc.json")
    with pytest.raises(CorruptFileError, match="'format'"):
        load_manifest(write({"hello": 1}))


def test_content_sha256_survives_an_unchanged_rerun_and_names_the_outputs(tmp_path):
    """A rerun that changes nothing rewrites the manifest (its `created`) but not its content's
    sha256 (the dataset identity a resumed bps-train checks); another output's sha256 changes it."""
    import copy
    import time

    from bps_assets.pipeline.manifest import content_sha256

    src = make_source(tmp_path / "src", TRAIN)
    first = preprocess(src, tmp_path / "out", "gibson", "tiny", OPTS, backend=FakeBackend()).manifest_path
    doc = json.loads(first.read_text())
    time.sleep(1.1)   # `created` has whole seconds
    again = preprocess(src, tmp_path / "out", "gibson", "tiny", OPTS, backend=FakeBackend()).manifest_path
    doc2 = json.loads(again.read_text())
    assert doc2["created"] != doc["created"] and content_sha256(doc2) == content_sha256(doc)
    other = copy.deepcopy(doc)
    name = next(iter(other["scenes"]))
    other["scenes"][name]["outputs"]["navmesh"]["sha256"] = "0" * 64
    assert content_sha256(other) != content_sha256(doc)
    other = copy.deepcopy(doc)
    other["scenes"][name]["subset"] = "val"
    assert content_sha256(other) != content_sha256(doc)
