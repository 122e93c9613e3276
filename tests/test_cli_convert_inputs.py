"""`bps-assets convert` on a directory and on a .gltf with external parts; Ctrl-C in
`bps-assets preprocess` (issue 13 item 9)."""
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from click.testing import CliRunner

from cli.main import main
from bps_assets.nav.reference_scenes import Geometry
from packed_scene_glb import write_glb
from readers_gltf_builder import GltfBuilder, grid_mesh

ROOT = Path(__file__).resolve().parents[1]


def test_convert_a_directory_says_so(tmp_path):
    d = tmp_path / "scans"
    d.mkdir()
    r = CliRunner().invoke(main, ["convert", str(d), "-o", str(tmp_path / "out")])
    assert r.exit_code == 2
    assert r.stderr.strip() == f"error: {d}: is a directory (give the scene files in it, e.g. {d}/*.glb)"


def test_gltf_bytes_in_count_its_bin_and_images(tmp_path):
    b = GltfBuilder()
    pos, tris = grid_mesh(40)
    rgba = np.random.default_rng(0).integers(0, 256, (64, 64, 4), dtype=np.uint8)
    tex = b.image_texture(rgba, uri="textures/wall.png")
    mat = b.material(pbrMetallicRoughness={"baseColorTexture": {"index": tex}})
    uv = (pos[:, :2] / 40).astype(np.float32)
    b.scene([b.node(mesh=b.mesh({**b.primitive(pos, tris, TEXCOORD_0=uv), "material": mat}))])
    src = b.write_gltf(tmp_path / "room.gltf")
    parts = [src, tmp_path / "room.bin", tmp_path / "textures" / "wall.png"]
    total = sum(p.stat().st_size for p in parts)
    assert src.stat().st_size < total / 10  # the .gltf itself is the small part
    r = CliRunner().invoke(main, ["convert", str(src), "-o", str(tmp_path / "out"), "--json"])
    assert r.exit_code == 0, r.stderr
    import json

    (res,) = json.loads(r.stdout)["results"]
    assert res["bytes_in"] == total


def _room(path, size):
    g = Geometry().quad_y(0, 0, size, size, 0.0, div=8).quad_y(0, 0, size, size, 2.5, up=False)
    g.wall_sheet(0, 0, 0, size, 0, 2.5).wall_sheet(size, 0, size, size, 0, 2.5)
    v, t = g.arrays()
    v = np.stack([v[:, 0], -v[:, 2], v[:, 1]], 1)  # Z-up like the scans
    write_glb(path, v.astype(np.float32), t.astype(np.uint32))


def test_ctrl_c_in_preprocess_says_what_finished_and_how_to_resume(tmp_path):
    names = ["Allensville", "Beechwood", "Benevolence", "Coffeen", "Cosmos", "Forkland", "Hanson", "Hiteman"]
    for i, n in enumerate(names):
        _room(tmp_path / "src" / "gibson" / f"{n}.glb", 6.0 + i)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "cli.main", "preprocess", str(tmp_path / "src"), "-o", str(out),
           "--dataset", "gibson", "--split", "tiny", "--subset", "train", "--workers", "1", "--no-progress"]
    # pytest-xdist's workers ignore SIGINT, and an ignored signal stays ignored across exec (Python
    # then installs no KeyboardInterrupt handler): give the run a terminal's default disposition
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    records = out / ".bps-state" / "scenes"
    deadline = time.time() + 120
    while time.time() < deadline and p.poll() is None and len(list(records.glob("*.json"))) < 1:
        time.sleep(0.05)
    assert p.poll() is None, p.communicate()
    p.send_signal(signal.SIGINT)
    stdout, stderr = p.communicate(timeout=60)
    assert p.returncode == 130, (stdout, stderr)
    assert "Traceback" not in stderr and "Aborted!" not in stderr
    (line,) = [ln for ln in stderr.splitlines() if ln.strip()]
    done = len(list(records.glob("*.json")))
    assert 1 <= done < len(names)
    assert line.startswith(f"error: {out}: interrupted: {done} of {len(names)} scene(s) to process finished")
    assert "Rerun the same command to resume" in line
    assert not (out / "manifest.json").exists()
    # the rerun does the rest only
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert f"{len(names) - done} processed, {done} up to date, 0 failed" in r.stdout


def test_a_scan_too_far_out_for_the_position_error_names_its_file_and_the_option(tmp_path):
    """Journey L3: quantize's float32 limit named no file and no way out; it names the scan and
    the least --position-error that fits, and that value converts."""
    pos, tris = grid_mesh(20)
    src = write_glb(tmp_path / "far.glb", (pos + np.float32(2e4)).astype(np.float32), tris.astype(np.uint32))
    r = CliRunner().invoke(main, ["convert", str(src), "-o", str(tmp_path / "out")])
    assert r.exit_code == 2 and r.stderr.startswith(f"error: {src}: positions: coordinates up to "), r.stderr
    least = r.stderr.split("pass --position-error ")[1].split()[0]
    r = CliRunner().invoke(main, ["convert", str(src), "-o", str(tmp_path / "out"), "--position-error", least])
    assert r.exit_code == 0 and (tmp_path / "out" / "far.bps").exists(), r.stderr


def test_the_uv_error_hint_names_an_option_preprocess_has_and_that_value_preprocesses(tmp_path):
    """Review r2 S6: quantize's hint "pass --uv-error X" named an option preprocess lacked; it now
    has the converter's --uv-error (recorded in settings.convert) and the hinted value works."""
    pos, tris = grid_mesh(8)
    uvs = (pos[:, :2] + np.float32(3000.0)).astype(np.float32)   # tiled far out: float32 holds ~1.2e-4
    src = tmp_path / "src"
    rgba = np.full((4, 4, 4), 200, np.uint8)   # a base colour texture: its UVs are kept
    write_glb(src / "gibson" / "Allensville.glb", pos, tris, uvs=uvs, rgba=rgba)
    cmd = ["preprocess", str(src), "-o", str(tmp_path / "out"), "--dataset", "gibson", "--split", "tiny",
           "--episodes", "0", "--workers", "1", "--in-process", "--force"]
    r = CliRunner().invoke(main, cmd)
    assert r.exit_code == 1 and "pass --uv-error " in r.output, r.output
    least = r.output.split("pass --uv-error ")[1].split()[0]
    r = CliRunner().invoke(main, cmd + ["--uv-error", least])
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["settings"]["convert"]["uv_error"] == float(least)
