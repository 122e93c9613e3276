"""Every scene file under ../shared/assets: it loads with the right triangle count and bounds,
or it is refused with the typed error it deserves. Expected counts are computed here from the
files with small independent code (glTF: accessor counts in the JSON; OBJ: the face lines;
PLY: the face lists), not with the readers."""
from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import numpy as np
import pytest

from bps_assets.errors import (BpsError, InputError, MissingDependencyError, UnsupportedExtensionError,
                               UnsupportedFormatError)
from bps_assets.readers import load

ASSETS = Path(__file__).resolve().parents[1].parent / "shared" / "assets"
EXTS = {".glb", ".gltf", ".ply", ".obj"}
FILES = sorted(p.relative_to(ASSETS).as_posix() for p in ASSETS.rglob("*")
               if p.is_file() and p.suffix.lower() in EXTS) if ASSETS.is_dir() else []

pytestmark = [pytest.mark.shared_assets,
              pytest.mark.skipif(not FILES, reason="../shared/assets absent")]

_MISSING = (InputError, "external file .* not found")
EXPECTED_ERRORS = {
    # glTF 1.0 (GLB version 1 header / asset.version 1.0)
    "loaders.gl/gltf/3d-tiles/Cesium_Air.glb": (UnsupportedFormatError, "GLB version 1"),
    "magnum-plugins/GltfImporter/version-legacy.gltf": (UnsupportedFormatError, "glTF 1.0"),
    # invalid JSON, on purpose (magnum edge cases)
    "magnum-plugins/GltfImporter/edge/material-extras.gltf": (InputError, "invalid glTF JSON"),
    "magnum-plugins/GltfImporter/edge/material-raw.gltf": (InputError, "invalid glTF JSON"),
    "magnum-plugins/GltfImporter/edge/scene-custom-fields.gltf": (InputError, "invalid glTF JSON"),
    # the default scene index points past an empty scene list
    "magnum-plugins/GltfImporter/scene-default-oob.gltf": (InputError, "scene index 0 out of range"),
    # unknown required extensions
    "gltf-transform/cli/ACMEBox.gltf": (UnsupportedExtensionError, "ACME_gizmo"),
    "habitat-sim/scenes/batch.gltf": (UnsupportedExtensionError, "MAGNUMX_mesh_views"),
    "habitat-sim/scenes/batch-multiple-textures.gltf": (UnsupportedExtensionError, "MAGNUMX_mesh_views"),
    "habitat-sim/scenes/batch-square-circle-triangle.gltf": (UnsupportedExtensionError, "MAGNUMX_mesh_views"),
    "habitat-sim/scenes/batch-square-circle-triangle-compressed.gltf":
        (UnsupportedExtensionError, "MAGNUMX_mesh_views"),
    # external buffers / images that are not in the shared copy (or never existed)
    "loaders.gl/gltf/meshopt/MeshoptCubeTest/glTF-Meshopt/MeshoptCubeTest.gltf": _MISSING,
    "magnum-plugins/GltfImporter/external-data.glb": _MISSING,
    "magnum-plugins/GltfImporter/external-data-order.glb": _MISSING,
    **{f"magnum-plugins/GltfImporter/edge/{n}.gltf": _MISSING for n in (
        "encoded-uris", "escaped-strings", "external-data-order", "external-data", "material-clearcoat",
        "material-common", "material-metallicroughness", "material-phong-fallback", "material-sheen",
        "material-specular", "material-specularglossiness", "material-transmission", "material-unlit",
        "material-volume", "texture")},
}

# Files whose POSITION min/max disagree with their own data (the reader follows the data).
MINMAX_WRONG = {
    "draco/ZeroLengthBufferView/ZeroLengthBufferView.gltf",  # first x in the .bin is 2^31, max says 1
}

# Counts known from outside these files' loaders:
KNOWN_TRIANGLES = {
    "trimesh/Duck.glb": 4212,  # Khronos glTF-Sample-Models Duck: 12636 indices (its accessor 0)
    "gltf-transform/view/assets/DamagedHelmet.glb": 15452,  # Khronos DamagedHelmet: 46356 indices
    "draco/Box/glTF_Binary/Box_Draco.glb": 12,  # Khronos Box: a cube, 6 faces x 2 triangles
    "gltf-transform/core/Box_glTF-Binary/Box.glb": 12,
    "trimesh/cube.OBJ": 12,
    "navmesh/go-detour/obj/cube.obj": 12,
    "trimesh/tet.ply": 4,  # a tetrahedron
}


# -- independent expectations ----------------------------------------------------------------------
def gltf_json(path: Path) -> dict:
    raw = path.read_bytes()
    if raw[:4] == b"glTF":
        n = struct.unpack_from("<I", raw, 12)[0]
        return json.loads(raw[20:20 + n])
    return json.loads(raw)


def gltf_instances(j: dict):
    """(mesh index, world 4x4) for every node instance of the default scene / the roots."""
    nodes = j.get("nodes", [])

    def local(n):
        if "matrix" in n:
            return np.array(n["matrix"], float).reshape(4, 4).T
        x, y, z, w = n.get("rotation", [0, 0, 0, 1])
        r = np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                      [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                      [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])
        m = np.eye(4)
        m[:3, :3] = r * np.array(n.get("scale", [1, 1, 1]), float)
        m[:3, 3] = n.get("translation", [0, 0, 0])
        return m

    if "scene" in j:
        roots = j["scenes"][j["scene"]].get("nodes", [])
    elif nodes:
        kids = {c for n in nodes for c in n.get("children", [])}
        roots = [i for i in range(len(nodes)) if i not in kids]
    else:
        return [(m, np.eye(4)) for m in range(len(j.get("meshes", [])))]
    out = []

    def visit(i, parent):
        w = parent @ local(nodes[i])
        if "mesh" in nodes[i]:
            out.append((nodes[i]["mesh"], w))
        for c in nodes[i].get("children", []):
            visit(c, w)

    for r in roots:
        visit(r, np.eye(4))
    return out


def gltf_expected(j: dict):
    """Triangles from accessor counts, and the world AABB of the POSITION min/max boxes."""
    acc = j.get("accessors", [])
    tris, lo, hi = 0, np.full(3, np.inf), np.full(3, -np.inf)
    have_minmax = True
    for mi, world in gltf_instances(j):
        for p in j["meshes"][mi]["primitives"]:
            mode = p.get("mode", 4)
            if mode not in (4, 5, 6) or "POSITION" not in p.get("attributes", {}):
                continue
            n = acc[p["indices"]]["count"] if "indices" in p else acc[p["attributes"]["POSITION"]]["count"]
            t = n // 3 if mode == 4 else max(n - 2, 0)
            if t == 0:
                continue
            tris += t
            a = acc[p["attributes"]["POSITION"]]
            if "min" not in a or "max" not in a:
                have_minmax = False
                continue
            mn, mx = np.array(a["min"], float), np.array(a["max"], float)
            if a.get("normalized"):
                div = {5120: 127, 5121: 255, 5122: 32767, 5123: 65535}[a["componentType"]]
                mn, mx = np.maximum(mn / div, -1), np.maximum(mx / div, -1)
            corners = np.array([[x, y, z, 1] for x in (mn[0], mx[0]) for y in (mn[1], mx[1]) for z in (mn[2], mx[2])])
            wc = corners @ world.T
            lo, hi = np.minimum(lo, wc[:, :3].min(0)), np.maximum(hi, wc[:, :3].max(0))
    return tris, (lo, hi) if have_minmax and tris else None


def obj_expected(path: Path):
    text = path.read_text(errors="replace").replace("\\\r\n", " ").replace("\\\n", " ")
    tris, verts = 0, []
    for line in text.splitlines():
        tok = line.split("#", 1)[0].split()
        if tok and tok[0] == "f":
            tris += max(len(tok) - 3, 0)
        elif tok and tok[0] == "v":
            verts.append([float(x) for x in tok[1:4]])
    v = np.array(verts) if verts else np.zeros((0, 3))
    return tris, (v.min(0), v.max(0)) if tris else None


def ply_expected(path: Path):
    """Face count from the face lists: ascii by lines, binary by walking records with struct."""
    data = path.read_bytes()
    end = re.search(rb"end_header\r?\n", data).end()
    header = data[:end].decode().splitlines()
    fmt = header[1].split()[1]
    elems = []
    for ln in header:
        t = ln.split()
        if t and t[0] == "element":
            elems.append([t[1], int(t[2]), []])
        elif t and t[0] == "property":
            elems[-1][2].append(t[1:])
    size = {"char": "b", "uchar": "B", "short": "h", "ushort": "H", "int": "i", "uint": "I", "float": "f",
            "double": "d", "int8": "b", "uint8": "B", "int16": "h", "uint16": "H", "int32": "i",
            "uint32": "I", "float32": "f", "float64": "d"}
    tris = 0
    if fmt == "ascii":
        lines = [ln for ln in data[end:].decode().splitlines() if ln.strip()]
        i = 0
        for name, count, props in elems:
            if name == "face":
                for ln in lines[i:i + count]:
                    tris += max(int(float(ln.split()[0])) - 2, 0)
            i += count
        return tris
    bo = "<" if "little" in fmt else ">"
    off = end
    for name, count, props in elems:
        for _ in range(count):
            for pr in props:
                if pr[0] == "list":
                    (n,) = struct.unpack_from(bo + size[pr[1]], data, off)
                    off += struct.calcsize(size[pr[1]]) + n * struct.calcsize(size[pr[2]])
                    if name == "face" and pr[-1] in ("vertex_indices", "vertex_index"):
                        tris += max(n - 2, 0)
                else:
                    off += struct.calcsize(size[pr[0]])
    return tris


# -- the suite ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("rel", FILES)
def test_shared_asset(rel):
    path = ASSETS / rel
    if rel in EXPECTED_ERRORS:
        cls, pattern = EXPECTED_ERRORS[rel]
        with pytest.raises(cls, match=pattern) as e:
            load(path)
        assert str(path) in str(e.value)  # the error names the file
        return
    try:
        doc = load(path)
    except MissingDependencyError as e:  # an optional decoder is not installed here
        pytest.skip(str(e))
    except BpsError as e:  # pragma: no cover - the message is what we want to see
        pytest.fail(f"{rel} should load: {type(e).__name__}: {e}")
    suffix = path.suffix.lower()
    box = None
    if suffix in (".glb", ".gltf"):
        j = gltf_json(path)
        expected, box = gltf_expected(j)
        # Draco point clouds declared as triangles decode to no faces: expected drops them.
        if doc.stats.get("skipped_points") and doc.triangle_count < expected:
            pytest.fail(f"{rel}: {doc.triangle_count} triangles, JSON declares {expected}")
        assert doc.triangle_count == expected, (rel, doc.stats)
    elif suffix == ".obj":
        expected, box = obj_expected(path)
        assert doc.triangle_count == expected
    else:
        assert doc.triangle_count == ply_expected(path)
    if rel in KNOWN_TRIANGLES:
        assert doc.triangle_count == KNOWN_TRIANGLES[rel]
    assert doc.source_path == str(path) and doc.frame == "source"
    if doc.triangle_count:
        lo, hi = doc.bounds()
        assert np.isfinite(lo).all() and np.isfinite(hi).all() and (hi >= lo).all()
        if box is not None and rel not in MINMAX_WRONG:
            tol = 1e-4 * max(1.0, float(np.abs(np.concatenate(box)).max()))
            assert (lo >= box[0] - tol).all() and (hi <= box[1] + tol).all(), (lo, hi, box)
        for m in doc.meshes:
            assert m.indices.dtype == np.uint32 and m.positions.dtype == np.float32
            assert int(m.indices.max()) < len(m.positions)
            for a in (m.uvs, m.colors, m.normals):
                assert a is None or len(a) == len(m.positions)
            assert m.material is None or 0 <= m.material < len(doc.materials)
        for mat in doc.materials:
            assert mat.texture is None or 0 <= mat.texture < len(doc.textures)
        for t in doc.textures:
            assert t.rgba.dtype == np.uint8 and t.rgba.ndim == 3 and t.rgba.shape[2] == 4


def test_expected_errors_exist():
    """Every file named above is in the shared copy (the table stays in sync with it)."""
    missing = sorted(set(EXPECTED_ERRORS) - set(FILES))
    assert not missing, missing


def test_refused_for_missing_images_still_load_geometry():
    """Files refused only because an image is missing load with textures=False (the images
    are then not needed), with the triangle count their JSON declares."""
    for rel in ("loaders.gl/gltf/meshopt/MeshoptCubeTest/glTF-Meshopt/MeshoptCubeTest.gltf",
                "magnum-plugins/GltfImporter/edge/escaped-strings.gltf"):
        path = ASSETS / rel
        doc = load(path, textures=False)
        assert doc.triangle_count == gltf_expected(gltf_json(path))[0]
        assert doc.textures == []
