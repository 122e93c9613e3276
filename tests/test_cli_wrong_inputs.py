"""Inputs a command must refuse rather than act on (journey f items 6, 8): ``navmesh`` given a
packed navmesh (it wrote ``X.navmesh.navmesh.bps``), ``manifest merge`` whose ``-o`` is one of
the shards it reads (``--overwrite`` replaced the shard)."""
import os

from click.testing import CliRunner

from bps_assets.pipeline.plan import Shard
from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess
from cli.main import main

from pipeline_fakes import FakeBackend, make_source


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_navmesh_refuses_a_packed_navmesh_naming_it(synth_pair, tmp_path):
    r = run("navmesh", synth_pair / "gibson" / "Allensville.glb", "-o", tmp_path, "--dataset", "gibson")
    assert r.exit_code == 0, r.output
    packed = tmp_path / "Allensville.navmesh.bps"
    before = packed.read_bytes()
    r = run("navmesh", packed, "-o", tmp_path)
    assert r.exit_code == 2, r.output
    assert f"error: {packed}: already a packed navmesh" in r.output and "nav info" in r.output, r.output
    assert sorted(os.listdir(tmp_path)) == ["Allensville.navmesh.bps"] and packed.read_bytes() == before
    r = run("navmesh", packed, "-o", tmp_path / "o", "--overwrite")   # another folder: refused all the same
    assert r.exit_code == 2 and not any((tmp_path / "o").glob("*")), r.output


def test_manifest_merge_refuses_to_write_over_one_of_its_shards(tmp_path):
    src = make_source(tmp_path / "src", ["Allensville", "Beechwood"])
    for i in range(2):
        preprocess(src, tmp_path / "out", "gibson", "tiny", PreprocessOptions(workers=1, in_process=True), Shard(i, 2),
                   backend=FakeBackend())
    shards = sorted((tmp_path / "out").glob("manifest.shard-*.json"))
    before = shards[0].read_bytes()
    os.symlink(shards[0], tmp_path / "out" / "link.json")
    for out in (shards[0], tmp_path / "out" / "link.json", tmp_path / "out" / ".." / "out" / shards[0].name):
        r = run("manifest", "merge", *shards, "-o", out, "--overwrite")
        assert r.exit_code == 2, r.output
        assert f"error: {out}: is one of the manifests to merge" in r.output, r.output
        assert shards[0].read_bytes() == before
    r = run("manifest", "merge", *shards, "-o", tmp_path / "out" / "manifest.json")
    assert r.exit_code == 0 and "2 ok scenes" in r.output, r.output
