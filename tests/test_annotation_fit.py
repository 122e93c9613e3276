"""Annotations that do not match their scan: most of it off (scaled 100x, colours no table line
names) is an AnnotationError naming the annotation, a smaller misfit a warning line, and
``allow_annotation_mismatch`` (CLI ``--allow-annotation-mismatch``) keeps it with the warning;
a malformed table line (unterminated quote, a field past the csv limit) and a .house region
past the id range are typed errors naming file and line, not a glued label or a traceback."""
from __future__ import annotations

import re

import numpy as np
import pytest

from bps_assets.errors import AnnotationError


@pytest.fixture(scope="module")
def scan(tmp_path_factory):
    from bps_assets import synth

    info = synth.generate(tmp_path_factory.mktemp("fit"), layout="gibson", scenes=1, overwrite=True)[0]
    return info


def _pair(scan, scale=1.0, recolour=False):
    from bps_assets.synth import semantic as ssem

    pos, idx, tri_obj, objects = ssem.annotate("gibson", scan.name)
    glb, txt = ssem.hm3d_files(pos * np.float32(scale), idx, tri_obj, objects)
    if recolour:   # every table colour changed: no face colour is named by a line
        txt = re.sub(r"^(\d+),([0-9A-Fa-f]{6}),", lambda m: f"{m.group(1)},{int(m.group(2), 16) ^ 0x0A0A0A:06X},",
                     txt, flags=re.M)
    stem = scan.path.name.split(".")[0]
    scan.path.with_name(stem + ".semantic.glb").write_bytes(glb)
    scan.path.with_name(stem + ".semantic.txt").write_text(txt)


def _convert(scan, tmp_path, **kw):
    from bps_assets.packed_scene import ConvertOptions, convert_file

    return convert_file(scan.path, tmp_path / "s.bps", ConvertOptions(dataset="gibson", max_texture=64, **kw),
                        overwrite=True)


def test_a_fitting_annotation_converts_without_a_warning(scan, tmp_path):
    _pair(scan)
    res = _convert(scan, tmp_path)
    assert res.stats["semantic_objects"] > 3 and "semantic_mismatch" not in res.stats


@pytest.mark.parametrize("kw,what", [({"scale": 100.0}, "probes hit no annotation surface"),
                                     ({"recolour": True}, "colour no table line names")])
def test_an_annotation_that_does_not_fit_is_refused_or_kept_with_a_warning(scan, tmp_path, kw, what):
    _pair(scan, **kw)
    with pytest.raises(AnnotationError, match=f"does not fit its scan: .*{what}.*--allow-annotation-mismatch") as e:
        _convert(scan, tmp_path)
    assert ".semantic.glb" in str(e.value) and len(str(e.value).splitlines()) == 1
    assert not (tmp_path / "s.bps").exists()
    res = _convert(scan, tmp_path, allow_annotation_mismatch=True)
    assert what in res.stats["semantic_mismatch"] and (tmp_path / "s.bps").exists()


def test_cli_flag_keeps_the_annotation_and_prints_the_warning(scan, tmp_path):
    from click.testing import CliRunner

    from cli.main import main as cli

    _pair(scan, scale=100.0)
    r = CliRunner().invoke(cli, ["convert", str(scan.path), "-o", str(tmp_path / "a"), "--dataset", "gibson",
                                 "--max-texture", "64"])
    assert r.exit_code != 0 and "does not fit its scan" in r.output
    r = CliRunner().invoke(cli, ["convert", str(scan.path), "-o", str(tmp_path / "b"), "--dataset", "gibson",
                                 "--max-texture", "64", "--allow-annotation-mismatch"])
    assert r.exit_code == 0 and "warning: annotation mismatch" in r.output, r.output


@pytest.mark.parametrize("line,msg", [
    ('1,FF0000,"chair,0\n2,00FF00,"table",0', "line 2: 1 double quote"),            # unterminated quote
    ('1,FF0000,"' + "x" * 200_000 + '",0', "line 2: label of 200000 characters"),   # over MAX_LABEL
    ('1,FF0000,"a ""b"" c",0', "line 2: 6 double quote"),                            # no CSV escapes
    ('1,FF0000,chair,0', "line 2: 0 double quote"),                                   # label not quoted
    ('1,FF0000,7,"chair",0', "line 2: expected id,RRGGBB, before"),
    ('1,FF0000,"chair",0,2', "line 2: expected id,RRGGBB, before"),
])
def test_semantic_txt_lines_are_read_one_by_one(line, msg, tmp_path):
    from bps_assets.readers.semantic_hm3d import parse_semantic_txt

    with pytest.raises(AnnotationError, match=msg):
        parse_semantic_txt(tmp_path / "x.semantic.txt", "HM3D Semantic Annotations\n" + line + "\n")


def test_semantic_txt_label_is_what_habitat_reads_between_the_quotes(tmp_path):
    """habitat-sim splits a line on its quotes (HM3DSemanticScene.cpp): commas stay in the label,
    spaces around the fields are trimmed, the label is kept verbatim."""
    from bps_assets.readers.semantic_hm3d import parse_semantic_txt

    objs = parse_semantic_txt(tmp_path / "x.semantic.txt", "HM3D Semantic Annotations\n"
                              '1,FF0000,"chair, folding",0\n 2 , 00ff00 ,"  shelf ", 3 \n')
    assert [(o.id, o.raw_name, o.color, o.region) for o in objs] == \
        [(1, "chair, folding", 0xFF0000, 0), (2, "  shelf ", 0x00FF00, 3)]


@pytest.mark.parametrize("region", ["3000000000", "1" + "0" * 20])
def test_house_region_out_of_range_is_typed(region, tmp_path):
    from bps_assets.readers.semantic_mp3d import parse_house

    text = f"ASCII 1.1\nC 0 1 chair 3 chair 0 0 0 0 0\nO 0 {region} 0 0 0 0 0 0 0 0 0 0 0 0 0\n"
    with pytest.raises(AnnotationError, match=f"line 3: malformed O record \\(region {region}"):
        parse_house(tmp_path / "x.house", text)


def test_nan_vertex_in_semantic_ply_is_typed(tmp_path):
    from bps_assets.readers.semantic_mp3d import read_semantic_ply

    p = tmp_path / "x_semantic.ply"
    p.write_text("ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nproperty float y\nproperty float z\n"
                 "element face 1\nproperty list uchar int vertex_indices\nproperty int object_id\nend_header\n"
                 "0 0 0\n1 0 nan\n0 1 0\n3 0 1 2 0\n")
    with pytest.raises(AnnotationError, match="vertex 1 is not finite"):
        read_semantic_ply(p)


def test_no_runtime_warning_lines_before_a_typed_error(tmp_path):
    import warnings

    from bps_assets.errors import BpsError
    from bps_assets.packed_scene import ConvertOptions, convert_file

    p = tmp_path / "big.obj"
    p.write_text("v 0 0 0\nv 1 0 1e300\nv 0 1 0\nf 1 2 3\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)   # a printed RuntimeWarning fails the test
        with pytest.raises(BpsError, match="no triangles left"):
            convert_file(p, tmp_path / "big.bps", ConvertOptions(), overwrite=True)
