"""Semantic annotations end to end on generated data: synth scans annotated in the HM3D and MP3D
formats convert into packed scenes whose object tables match synth's ground truth, whose
``tri_object`` matches the annotation per triangle, and whose semantic section round-trips;
hostile annotation files and damaged sections are typed errors with nothing written."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from bps_assets import synth
from bps_assets.errors import AnnotationError, CorruptFileError, InputError
from bps_assets.packed_scene import ConvertOptions, convert_file, read_packed_scene
from bps_assets.readers.semantic_files import SemanticSource, find_semantic, read_annotation
from bps_assets.synth import semantic as ssem
from hostile_cases import bad_annotations, rewrite, semantic_scene, warned_annotations
from semantic_fixtures import annotation_mesh, synth_semantic_scene


def _convert_synth(tmp: Path, layout: str, colours: str = "texture"):
    out, info, truth = synth_semantic_scene(tmp, layout, colours)
    return info, truth, out, read_packed_scene(out)


@pytest.mark.parametrize("layout,colours", [("mp3d", ""), ("gibson", "texture"), ("gibson", "vertex")])
def test_synth_object_counts_match_ground_truth(tmp_path, layout, colours):
    info, truth, out, ps = _convert_synth(tmp_path, layout, colours)
    table = ps.semantics
    got = Counter(table.category_name(i) for i in range(len(table)))
    assert dict(got) == truth["categories"] and len(table) == truth["objects"]
    assert {"chair", "bed", "plant", "toilet", "tv_monitor"} <= set(got)  # ObjectNav goals occur
    assert ps.header["semantics"]["transfer"]["probe_misses"] == 0
    # every triangle's id is the annotation's: match packed triangles to source ones by centroid
    from scipy.spatial import cKDTree
    pos, idx, tri_obj = annotation_mesh(out, layout, info.name)
    _, near = cKDTree(pos[idx].mean(1)).query(ps.positions[ps.indices.astype(np.int64)].mean(1))
    agree = float((tri_obj[near] == ps.tri_object).mean())
    assert agree >= 0.999, agree
    # boxes of objects contain their surface samples; the object table's ids are the file's
    pts = table.points
    assert np.all(pts >= table.aabb[:, None, :3] - 1e-5) and np.all(pts <= table.aabb[:, None, 3:] + 1e-5)
    # habitat's id is ours in both formats (MP3D: the .house object index, no longer index + 1)
    assert np.array_equal(table.source_ids, table.ids)


def test_semantic_section_round_trips(tmp_path):
    from bps_assets.transforms import semantic as t_semantic

    info, truth, out, ps = _convert_synth(tmp_path, "mp3d")
    ann = read_annotation(find_semantic(info.path))
    m = np.asarray(ps.header["frame"]["matrix"])
    ann.positions = (ann.positions @ m[:3, :3].T + m[:3, 3]).astype(np.float32)
    tri, table, _ = t_semantic.transfer(ann, ps.positions, ps.indices)
    assert np.array_equal(tri, ps.tri_object)
    back = ps.semantics
    for f in ("ids", "category", "region", "aabb", "source_ids"):
        assert np.array_equal(getattr(back, f), getattr(table, f)), f
    assert np.array_equal(back.points, table.points, equal_nan=True)
    assert back.raw_names == table.raw_names and back.categories == table.categories
    t = ps.to_torch()
    assert str(t["tri_object"].dtype) == "torch.int32" and t["tri_object"].shape[0] == ps.indices.shape[0]
    only = read_packed_scene(out, sections=["positions", "indices", "tri_object"])
    assert only.tri_object is not None and only.semantics is None
    # a scan without annotation files: no section, still a complete scene
    plain = convert_file(info.path, tmp_path / "plain.bps", ConvertOptions(dataset="mp3d"), semantic=None)
    pp = read_packed_scene(plain.output)
    assert pp.tri_object is None and pp.semantics is None and "semantics" not in pp.header


def test_hostile_annotations_are_typed_and_write_nothing(tmp_path):
    cases = bad_annotations(tmp_path / "bad")
    assert len(cases) >= 14
    for name, (fmt, mesh, table) in cases.items():
        with pytest.raises(InputError) as e:
            read_annotation(SemanticSource(fmt, str(mesh), str(table)))
        assert str(mesh) in str(e.value) or str(table) in str(e.value), name
        assert "\n" not in str(e.value), name
        if name.startswith(("txt", "house")):
            assert isinstance(e.value, AnnotationError), name
        dst = tmp_path / "out.bps"
        with pytest.raises(InputError):
            convert_file(mesh.parent / "grid.glb", dst, ConvertOptions(dataset="generic"))
        assert not dst.exists() and not list(tmp_path.glob(".out.bps.*")), name


def test_half_a_pair_is_an_error(tmp_path):
    from hostile_cases import annotated_grid

    a = annotated_grid(tmp_path)
    (tmp_path / "hm3d" / "grid.semantic.glb").unlink()       # the table without its mesh: an error
    with pytest.raises(AnnotationError, match="grid.semantic.glb"):
        find_semantic(a["hm3d"])
    (tmp_path / "mp3d" / "grid.house").unlink()   # a mesh without its table (Gibson's _semantic.ply)
    assert find_semantic(a["mp3d"]) is None
    assert find_semantic(tmp_path / "nowhere" / "x.glb") is None


def test_counted_warnings(tmp_path):
    for name, (fmt, mesh, table, key) in warned_annotations(tmp_path).items():
        ann = read_annotation(SemanticSource(fmt, str(mesh), str(table)))
        assert ann.warnings.get(key, 0) > 0, (name, ann.warnings)
        res = convert_file(mesh.parent / "grid.glb", mesh.parent / "o.bps", ConvertOptions(dataset="generic"))
        assert res.stats[f"semantic_annotation_{key}"] > 0
        hdr = read_packed_scene(res.output, sections=["tri_object"]).header
        assert hdr["semantics"]["source"]["warnings"][key] > 0


def test_damaged_semantic_section_is_corrupt(tmp_path):
    scene = semantic_scene(tmp_path)
    ps = read_packed_scene(scene)
    assert len(ps.semantics) == 4
    hdr = ps.header["semantics"]
    t = ps.tri_object.copy()
    t[0] = 77
    bad = {
        "tri_object id not in table": ({"tri_object": t}, None),
        "negative id": ({"tri_object": -np.abs(ps.tri_object)}, None),
        "category out of range": ({"object_category": ps.object_category + 100}, None),
        "ids not increasing": ({"object_ids": ps.object_ids[::-1].copy()}, None),
        "box min > max": ({"object_aabb": ps.object_aabb[:, [3, 4, 5, 0, 1, 2]].copy()}, None),
        "objects > triangles": (None, {"semantics": {**hdr, "objects": 2**40}}),
        "raw_names count": (None, {"semantics": {**hdr, "raw_names": hdr["raw_names"][:1]}}),
        "rows differ from header": (None, {"semantics": {**hdr, "objects": 3, "raw_names": hdr["raw_names"][:3]}}),
        "section without header": (None, {"semantics": None}),
    }
    for name, (arrays, header) in bad.items():
        p = rewrite(scene, tmp_path / f"{name.replace(' ', '_')}.bps", arrays, header)
        if header and header.get("semantics", 0) is None:
            from bps_assets.container import Container, SectionSpec, write_container
            with Container(p) as c:
                arr, h = c.read_many(), dict(c.header)
            h.pop("semantics")
            p.unlink()
            write_container(p, "SCEN", h, arr, {n: SectionSpec("raw") for n in arr})
        with pytest.raises(CorruptFileError):
            read_packed_scene(p)


def _entries(out):
    import json
    return json.loads((Path(out) / "manifest.json").read_text())["scenes"]


def test_preprocess_mp3d_records_semantics(tmp_path):
    from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess
    from test_pipeline_preprocess import validate_schema

    src, out = tmp_path / "src", tmp_path / "out"
    infos = synth.generate(src, layout="mp3d", scenes=2)
    truth = ssem.write_mp3d(infos[0].path, "mp3d", infos[0].name)
    res = preprocess(src, out, "mp3d", "benchmark", PreprocessOptions(workers=1, in_process=True))
    assert res.ok
    ent = _entries(out)
    a, b = ent[infos[0].name], ent[infos[1].name]
    assert a["stats"]["objects"] == truth["objects"]
    assert a["stats"]["semantic"]["categories"] == truth["categories"] and a["stats"]["semantic"]["format"] == "mp3d"
    assert a["sources"]["semantic_mesh"]["path"] == f"mp3d/{infos[0].name}/{infos[0].name}_semantic.ply"
    assert a["sources"]["semantic_table"]["path"] == f"mp3d/{infos[0].name}/{infos[0].name}.house"
    # the scan without annotation files is a complete PointNav scene without a semantic section
    assert b["status"] == "ok" and "objects" not in b["stats"] and "semantic_mesh" not in b["sources"]
    assert read_packed_scene(out / b["outputs"]["scene"]["path"]).tri_object is None
    validate_schema(out / "manifest.json")
    # annotations count in the fingerprint: a changed .house redoes the scene
    house = infos[0].path.with_name(f"{infos[0].name}.house")
    res2 = preprocess(src, out, "mp3d", "benchmark", PreprocessOptions(workers=1, in_process=True))
    assert res2.ok and _entries(out)[infos[0].name]["fingerprint"] == a["fingerprint"]  # kept
    house.write_text(house.read_text() + "\n")
    res3 = preprocess(src, out, "mp3d", "benchmark", PreprocessOptions(workers=1, in_process=True))
    assert res3.ok and _entries(out)[infos[0].name]["fingerprint"] != a["fingerprint"]  # redone


def test_preprocess_hm3d_records_semantics(tmp_path):
    import hm3d_tree
    from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess

    src, out = tmp_path / "src", tmp_path / "out"
    folder, index, sid, name, _ = hm3d_tree.SCANS[1]
    glb = hm3d_tree.scan_dir(src, folder, index, sid) / f"{sid}.basis.glb"
    hm3d_tree.write_scan(glb, name, ktx2=None)
    truth = ssem.write_hm3d(glb, "gibson", name, y_up=True)
    res = preprocess(src, out, "hm3d", "val", PreprocessOptions(workers=1, in_process=True))
    assert res.ok
    e = _entries(out)[sid]
    assert e["stats"]["objects"] == truth["objects"]
    assert e["stats"]["semantic"]["categories"] == truth["categories"] and e["stats"]["semantic"]["format"] == "hm3d"
    assert e["sources"]["semantic_table"]["path"] == f"hm3d/val/{index}-{sid}/{sid}.semantic.txt"


def test_scene_dataset_config_names_the_pair(tmp_path):
    import json

    from bps_assets.pipeline.scene_dataset_config import semantic_for
    from hostile_cases import annotated_grid

    g = annotated_grid(tmp_path / "d")
    root = tmp_path / "d" / "hm3d"
    (root / "grid.semantic.glb").rename(root / "annot_mesh.glb")
    (root / "grid.semantic.txt").rename(root / "annot.txt")
    (root / "grid.stage_config.json").write_text(json.dumps(
        {"render_asset": "grid.glb", "semantic_asset": "annot_mesh.glb", "semantic_descriptor_filename": "annot.txt"}))
    cfg = tmp_path / "d" / "x.scene_dataset_config.json"
    cfg.write_text(json.dumps({"stages": {"paths": {".json": ["hm3d/*.stage_config.json"]}}}))
    s = semantic_for(g["hm3d"], str(cfg))
    assert s is not None and s.format == "hm3d" and s.mesh == str(root / "annot_mesh.glb")
    assert semantic_for(g["hm3d"], "hm3d") is None  # not beside the scan under habitat's names
    ps = read_packed_scene(convert_file(g["hm3d"], tmp_path / "o.bps", semantic=s).output)
    assert sorted(ps.semantics.category_name(i) for i in range(4)) == ["bed", "chair", "plant", "toilet"]


def test_cli_info_preview_verify(tmp_path):
    import json

    from click.testing import CliRunner

    from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess
    from cli.main import main

    def run(*a):
        return CliRunner().invoke(main, [str(x) for x in a], catch_exceptions=False)

    src, out = tmp_path / "src", tmp_path / "out"
    r = run("synth", src, "--layout", "mp3d", "-n", "1", "--semantic", "--json")
    assert r.exit_code == 0, r.output
    truth = json.loads(r.output)["scenes"][0]["semantic"]
    assert preprocess(src, out, "mp3d", "benchmark", PreprocessOptions(workers=1, in_process=True)).ok
    name = json.loads(r.output)["scenes"][0]["name"]
    scene = out / "scenes" / f"{name}.bps"
    r = run("info", scene)
    assert r.exit_code == 0 and f"objects: {truth['objects']} in {len(truth['categories'])} categories" in r.output
    for cat, n in truth["categories"].items():
        assert any(ln.split() == [cat, str(n)] for ln in r.output.splitlines()), (cat, r.output)
    js = json.loads(run("info", scene, "--json").output)
    assert js["objects_per_category"] == truth["categories"]
    nav = out / "navmeshes" / f"{name}.navmesh.bps"
    r = run("preview", nav, "-o", tmp_path / "p.png", "--semantic", scene)
    assert r.exit_code == 0 and (tmp_path / "p.png").stat().st_size > 1000
    n_drawn = sum(v for k, v in truth["categories"].items() if k not in ("wall", "floor", "ceiling"))
    assert f"{n_drawn} objects" in r.output
    # issue 35 item 11: every box labelled, a legend of what is drawn, a scale bar of the stated length
    from PIL import Image

    from bps_assets.nav import load_navmesh
    from bps_assets.nav.semantic_preview import write_semantic_preview

    table = read_packed_scene(scene, sections=["object_ids", "object_category", "object_region", "object_aabb",
                                               "object_source_ids"]).semantics
    info = write_semantic_preview(load_navmesh(nav), table, tmp_path / "p2.png")
    assert info["labels"] == info["objects"] == n_drawn
    assert [(c, n) for c, n, _ in info["legend"]] == sorted(
        (k, v) for k, v in truth["categories"].items() if k not in ("wall", "floor", "ceiling"))
    # objects without a category: labelled and counted "(unmatched)" as `info` says, not ""
    from dataclasses import replace
    drawn = [i for i in range(len(table)) if table.category_name(i) not in ("wall", "floor", "ceiling")]
    cat = table.category.copy()
    cat[drawn[:2]] = -1
    un = write_semantic_preview(load_navmesh(nav), replace(table, category=cat), tmp_path / "p3.png")
    legend = {c: n for c, n, _ in un["legend"]}
    assert legend["(unmatched)"] == 2 and "" not in legend and un["objects"] == n_drawn
    png = np.asarray(Image.open(tmp_path / "p2.png").convert("RGB"))
    row = (png[info["scale_bar_row"] + 1] == 0).all(axis=1)
    run_px = int(np.argmin(row[4:]))   # the black run from x = 4
    assert run_px == info["scale_bar_px"] and info["scale_bar_m"] / info["scale_bar_px"] == pytest.approx(
        info["metres_per_pixel"], rel=0.01)
    assert info["height"] == png.shape[0] and info["width"] == png.shape[1]
    plain = convert_file(src / "mp3d" / name / f"{name}.glb", tmp_path / "plain.bps", ConvertOptions(dataset="mp3d"),
                         semantic=None)
    r = CliRunner().invoke(main, ["preview", str(nav), "-o", str(tmp_path / "q.png"), "--semantic", plain.output])
    assert r.exit_code != 0 and "no semantic section" in r.output and not (tmp_path / "q.png").exists()
    # a bad input like any other (journey L5): the project's one "error:" line, exit 2
    assert r.exit_code == 2 and r.stderr == f"error: {plain.output}: the packed scene has no semantic section\n"
    assert run("verify", out / "manifest.json", "--deep").exit_code == 0
    # a semantic section damaged with valid checksums: verify --deep names the file and section
    from hostile_cases import rewrite
    ps = read_packed_scene(scene)
    t = ps.tri_object.copy()
    t[:10] = 999
    rewrite(scene, tmp_path / "bad.bps", {"tri_object": t})
    import shutil
    shutil.copy(tmp_path / "bad.bps", scene)
    from hostile_cases import manifest_over
    m = manifest_over(out, {name: {"scene": (scene, "SCEN"), "navmesh": (nav, "NAVM")}})
    r = CliRunner().invoke(main, ["verify", str(m), "--deep"])
    assert r.exit_code == 1 and "tri_object" in r.output, r.output


def test_split_follows_boundaries_painted_inside_faces(tmp_path):
    """An id texture whose boundary (x = 0.3) cuts through faces: cutting the crossed triangles
    at conversion (semantic_split) makes per-triangle ids follow it on far more of the surface."""
    from bps_assets.packed_scene import convert_scene
    from bps_assets.semantics import Annotation, ObjectRecord
    from bps_assets.transforms.semantic import annotation_ids
    from packed_scene_fixtures import grid_mesh
    from bps_assets.scene import Mesh, SceneDocument

    p, t, _ = grid_mesh(8, extent=4.0, split=False)        # Y-up grid, 0.5 m cells
    side = 512
    lo, hi = p[:, [0, 2]].min(0), p[:, [0, 2]].max(0)
    uv = ((p[:, [0, 2]] - lo) / (hi - lo)).astype(np.float32)   # planar: texel = position
    xs = lo[0] + (np.arange(side) + 0.5) / side * (hi[0] - lo[0])
    img = np.where(xs[None, :] < 0.3, 1, 2).repeat(side, 0).astype(np.int32)
    objs = [ObjectRecord(1, "chair", 0, 1), ObjectRecord(2, "sofa", 0, 2)]
    res = {}
    for level in (0, 1):
        ann = Annotation(p.copy(), t.astype(np.int64), objs, face_object=np.zeros(len(t), np.int32), uvs=uv,
                         face_image=np.zeros(len(t), np.int32), id_images=[img])
        doc = SceneDocument(meshes=[Mesh(positions=p.copy(), indices=t.astype(np.uint32))])
        convert_scene(doc, tmp_path / f"{level}.bps", ConvertOptions(semantic_split=level), semantic=ann)
        ps = read_packed_scene(tmp_path / f"{level}.bps", sections=["positions", "indices", "tri_object"])
        rng = np.random.default_rng(0)
        n = len(ps.indices)
        area = 0.5 * np.linalg.norm(np.cross(*(ps.positions[ps.indices[:, k].astype(np.int64)] -
                                                 ps.positions[ps.indices[:, 0].astype(np.int64)] for k in (1, 2))), axis=1)
        tri = rng.choice(n, 20000, p=area / area.sum())
        b = rng.random((20000, 2)).astype(np.float32)
        flip = b.sum(1) > 1
        b[flip] = 1 - b[flip]
        truth, _ = annotation_ids(ann, ps.positions, ps.indices, b, tri, 0.02)
        res[level] = (n, float((ps.tri_object[tri] == truth).mean()))
    assert res[1][0] > res[0][0]                              # crossed triangles were cut
    assert res[1][1] > res[0][1] and res[1][1] >= 0.99, res   # and the ids follow the line closer


def test_preprocess_broken_pair_is_a_warning_or_strict_failure(tmp_path):
    from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess

    src, out = tmp_path / "src", tmp_path / "out"
    info = synth.generate(src, layout="mp3d", scenes=1)[0]
    ssem.write_mp3d(info.path, "mp3d", info.name)
    house = info.path.with_name(f"{info.name}.house")
    house.write_text("ASCII 1.1\nO 0 0 5 x\n")
    assert preprocess(src, out, "mp3d", "benchmark", PreprocessOptions(workers=1, in_process=True)).ok
    e = _entries(out)[info.name]
    assert e["status"] == "ok" and "objects" not in e["stats"] and str(house) in e["stats"]["semantic_error"]
    assert any("no semantic section" in w for w in e["stats"]["warnings"])
    assert read_packed_scene(out / e["outputs"]["scene"]["path"]).tri_object is None
    res = preprocess(src, tmp_path / "out2", "mp3d", "benchmark",
                     PreprocessOptions(workers=1, in_process=True, strict=True))
    assert not res.ok and not (tmp_path / "out2" / "scenes" / f"{info.name}.bps").exists()


def test_gibson_semantic_ply_without_house_is_not_an_annotation(tmp_path):
    """Gibson ships NAME_semantic.ply (3DSceneGraph, with a .scn): no .house, so no MP3D pair;
    the scene preprocesses as before, without a semantic section."""
    from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess

    src, out = tmp_path / "src", tmp_path / "out"
    info = synth.generate(src, layout="gibson", scenes=1)[0]
    info.path.with_name(f"{info.name}_semantic.ply").write_bytes(b"ply\nformat ascii 1.0\nend_header\n")
    assert preprocess(src, out, "gibson", "tiny", PreprocessOptions(workers=1, in_process=True, strict=True)).ok
    e = _entries(out)[info.name]
    assert "semantic_mesh" not in e["sources"] and "semantic_error" not in e["stats"]


def test_mp3d_ids_are_habitats_object_index(tmp_path):
    """habitat-sim's semantic sensor reports a face's PLY object_id (the .house object index;
    GenericSemanticMeshData.cpp): ours is the same number. Object 0 reads 0 there, our "no
    object": no table row, its faces counted; faces of no object (-1) read 65535 in both."""
    from bps_assets.readers.semantic_mp3d import NO_OBJECT, read_mp3d_semantics

    ply = tmp_path / "x_semantic.ply"
    ply.write_text("ply\nformat ascii 1.0\nelement vertex 4\nproperty float x\nproperty float y\nproperty float z\n"
                   "element face 3\nproperty list uchar int vertex_indices\nproperty int object_id\nend_header\n"
                   "0 0 0\n1 0 0\n1 1 0\n0 1 0\n3 0 1 2 0\n3 0 2 3 5\n3 0 3 1 -1\n")
    o = " 0 0 0  1 0 0  0 1 0  1 1 1 0 0 0 0 0 0 0 0"
    house = tmp_path / "x.house"
    house.write_text(f"ASCII 1.1\nC 0 1 chair 3 chair 0 0 0 0 0\nC 1 2 bed 11 bed 0 0 0 0 0\n"
                     f"O 0 0 1{o}\nO 5 0 0{o}\n")
    ann = read_mp3d_semantics(ply, house)
    assert [(r.id, r.source_id, r.category) for r in ann.objects] == [(5, 5, "chair")]
    assert ann.face_object.tolist() == [0, 5, NO_OBJECT] and NO_OBJECT == 65535
    assert ann.warnings["object_zero_faces"] == 1 and ann.warnings["unannotated_faces"] == 1


@pytest.mark.parametrize("index", [65535, 65536, 1 << 20])
def test_a_house_object_index_at_or_over_65535_is_refused(tmp_path, index):
    """habitat-sim keeps 16-bit ids and 65535 means no object: a .house object with such an
    index would alias "no object" or another object; refused naming the file, line and index."""
    from bps_assets.readers.semantic_mp3d import parse_house

    o = " 0 0 0  1 0 0  0 1 0  1 1 1 0 0 0 0 0 0 0 0"
    house = tmp_path / "x.house"
    house.write_text(f"ASCII 1.1\nC 0 1 chair 3 chair 0 0 0 0 0\nO 65534 0 0{o}\nO {index} 0 0{o}\n")
    with pytest.raises(AnnotationError) as e:
        parse_house(house)
    assert all(s in str(e.value) for s in (str(house), "line 4", f"object index {index}", "16-bit")), str(e.value)
    house.write_text(f"ASCII 1.1\nC 0 1 chair 3 chair 0 0 0 0 0\nO 65534 0 0{o}\n")
    assert [r.id for r in parse_house(house)] == [65534]


def fingerprint_without_rules(src, settings, **extra):
    """preprocess.fingerprint as it was before any per-format rule (plus ``extra`` keys)."""
    import hashlib
    import json

    from bps_assets import __version__
    from bps_assets.hashing import settings_fingerprint

    doc = {"sources": {r: s["sha256"] for r, s in sorted(src.items())},
           "settings": settings_fingerprint(settings), "tool_version": __version__, **extra}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def test_mp3d_scenes_fingerprint_the_id_rule():
    """Packed MP3D scenes made with the old ids (index + 1) convert again on resume; other
    scenes keep their fingerprints."""
    from bps_assets.pipeline.preprocess import fingerprint
    from bps_assets.readers.semantic_categories import builtin_table_digest

    old_rule = fingerprint_without_rules
    base = {"scene": {"path": "a/a.glb", "sha256": "1"}, "semantic_mesh": {"path": "a/a_semantic.ply", "sha256": "2"}}
    mp3d = {**base, "semantic_table": {"path": "a/a.house", "sha256": "3"}}
    hm3d = {**base, "semantic_table": {"path": "a/a.semantic.txt", "sha256": "3"}}
    settings = {"convert": {"dataset": "mp3d"}}
    assert fingerprint(mp3d, settings) != old_rule(mp3d, settings)
    # HM3D: no id rule (its raw labels add the built-in table's digest: the test below)
    assert fingerprint(hm3d, settings) == old_rule(hm3d, settings, builtin_labels=builtin_table_digest())
    assert fingerprint({"scene": base["scene"]}, settings) == old_rule({"scene": base["scene"]}, settings)


def test_a_resume_over_the_previous_mp3d_rule_says_mp3d_s_id_rule():
    """A scene record written under the previous rule ("object_index": faces of no object 0)
    is redone and the resume says why: MP3D's id rule changed (not just another fingerprint)."""
    from bps_assets.pipeline.preprocess import fingerprint, rules_changed
    from bps_assets.readers.semantic_mp3d import ID_RULE

    mp3d = {"scene": {"path": "a/a.glb", "sha256": "1"}, "semantic_mesh": {"path": "a/a_semantic.ply", "sha256": "2"},
            "semantic_table": {"path": "a/a.house", "sha256": "3"}}
    settings = {"convert": {"dataset": "mp3d"}}
    prev = {"mp3d_ids": "object_index"}
    rec = {"fingerprint": fingerprint(mp3d, settings, prev), "rules": prev}
    assert ID_RULE != "object_index" and rec["fingerprint"] != fingerprint(mp3d, settings)
    assert rules_changed(rec, mp3d, settings) == "MP3D's id rule"
    now = {"fingerprint": fingerprint(mp3d, settings), "rules": {"mp3d_ids": ID_RULE}}
    assert rules_changed(now, mp3d, settings) == ""
    assert rules_changed({**rec, "fingerprint": "other"}, mp3d, settings) == ""   # more than the rule changed


def test_builtin_table_edit_changes_the_fingerprint_of_scenes_it_maps(monkeypatch):
    """Scenes whose raw labels the built-in table maps (HM3D .semantic.txt) convert again on
    resume after a table edit; MP3D (.house: own mpcat40), scenes given a --label-table and
    scenes without annotations keep their fingerprints."""
    import copy

    from bps_assets.pipeline.preprocess import fingerprint
    from bps_assets.readers import semantic_categories as sc
    from bps_assets.readers.semantic_mp3d import ID_RULE

    without_table = fingerprint_without_rules
    base = {"scene": {"path": "a/a.basis.glb", "sha256": "1"}, "semantic_mesh": {"path": "a/a.semantic.glb", "sha256": "2"}}
    hm3d = {**base, "semantic_table": {"path": "a/a.semantic.txt", "sha256": "3"}}
    mp3d = {**base, "semantic_table": {"path": "a/a.house", "sha256": "3"}}
    plain, user = {"convert": {"dataset": "hm3d"}}, {"convert": {"label_table": {"name": "m.tsv", "sha256": "4"}}}
    before = fingerprint(hm3d, plain)
    assert before != without_table(hm3d, plain)
    assert fingerprint(hm3d, user) == without_table(hm3d, user)
    assert fingerprint(mp3d, plain) == without_table(mp3d, plain, mp3d_ids=ID_RULE)
    assert fingerprint({"scene": base["scene"]}, plain) == without_table({"scene": base["scene"]}, plain)
    edited = copy.deepcopy(sc._load())
    edited["raw_to_mpcat40"]["flower pot"] = "plant"      # the kind of fix this session made
    monkeypatch.setattr(sc, "_load", lambda: edited)
    assert fingerprint(hm3d, plain) != before
    assert fingerprint(hm3d, user) == without_table(hm3d, user)


def test_mp3d_header_records_the_id_rule_and_older_files_warn_once(tmp_path, caplog):
    """MP3D scenes record how their ids were made; one packed before (no ``id_rule``: ids were
    the object index + 1) loads with one warning per file, from the readers and `info`."""
    import logging

    from click.testing import CliRunner

    from cli.main import main
    from hostile_cases import rewrite

    from bps_assets.readers.semantic_mp3d import ID_RULE

    info, truth, out, ps = _convert_synth(tmp_path, "mp3d")
    assert ps.header["semantics"]["id_rule"] == ID_RULE == "object_index, no object 65535"
    assert ps.header["semantics"]["no_object_id"] == 65535
    hm3d = _convert_synth(tmp_path / "hm3d", "gibson")[3].header["semantics"]
    assert "id_rule" not in hm3d and "no_object_id" not in hm3d
    older = {k: v for k, v in ps.header["semantics"].items() if k not in ("id_rule", "no_object_id")}
    old, old2 = (rewrite(out, tmp_path / n, header={"semantics": older}) for n in ("old.bps", "old2.bps"))
    caplog.set_level(logging.WARNING, "bps_assets.semantics")

    def notes():
        return [r.getMessage() for r in caplog.records if r.name == "bps_assets.semantics"]
    read_packed_scene(out)
    assert notes() == []
    read_packed_scene(old)
    assert read_packed_scene(old, sections=["tri_object", "object_ids"]).tri_object is not None  # once
    assert len(notes()) == 1 and notes()[0].startswith(f"{old}: MP3D semantics packed under an older id rule")
    assert "convert the scan again" in notes()[0]
    r = CliRunner().invoke(main, ["info", str(old2)], catch_exceptions=False)
    assert r.exit_code == 0 and len(notes()) == 2 and notes()[1].startswith(str(old2))
    assert "object index + 1" in notes()[0] and "not habitat's object_id" in notes()[0]
    # the previous rule (object_index, faces of no object 0): the same warning, saying what differs
    prev = rewrite(out, tmp_path / "prev.bps", header={"semantics": {**older, "id_rule": "object_index"}})
    read_packed_scene(prev)
    assert len(notes()) == 3 and notes()[2].startswith(f"{prev}: MP3D semantics packed under an older id rule "
                                                       "(object_index, not object_index, no object 65535)")
    assert "faces of no object read 0, not habitat's 65535" in notes()[2]
    bad = rewrite(out, tmp_path / "bad.bps", header={"semantics": {**ps.header["semantics"], "id_rule": 5}})
    with pytest.raises(CorruptFileError, match="id_rule must be a string") as ei:
        read_packed_scene(bad)
    assert str(bad) in str(ei.value)


def test_mp3d_faces_of_no_object_read_habitats_65535(tmp_path):
    """habitat-sim's StanfordImporter reads the PLY's int object_id as unsigned and
    GenericSemanticMeshData keeps 16 bits, so a face of no object (-1) reads 65535 there: a
    converted MP3D scene stores that id in tri_object (header ``no_object_id``), the sensor's
    id rule reads it, no table row has it; a file whose ``no_object_id`` is an object's id, or
    not an integer, is refused naming the file."""
    from scipy.spatial import cKDTree

    from bps_assets import synth
    from bps_assets.semantics import object_ids

    NO_OBJECT = 65535   # habitat-sim's id of a face of no object

    info = synth.generate(tmp_path / "src", layout="mp3d", scenes=1)[0]
    pos, idx, tri_obj, objects = ssem.annotate("mp3d", info.name)
    drop = int(np.bincount(tri_obj).argmax())          # the largest object's faces lose their object
    tri_obj = np.where(tri_obj == drop, 0, tri_obj)    # synth writes object_id -1 for 0
    ply, house = ssem.mp3d_files(pos, idx, tri_obj, objects, info.name)
    stem = Path(info.path).name.split(".")[0]
    (Path(info.path).parent / f"{stem}_semantic.ply").write_bytes(ply)
    (Path(info.path).parent / f"{stem}.house").write_text(house)
    out = Path(convert_file(info.path, tmp_path / "s.bps", ConvertOptions(dataset="mp3d")).output)
    ps = read_packed_scene(out)
    m = np.asarray(ps.header["frame"]["matrix"], np.float64)
    src = (pos.astype(np.float64) @ m[:3, :3].T + m[:3, 3])[idx.astype(np.int64)].mean(1)
    _, near = cKDTree(src).query(ps.positions[ps.indices.astype(np.int64)].mean(1))
    want = np.where(tri_obj[near] == 0, NO_OBJECT, tri_obj[near])
    assert (want == NO_OBJECT).mean() > 0.05 and float((want == ps.tri_object).mean()) >= 0.999
    assert ps.header["semantics"]["no_object_id"] == NO_OBJECT and NO_OBJECT not in ps.semantics.ids
    assert drop not in ps.semantics.ids
    hit = np.flatnonzero(ps.tri_object == NO_OBJECT)[:5]
    assert object_ids(ps.tri_object, hit).tolist() == [NO_OBJECT] * len(hit)   # what the sensor reports
    st = ps.header["semantics"]["transfer"]
    assert st["object_triangles"] == int(np.isin(ps.tri_object, ps.semantics.ids).sum())
    for bad, msg in ((int(ps.semantics.ids[0]), "no_object_id .* is an object's id"),
                     ("x", "no_object_id must be an integer")):
        hdr = {"semantics": {**ps.header["semantics"], "no_object_id": bad}}
        f = rewrite(out, tmp_path / f"bad{bad}.bps", header=hdr)
        with pytest.raises(CorruptFileError, match=msg) as ei:
            read_packed_scene(f)
        assert str(f) in str(ei.value)
