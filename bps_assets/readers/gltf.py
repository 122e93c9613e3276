"""glTF 2.0 reader (``.glb`` / ``.gltf``) -> SceneDocument.

The node hierarchy of the default scene (or every root node when the file names no default
scene; every mesh once when the file has no nodes at all) is flattened into world-space
meshes: one ``Mesh`` per (node instance, primitive), each primitive decoded once and then
transformed per instance. Nothing changes the frame: a Z-up scan stays Z-up.
Read: triangles / strips / fans (points and lines are skipped and counted in ``doc.stats``),
indexed or not, sparse and normalized accessors (KHR_mesh_quantization), Draco and meshopt
geometry, POSITION / NORMAL / COLOR_0 / the TEXCOORD_n set the base colour texture uses
(KHR_texture_transform applied), base colour factor and texture (or the diffuse ones of
KHR_materials_pbrSpecularGlossiness). Not applied: skins, morph targets and animations (the
static bind pose is read), CESIUM_RTC centres. Every external URI is checked (inside the file's
directory, file present) before anything is read, and every count, offset and stride against
the bytes that back it before an array is allocated (gltf_accessors). Arrays are never shared
between two output meshes.
"""
from __future__ import annotations

import math
import os

import numpy as np

from ..errors import InputError, UnsupportedExtensionError, is_int, is_real
from ..scene import Material, Mesh, SceneDocument, Texture
from ..transforms.frame import quat_matrix
from .guard import guarded
from .gltf_accessors import NORMALIZE, buffer_view, read_accessor
from .gltf_compression import decode_draco, draco_attribute, draco_faces
from .gltf_container import GltfFile, open_gltf
from .images import decode_image

# Extensions this reader implements (or, for appearance-only ones, may safely approximate by
# the base colour: a batch renderer of RGB/depth uses nothing else of a material or a light).
SUPPORTED_EXTENSIONS = frozenset({
    "KHR_draco_mesh_compression", "EXT_meshopt_compression", "KHR_meshopt_compression",
    "KHR_mesh_quantization", "KHR_texture_transform", "KHR_texture_basisu", "GOOGLE_texture_basis",
    "KHR_texture_ktx", "EXT_texture_webp", "KHR_materials_unlit",
    "KHR_materials_pbrSpecularGlossiness", "KHR_lights_punctual", "KHR_materials_emissive_strength",
    "KHR_materials_clearcoat", "KHR_materials_sheen", "KHR_materials_specular",
    "KHR_materials_transmission", "KHR_materials_volume", "KHR_materials_ior",
    "KHR_materials_iridescence", "KHR_materials_anisotropy", "KHR_materials_dispersion",
    "KHR_materials_variants",
})
# Image-source extensions of a texture, in order of preference after the plain ``source``.
IMAGE_SOURCE_EXTENSIONS = ("EXT_texture_webp", "KHR_texture_basisu", "GOOGLE_texture_basis",
                           "KHR_texture_ktx", "MSFT_texture_dds", "EXT_texture_avif")
MODE_POINTS, MODE_LINES, MODE_LINE_LOOP, MODE_LINE_STRIP = 0, 1, 2, 3
MODE_TRIANGLES, MODE_STRIP, MODE_FAN = 4, 5, 6
# Counted over the expanded node DAG before any instance is made (a node reached by two paths
# counts twice): real scans have tens to a few thousand of each, and walking a crafted DAG's
# instances takes minutes (docs/DECISIONS.md). ``expanded_counts`` refuses more, in milliseconds.
MAX_INSTANCES = 1 << 17            # node instances
MAX_PRIMITIVE_INSTANCES = 1 << 16  # mesh primitives, each instanced once per node that uses it
MAX_DEPTH = 1024


@guarded("glTF")
def read_gltf(path: str | os.PathLike, *, textures: bool = True) -> SceneDocument:
    """Read a glTF 2.0 file. ``textures=False`` skips image decoding (materials keep their
    texture slots as None), for geometry-only uses."""
    g = open_gltf(path)
    doc = SceneDocument(source_path=os.fspath(path),
                        source_format="glb" if g.glb_bin is not None or str(path).lower().endswith(".glb") else "gltf")
    _check_required(g)
    g.check_external(images=textures)
    _Reader(g, doc, textures).run()
    return doc


def _check_required(g: GltfFile) -> None:
    req = g.json.get("extensionsRequired", [])
    if not isinstance(req, list):
        raise g.fail("extensionsRequired must be an array")
    unknown = sorted(str(e) for e in req if not isinstance(e, str) or e not in SUPPORTED_EXTENSIONS)
    if unknown:
        raise UnsupportedExtensionError(
            g.path, f"required glTF extension(s) not supported: {', '.join(unknown)}")


def _finite(g: GltfFile, v, n: int, what: str, default) -> np.ndarray:
    if v is None:
        v = default
    try:
        a = np.asarray(v, np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise g.fail(f"{what} must be {n} numbers") from None
    if a.shape != (n,) or not np.isfinite(a).all():
        raise g.fail(f"{what} must be {n} finite numbers, got {v!r}")
    return a


def node_matrix(g: GltfFile, node: dict, i: int) -> np.ndarray:
    """Local 4x4 of a node: ``matrix`` (column-major) or T * R * S."""
    if "matrix" in node:
        return _finite(g, node["matrix"], 16, f"nodes[{i}].matrix", [np.nan]).reshape(4, 4).T.copy()
    t = _finite(g, node.get("translation"), 3, f"nodes[{i}].translation", [0, 0, 0])
    q = _finite(g, node.get("rotation"), 4, f"nodes[{i}].rotation", [0, 0, 0, 1])
    s = _finite(g, node.get("scale"), 3, f"nodes[{i}].scale", [1, 1, 1])
    m = np.eye(4)
    m[:3, :3] = quat_matrix(q) * s[None, :]
    m[:3, 3] = t
    return m


def texture_transform_matrix(ext: dict) -> np.ndarray:
    """3x3 UV matrix of KHR_texture_transform: T(offset) * R(rotation) * S(scale)."""
    def vec2(v, default):
        a = np.asarray(default if v is None else v, np.float64).reshape(-1)
        if a.shape != (2,):
            raise InputError(None, "expected 2 numbers")
        return a

    ox, oy = vec2(ext.get("offset"), [0, 0])
    sx, sy = vec2(ext.get("scale"), [1, 1])
    r = ext.get("rotation", 0.0)
    if not is_real(r):
        raise InputError(None, "rotation must be a number")
    c, s = math.cos(r), math.sin(r)
    t = np.array([[1, 0, ox], [0, 1, oy], [0, 0, 1]], np.float64)
    rot = np.array([[c, s, 0], [-s, c, 0], [0, 0, 1]], np.float64)
    sc = np.array([[sx, 0, 0], [0, sy, 0], [0, 0, 1]], np.float64)
    return t @ rot @ sc


def primitive_triangles(idx: np.ndarray, mode: int) -> np.ndarray:
    """[T, 3] triangles of an index list in glTF primitive ``mode`` 4, 5 or 6."""
    n = idx.shape[0]
    if mode == MODE_TRIANGLES:
        return idx[: n - n % 3].reshape(-1, 3)
    if n < 3:
        return np.zeros((0, 3), idx.dtype)
    i = np.arange(n - 2)
    if mode == MODE_STRIP:  # spec: {v_i, v_{i+(1+i%2)}, v_{i+(2-i%2)}}
        odd = i & 1
        return np.stack([idx[i], idx[i + 1 + odd], idx[i + 2 - odd]], axis=1)
    return np.stack([idx[i + 1], idx[i + 2], np.full(n - 2, idx[0], idx.dtype)], axis=1)  # fan


def expanded_counts(g: GltfFile, roots) -> tuple[int, int]:
    """(node instances, primitive instances) the scene's node DAG expands to, counted bottom-up
    once per node (memoized, saturating past the caps) before anything is instanced; an
    InputError when either is over its cap or the hierarchy has a cycle."""
    nodes = g.items("nodes")
    meshes = g.items("meshes")
    cap_n, cap_p = MAX_INSTANCES + 1, MAX_PRIMITIVE_INSTANCES + 1
    memo: dict[int, tuple[int, int]] = {}
    on_path: set[int] = set()

    def own(ni):
        node = g.item("nodes", ni, "node")
        mi = node.get("mesh")
        prims = 0
        if is_int(mi) and 0 <= mi < len(meshes) and \
                isinstance(meshes[mi], dict) and isinstance(meshes[mi].get("primitives"), list):
            prims = len(meshes[mi]["primitives"])
        children = node.get("children") or []
        if not isinstance(children, list):
            raise g.fail(f"nodes[{ni}].children must be an array")
        return prims, [g.index(c, f"nodes[{ni}].children") for c in children]

    total_n = total_p = 0
    for r in roots:
        r = g.index(r, "scene.nodes")
        stack = [(r, False)]
        while stack:
            ni, done = stack.pop()
            if done:
                prims, children = own(ni)
                n, p = 1, prims
                for c in children:
                    cn, cp = memo.get(c, (0, 0))
                    n, p = min(cap_n, n + cn), min(cap_p, p + cp)
                memo[ni] = (n, p)
                on_path.discard(ni)
                continue
            if ni in memo:
                continue
            if ni in on_path:
                raise g.fail(f"node hierarchy has a cycle through node {ni}")
            on_path.add(ni)
            stack.append((ni, True))
            stack.extend((c, False) for c in own(ni)[1] if c not in memo)
        rn, rp = memo[r]
        total_n, total_p = min(cap_n, total_n + rn), min(cap_p, total_p + rp)
    if total_n > MAX_INSTANCES:
        raise g.fail(f"the node hierarchy expands to more than {MAX_INSTANCES} node instances "
                     "(nodes shared by several parents multiply)")
    if total_p > MAX_PRIMITIVE_INSTANCES:
        raise g.fail(f"the scene instances more than {MAX_PRIMITIVE_INSTANCES} mesh primitives")
    return total_n, total_p


class _Reader:
    def __init__(self, g: GltfFile, doc: SceneDocument, textures: bool):
        self.g, self.doc, self.decode_textures = g, doc, textures
        self.material_map: dict = {}   # glTF material index -> (doc index, texCoord set)
        self.image_map: dict = {}      # glTF image index -> doc texture index
        self.prim_cache: dict = {}
        self.prim_uses: dict = {}

    # -- scene graph -----------------------------------------------------------------------
    def run(self) -> None:
        g = self.g
        nodes = g.items("nodes")
        g.items("scenes")  # type check
        # (CESIUM_RTC's centre is not applied: it lives in the tile's ECEF frame, not the glTF's.)
        root = np.eye(4)
        if "scene" in g.json:
            roots = g.item("scenes", g.json["scene"], "scene").get("nodes", [])
        elif nodes:
            children = set()
            for n in nodes:
                if isinstance(n, dict):
                    for c in n.get("children", []) or []:
                        if isinstance(c, int):
                            children.add(c)
            roots = [i for i in range(len(nodes)) if i not in children]
        else:
            # No nodes at all: show every mesh once, untransformed.
            prims = sum(len(m.get("primitives") or ()) for m in g.items("meshes") if isinstance(m, dict))
            if prims > MAX_PRIMITIVE_INSTANCES:
                raise g.fail(f"{prims} mesh primitives, over the cap of {MAX_PRIMITIVE_INSTANCES}")
            for mi in range(len(g.items("meshes"))):
                self.instance_mesh(mi, root, f"mesh{mi}")
            return
        if not isinstance(roots, list):
            raise g.fail("scene.nodes must be an array")
        expanded_counts(g, roots)
        instances = 0
        stack = [(r, root, ()) for r in reversed(roots)]
        while stack:
            ni, parent, path = stack.pop()
            node = g.item("nodes", ni, "node")
            if ni in path:
                raise g.fail(f"node hierarchy has a cycle through node {ni}")
            if len(path) > MAX_DEPTH:
                raise g.fail(f"node hierarchy deeper than {MAX_DEPTH}")
            instances += 1
            if instances > MAX_INSTANCES:
                raise g.fail(f"more than {MAX_INSTANCES} node instances")
            world = parent @ node_matrix(g, node, ni)
            if "mesh" in node:
                self.instance_mesh(node["mesh"], world, str(node.get("name") or f"node{ni}"))
            children = node.get("children", []) or []
            if not isinstance(children, list):
                raise g.fail(f"nodes[{ni}].children must be an array")
            sub = path + (ni,)
            for c in reversed(children):
                stack.append((c, world, sub))

    def instance_mesh(self, mi, world: np.ndarray, name: str) -> None:
        g = self.g
        mesh = g.item("meshes", mi, "mesh")
        prims = mesh.get("primitives", [])
        if not isinstance(prims, list):
            raise g.fail(f"meshes[{mi}].primitives must be an array")
        lin = world[:3, :3]
        det = float(np.linalg.det(lin))
        for pi in range(len(prims)):
            local = self.primitive(mi, pi, prims[pi])
            if local is None:
                continue
            pos, tris, normals, uvs, colors, mat = local
            # The first instance of a primitive takes its decoded arrays; later instances get
            # copies, so no two meshes share a buffer a transform might modify in place.
            shared = self.prim_uses.get((mi, pi), 0) > 0
            self.prim_uses[(mi, pi)] = self.prim_uses.get((mi, pi), 0) + 1
            if shared:
                uvs = None if uvs is None else uvs.copy()
                colors = None if colors is None else colors.copy()
            if np.array_equal(world, np.eye(4)):
                # positions / normals come from the accessor cache, which primitives share
                self.doc.meshes.append(Mesh(
                    positions=pos.copy(), indices=tris.copy() if shared else tris, uvs=uvs, colors=colors,
                    normals=None if normals is None else normals.copy(),
                    material=mat, name=f"{name}/{mesh.get('name') or f'mesh{mi}'}/{pi}"))
                continue
            p = pos.astype(np.float64) @ lin.T + world[:3, 3]
            t = tris[:, [0, 2, 1]] if det < 0 else tris
            n = None
            if normals is not None:
                try:
                    nm = np.linalg.inv(lin).T
                except np.linalg.LinAlgError:
                    nm = None
                if nm is not None:
                    n = normals.astype(np.float64) @ nm.T
                    ln = np.linalg.norm(n, axis=1, keepdims=True)
                    n = (n / np.where(ln > 0, ln, 1)).astype(np.float32)
            self.doc.meshes.append(Mesh(
                positions=p.astype(np.float32), indices=np.ascontiguousarray(t, np.uint32),
                uvs=uvs, colors=colors, normals=n, material=mat,
                name=f"{name}/{mesh.get('name') or f'mesh{mi}'}/{pi}"))

    # -- primitives ------------------------------------------------------------------------
    def primitive(self, mi: int, pi: int, prim):
        key = (mi, pi)
        if key not in self.prim_cache:
            self.prim_cache[key] = self._decode_primitive(mi, pi, prim)
        return self.prim_cache[key]

    def _decode_primitive(self, mi: int, pi: int, prim):
        g, doc = self.g, self.doc
        where = f"meshes[{mi}].primitives[{pi}]"
        if not isinstance(prim, dict):
            raise g.fail(f"{where} must be an object")
        mode = prim.get("mode", MODE_TRIANGLES)
        if not is_int(mode) or mode not in range(7):
            raise g.fail(f"{where}.mode {mode!r} is not a glTF primitive mode")
        attrs = prim.get("attributes", {})
        if not isinstance(attrs, dict):
            raise g.fail(f"{where}.attributes must be an object")
        draco = g.obj(prim.get("extensions")).get("KHR_draco_mesh_compression")
        if mode in (MODE_POINTS, MODE_LINES, MODE_LINE_LOOP, MODE_LINE_STRIP):
            n = self._element_count(prim, attrs, draco)
            if mode == MODE_POINTS:
                doc.count("skipped_points", n)
            else:
                segs = {MODE_LINES: n // 2, MODE_LINE_LOOP: n if n > 1 else 0,
                        MODE_LINE_STRIP: max(n - 1, 0)}[mode]
                doc.count("skipped_lines", segs)
            return None
        if "POSITION" not in attrs:
            doc.count("primitives_without_positions")
            return None

        if draco is not None:
            dmesh, dattrs = self._draco(where, draco)

            def attr(name, as_float=True):
                if name in dattrs:
                    return self._draco_attr(dmesh, dattrs[name], attrs.get(name), where)
                return read_accessor(g, attrs[name], as_float) if name in attrs else None
        else:
            def attr(name, as_float=True):
                return read_accessor(g, attrs[name], as_float) if name in attrs else None

        pos = attr("POSITION")
        if pos.shape[1] != 3:
            raise g.fail(f"{where}: POSITION must be VEC3")
        nv = pos.shape[0]
        if draco is not None:
            idx = draco_faces(dmesh)
            if idx is None:  # a Draco point cloud declared as triangles
                doc.count("skipped_points", nv)
                return None
            idx = idx.astype(np.int64)
        elif "indices" in prim:
            ia = g.item("accessors", prim["indices"], "indices accessor")
            if ia.get("componentType") not in (5121, 5123, 5125) or ia.get("type") != "SCALAR":
                raise g.fail(f"{where}.indices must be SCALAR u8/u16/u32")
            idx = read_accessor(g, prim["indices"]).reshape(-1).astype(np.int64)
        else:
            idx = np.arange(nv, dtype=np.int64)
        if idx.size and int(idx.max()) >= nv:
            raise g.fail(f"{where}: index {int(idx.max())} out of range for {nv} vertices")
        tris = primitive_triangles(idx, mode).astype(np.uint32)
        if mode != MODE_TRIANGLES or idx.size % 3:
            doc.count("converted_strip_fan_primitives" if mode != MODE_TRIANGLES else "truncated_index_lists")
        if tris.shape[0] == 0:
            doc.count("empty_primitives")
            return None

        mat_index, uv_set, uv_matrix = None, None, None
        if "material" in prim:
            mat_index, uv_set, uv_matrix = self.material(prim["material"])
        uvs = None
        if uv_set is not None:
            name = f"TEXCOORD_{uv_set}"
            if name in attrs:
                uv = attr(name)
                if uv.shape[1] != 2:
                    raise g.fail(f"{where}: {name} must be VEC2")
                uvs = uv.astype(np.float32)
                if uv_matrix is not None:
                    uvs = (uvs @ uv_matrix[:2, :2].T.astype(np.float32)
                           + uv_matrix[:2, 2].astype(np.float32))
                uvs = np.ascontiguousarray(uvs, np.float32)
            else:
                doc.count("missing_texcoords")
        colors = None
        if "COLOR_0" in attrs:
            c = attr("COLOR_0")
            if c.shape[1] not in (3, 4):
                raise g.fail(f"{where}: COLOR_0 must be VEC3 or VEC4")
            if c.shape[1] == 3:
                c = np.concatenate([c, np.ones((c.shape[0], 1), np.float32)], axis=1)
            colors = np.clip(c, 0.0, 1.0).astype(np.float32)
        normals = attr("NORMAL") if "NORMAL" in attrs else None
        if normals is not None and normals.shape[1] != 3:
            normals = None
        for name, a in (("TEXCOORD", uvs), ("COLOR_0", colors), ("NORMAL", normals)):
            if a is not None and a.shape[0] != nv:
                raise g.fail(f"{where}: {name} has {a.shape[0]} elements but POSITION has {nv}")
        return pos, tris, normals, uvs, colors, mat_index

    def _element_count(self, prim, attrs, draco) -> int:
        """Declared element count of a skipped point/line primitive (for the stats only)."""
        g = self.g
        key = prim["indices"] if "indices" in prim and draco is None else attrs.get("POSITION")
        if key is None:
            return 0
        n = g.item("accessors", key, "accessor").get("count", 0)
        return n if isinstance(n, int) and n >= 0 else 0

    def _draco(self, where, ext):
        g = self.g
        if not isinstance(ext, dict) or "bufferView" not in ext:
            raise g.fail(f"{where}: KHR_draco_mesh_compression needs a bufferView")
        data, _ = buffer_view(g, ext["bufferView"])

        def fail(detail):
            return g.fail(f"{where}: {detail}")

        dmesh = decode_draco(g.path, data, fail)
        dattrs = ext.get("attributes") or {}
        if not isinstance(dattrs, dict):
            raise fail("KHR_draco_mesh_compression.attributes must be an object")
        return dmesh, dattrs

    def _draco_attr(self, dmesh, uid, acc_index, where) -> np.ndarray:
        g = self.g

        def fail(detail):
            return g.fail(f"{where}: {detail}")

        a = draco_attribute(dmesh, uid, fail)
        if acc_index is not None:
            # The accessor, not DracoPy's array dtype (float32 even for int16 streams), says
            # whether values are normalized integers (KHR_mesh_quantization + Draco).
            acc = g.item("accessors", acc_index, "accessor")
            ct = acc.get("componentType")
            if acc.get("normalized") is True and isinstance(ct, int) and ct in NORMALIZE:
                return np.maximum(a.astype(np.float32) / NORMALIZE[ct], -1.0)
        return a.astype(np.float32)

    # -- materials and textures ---------------------------------------------------------------
    def material(self, index):
        index = self.g.index(index, "material")
        if index in self.material_map:
            return self.material_map[index]
        g = self.g
        m = g.item("materials", index, "material")
        sg = g.obj(m.get("extensions")).get("KHR_materials_pbrSpecularGlossiness")
        if isinstance(sg, dict):
            factor, tex_info = sg.get("diffuseFactor"), sg.get("diffuseTexture")
        else:
            pbr = m.get("pbrMetallicRoughness") or {}
            if not isinstance(pbr, dict):
                raise g.fail(f"materials[{index}].pbrMetallicRoughness must be an object")
            factor, tex_info = pbr.get("baseColorFactor"), pbr.get("baseColorTexture")
        color = _finite(g, factor, 4, f"materials[{index}] base colour factor", [1, 1, 1, 1])
        mat = Material(name=str(m.get("name") or f"material{index}"), base_color=color.astype(np.float32),
                       double_sided=bool(m.get("doubleSided", False)),
                       alpha_mode=str(m.get("alphaMode", "OPAQUE")))
        uv_set = uv_matrix = None
        if isinstance(tex_info, dict):
            if "index" not in tex_info:
                raise g.fail(f"materials[{index}] base colour texture has no index")
            uv_set = tex_info.get("texCoord", 0)
            tt = g.obj(tex_info.get("extensions")).get("KHR_texture_transform")
            if isinstance(tt, dict):
                try:
                    uv_matrix = texture_transform_matrix(tt)
                except (TypeError, ValueError, InputError):
                    raise g.fail(f"materials[{index}]: malformed KHR_texture_transform") from None
                if not np.isfinite(uv_matrix).all():
                    raise g.fail(f"materials[{index}]: non-finite KHR_texture_transform")
                uv_set = tt.get("texCoord", uv_set)
                mat.uv_transform = uv_matrix.astype(np.float32)
            if not isinstance(uv_set, int) or uv_set < 0:
                raise g.fail(f"materials[{index}]: texCoord {uv_set!r} is not a set index")
            if self.decode_textures:
                mat.texture = self.texture(tex_info["index"])
        self.doc.materials.append(mat)
        out = (len(self.doc.materials) - 1, uv_set, uv_matrix)
        self.material_map[index] = out
        return out

    def texture(self, ti) -> int | None:
        g = self.g
        t = g.item("textures", ti, "texture")
        src = t.get("source")
        exts = g.obj(t.get("extensions"))
        if src is None:
            for name in IMAGE_SOURCE_EXTENSIONS:
                e = exts.get(name)
                if isinstance(e, dict) and "source" in e:
                    src = e["source"]
                    break
        if src is None:
            self.doc.count("textures_without_image")
            return None
        src = g.index(src, "image")
        if src in self.image_map:
            return self.image_map[src]
        img = g.item("images", src, "image")
        what = f"images[{src}]"
        if "uri" in img:
            data = g.read_uri(img["uri"], what)
            label = img["uri"] if not str(img["uri"]).startswith("data:") else f"{what} (data URI)"
        elif "bufferView" in img:
            data = bytes(buffer_view(g, img["bufferView"])[0])
            label = f"{what} (bufferView {img['bufferView']})"
        else:
            raise g.fail(f"{what} has neither uri nor bufferView")
        rgba = decode_image(data, g.path, what)
        self.doc.textures.append(Texture(rgba=rgba, source=label, name=str(img.get("name") or "")))
        self.image_map[src] = len(self.doc.textures) - 1
        return self.image_map[src]

