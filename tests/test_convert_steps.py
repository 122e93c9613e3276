"""The converter is a list of transforms built from ConvertOptions (glTF-Transform's model)."""
from __future__ import annotations

import numpy as np
import pytest

from bps_assets.errors import ConfigError
from bps_assets.packed_scene import ConvertOptions, geometry_transforms, process_geometry
from packed_scene_fixtures import make_doc


def test_every_geometry_option_reaches_its_step():
    # reorder "none" keeps the merged triangle order; the default Morton order does not
    kept = process_geometry(make_doc(30, z_up=True), ConvertOptions(dataset="gibson", reorder_curve="none"))
    morton = process_geometry(make_doc(30, z_up=True), ConvertOptions(dataset="gibson"))
    assert np.array_equal(kept.tri_source, np.sort(kept.tri_source))
    assert not np.array_equal(morton.tri_source, np.sort(morton.tri_source))
    assert sorted(morton.tri_source.tolist()) == kept.tri_source.tolist()


def _doc_with_slivers(k: int = 10):
    """make_doc with k triangles whose first two corners lie 1e-7 m apart (and share UVs):
    not degenerate to ``clean`` (area ~1e-8 m^2) but one vertex after quantization. The first
    triangles sit at the grid's corner near the origin, where float32 resolves 1e-7 m."""
    doc = make_doc(20, z_up=True)
    m = doc.meshes[0]
    for tri in m.indices[:k]:
        m.positions[tri[1]] = m.positions[tri[0]] + np.float32(1e-7)
        m.uvs[tri[1]] = m.uvs[tri[0]]
    return doc


def test_collapsed_triangles_follow_the_weld_option():
    dropped = process_geometry(_doc_with_slivers(), ConvertOptions(dataset="gibson"))
    kept = process_geometry(_doc_with_slivers(), ConvertOptions(dataset="gibson", weld_drop_collapsed=False))
    assert dropped.stats["collapsed_triangles"] == 10
    assert kept.stats["collapsed_triangles"] == 0
    assert kept.triangle_count == dropped.triangle_count + 10


def test_a_caller_can_insert_a_step():
    seen = []

    def count(g):
        seen.append(g.triangle_count)
        return g

    steps = geometry_transforms(ConvertOptions(dataset="gibson"))
    g = process_geometry(make_doc(20, z_up=True), ConvertOptions(dataset="gibson"),
                         geometry_steps=[*steps[:2], count, *steps[2:]])
    assert seen == [g.triangle_count]
    assert [s.__qualname__.split(".")[0] for s in steps] == ["quantize", "weld", "reorder", "meshlets"]


def test_unknown_curve_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown curve 'hilbert'"):
        geometry_transforms(ConvertOptions(reorder_curve="hilbert"))
