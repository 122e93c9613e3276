"""The renderer does not probe objects (issue 30 item 6): no ``hasattr`` and no ``getattr`` with
a default in ``bps_runtime/render``. Scene inputs are ``PackedScene`` / ``ShadingData`` (every
attribute declared, possibly None); accels say what they are with their class attribute
``composed`` and initialise every attribute in ``__init__``. ``getattr(obj, name)`` without a
default (reflection over a dataclass's own declared fields) stays allowed."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from bps_runtime.render import build_shading_data
from runtime_scenes import room_scene

RENDER = Path(__file__).resolve().parents[1] / "bps_runtime" / "render"


def _probes(path: Path):
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            name = node.func.id
            if name == "hasattr" or (name == "getattr" and (len(node.args) > 2 or node.keywords)):
                yield f"bps_runtime/render/{path.name}:{node.lineno}: {name}"


def test_render_has_no_attribute_probes():
    bad = [p for path in sorted(RENDER.glob("*.py")) for p in _probes(path)]
    assert not bad, "attribute probes (read declared attributes instead):\n" + "\n".join(bad)


def test_the_probe_check_sees_both_forms(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("a = hasattr(o, 'b')\nc = getattr(o, 'd', None)\ne = getattr(o, 'f')\n")
    assert [p.split(": ")[1] for p in _probes(f)] == ["hasattr", "getattr"]


def test_shading_data_from_a_scene_without_textures_colours_or_ids():
    """A PackedScene read without its optional sections (None) gives untextured, uncoloured
    tables without semantic ids, as before."""
    s = room_scene(textured=False, vertex_colors=False)
    s.tex_levels = s.tex_blocks = None
    sd = build_shading_data(s)
    assert sd.colors is None and sd.tri_object is None
    assert sd.tex_data.size == 0 and (sd.material_texture == -1).all()
    empty = room_scene(textured=False, vertex_colors=False)
    np.testing.assert_array_equal(build_shading_data(empty).level_info, sd.level_info)


def test_accels_declare_whether_they_are_composed():
    from bps_runtime.render import embree_bridge
    from bps_runtime.render.embree import EmbreeAccel

    s = room_scene()
    a = EmbreeAccel(s.positions, s.indices)
    assert a.composed is False and a.native_shading is None and a.shade_arrays is None
    if not embree_bridge.available():
        pytest.skip("the Embree bridge is not compiled")
    from bps_runtime.render.embree_instances import InstancedAccel

    b = embree_bridge.BridgeAccel(s.positions, s.indices.astype(np.int32))
    assert b.composed is False and b.native_shading is None
    assert InstancedAccel([(b, None, np.eye(4), 0)]).composed is True
