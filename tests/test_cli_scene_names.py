"""``convert``, ``navmesh`` and ``episodes`` name a scene as ``preprocess`` does (habitat's rule,
``habitat_names.habitat_scene_name``: the file name up to its first dot), so an HM3D scan
``X.basis.glb`` becomes scene ``X`` in each and the three chain: convert -> X.bps, navmesh ->
X.navmesh.bps, episodes on X.navmesh.bps finds X.bps."""
from __future__ import annotations

import gzip
import json

from click.testing import CliRunner

from cli.main import main


def _cli(*args):
    r = CliRunner().invoke(main, [str(a) for a in args])
    assert r.exit_code == 0, r.output
    return r


def test_a_basis_glb_is_scene_x_in_convert_navmesh_and_episodes(tmp_path):
    src = tmp_path / "src"
    _cli("synth", src, "-n", 1, "--semantic")
    glb = next((src / "gibson").glob("*.glb"))
    name = glb.name.split(".")[0]
    glb = src / "gibson" / f"{name}.glb"   # not its semantic mesh NAME.semantic.glb
    scan = glb.rename(glb.with_name(f"{name}.basis.glb"))   # HM3D's naming; NAME.semantic.* stay beside
    conv, nav, eps = tmp_path / "conv", tmp_path / "nav", tmp_path / "eps"
    _cli("convert", scan, "-o", conv, "--up", "z")
    assert [p.name for p in conv.iterdir()] == [f"{name}.bps"]
    _cli("navmesh", scan, "-o", nav, "--up", "z", "--agent-radius", 0.18, "--agent-height", 0.88)
    assert [p.name for p in nav.iterdir()] == [f"{name}.navmesh.bps"]
    _cli("episodes", nav / f"{name}.navmesh.bps", "--task", "objectnav", "--scenes", conv, "-o", eps,
         "--split", "train", "--per-scene", 3, "--seed", 1)
    assert [p.name for p in (eps / "train" / "content").iterdir()] == [f"{name}.json.gz"]
    doc = json.loads(gzip.decompress((eps / "train" / "content" / f"{name}.json.gz").read_bytes()))
    assert doc["episodes"] and {e["scene_id"].split("/")[-1].split(".")[0] for e in doc["episodes"]} == {name}
