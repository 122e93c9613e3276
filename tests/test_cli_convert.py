"""`bps-assets convert` and `bps-assets info` through the real CLI entry point."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
from click.testing import CliRunner

from bps_assets.container import write_container
from bps_assets.packed_scene import read_packed_scene
from cli.main import main
from packed_scene_fixtures import grid_mesh, natural_image
from packed_scene_glb import write_glb


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("in")
    p, t, uv = grid_mesh(30, z_up=True)
    a = write_glb(d / "gibson" / "Adrian.glb", p, t, uv, natural_image(128))
    p2, t2, uv2 = grid_mesh(20, z_up=True, seed=1)
    b = write_glb(d / "mp3d" / "17DRP5sb8fy" / "17DRP5sb8fy.glb", p2, t2, uv2)
    garbage = d / "garbage.glb"
    garbage.write_bytes(b"glTF" + os.urandom(64))
    not_json = d / "bad.gltf"
    not_json.write_text("{not json")
    return {"a": a, "b": b, "garbage": garbage, "bad_json": not_json, "tris_a": len(t), "tris_b": len(t2)}


def run(args):
    r = CliRunner().invoke(main, [str(a) for a in args])
    return r.exit_code, r.stdout, r.stderr


def test_convert_writes_one_file_per_input_and_prints_a_line_each(inputs, tmp_path):
    out = tmp_path / "out"
    code, stdout, stderr = run(["convert", inputs["a"], inputs["b"], "-o", out, "--dataset", "gibson"])
    assert code == 0, stderr
    lines = stdout.strip().splitlines()
    assert len(lines) == 3 and lines[2] == "2 converted, 0 failed"
    assert lines[0].startswith(f"Adrian: triangles {inputs['tris_a']} -> {inputs['tris_a']}")
    assert "bytes" in lines[0] and " s -> " in lines[0]
    s = read_packed_scene(out / "Adrian.bps")
    assert s.header["frame"]["up"] == "z" and s.header["source"]["sha256"]
    assert len(s.indices) == inputs["tris_a"]
    # Z-up source: its z (height, |h| < 0.32) became +y, its y (0..10) became -z
    assert np.abs(s.positions[:, 1]).max() < 0.32 and s.positions[:, 2].min() < -9.9
    assert sorted(os.listdir(out)) == ["17DRP5sb8fy.bps", "Adrian.bps"]


def test_mp3d_layout_names_scenes_by_folder_and_json_output(inputs, tmp_path):
    out = tmp_path / "out"
    b = inputs["b"]
    renamed = tmp_path / "mp3d" / "X1" / "house.glb"
    renamed.parent.mkdir(parents=True)
    renamed.write_bytes(b.read_bytes())
    code, stdout, stderr = run(["convert", renamed, "-o", out, "--dataset", "mp3d", "--json",
                                "--max-texture", "64"])
    assert code == 0, stderr
    res = json.loads(stdout)
    assert res["ok"] and res["converted"] == 1
    r = res["results"][0]
    assert r["scene_id"] == "X1" and r["output"].endswith("X1.bps")
    for k in ("triangles_in", "triangles_out", "bytes_in", "bytes_out", "seconds", "psnr"):
        assert k in r
    assert r["bytes_in"] == renamed.stat().st_size and r["bytes_out"] == (out / "X1.bps").stat().st_size


def test_bad_inputs_get_one_line_each_the_rest_still_converts(inputs, tmp_path):
    out = tmp_path / "out"
    args = ["convert", inputs["garbage"], inputs["a"], tmp_path / "missing.glb", inputs["bad_json"],
            tmp_path / "scene.txt", "-o", out]
    (tmp_path / "scene.txt").write_text("hello")
    code, stdout, stderr = run(args)
    assert code != 0
    errors = [ln for ln in stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 4, stderr
    assert "Traceback" not in stderr + stdout
    assert any("missing.glb" in e for e in errors) and any("garbage.glb" in e for e in errors)
    assert any("bad.gltf" in e for e in errors) and any("scene.txt" in e for e in errors)
    assert "Adrian:" in stdout
    assert sorted(os.listdir(out)) == ["Adrian.bps"]  # nothing partial for the bad ones


def test_refuses_to_overwrite_without_flag(inputs, tmp_path):
    out = tmp_path / "out"
    assert run(["convert", inputs["a"], "-o", out])[0] == 0
    target = out / "Adrian.bps"
    before = target.read_bytes()
    code, stdout, stderr = run(["convert", inputs["a"], "-o", out, "--max-texture", "32"])
    assert code != 0 and "already exists" in stderr and "--overwrite" in stderr
    assert target.read_bytes() == before
    code, _, stderr = run(["convert", inputs["a"], "-o", out, "--max-texture", "32", "--overwrite"])
    assert code == 0, stderr
    assert read_packed_scene(target).tex_levels[0, 2] == 32
    assert sorted(os.listdir(out)) == ["Adrian.bps"]


def test_bad_option_values_are_one_line_errors(inputs, tmp_path):
    code, _, stderr = run(["convert", inputs["a"], "-o", tmp_path / "o", "--max-texture", "1000"])
    assert code != 0 and "power of two" in stderr and "Traceback" not in stderr
    assert not (tmp_path / "o").exists() or not os.listdir(tmp_path / "o")
    code, _, _ = run(["convert", inputs["a"], "-o", tmp_path / "o", "--dataset", "replica"])
    assert code != 0


def test_jobs_uses_processes_and_gives_the_same_files(inputs, tmp_path):
    code, stdout, stderr = run(["convert", inputs["a"], inputs["b"], inputs["garbage"], "-o", tmp_path / "p",
                                "--jobs", "2", "--json"])
    assert code != 0
    res = json.loads(stdout)
    assert res["converted"] == 2 and res["failed"] == 1
    assert [r["ok"] for r in res["results"]] == [True, True, False]  # input order
    code, _, _ = run(["convert", inputs["a"], inputs["b"], "-o", tmp_path / "s"])
    assert code == 0
    for name in ("Adrian.bps", "17DRP5sb8fy.bps"):
        a, b = read_packed_scene(tmp_path / "p" / name), read_packed_scene(tmp_path / "s" / name)
        np.testing.assert_array_equal(a.positions, b.positions)
        np.testing.assert_array_equal(a.tex_blocks, b.tex_blocks)


def test_info_shows_header_and_sections_for_any_kind(inputs, tmp_path):
    out = tmp_path / "out"
    run(["convert", inputs["a"], "-o", out])
    code, stdout, stderr = run(["info", out / "Adrian.bps"])
    assert code == 0, stderr
    assert "kind SCEN" in stdout and "positions_q" in stdout and "PSNR" in stdout and "sha256" in stdout
    code, stdout, _ = run(["info", out / "Adrian.bps", "--json"])
    info = json.loads(stdout)
    assert info["kind"] == "SCEN" and info["header"]["scene_id"] == "Adrian"
    assert {s["name"] for s in info["sections"]} >= {"positions_q", "indices", "tex_blocks", "chunk_spheres"}
    # a navmesh-kind container
    write_container(tmp_path / "n.navmesh.bps", "NAVM", {"cell_size": 0.05}, {"cells": np.arange(10, dtype=np.int32)})
    code, stdout, _ = run(["info", tmp_path / "n.navmesh.bps", "--json"])
    assert code == 0 and json.loads(stdout)["kind"] == "NAVM"
    # damage: one line, non-zero
    (tmp_path / "junk.bps").write_bytes(b"nope" * 10)
    code, stdout, stderr = run(["info", tmp_path / "junk.bps"])
    assert code != 0 and stderr.startswith("error:") and len(stderr.strip().splitlines()) == 1
    code, _, stderr = run(["info", tmp_path / "absent.bps"])
    assert code != 0 and "no such file" in stderr


def test_every_step_setting_reaches_the_file(inputs, tmp_path):
    out = tmp_path / "out"
    code, _, stderr = run(["convert", inputs["a"], "-o", out, "--dataset", "gibson", "--reorder", "none",
                           "--keep-collapsed", "--position-error", "0.002", "--meshlet-max-triangles", "32",
                           "--chunk-meshlets", "4", "--no-mipmaps", "--zstd-level", "3"])
    assert code == 0, stderr
    s = read_packed_scene(out / "Adrian.bps")
    st = s.header["converter"]["settings"]
    assert (st["reorder_curve"], st["weld_drop_collapsed"], st["position_error"], st["meshlet_max_triangles"],
            st["chunk_meshlets"], st["mipmaps"], st["zstd_level"]) == ("none", False, 0.002, 32, 4, False, 3)
    assert s.header["quantization"]["positions"]["error_bound"] <= 0.002
    assert int(np.max(s.meshlet_tris[:, 1])) <= 32
    assert int(np.max(s.tex_levels[:, 1])) == 0  # one level: no mips
    code, _, stderr = run(["convert", inputs["a"], "-o", tmp_path / "x", "--reorder", "hilbert"])
    assert code == 2 and "hilbert" in stderr
