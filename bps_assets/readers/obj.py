"""Wavefront OBJ reader (+ MTL) -> SceneDocument.

Reads ``v`` (with optional ``r g b`` vertex colours), ``vt``, ``vn`` and ``f`` in all its
forms (``v``, ``v/vt``, ``v//vn``, ``v/vt/vn``, negative = relative indices), fan-triangulating
polygons; ``o`` / ``g`` / ``usemtl`` split the output into one Mesh per (group, material).
``mtllib`` materials give ``Kd`` (+ ``d`` / ``Tr`` alpha) and ``map_Kd`` (its ``-o`` / ``-s``
options become the UV transform, applied to the UVs).

An OBJ's MTL is advisory: a missing ``mtllib`` file or ``map_Kd`` image does not stop the load;
it is counted in ``doc.stats`` (``missing_mtllib``, ``missing_textures``) and the default
material is used. Paths that leave the OBJ's directory are refused (InputError).

Speed: lines are dispatched once in Python; numbers are converted in bulk with numpy, and
corner de-duplication / triangulation / per-group splitting are vectorized.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..errors import InputError
from ..scene import Material, Mesh, SceneDocument, Texture
from .guard import guarded
from .images import decode_image
from .polygons import fan_triangulate

# map_* options and how many values each takes (-o/-s/-t take 1 to 3 numbers).
_MAP_OPTS = {"-blendu": 1, "-blendv": 1, "-boost": 1, "-mm": 2, "-texres": 1, "-clamp": 1,
             "-bm": 1, "-imfchan": 1, "-type": 1, "-cc": 1}
_MAP_VEC_OPTS = ("-o", "-s", "-t")


def _floats(rows: list[list[str]], path: str, what: str) -> np.ndarray:
    if not rows:
        return np.zeros((0, 0))
    width = min(len(r) for r in rows)
    try:
        if all(len(r) == width for r in rows):
            return np.array(rows, dtype=np.float64).reshape(len(rows), width)
        return np.array([r[:width] for r in rows], dtype=np.float64)
    except ValueError:
        raise InputError(path, f"OBJ: a '{what}' line has a non-numeric value") from None


def _safe_path(path: str, base: Path, name: str, what: str) -> Path:
    rel = name.strip().strip('"').replace("\\", "/")
    if os.path.isabs(rel) or rel.startswith("/") or (len(rel) > 1 and rel[1] == ":"):
        raise InputError(path, f"{what} {name!r}: absolute paths are not allowed")
    if ".." in rel.split("/"):
        raise InputError(path, f"{what} {name!r} leaves the directory of the OBJ file (path traversal)")
    return base / rel


@guarded("OBJ")
def read_obj(path: str | os.PathLike, *, textures: bool = True) -> SceneDocument:
    spath = os.fspath(path)
    try:
        text = Path(path).read_bytes().decode("utf-8", "replace")
    except OSError as e:
        raise InputError(spath, f"cannot read: {e.strerror or e}") from None
    base = Path(spath).parent
    doc = SceneDocument(source_path=spath, source_format="obj")

    vrows, vtrows, vnrows = [], [], []
    counts, corners, face_group, face_nv, face_nvt, face_nvn = [], [], [], [], [], []
    groups: list[tuple[str, str | None]] = [("", None)]
    group_ids = {("", None): 0}
    cur_name, cur_mat, gid = "", None, 0
    mtllibs: list[str] = []
    n_points = n_lines = 0

    if "\\\n" in text or "\\\r\n" in text:  # line continuations
        text = text.replace("\\\r\n", " ").replace("\\\n", " ")
    for line in text.splitlines():
        if "#" in line:
            line = line.split("#", 1)[0]
        tok = line.split()
        if not tok:
            continue
        kw = tok[0]
        if kw == "v":
            vrows.append(tok[1:])
        elif kw == "vt":
            vtrows.append(tok[1:3] if len(tok) >= 3 else tok[1:2] + ["0"])
        elif kw == "vn":
            vnrows.append(tok[1:4])
        elif kw == "f":
            c = tok[1:]
            counts.append(len(c))
            corners.extend(c)
            face_group.append(gid)
            face_nv.append(len(vrows))
            face_nvt.append(len(vtrows))
            face_nvn.append(len(vnrows))
        elif kw in ("o", "g", "usemtl"):
            rest = line.split(None, 1)[1].strip() if len(tok) > 1 else ""
            if kw == "usemtl":
                cur_mat = rest or None
            else:
                cur_name = rest
            key = (cur_name, cur_mat)
            if key not in group_ids:
                group_ids[key] = len(groups)
                groups.append(key)
            gid = group_ids[key]
        elif kw == "mtllib":
            mtllibs.append(line.split(None, 1)[1].strip() if len(tok) > 1 else "")
        elif kw == "p":
            n_points += len(tok) - 1
        elif kw == "l":
            n_lines += max(len(tok) - 2, 0)
    if n_points:
        doc.count("skipped_points", n_points)
    if n_lines:
        doc.count("skipped_lines", n_lines)

    # "v x y z [r g b]": rows without colours (when others have them) count as white.
    has_rgb = any(len(r) >= 6 for r in vrows)
    if has_rgb:
        vrows = [r[:6] if len(r) >= 6 else r[:3] + ["1", "1", "1"] for r in vrows]
    v = _floats(vrows, spath, "v")
    if v.size and v.shape[1] < 3:
        raise InputError(spath, "OBJ: a 'v' line has fewer than 3 coordinates")
    nv = v.shape[0]
    positions = v[:, :3].astype(np.float32) if nv else np.zeros((0, 3), np.float32)
    vcolors = None
    if nv and has_rgb:
        rgb = v[:, 3:6]
        if np.nanmax(rgb, initial=0) > 1.0:  # some writers use 0..255
            rgb = rgb / 255.0
        rgb = np.nan_to_num(rgb, nan=1.0)
        vcolors = np.concatenate([np.clip(rgb, 0, 1), np.ones((nv, 1))], axis=1).astype(np.float32)
    vt = _floats(vtrows, spath, "vt")[:, :2].astype(np.float32) if vtrows else np.zeros((0, 2), np.float32)
    vn = _floats(vnrows, spath, "vn")
    vn = vn[:, :3].astype(np.float32) if vnrows and vn.shape[1] >= 3 else None

    materials = _load_mtllibs(doc, spath, base, mtllibs, textures)

    if not counts:
        if nv and not (n_points or n_lines):
            doc.count("skipped_points", nv)
        return doc
    counts_a = np.asarray(counts, np.int64)
    vi, ti, ni = _parse_corners(spath, corners)
    corner_face = np.repeat(np.arange(counts_a.size), counts_a)
    vi = _resolve(spath, vi, np.asarray(face_nv, np.int64)[corner_face], nv, "v", required=True)
    # Faces naming vt / vn indices in a file that has none of them: ignore those indices.
    if vt.shape[0] == 0 and (ti != 0).any():
        doc.count("ignored_texcoord_indices")
        ti[:] = 0
    if vn is None and (ni != 0).any():
        doc.count("ignored_normal_indices")
        ni[:] = 0
    ti = _resolve(spath, ti, np.asarray(face_nvt, np.int64)[corner_face], vt.shape[0], "vt")
    ni = _resolve(spath, ni, np.asarray(face_nvn, np.int64)[corner_face], len(vnrows), "vn")
    small = int((counts_a < 3).sum())
    if small:
        doc.count("skipped_degenerate_faces", small)

    # One output vertex per distinct (v, vt, vn) corner.
    use_t, use_n = bool((ti >= 0).any()), bool((ni >= 0).any())
    if use_t or use_n:
        key = np.stack([vi, ti if use_t else np.zeros_like(vi), ni if use_n else np.zeros_like(vi)], axis=1)
        uniq, corner_vertex = np.unique(key, axis=0, return_inverse=True)
        corner_vertex = corner_vertex.reshape(-1)
        pos_all = positions[uniq[:, 0]]
        col_all = None if vcolors is None else vcolors[uniq[:, 0]]
        uv_all = None
        if use_t:
            uv_all = np.zeros((uniq.shape[0], 2), np.float32)
            has = uniq[:, 1] >= 0
            uv_all[has] = vt[uniq[has, 1]]
        nrm_all = None
        if use_n:
            nrm_all = np.zeros((uniq.shape[0], 3), np.float32)
            has = uniq[:, 2] >= 0
            nrm_all[has] = vn[uniq[has, 2]]
    else:
        corner_vertex = vi
        pos_all, col_all, uv_all, nrm_all = positions, vcolors, None, None

    tris, poly = fan_triangulate(counts_a, corner_vertex)
    tri_group = np.asarray(face_group, np.int64)[poly]
    order = np.argsort(tri_group, kind="stable")
    tris, tri_group = tris[order], tri_group[order]
    bounds = np.searchsorted(tri_group, np.arange(len(groups) + 1))
    mat_index: dict = {}
    for g in range(len(groups)):
        t = tris[bounds[g]:bounds[g + 1]]
        if not t.size:
            continue
        used, local = np.unique(t.reshape(-1), return_inverse=True)
        name, mname = groups[g]
        mi, uvm = None, None
        if mname is not None:
            if mname not in mat_index:
                src = materials.get(mname)
                if src is None:
                    doc.count("unknown_materials")
                    src = Material(name=mname)
                doc.materials.append(src)
                mat_index[mname] = len(doc.materials) - 1
            mi = mat_index[mname]
            uvm = doc.materials[mi].uv_transform
        uvs = None if uv_all is None else uv_all[used]
        if uvs is not None and uvm is not None:
            uvs = (uvs @ uvm[:2, :2].T + uvm[:2, 2]).astype(np.float32)
        doc.meshes.append(Mesh(
            positions=np.ascontiguousarray(pos_all[used]),
            indices=local.reshape(-1, 3).astype(np.uint32),
            uvs=uvs, colors=None if col_all is None else col_all[used],
            normals=None if nrm_all is None else nrm_all[used], material=mi,
            name=name or mname or Path(spath).stem))
    return doc


def _parse_corners(path: str, corners: list[str]):
    """Corner strings -> (v, vt, vn) int64 arrays; 0 marks 'absent' (OBJ indices start at 1)."""
    try:
        if not any("/" in c for c in corners):
            v = np.array(corners, dtype=np.int64)
            z = np.zeros_like(v)
            return v, z, z.copy()
        parts = [c.split("/") for c in corners]
        v = np.array([p[0] for p in parts], dtype=np.int64)
        t = np.array([p[1] if len(p) > 1 and p[1] else "0" for p in parts], dtype=np.int64)
        n = np.array([p[2] if len(p) > 2 and p[2] else "0" for p in parts], dtype=np.int64)
        return v, t, n
    except ValueError:
        raise InputError(path, "OBJ: a face corner is not an integer index") from None


def _resolve(path, idx: np.ndarray, seen: np.ndarray, total: int, what: str, required: bool = False) -> np.ndarray:
    """1-based -> 0-based (checked against all ``total`` elements, as common loaders do, so
    a file may define vt/vn after its faces); negative indices count back from the elements
    defined before the face (``seen``); -1 = absent."""
    out = np.where(idx > 0, idx - 1, np.where(idx < 0, seen + idx, -1))
    if required and (idx == 0).any():
        raise InputError(path, f"OBJ: face refers to {what} index 0 (indices start at 1)")
    bad = ((idx > 0) & (out >= total)) | ((idx < 0) & (out < 0))
    if bad.any():
        k = int(np.argmax(bad))
        raise InputError(path, f"OBJ: face {what} index {int(idx[k])} out of range "
                               f"({total} defined, {int(seen[k])} before that face)")
    return out


def _load_mtllibs(doc, path, base: Path, names: list[str], textures: bool) -> dict:
    mats: dict[str, Material] = {}
    for entry in names:
        cands = [entry] if (base / entry).exists() else entry.split()
        for name in cands:
            mpath = _safe_path(path, base, name, "mtllib")
            try:
                text = mpath.read_bytes().decode("utf-8", "replace")
            except OSError:
                doc.count("missing_mtllib")
                continue
            _parse_mtl(doc, path, mpath, text, mats, textures)
    return mats


def _parse_mtl(doc, path, mpath: Path, text: str, mats: dict, textures: bool) -> None:
    cur = None
    for line in text.splitlines():
        tok = line.split("#", 1)[0].split() if "#" in line else line.split()
        if not tok:
            continue
        kw = tok[0]
        try:
            if kw == "newmtl":
                name = line.split(None, 1)[1].strip() if len(tok) > 1 else ""
                cur = mats[name] = Material(name=name)
            elif cur is None:
                continue
            elif kw == "Kd" and len(tok) >= 4:
                cur.base_color[:3] = np.clip([float(x) for x in tok[1:4]], 0, 1)
            elif kw == "d" and len(tok) >= 2:
                cur.base_color[3] = float(tok[-1])
            elif kw == "Tr" and len(tok) >= 2:
                cur.base_color[3] = 1.0 - float(tok[-1])
            elif kw == "map_Kd" and len(tok) >= 2:
                fname, uvm = _map_args(tok[1:])
                if uvm is not None:
                    cur.uv_transform = uvm
                if textures and fname:
                    cur.texture = _texture(doc, path, mpath.parent, fname)
        except ValueError:
            raise InputError(path, f"MTL {mpath.name}: bad number in {line.strip()!r}") from None
    for m in mats.values():
        if m.base_color[3] < 1.0:
            m.alpha_mode = "BLEND"


def _map_args(args: list[str]):
    off, scale, i = [0.0, 0.0], [1.0, 1.0], 0
    while i < len(args) and args[i].startswith("-"):
        opt = args[i]
        i += 1
        if opt in _MAP_VEC_OPTS:
            vals = []
            while i < len(args) and len(vals) < 3:
                try:
                    vals.append(float(args[i]))
                except ValueError:
                    break
                i += 1
            if opt == "-o" and vals:
                off = (vals + [0.0])[:2]
            elif opt == "-s" and vals:
                scale = (vals + [1.0])[:2]
        else:
            i += _MAP_OPTS.get(opt, 0)
    fname = " ".join(args[i:])
    uvm = None
    if off != [0.0, 0.0] or scale != [1.0, 1.0]:
        uvm = np.array([[scale[0], 0, off[0]], [0, scale[1], off[1]], [0, 0, 1]], np.float32)
    return fname, uvm


def _texture(doc, path, mtl_dir: Path, fname: str) -> int | None:
    obj_dir = Path(path).parent
    target = _safe_path(path, mtl_dir, fname, "map_Kd")
    try:
        if obj_dir.resolve() not in target.resolve().parents:
            raise InputError(path, f"map_Kd {fname!r} leaves the directory of the OBJ file")
    except OSError:
        pass
    key = str(target)
    for i, t in enumerate(doc.textures):
        if t.source == key:
            return i
    try:
        data = target.read_bytes()
    except OSError:
        doc.count("missing_textures")
        return None
    doc.textures.append(Texture(rgba=decode_image(data, path, f"map_Kd {fname!r}"), source=key, name=fname))
    return len(doc.textures) - 1
