"""convert_file on a sample of the real third-party files in ../shared/assets.

Each file either converts with the triangle count and bounds its reader reports (minus the
triangles the summary says were dropped), or fails with the same typed error the reader
raises. (The readers' own tests cover every file; this checks the conversion on real data.)
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bps_assets.errors import BpsError, EmptySceneError
from bps_assets.packed_scene import ConvertOptions, convert_file, read_packed_scene
from bps_assets.readers import load

ASSETS = Path(__file__).resolve().parents[1].parent / "shared" / "assets"
SAMPLE = [
    "trimesh/Duck.glb",
    "gltf-transform/view/assets/DamagedHelmet.glb",
    "habitat-sim/deleted_history/van-gogh-room.mesh.ply",
    "habitat-sim/dataset_tests/dataset_0/objects/dataset_test_object1.glb",
    "replicacad/objects/frl_apartment_chair_01.glb",
    "trimesh/fandisk.obj",
    "trimesh/mode5.gltf",
    "navmesh/recast-navigation-js/dungeon.gltf",
    "draco/KhronosSampleModels/Duck/glTF_Binary/Duck.glb",
    "loaders.gl/tile-converter/helsinki-glb-8-meshopt/0/0.glb",
]

pytestmark = [pytest.mark.shared_assets,
              pytest.mark.skipif(not ASSETS.is_dir(), reason="../shared/assets not present")]


@pytest.mark.parametrize("rel", SAMPLE)
def test_real_file_converts_with_its_count_and_bounds_or_fails_typed(rel, tmp_path):
    src = ASSETS / rel
    if not src.exists():
        pytest.skip(f"{rel} not in this copy of the assets")
    options = ConvertOptions(max_texture=256)
    try:
        doc = load(src)
    except BpsError as e:
        with pytest.raises(type(e)) as got:
            convert_file(src, tmp_path / "x.bps", options)
        assert str(src) in str(got.value) or src.name in str(got.value)
        assert not (tmp_path / "x.bps").exists()
        return
    n_in = doc.triangle_count
    lo, hi = doc.bounds()
    try:
        res = convert_file(src, tmp_path / "x.bps", options)
    except EmptySceneError as e:  # nothing left to render: an error naming the file, no output
        assert str(src) in str(e) and (n_in == 0 or f"all {n_in} dropped" in str(e))
        assert not (tmp_path / "x.bps").exists()
        return
    st = res.stats
    assert st["triangles_in"] == n_in
    assert st["triangles_out"] == n_in - st["dropped_triangles"]
    s = read_packed_scene(tmp_path / "x.bps")
    assert len(s.indices) == st["triangles_out"]
    assert s.header["source"]["sha256"] and s.header["source"]["bytes"] == src.stat().st_size
    if st["triangles_out"]:
        tol = 1e-3 + 1e-6 * float(np.abs([lo, hi]).max())
        got_lo, got_hi = s.positions.min(0), s.positions.max(0)
        if st["dropped_triangles"] == 0:
            np.testing.assert_allclose(got_lo, lo, atol=tol)
            np.testing.assert_allclose(got_hi, hi, atol=tol)
        else:
            assert (got_lo >= lo - tol).all() and (got_hi <= hi + tol).all()
    for t in s.header["textures"]:
        assert t["psnr_db"] > 20  # real textures at <= 256 px
