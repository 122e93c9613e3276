"""``verify --deep`` reads each section of a packed scene once: the textures once per scene
whatever its LOD levels, and a composed scene as its file stores it (stage, instance table, the
asset files it names), each asset's sections checked once however many scenes list it."""
from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import pytest

from bps_assets import synth
from bps_assets.container import Container
from bps_assets.errors import CorruptFileError, InputError
from bps_assets.packed_scene import ConvertOptions, convert_file
from bps_assets.pipeline.verify import _deep_check_packed, verify_manifest
from bps_assets.scene_dataset.packing import read_composed

from hostile_cases import rewrite
from test_composed_scenes import _crate_room, _tiny_composed


@pytest.fixture
def reads(monkeypatch):
    """Counter of (file name, section) over every decode while the test runs: Container.read
    and Container.verify_section (a section read and then verified again counts twice)."""
    seen = collections.Counter()

    def counting(real):
        def counted(self, name, *a, **kw):
            seen[(Path(self.path).name, name)] += 1
            return real(self, name, *a, **kw)
        return counted

    monkeypatch.setattr(Container, "read", counting(Container.read))
    monkeypatch.setattr(Container, "verify_section", counting(Container.verify_section))
    return seen


def _header(path) -> dict:
    with Container(path, "SCEN") as c:
        return c.header


def test_a_scene_with_lod_levels_is_read_once(tmp_path, reads):
    info = synth.generate(tmp_path / "src", layout="gibson", scenes=1)[0]
    dst = tmp_path / "lod.bps"
    convert_file(info.path, dst, ConvertOptions(dataset="gibson", lod=(0.01, 0.05)))
    hdr = _header(dst)
    assert len(hdr["lods"]["levels"]) == 2 and hdr["counts"]["textures"] > 0
    reads.clear()
    _deep_check_packed(dst, "SCEN", hdr)
    assert reads[("lod.bps", "tex_blocks")] == 1
    assert reads[("lod.bps", "lod1.indices")] == 1
    assert max(reads.values()) == 1, [k for k, n in reads.items() if n > 1]


def test_a_composed_scene_is_checked_through_its_instances(tmp_path, reads, monkeypatch):
    from bps_assets import composed_section

    def no_flattening(*a, **kw):
        raise AssertionError("verify flattened the composed scene")

    dst = _tiny_composed(tmp_path)
    monkeypatch.setattr(composed_section, "expand", no_flattening)
    reads.clear()
    _deep_check_packed(dst, "SCEN", _header(dst))
    assert reads[("s.bps", "instance_transform")] == 1
    assert not [k for k in reads if k[0] != "s.bps"], reads   # no asset section read for the scene
    # what the table promises is still checked: a bad asset index, a missing asset file
    with Container(dst, "SCEN") as c:
        asset = np.array(c.read("instance_asset"))
    asset[0] = 7
    bad = rewrite(dst, tmp_path / "out" / "scenes" / "bad.bps", {"instance_asset": asset})
    with pytest.raises(CorruptFileError, match="instance_asset"):
        _deep_check_packed(bad, "SCEN", _header(bad))
    _, table, paths = read_composed(dst)
    paths[int(table.asset[0])].unlink()
    with pytest.raises(InputError, match="no such file"):
        _deep_check_packed(dst, "SCEN", _header(dst))


def test_manifest_deep_verify_reads_each_asset_once(tmp_path, reads):
    """Scenes s and t both list the crate asset: it is decoded once; a damaged asset is a
    problem of both scenes."""
    import json

    from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess

    src = tmp_path / "src"
    cfg = _crate_room(src, [{"template_name": "crate", "translation": [1, 0, 1]},
                            {"template_name": "crate", "translation": [-1, 0, 1]}])
    (src / "scenes" / "t.scene_instance.json").write_text(json.dumps({
        "stage_instance": {"template_name": "room"},
        "object_instances": [{"template_name": "crate", "translation": [0, 0, -1]}]}))
    out = tmp_path / "out"
    assert preprocess(src, out, str(cfg), options=PreprocessOptions(in_process=True)).ok
    assets = [p.name for p in (out / "assets").iterdir()]
    assert len(assets) == 1
    doc = json.loads((out / "manifest.json").read_text())
    assert [sorted(r["path"] for r in doc["scenes"][s]["outputs"].values() if r["path"].startswith("assets/"))
            for s in ("s", "t")] == [["assets/" + assets[0]]] * 2
    reads.clear()
    rep = verify_manifest(out / "manifest.json", deep=True, jobs=1)
    assert rep.ok, rep.to_json()
    assert reads[(assets[0], "positions_q")] == 1 and reads[("s.bps", "positions_q")] == 1
    assert reads[("t.bps", "positions_q")] == 1
    # (navmeshes are loaded again by the scene-fit check, deep or not: scene files only here)
    twice = [k for k, n in reads.items() if n > 1 and not k[0].endswith(".navmesh.bps")]
    assert not twice, twice
    assert rep.bytes == sum(p.stat().st_size for p in out.rglob("*.bps"))   # each file counted once
    asset = out / "assets" / assets[0]
    data = bytearray(asset.read_bytes())
    data[-1] ^= 0xFF
    asset.write_bytes(bytes(data))
    rep = verify_manifest(out / "manifest.json", deep=True, jobs=1)
    bad = {s["name"]: s["problems"] for s in rep.to_json()["scenes"]}
    assert all(any(assets[0] in p for p in bad[s]) for s in ("s", "t")), bad


def _oversized_composed(tmp_path) -> Path:
    """A composed scene whose flattening exceeds 2^31 triangles: 2^17 instances (the cap) of an
    18,050-triangle asset. Only the table is built (16 MiB of transforms), never the flat scene."""
    from bps_assets.composed_section import MAX_INSTANCES
    from bps_assets.scene_dataset import habitat as H
    from bps_assets.scene_dataset.packing import pack_scene
    from readers_gltf_builder import GltfBuilder, grid_mesh

    cfg = _crate_room(tmp_path / "src", [{"template_name": "crate", "translation": [1, 0, 1]}])
    b = GltfBuilder()
    b.scene([b.node(mesh=b.mesh(b.primitive(*grid_mesh(95))))])
    b.write_glb(tmp_path / "src" / "objects" / "crate.glb")
    (tmp_path / "out" / "scenes").mkdir(parents=True)
    dst = tmp_path / "out" / "scenes" / "s.bps"
    pack_scene(H.read_scene_instance(H.read_dataset_config(cfg), "s"), dst, tmp_path / "out" / "assets")
    _, table, paths = read_composed(dst)
    assert _header(paths[int(table.asset[0])])["counts"]["triangles"] * MAX_INSTANCES >= 2**31
    n = MAX_INSTANCES
    with Container(dst, "SCEN") as c:
        arrays = {k: np.repeat(c.read(k)[:1], n, axis=0) for k in c.sections if k.startswith("instance_")}
        comp = dict(c.header["composed"])
    arrays["instance_group"] = np.arange(n, dtype=np.int32)
    comp.update(instances=n, names=comp["names"][:1] * n, kinds=comp["kinds"][:1] * n)
    return rewrite(dst, dst.with_name("big.bps"), arrays, header={"composed": comp})


def test_deep_verify_refuses_a_composed_scene_too_big_to_flatten(tmp_path):
    """The runtime flattens composed scenes for some renderers: a scene whose flattening
    exceeds 2^31 triangles fails ``verify --deep`` with the reader's own error."""
    from bps_assets.packed_scene import read_packed_scene

    dst = _oversized_composed(tmp_path)
    with pytest.raises(CorruptFileError) as reader:
        read_packed_scene(dst, ["positions", "indices"])
    assert "exceeds 2^31" in str(reader.value)
    with pytest.raises(CorruptFileError) as verify:
        _deep_check_packed(dst, "SCEN", _header(dst))
    assert str(verify.value) == str(reader.value)
    from bps_assets.composed_section import check_expanded_totals
    with pytest.raises(CorruptFileError, match="2\\^31 materials"):   # material ids are int32 too
        check_expanded_totals(dst, 0, 0, 2**31)
    check_expanded_totals(dst, 2**31 - 1, 2**31 - 1, 2**31 - 1)
