"""Bad shading tables and bad inputs get typed errors, never a crash: ShadingData's constructor
checks every cross reference; the C bridge checks every table index again as it shades (the
arrays can change after the Python check) and every size it is handed; its library loader
closes what it opened when a symbol is missing."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import numpy as np
import pytest

from bps_assets.errors import BpsError, ConfigError, CorruptFileError
from bps_runtime.render import RenderOptions, ShadingData, build_shading_data, embree_bridge, make_renderer
from bps_runtime.render.camera import camera_directions
from runtime_scenes import room_scene

needs_bridge = pytest.mark.skipif(not embree_bridge.available(),
                                  reason="the Embree bridge was not compiled (no C compiler at install)")


def _tables(sd: ShadingData) -> dict:
    return {f.name: getattr(sd, f.name) for f in dataclasses.fields(sd)}


def _bad(**changes):
    """A valid scene's tables with some replaced (copies: the valid scene is not touched)."""
    sd = build_shading_data(room_scene(), "room.bps")
    t = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in _tables(sd).items()}
    for k, fn in changes.items():
        t[k] = fn(t[k])
    return t


def _set(index, value):
    def fn(a):
        a[index] = value
        return a
    return fn


BAD_TABLES = {
    "vertex index": (dict(indices=_set((0, 1), 10**6)), "out of range"),
    "negative vertex index": (dict(indices=_set((3, 0), -1)), "out of range"),
    "material": (dict(tri_material=_set(2, 3)), "tri_material"),
    "texture": (dict(material_texture=_set(1, 9)), "material_texture"),
    "level count": (dict(tex_nlevels=_set(0, 99)), "tex_nlevels"),
    "level bytes": (dict(level_info=_set((0, 0, 0), 10**9)), "outside tex_data"),
    "BC1 alignment": (dict(level_info=_set((0, 1, 0), 4)), "multiple of 8"),
    "level size": (dict(level_info=_set((1, 0, 1), 0)), "no image"),
    "format": (dict(tex_format=_set(0, 5)), "tex_format"),
    "colours": (dict(colors=lambda a: a[:, :3].copy()), "colors has shape"),
    "uv rows": (dict(uvs=lambda a: a[:-1].copy(), colors=lambda a: a[:-1].copy()), "out of range"),
    "float indices": (dict(indices=lambda a: a.astype(np.float32)), "dtype"),
    "tex_data size": (dict(tex_data=lambda a: a[:-3].copy()), "multiple of 8"),
    "lod rows": (dict(tri_lod_bias=lambda a: a[:-1].copy()), "tri_lod_bias has shape"),
    "no material": (dict(material_color=lambda a: a[:0].copy(), material_texture=lambda a: a[:0].copy()),
                    "at least one material"),
}


@pytest.mark.parametrize("case", sorted(BAD_TABLES))
def test_shading_data_rejects_bad_tables(case):
    changes, message = BAD_TABLES[case]
    with pytest.raises(CorruptFileError, match=message) as e:
        ShadingData(**_bad(**changes))
    assert e.value.path == "room.bps" and "shading tables" in str(e.value)


def test_shading_data_converts_compatible_dtypes_without_copying_exact_ones():
    sd = build_shading_data(room_scene())
    t = _tables(sd)
    same = ShadingData(**t)
    assert all(getattr(same, k) is v for k, v in t.items() if isinstance(v, np.ndarray))
    wide = ShadingData(**dict(t, indices=t["indices"].astype(np.uint32), tri_material=t["tri_material"].astype(np.int64)))
    assert wide.indices.dtype == np.int32 and wide.tri_material.dtype == np.int32
    with pytest.raises(CorruptFileError, match="outside int32"):
        ShadingData(**dict(t, tri_material=t["tri_material"].astype(np.int64) + 2**40))


def test_a_mesh_other_than_the_tables_is_refused():
    s = room_scene()
    sd = build_shading_data(s, "room.bps")
    r = make_renderer("embree", RenderOptions(resolution=(8, 8), threads=1))
    with pytest.raises(CorruptFileError, match="the mesh has"):
        r.prepare(sd, s.positions, s.indices[:-2])


# ------------------------------------------------------------------------- the C bridge

def _native_renderer(threads=2):
    s = room_scene()
    sd = build_shading_data(s, "room.bps")
    r = make_renderer("embree", RenderOptions(resolution=(16, 16), threads=threads), shading="native")
    accel = r.prepare(sd, s.positions, s.indices)
    r.attach(0, sd, accel)
    return r, accel.native_shading


POSES = ([[4.0, 0.0, -3.0], [2.0, 0.3, -1.0], [6.0, 0.0, -5.0]], [0.0, 2.0, 4.0])


@needs_bridge
@pytest.mark.parametrize("table,index,value", [
    ("tri_material", 0, 10**6),            # material id read from a triangle
    ("tri_material", slice(None), -5),
    ("indices", slice(None), 2**30),      # vertex ids (uvs, colours)
    ("mat_tex", slice(None), 77),         # texture id read from a material
    ("tex_nlevels", slice(None), 1000),   # level count read from a texture
    ("tex_nlevels", slice(None), 0),
    ("level_info", slice(None), 2**40),   # byte offsets, widths, heights
    ("level_info", slice(None), -8),
])
def test_c_shader_checks_every_index_it_follows(table, index, value):
    """Tables changed after they were checked (the arrays the C struct points into): the frame
    is refused with a typed error instead of reading outside the tables."""
    r, native = _native_renderer()
    try:
        good = r.render([0, 0, 0], *POSES, ("depth", "rgb"))
        arr = native._arrays[table]
        saved = arr.copy()
        arr[index] = value
        with pytest.raises(CorruptFileError, match="outside the scene's material, texture or level tables") as e:
            r.render([0, 0, 0], *POSES, ("rgb",))
        assert isinstance(e.value, BpsError) and e.value.path == "room.bps"
        arr[...] = saved
        again = r.render([0, 0, 0], *POSES, ("depth", "rgb"))
        assert np.array_equal(good["rgb"].numpy(), again["rgb"].numpy())
    finally:
        r.close()


@needs_bridge
def test_trace_cameras_checks_its_shapes():
    s = room_scene()
    acc = embree_bridge.BridgeAccel(s.positions, s.indices)
    dirs = camera_directions(RenderOptions(resolution=(4, 4)))
    org = np.array([[4.0, 1.2, -3.0], [2.0, 1.2, -2.0]], np.float32)
    rot = np.repeat(np.eye(3, dtype=np.float32)[None], 2, 0)
    t = np.empty(2 * 16, np.float32)
    acc.trace_cameras(org, rot, dirs, t)
    assert (t > 0).all()
    with pytest.raises(ConfigError, match="rotations must be"):
        acc.trace_cameras(org, rot[:1], dirs, t)
    with pytest.raises(ConfigError, match="rotations must be"):
        acc.trace_cameras(org, rot.reshape(2, 9), dirs, t)
    with pytest.raises(ConfigError, match="cam_dirs must be"):
        acc.trace_cameras(org, rot, dirs[:, :2], t)
    with pytest.raises(ConfigError, match="origins must be"):
        acc.trace_cameras(org.reshape(-1), rot, dirs, t)


@needs_bridge
def test_c_entry_point_refuses_arrays_smaller_than_its_counts():
    """Called directly (as a wrong wrapper would): the C side checks the rows it is told the
    arrays hold against the agents and directions it is asked to trace, and writes nothing."""
    s = room_scene()
    acc = embree_bridge.BridgeAccel(s.positions, s.indices)
    lib = acc._lib
    org = np.array([[4.0, 1.2, -3.0]] * 2, np.float32)
    rot = np.repeat(np.eye(3, dtype=np.float32)[None], 2, 0)
    dirs = camera_directions(RenderOptions(resolution=(4, 4)))
    t = np.full(2 * 16, -7.0, np.float32)
    p = lambda a: a.ctypes.data  # noqa: E731

    def call(origin_rows, rotation_rows, dir_floats):
        return lib.bps_trace_cameras(acc._scene, 2, p(org), origin_rows, p(rot), rotation_rows, 16, p(dirs),
                                     dir_floats, p(t), None, None, None, None, None, None, None, None, None, 0,
                                     0.0)

    assert call(1, 2, dirs.size) == -1 and call(2, 1, dirs.size) == -2 and call(2, 2, dirs.size - 3) == -3
    assert (t == -7.0).all()
    assert call(2, 2, dirs.size) == 0 and (t > 0).all()


@needs_bridge
def test_library_without_embree_symbols_is_closed_again():
    """bps_load on a library that is not Embree 4: code 2, the library is unmapped again
    (dlclose), and a later load of the real library still works."""
    code = r"""
import ctypes, ctypes.util, sys
from bps_assets import native
from bps_runtime.render.embree_bridge import embree_library_path

def mapped(name):
    with open("/proc/self/maps") as f:
        return any(name in line for line in f)

cands = [ctypes.util.find_library(n) for n in ("bz2", "lzma", "sqlite3", "expat", "uuid", "ffi", "gdbm")]
cands = [c for c in cands if c and not mapped(c.split(".so")[0])]
if not cands:
    print("SKIP no unmapped system library to try"); sys.exit(0)
lib = native.load("bps_runtime.render._embree_bridge")
lib.bps_load.argtypes = [ctypes.c_char_p]
name = cands[0]
rc = lib.bps_load(name.encode())
print("RC", rc, "MAPPED", mapped(name.split(".so")[0]))
print("REAL", lib.bps_load(embree_library_path().encode()))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    if out.stdout.startswith("SKIP"):
        pytest.skip(out.stdout.strip())
    assert "RC 2 MAPPED False" in out.stdout and "REAL 0" in out.stdout, out.stdout
