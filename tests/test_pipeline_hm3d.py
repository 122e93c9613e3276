"""HM3D v0.2: the manifest's layout and index-rule splits, discovery errors, preprocess /
verify on an HM3D-layout tree (KTX2 textures, shipped .basis.navmesh), habitat's own episode
files mapped onto the manifest, and habitat scene dataset configs as source descriptions."""
import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from bps_assets.errors import DatasetError, InputError
from bps_assets.pipeline.datasets import load_dataset, load_scene_dataset_config
from bps_assets.pipeline.discover import classify_files
from bps_assets.pipeline.habitat_episodes import map_habitat_episodes
from bps_assets.pipeline.manifest import load_manifest
from bps_assets.pipeline.plan import Shard, make_plan
from bps_assets.pipeline.scene_dataset_config import read_stages
from cli.main import main

import hm3d_tree
from test_pipeline_preprocess import validate_schema

needs_assets = pytest.mark.skipif(not (hm3d_tree.KTX2_DXT.exists() and hm3d_tree.NAVMESH.exists()),
                                  reason="../shared/assets absent")


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def _touch(root: Path, *rels):
    for r in rels:
        p = root / r
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"")


# ------------------------------------------------------------------------------ manifest
def test_hm3d_manifest_splits_and_axis():
    ds = load_dataset("hm3d")
    assert ds.up_axis == "y" and ds.default_split == "train"
    rules = {s: ds.split_rules(s) for s in ("train", "val", "minival", "test")}
    assert {s: {k: (r.folder, r.lo, r.hi) for k, r in v.items()} for s, v in rules.items()} == {
        "train": {"train": ("train", 0, 799)}, "val": {"val": ("val", 800, 899)},
        "minival": {"val": ("minival", 800, 809)}, "test": {"test": ("test", 900, 999)}}
    # the four ranges cover 0..999 once (minival is a part of val, in its own folder)
    covered = sorted(i for r in (rules["train"]["train"], rules["val"]["val"], rules["test"]["test"])
                     for i in range(r.lo, r.hi + 1))
    assert covered == list(range(1000))
    lay = ds.layout
    m = lay.pattern(lay.scene).match("hm3d/val/00800-TEEsavR23oF/TEEsavR23oF.basis.glb")
    assert m.groupdict() == {"split": "val", "index": "00800", "scene": "TEEsavR23oF"}
    assert lay.navmesh_path("TEEsavR23oF", "val", "00800") == \
        "hm3d/val/00800-TEEsavR23oF/TEEsavR23oF.basis.navmesh"
    assert lay.pattern(lay.scene).match("hm3d/val/0800-TEEsavR23oF/TEEsavR23oF.basis.glb") is None
    with pytest.raises(DatasetError, match="split folder and index"):
        lay.scene_path("TEEsavR23oF")
    assert ds.split("val") == {}  # ids are found in the tree, not listed


def test_layout_grammar_rejects_bad_rules(tmp_path, monkeypatch):
    good = json.loads(Path(load_dataset("hm3d").path).read_text())
    monkeypatch.setenv("BPS_DATA_MANIFESTS", str(tmp_path))
    cases = {
        "badrange": ("splits", {"val": {"val": {"folder": "val", "index": [900, 800]}}}, "lo <= hi"),
        "badfield": ("layout", dict(good["layout"], navmesh="hm3d/{split}/{house}.navmesh"), "fields"),
        "noindex": ("layout", dict(good["layout"], scene="hm3d/{split}/{scene}/{scene}.basis.glb",
                                   navmesh="hm3d/{split}/{scene}.navmesh", companions=[]), "needs {split} and {index}"),
        "mixed": ("splits", {"val": {"val": {"folder": "val", "index": [1, 2]}, "train": ["a"]}}, "mixes"),
    }
    for name, (key, value, msg) in cases.items():
        d = dict(good, name=name, default_split="val", **{key: value})
        if key == "layout":
            d["default_split"] = "val"
        (tmp_path / f"{name}.json").write_text(json.dumps(d))
        with pytest.raises(DatasetError, match=msg) as ei:
            load_dataset(name)
        assert f"{name}.json" in str(ei.value)


# ------------------------------------------------------------------------------ discovery
def test_plan_discovers_scans_by_folder_and_index(tmp_path):
    _touch(tmp_path,
           "hm3d/train/00000-kfPV7w3FaU5/kfPV7w3FaU5.basis.glb",
           "hm3d/val/00800-TEEsavR23oF/TEEsavR23oF.basis.glb",
           "hm3d/val/00800-TEEsavR23oF/TEEsavR23oF.basis.navmesh",
           "hm3d/val/00800-TEEsavR23oF/TEEsavR23oF.semantic.glb",
           "hm3d/val/00800-TEEsavR23oF/TEEsavR23oF.semantic.txt",
           "hm3d/val/00801-HaxA7YrQdEC/HaxA7YrQdEC.basis.glb",
           "hm3d/val/00801-HaxA7YrQdEC/HaxA7YrQdEC.glb",
           "hm3d/val/00850-wcojb4TFT35/wcojb4TFT35.basis.glb",
           "hm3d/minival/00800-TEEsavR23oF/TEEsavR23oF.basis.glb",
           "hm3d/hm3d_basis.scene_dataset_config.json", "hm3d/notes.txt")
    ds = load_dataset("hm3d")
    p = make_plan(tmp_path, ds, "val")
    assert [(s.name, s.subset) for s in p.scenes] == [
        ("HaxA7YrQdEC", "val"), ("TEEsavR23oF", "val"), ("wcojb4TFT35", "val")]
    by = {s.name: s for s in p.scenes}
    assert by["TEEsavR23oF"].rel_scene == "hm3d/val/00800-TEEsavR23oF/TEEsavR23oF.basis.glb"
    assert by["TEEsavR23oF"].rel_navmesh == "hm3d/val/00800-TEEsavR23oF/TEEsavR23oF.basis.navmesh"
    assert by["HaxA7YrQdEC"].navmesh is None and p.missing == []
    assert p.other_split == ["kfPV7w3FaU5"]  # TEEsavR23oF of minival is in val too: not "other"
    assert p.stray == ["hm3d/notes.txt"]  # habitat-sim's own scene dataset config is a companion
    mini = make_plan(tmp_path / "hm3d", ds, "minival")  # the hm3d/ folder itself works too
    assert [s.rel_scene for s in mini.scenes] == ["hm3d/minival/00800-TEEsavR23oF/TEEsavR23oF.basis.glb"]
    assert mini.other_split == ["HaxA7YrQdEC", "kfPV7w3FaU5", "wcojb4TFT35"]
    shards = [make_plan(tmp_path, ds, "val", Shard(i, 2)).selected for i in range(2)]
    assert sorted(shards[0] + shards[1]) == ["HaxA7YrQdEC", "TEEsavR23oF", "wcojb4TFT35"]
    assert make_plan(tmp_path, ds, "test").scenes == []


@pytest.mark.parametrize("rel, msg", [
    ("hm3d/val/TEEsavR23oF/TEEsavR23oF.basis.glb", "outside the layout"),      # no index
    ("hm3d/val/00800_TEEsavR23oF/TEEsavR23oF.basis.glb", "outside the layout"),
    ("hm3d/val/00950-TEEsavR23oF/TEEsavR23oF.basis.glb", "outside every split of folder 'val'"),
    ("hm3d/train/00800-TEEsavR23oF/TEEsavR23oF.basis.glb", "outside every split of folder 'train'"),
    ("hm3d/extra/00800-TEEsavR23oF/TEEsavR23oF.basis.glb", "no split of hm3d"),
    ("hm3d/00800-TEEsavR23oF/TEEsavR23oF.basis.glb", "outside the layout"),
])
def test_wrong_layout_is_an_error_naming_the_path(tmp_path, rel, msg):
    _touch(tmp_path, "hm3d/val/00801-HaxA7YrQdEC/HaxA7YrQdEC.basis.glb", rel)
    with pytest.raises(DatasetError, match=msg) as ei:
        make_plan(tmp_path, load_dataset("hm3d"), "val")
    assert str(tmp_path / rel) in str(ei.value)
    with pytest.raises(DatasetError):
        classify_files([rel], load_dataset("hm3d"))


def test_cli_verify_source_and_datasets(tmp_path):
    _touch(tmp_path, "hm3d/val/00800-TEEsavR23oF/TEEsavR23oF.basis.glb",
           "hm3d/val/TEEsavR23oF/TEEsavR23oF.basis.glb")
    r = run("verify", "--source", tmp_path, "--dataset", "hm3d", "--split", "val")
    assert r.exit_code != 0 and "TEEsavR23oF/TEEsavR23oF.basis.glb" in r.output
    assert "train (800/0/0), val (0/100/0), minival (0/10/0), test (0/0/100)" in run("datasets").output
    assert json.loads(run("datasets", "hm3d", "--split", "minival", "--json").output) == \
        {"val": "found in the tree: minival/ 00800-00809"}


def test_verify_source_knows_habitat_configs_and_reports_half_annotation_pairs(tmp_path):
    """habitat-sim's own scene dataset configs (where its download puts them) are part of the
    tree; a .semantic.txt without its .semantic.glb is reported (preprocess would drop it)."""
    _touch(tmp_path, "hm3d/val/00800-TEEsavR23oF/TEEsavR23oF.basis.glb",
           "hm3d/hm3d_annotated_basis.scene_dataset_config.json", "hm3d/hm3d_basis.scene_dataset_config.json",
           "hm3d/minival/hm3d_annotated_minival_basis.scene_dataset_config.json",
           "hm3d/minival/hm3d_minival_basis.scene_dataset_config.json",
           "hm3d/val/hm3d_annotated_basis.scene_dataset_config.json", "hm3d/val/notes.json")
    r = run("verify", "--source", tmp_path, "--dataset", "hm3d", "--split", "val", "--json")
    rep = json.loads(r.output)
    assert r.exit_code == 0 and rep["stray"] == ["hm3d/val/notes.json"] and rep["broken_semantics"] == []
    _touch(tmp_path, "hm3d/val/00800-TEEsavR23oF/TEEsavR23oF.semantic.txt")
    r = run("verify", "--source", tmp_path, "--dataset", "hm3d", "--split", "val")
    assert r.exit_code == 1 and "half annotation pair" in r.output
    assert "TEEsavR23oF.semantic.glb: missing" in r.output


# ------------------------------------------------------------------------------ end to end
@needs_assets
def test_preprocess_verify_hm3d_val(tmp_path):
    src, out = tmp_path / "scene_datasets", tmp_path / "out"
    facts = hm3d_tree.build_tree(src)
    r = run("preprocess", src, "-o", out, "--dataset", "hm3d", "--split", "val", "--episodes", "4",
            "--workers", "1", "--json")
    assert r.exit_code == 0, r.output
    m = load_manifest(out)
    validate_schema(m.path)
    assert m.dataset == "hm3d" and m.split == "val" and m.subsets == ["val"]
    assert m.names("val") == ["HaxA7YrQdEC", "TEEsavR23oF"]  # train's kfPV7w3FaU5 is not in val
    src_paths = {n: e["sources"]["scene"]["path"] for n, e in m.doc["scenes"].items()}
    assert src_paths["TEEsavR23oF"] == "hm3d/val/00800-TEEsavR23oF/TEEsavR23oF.basis.glb"
    tee, hax = m.scene("TEEsavR23oF"), m.scene("HaxA7YrQdEC")
    # TEE's .navmesh is van-gogh-room's, which does not fit the synth scan: built instead (issue 25)
    assert tee.stats["navmesh_source"] == "built" and hax.stats["navmesh_source"] == "built"
    assert "not imported (the navmesh does not fit the scene" in tee.stats["navmesh_note"]
    assert m.doc["scenes"]["TEEsavR23oF"]["sources"]["navmesh"]["path"].endswith("TEEsavR23oF.basis.navmesh")
    assert "navmesh" not in m.doc["scenes"]["HaxA7YrQdEC"]["sources"]
    for s in (tee, hax):
        assert s.stats["triangles"] > 0.9 * facts[s.name]["triangles"] and s.stats["texture_bytes"] > 0

    # the packed scene: Y-up source kept as it is; the KTX2 texture decoded to its pixels
    from bps_assets.packed_scene import decode_texture_level, read_packed_scene
    from bps_assets.readers.images import decode_image
    ps = read_packed_scene(tee.scene)
    assert ps.header["frame"]["up"] == "y"
    height = ps.header["bounds"]["max"][1] - ps.header["bounds"]["min"][1]
    assert 2.0 < height < 8.0  # storeys stand along +Y: not turned on their side
    ktx = decode_image(hm3d_tree.KTX2_DXT.read_bytes(), "ktx2", "ktx2")
    sizes = {tuple(int(x) for x in row[2:4]) for row in ps.tex_levels if row[1] == 0}
    assert (ktx.shape[1], ktx.shape[0]) in sizes  # the KTX2 image made it into the packed scene
    t = next(int(r[0]) for r in ps.tex_levels if r[1] == 0 and (int(r[2]), int(r[3])) == (ktx.shape[1], ktx.shape[0]))
    got = decode_texture_level(ps, t).astype(int)
    assert np.abs(got[..., :3] - ktx[..., :3].astype(int)).mean() < 12

    # episodes name the scan as habitat-lab does
    with gzip.open(tee.episodes) as f:
        eps = json.load(f)["episodes"]
    assert len(eps) == 4
    assert {e["scene_id"] for e in eps} == {"hm3d/val/00800-TEEsavR23oF/TEEsavR23oF.basis.glb"}

    assert run("verify", out / "manifest.json", "--deep").exit_code == 0

    # habitat's own pointnav_hm3d_v1 files (content per scene, habitat's naming) map onto it
    hab = tmp_path / "pointnav_hm3d_v1" / "val"
    (hab / "content").mkdir(parents=True)
    with gzip.open(hab / "val.json.gz", "wt") as f:
        json.dump({"episodes": []}, f)
    for sid, idx in (("TEEsavR23oF", "00800"), ("HaxA7YrQdEC", "00801")):
        hep = [dict(e, episode_id=str(i), scene_id=f"hm3d/val/{idx}-{sid}/{sid}.basis.glb")
               for i, e in enumerate(eps[:2 if sid == "TEEsavR23oF" else 3])]
        hep[0]["scene_id"] = "data/scene_datasets/" + hep[0]["scene_id"]
        with gzip.open(hab / "content" / f"{sid}.json.gz", "wt") as f:
            json.dump({"episodes": hep}, f)
    mapped = map_habitat_episodes(hab / "val.json.gz", out / "manifest.json")
    assert {k: len(v) for k, v in mapped.by_scene.items()} == {"TEEsavR23oF": 2, "HaxA7YrQdEC": 3}
    assert mapped.count == 5 and not mapped.unmatched
    # ... and the runtime runs them: make(episodes=habitat's file) over the HM3D manifest
    import torch
    from bps_runtime import make

    with make(out / "manifest.json", split="val", num_envs=4, episodes=hab / "val.json.gz",
              resolution=(16, 16), seed=0) as env:
        env.reset()
        seen = set()
        for _ in range(3):
            _, _, _, info = env.step(torch.zeros(4, dtype=torch.long))  # STOP: every episode ends
            seen |= set(info["episode"]["episode_id"]) | set(info["scene_id"])
    assert {"TEEsavR23oF", "HaxA7YrQdEC"} <= seen
    assert seen - {"TEEsavR23oF", "HaxA7YrQdEC", ""} <= {"0", "1", "2"}  # habitat's episode ids
    # a scene the manifest lacks: an error naming it, or counted when allowed
    with gzip.open(hab / "content" / "kfPV7w3FaU5.json.gz", "wt") as f:
        json.dump({"episodes": [dict(eps[0], scene_id="hm3d/train/00000-kfPV7w3FaU5/kfPV7w3FaU5.basis.glb")]}, f)
    with pytest.raises(InputError, match="kfPV7w3FaU5"):
        map_habitat_episodes(hab, m)
    mapped = map_habitat_episodes(hab, m, allow_unmatched=True)
    assert mapped.unmatched == {"hm3d/train/00000-kfPV7w3FaU5/kfPV7w3FaU5.basis.glb": 1}
    assert map_habitat_episodes(hab, m, subset="train", allow_unmatched=True).count == 0


# ------------------------------------------------------------------------------ scene dataset config
def _config(root: Path, stages: dict, **extra) -> Path:
    p = root / "hm3d" / "hm3d_basis.scene_dataset_config.json"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps({"stages": stages, **extra}))
    return p


def test_scene_dataset_config_reads_stages_and_navmeshes(tmp_path):
    _touch(tmp_path, "hm3d/val/00800-TEEsavR23oF/TEEsavR23oF.basis.glb",
           "hm3d/val/00800-TEEsavR23oF/TEEsavR23oF.basis.navmesh",
           "hm3d/val/00801-HaxA7YrQdEC/HaxA7YrQdEC.basis.glb",
           "hm3d/val/00801-HaxA7YrQdEC/HaxA7YrQdEC.semantic.glb",
           "hm3d/other/apt.glb", "hm3d/navs/apt_custom.navmesh",
           "hm3d/configs/stages/apt2.stage_config.json")
    (tmp_path / "hm3d/configs/stages/apt2.stage_config.json").write_text(
        json.dumps({"render_asset": "../../other/apt2.glb", "up": [0, 1, 0]}))
    _touch(tmp_path, "hm3d/other/apt2.glb")
    cfg = _config(tmp_path, {"default_attributes": {"up": [0, 1, 0], "front": [0, 0, -1]},
                             "paths": {".glb": ["val/*/*.basis.glb", "other/apt.glb"],
                                       ".json": ["configs/stages"]}},
                  navmesh_instances={"apt": "navs/apt_custom.navmesh"})
    files, up = read_stages(cfg)
    assert up == "y"
    assert files == {
        "HaxA7YrQdEC": ("val/00801-HaxA7YrQdEC/HaxA7YrQdEC.basis.glb",
                        "val/00801-HaxA7YrQdEC/HaxA7YrQdEC.basis.navmesh"),
        "TEEsavR23oF": ("val/00800-TEEsavR23oF/TEEsavR23oF.basis.glb",
                        "val/00800-TEEsavR23oF/TEEsavR23oF.basis.navmesh"),
        "apt": ("other/apt.glb", "navs/apt_custom.navmesh"),
        "apt2": ("other/apt2.glb", "other/apt2.navmesh")}
    ds = load_dataset(str(cfg))  # a config path is a dataset
    plan = make_plan(cfg.parent, ds)
    assert [s.name for s in plan.scenes] == ["HaxA7YrQdEC", "TEEsavR23oF", "apt", "apt2"]
    nav = {s.name: s.rel_navmesh for s in plan.scenes}
    assert nav["TEEsavR23oF"].endswith(".basis.navmesh") and nav["HaxA7YrQdEC"] is None  # absent
    zup = _config(tmp_path, {"default_attributes": {"up": [0, 0, 1]}, "paths": {".glb": ["other/*.glb"]}})
    assert load_scene_dataset_config(zup).up_axis == "z"


def test_a_non_finite_up_vector_is_a_dataset_error_through_the_cli(tmp_path):
    """``"up": [0, 1e999, 0]`` parses as infinity: a typed error naming the stage config and
    the field, a non-zero exit, no traceback (it was an OverflowError)."""
    _touch(tmp_path, "hm3d/other/x.glb")
    stage = tmp_path / "hm3d" / "stages" / "x.stage_config.json"
    stage.parent.mkdir(parents=True)
    stage.write_text('{"render_asset": "../other/x.glb", "up": [0, 1e999, 0]}')
    cfg = _config(tmp_path, {"paths": {".json": ["stages"]}})
    r = run("preprocess", cfg.parent, "-o", tmp_path / "out", "--dataset", cfg)
    assert r.exit_code != 0
    assert str(stage) in r.output and "up [0, inf, 0]" in r.output, r.output
    assert "Traceback" not in r.output and not (tmp_path / "out" / "manifest.json").exists()


@pytest.mark.parametrize("stages, msg", [
    ({"paths": {".glb": ["nothing/*.glb"]}}, "matched nothing"),
    ({"paths": {".glb": ["../outside/*.glb"]}}, "outside the config's folder"),
    ({"paths": {".glb": "val/*.glb"}}, "must be a list"),
    ({"default_attributes": {"up": [1, 0, 0]}, "paths": {".glb": ["a/*.glb"]}}, "up"),
    ({"paths": {".glb": ["a/*.glb", "b/*.glb"]}}, "two stages named 'x'"),
])
def test_scene_dataset_config_errors(tmp_path, stages, msg):
    _touch(tmp_path, "outside/o.glb", "hm3d/a/x.glb", "hm3d/b/x.glb")
    cfg = _config(tmp_path, stages)
    with pytest.raises(DatasetError, match=msg) as ei:
        read_stages(cfg)
    assert str(cfg) in str(ei.value)


def test_scene_dataset_config_files_share_one_cap_and_keep_their_errors(tmp_path, monkeypatch):
    """Both readers of a scene dataset config read through scene_dataset.config_json (one cap,
    one suffix table); read_stages keeps its DatasetErrors for a file it cannot read, and both
    refuse a file over the cap with the same ResourceLimitError."""
    from bps_assets.errors import ResourceLimitError
    from bps_assets.scene_dataset import config_json, habitat

    _touch(tmp_path, "hm3d/a/x.glb")
    cfg = _config(tmp_path, {"paths": {".glb": ["a/*.glb"]}})
    with pytest.raises(DatasetError, match="no such file"):
        read_stages(cfg.with_name("absent.scene_dataset_config.json"))
    bom = _config(tmp_path / "bom", {"paths": {".glb": ["a/*.glb"]}})
    bom.write_bytes(b"\xef\xbb\xbf" + bom.read_bytes())
    with pytest.raises(DatasetError, match="not a readable JSON file"):
        read_stages(bom)
    monkeypatch.setattr(config_json, "MAX_CONFIG_BYTES", 16)
    # over the cap: the capped reader's own error, naming the file and the cap (before: a
    # DatasetError whose text was rebuilt by hand from the cap)
    with pytest.raises(ResourceLimitError, match="more than 16 bytes of scene dataset JSON") as ei:
        read_stages(cfg)
    assert ei.value.path == str(cfg)
    with pytest.raises(ResourceLimitError, match="scene dataset JSON"):
        habitat.read_dataset_config(cfg)


@needs_assets
def test_preprocess_from_scene_dataset_config(tmp_path):
    src, out = tmp_path / "scene_datasets", tmp_path / "out"
    hm3d_tree.build_tree(src, hm3d_tree.SCANS[1:2])
    cfg = _config(src, {"paths": {".glb": ["val/*/*.basis.glb"]}})
    assert run("preprocess", cfg, "-o", out, "--dataset", "hm3d").exit_code != 0  # config names it
    r = run("preprocess", cfg, "-o", out, "--workers", "1", "--episodes", "2")
    assert r.exit_code == 0, r.output
    m = load_manifest(out)
    assert m.dataset == str(cfg) and m.names("train") == ["TEEsavR23oF"]
    # the .navmesh beside the stage is found (van-gogh-room's: it does not fit, so built instead)
    assert m.doc["scenes"]["TEEsavR23oF"]["sources"]["navmesh"]["path"].endswith("TEEsavR23oF.basis.navmesh")
    assert "does not fit the scene" in m.scene("TEEsavR23oF").stats["navmesh_note"]
    with gzip.open(m.scene("TEEsavR23oF").episodes) as f:
        assert {e["scene_id"] for e in json.load(f)["episodes"]} == \
            {"val/00800-TEEsavR23oF/TEEsavR23oF.basis.glb"}


@pytest.mark.parametrize("ktx", ["2d_etc1s.ktx2", "2d_uastc.ktx2"])
def test_basis_universal_textures_in_an_hm3d_scan(tmp_path, ktx):
    """HM3D's .basis.glb textures are Basis Universal (ETC1S or UASTC) KTX2 images."""
    pytest.importorskip("opengl_basisu")
    path = hm3d_tree.SHARED / "gltf-transform" / "extensions" / ktx
    if not path.exists():
        pytest.skip("shared assets absent")
    from bps_assets.packed_scene import ConvertOptions, convert_file, read_packed_scene
    from bps_assets.readers import load
    from bps_assets.readers.images import decode_image

    glb = tmp_path / "hm3d/val/00800-TEEsavR23oF/TEEsavR23oF.basis.glb"
    hm3d_tree.write_scan(glb, "Collierville", ktx2=path)
    want = decode_image(path.read_bytes(), str(path), ktx)
    doc = load(glb)
    assert np.array_equal(doc.textures[0].rgba, want)
    convert_file(glb, tmp_path / "s.bps", ConvertOptions(dataset="generic", up="y"))
    ps = read_packed_scene(tmp_path / "s.bps")
    sizes = {(int(r[2]), int(r[3])) for r in ps.tex_levels if r[1] == 0}
    # the 40 px KTX2 image is stored at a power of two near it; synth's own are 256 / 512 px
    assert any(w == h and w / 2 <= want.shape[0] <= w * 2 and w < 256 for w, h in sizes), sizes


def _episode(eid, scene_id):
    return {"episode_id": eid, "scene_id": scene_id, "start_position": [0.0, 0.0, 0.0],
            "start_rotation": [0.0, 0.0, 0.0, 1.0], "goals": [{"position": [1.0, 0.0, 1.0], "radius": 0.2}],
            "info": {"geodesic_distance": 1.5}}


def test_habitat_episodes_map_by_path_then_by_scene_name(tmp_path):
    """Episodes naming hm3d/val/... map onto a manifest made from minival/ by the scan id;
    habitat's content_scenes_path is honoured."""
    from bps_assets.pipeline.manifest import Manifest

    scenes = {sid: {"subset": "val", "status": "ok", "outputs": {},
                    "sources": {"scene": {"path": f"hm3d/minival/{i}-{sid}/{sid}.basis.glb"}}}
              for sid, i in (("TEEsavR23oF", "00800"), ("wcojb4TFT35", "00802"))}
    m = Manifest({"dataset": "hm3d", "split": "minival", "scenes": scenes}, tmp_path / "manifest.json")
    hab = tmp_path / "pointnav_hm3d_v1" / "val"
    (hab / "eps").mkdir(parents=True)
    (hab / "val.json").write_text(json.dumps({"episodes": [],
                                              "content_scenes_path": "{data_path}/eps/{scene}.json"}))
    (hab / "eps" / "TEEsavR23oF.json").write_text(json.dumps({"episodes": [
        _episode("0", "hm3d/val/00800-TEEsavR23oF/TEEsavR23oF.basis.glb"),
        _episode("1", "hm3d/minival/00800-TEEsavR23oF/TEEsavR23oF.basis.glb")]}))
    (hab / "eps" / "wcojb4TFT35.json").write_text(json.dumps({"episodes": [
        _episode("7", "./hm3d/val/00802-wcojb4TFT35/wcojb4TFT35.basis.glb")]}))
    got = map_habitat_episodes(hab / "val.json", m)
    assert {k: [e["episode_id"] for e in v] for k, v in got.by_scene.items()} == \
        {"TEEsavR23oF": ["0", "1"], "wcojb4TFT35": ["7"]}
    with pytest.raises(InputError, match="not a scene of"):
        map_habitat_episodes(hab / "val.json", m, subset="train")
