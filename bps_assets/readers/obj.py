"""Wavefront OBJ reader (+ MTL) -> SceneDocument.

Reads ``v`` (with optional ``r g b`` vertex colours), ``vt``, ``vn`` and ``f`` in all its
forms (``v``, ``v/vt``, ``v//vn``, ``v/vt/vn``, negative = relative indices), fan-triangulating
polygons; ``o`` / ``g`` / ``usemtl`` split the output into one Mesh per (group, material).
``mtllib`` materials give ``Kd`` (+ ``d`` / ``Tr`` alpha) and ``map_Kd`` (its ``-o`` / ``-s``
options become the UV transform, applied to the UVs).

An OBJ's MTL is advisory: a missing ``mtllib`` file or ``map_Kd`` image does not stop the load;
it is counted in ``doc.stats`` (``missing_mtllib``, ``missing_textures``) and the default
material is used. Paths that leave the OBJ's directory are refused (InputError).
Parsing is vectorized: lines are classified by their first bytes with numpy and each run of
same-kind lines is parsed in one ``np.fromstring`` call (timings: docs/DECISIONS.md).
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np

from ..errors import InputError
from ..scene import Material, Mesh, SceneDocument, Texture
from .guard import guarded, read_source, text_pieces
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


def _rows_to_array(path: str, parts: list, what: str, colors: bool = False) -> np.ndarray:
    """Concatenate the scanner's pieces (2-D float arrays from the fast path, or lists of
    token rows from the slow one) into one [N, W] array."""
    if colors and any(isinstance(p, list) and any(len(r) >= 6 for r in p) or
                      (isinstance(p, np.ndarray) and p.shape[1] >= 6) for p in parts):
        width = 6  # "v x y z [r g b]": rows without colours (when others have them) are white
    else:
        width = None
    arrays = []
    for p in parts:
        if isinstance(p, list):
            if width == 6:
                p = [r[:6] if len(r) >= 6 else r[:3] + ["1", "1", "1"] for r in p]
            a = _floats(p, path, what)
        else:
            a = p
            if width == 6 and a.shape[1] < 6:
                a = np.concatenate([a[:, :3], np.ones((a.shape[0], 3))], axis=1)
        if a.size:
            arrays.append(a)
    if not arrays:
        return np.zeros((0, 3))
    w = min(a.shape[1] for a in arrays)
    return np.concatenate([a[:, :w] for a in arrays])


class _Scan:
    """What the line scan found; faces as flat arrays (0 = absent vt/vn index)."""

    def __init__(self):
        self.v, self.vt, self.vn = [], [], []          # pieces for _rows_to_array
        self.nv = self.nvt = self.nvn = 0
        self.counts, self.vi, self.ti, self.ni = [], [], [], []
        self.face_group, self.face_nv, self.face_nvt, self.face_nvn = [], [], [], []
        self.groups: list[tuple[str, str | None]] = [("", None)]
        self.group_ids = {("", None): 0}
        self.name, self.mat, self.gid = "", None, 0
        self.mtllibs: list[str] = []
        self.n_points = self.n_lines = 0

    def finish(self):
        cat = (lambda xs, dt=np.int64: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dt))
        self.counts, self.vi, self.ti, self.ni = cat(self.counts), cat(self.vi), cat(self.ti), cat(self.ni)
        self.face_group, self.face_nv = cat(self.face_group), cat(self.face_nv)
        self.face_nvt, self.face_nvn = cat(self.face_nvt), cat(self.face_nvn)
        return self


_WS = np.array([32, 9, 13], np.uint8)
KIND_OTHER, KIND_V, KIND_VT, KIND_VN, KIND_F = 0, 1, 2, 3, 4


def _scan(path: str, data: bytes) -> _Scan:
    """Classify every line by its first bytes with numpy, then parse each run of same-kind
    lines in one step (``np.fromstring`` over the run's bytes); only state lines (o, g,
    usemtl, mtllib, p, l, ...) and runs in unusual forms are handled line by line. The text
    goes through in ``guard.TEXT_PIECE`` pieces, each converted to arrays before the next, so junk
    is refused after one piece and memory stays a small multiple of the file's size."""
    sc = _Scan()
    for piece in text_pieces(data, continuations=True):
        _scan_piece(path, piece, sc)
    return sc.finish()


def _scan_piece(path: str, data: bytes, sc: _Scan) -> None:
    if b"\\\n" in data or b"\\\r\n" in data:  # line continuations
        data = data.replace(b"\\\r\n", b" ").replace(b"\\\n", b" ")
    if b"#" in data:
        data = re.sub(rb"#[^\n]*", b"", data)
    arr = np.frombuffer(data, np.uint8)
    nl = np.flatnonzero(arr == 10)
    if arr.size and np.isin(arr[np.concatenate([[0], nl[nl + 1 < arr.size] + 1])], [32, 9]).any():
        data = re.sub(rb"(?m)^[ \t]+", b"", data)  # indented lines
        arr = np.frombuffer(data, np.uint8)
        nl = np.flatnonzero(arr == 10)
    starts = np.concatenate([[0], nl + 1])
    ends = np.concatenate([nl, [arr.size]])
    pad = np.concatenate([arr, np.zeros(3, np.uint8)])
    c0, c1, c2 = pad[starts], pad[starts + 1], pad[starts + 2]
    ws1, ws2 = np.isin(c1, _WS), np.isin(c2, _WS)
    kind = np.full(starts.size, KIND_OTHER, np.int8)
    isv = c0 == ord("v")
    kind[isv & ws1] = KIND_V
    kind[isv & (c1 == ord("t")) & ws2] = KIND_VT
    kind[isv & (c1 == ord("n")) & ws2] = KIND_VN
    kind[(c0 == ord("f")) & ws1] = KIND_F
    change = np.flatnonzero(np.diff(kind)) + 1
    run_s = np.concatenate([[0], change])
    run_e = np.concatenate([change, [kind.size]])
    for rs, re_ in zip(run_s.tolist(), run_e.tolist()):
        k = int(kind[rs])
        chunk = data[starts[rs]:ends[re_ - 1]]
        n = re_ - rs
        if k == KIND_OTHER:
            for i in range(rs, re_):
                _state_line(sc, data[starts[i]:ends[i]].decode("utf-8", "replace"))
        elif k == KIND_F:
            _faces(path, sc, chunk, n)
        else:
            marker = {KIND_V: b"v", KIND_VT: b"vt", KIND_VN: b"vn"}[k]
            widths = {KIND_V: (3,), KIND_VT: (2, 3), KIND_VN: (3,)}[k]
            a = _numbers(b"\n" + chunk, b"\n" + marker, np.float64)
            if a is not None and a.size in [w * n for w in widths]:
                rows = a.reshape(n, -1)
            else:  # other widths (colours, w, ...) or junk: line by line
                rows = [ln.split()[1:] for ln in chunk.decode("utf-8", "replace").split("\n")]
                rows = [r for r in rows if r] if k == KIND_V else [r or ["0"] for r in rows]
                if k == KIND_VT:
                    rows = [r[:2] if len(r) >= 2 else r[:1] + ["0"] for r in rows]
                if not rows:
                    continue
                rows = _checked_rows(path, rows, {KIND_V: "v", KIND_VT: "vt", KIND_VN: "vn"}[k])
            if k == KIND_V:
                sc.v.append(rows)
                sc.nv += len(rows)
            elif k == KIND_VT:
                sc.vt.append(rows)
                sc.nvt += len(rows)
            else:
                sc.vn.append(rows)
                sc.nvn += len(rows)


def _checked_rows(path: str, rows: list[list[str]], what: str):
    """Token rows of one piece as a float array (all one width), or kept as rows (several
    widths, resolved with the whole file's) once every token is known to be a number."""
    if all(len(r) == len(rows[0]) for r in rows):
        return _floats(rows, path, what)
    _floats([[x for r in rows for x in r]], path, what)
    return rows


_NUMBER_BYTES = np.zeros(256, bool)
_NUMBER_BYTES[np.frombuffer(b"0123456789.+-eE \t\r\n", np.uint8)] = True


def _numbers(chunk: bytes, marker: bytes, dtype):
    """All numbers of a run of lines, their leading keyword removed; None when the text holds
    anything but plain decimal numbers (the caller then goes line by line). The byte check
    comes first so numpy's parser, which stops with only a warning at the first bad token,
    is only given text it can read to the end (and no global warning filter is touched)."""
    body = chunk.replace(marker + b" ", b" ").replace(marker + b"\t", b" ")
    if not _NUMBER_BYTES[np.frombuffer(body, np.uint8)].all():
        return None
    try:
        return np.fromstring(body, dtype=dtype, sep=" ")
    except ValueError:
        return None


def _faces(path: str, sc: _Scan, chunk: bytes, n: int) -> None:
    """A run of n face lines: corner counts from token starts per line (vectorized), corner
    indices from one parse when every corner has the same form, else corner by corner."""
    b = np.frombuffer(chunk, np.uint8)
    isws = np.isin(b, _WS) | (b == 10)
    tok_start = ~isws & np.concatenate([[True], isws[:-1]])
    line_of = np.concatenate([[0], np.cumsum(b == 10)[:-1]]) if b.size else np.zeros(0, np.int64)
    counts = np.bincount(line_of[tok_start], minlength=n)[:n] - 1  # minus the "f"
    body = b"\n" + chunk
    first = body.split(None, 2)[1] if len(body.split(None, 2)) > 1 else b""
    slashes = first.count(b"/")
    total = int(counts.sum())
    vi = ti = ni = None
    n_slash = int(np.count_nonzero(b == ord("/")))
    n_double = chunk.count(b"//")
    if slashes == 0 and n_slash == 0:
        a = _numbers(body, b"\nf", np.int64)
        if a is not None and a.size == total:
            vi, ti, ni = a, np.zeros_like(a), np.zeros_like(a)
    elif slashes == 1 and n_slash == total and n_double == 0:  # v/vt
        a = _numbers(body.replace(b"/", b" "), b"\nf", np.int64)
        if a is not None and a.size == 2 * total:
            a = a.reshape(-1, 2)
            vi, ti, ni = a[:, 0], a[:, 1], np.zeros(total, np.int64)
    elif slashes == 2 and n_slash == 2 * total and n_double == total:  # v//vn
        a = _numbers(body.replace(b"//", b" "), b"\nf", np.int64)
        if a is not None and a.size == 2 * total:
            a = a.reshape(-1, 2)
            vi, ti, ni = a[:, 0], np.zeros(total, np.int64), a[:, 1]
    elif slashes == 2 and n_slash == 2 * total and n_double == 0:  # v/vt/vn
        a = _numbers(body.replace(b"/", b" "), b"\nf", np.int64)
        if a is not None and a.size == 3 * total:
            a = a.reshape(-1, 3)
            vi, ti, ni = a[:, 0], a[:, 1], a[:, 2]
    if vi is None:  # mixed or unusual forms ("1/2/", ...): corner by corner
        corners = []
        for ln in chunk.decode("utf-8", "replace").split("\n"):
            corners.extend(ln.split()[1:])
        if len(corners) != total:
            raise InputError(path, "OBJ: malformed face line")
        vi, ti, ni = _parse_corners(path, corners)
    keep = counts >= 0
    sc.counts.append(counts[keep])
    sc.vi.append(vi)
    sc.ti.append(ti)
    sc.ni.append(ni)
    nf = int(keep.sum())
    sc.face_group.append(np.full(nf, sc.gid))
    sc.face_nv.append(np.full(nf, sc.nv))
    sc.face_nvt.append(np.full(nf, sc.nvt))
    sc.face_nvn.append(np.full(nf, sc.nvn))


def _state_line(sc: _Scan, line: str) -> None:
    tok = line.split()
    if not tok:
        return
    kw = tok[0]
    rest = line.split(None, 1)[1].strip() if len(tok) > 1 else ""
    if kw in ("o", "g", "usemtl"):
        if kw == "usemtl":
            sc.mat = rest or None
        else:
            sc.name = rest
        key = (sc.name, sc.mat)
        if key not in sc.group_ids:
            sc.group_ids[key] = len(sc.groups)
            sc.groups.append(key)
        sc.gid = sc.group_ids[key]
    elif kw == "mtllib":
        sc.mtllibs.append(rest)
    elif kw == "p":
        sc.n_points += len(tok) - 1
    elif kw == "l":
        sc.n_lines += max(len(tok) - 2, 0)


def _safe_path(path: str, base: Path, name: str, what: str) -> Path:
    rel = name.strip().strip('"').replace("\\", "/")
    if os.path.isabs(rel) or rel.startswith("/") or (len(rel) > 1 and rel[1] == ":"):
        raise InputError(path, f"{what} {name!r}: absolute paths are not allowed")
    if ".." in rel.split("/"):
        raise InputError(path, f"{what} {name!r} leaves the directory of the OBJ file (path traversal)")
    return base / rel


@guarded("OBJ")
def read_obj(path: str | os.PathLike, *, textures: bool = True) -> SceneDocument:
    spath, data = read_source(path, "OBJ")
    base = Path(spath).parent
    doc = SceneDocument(source_path=spath, source_format="obj")
    sc = _scan(spath, data)
    vrows, vtrows, vnrows = sc.v, sc.vt, sc.vn
    groups, mtllibs = sc.groups, sc.mtllibs
    if sc.n_points:
        doc.count("skipped_points", sc.n_points)
    if sc.n_lines:
        doc.count("skipped_lines", sc.n_lines)

    v = _rows_to_array(spath, vrows, "v", colors=True)
    if v.size and v.shape[1] < 3:
        raise InputError(spath, "OBJ: a 'v' line has fewer than 3 coordinates")
    nv = v.shape[0]
    positions = v[:, :3].astype(np.float32) if nv else np.zeros((0, 3), np.float32)
    vcolors = None
    if nv and v.shape[1] >= 6:  # "v x y z r g b"
        rgb = v[:, 3:6]
        if np.nanmax(rgb, initial=0) > 1.0:  # some writers use 0..255
            rgb = rgb / 255.0
        rgb = np.nan_to_num(rgb, nan=1.0)
        vcolors = np.concatenate([np.clip(rgb, 0, 1), np.ones((nv, 1))], axis=1).astype(np.float32)
    vt = _rows_to_array(spath, vtrows, "vt")
    vt = vt[:, :2].astype(np.float32) if vt.shape[0] and vt.shape[1] >= 2 else np.zeros((vt.shape[0], 2), np.float32)
    vn = _rows_to_array(spath, vnrows, "vn")
    n_vn = vn.shape[0]
    vn = vn[:, :3].astype(np.float32) if n_vn and vn.shape[1] >= 3 else None

    materials = _load_mtllibs(doc, spath, base, mtllibs, textures)

    if not sc.counts.size:
        if nv and not (sc.n_points or sc.n_lines):
            doc.count("skipped_points", nv)
        return doc
    counts_a = sc.counts
    vi, ti, ni = sc.vi, sc.ti, sc.ni
    corner_face = np.repeat(np.arange(counts_a.size), counts_a)
    vi = _resolve(spath, vi, sc.face_nv[corner_face], nv, "v", required=True)
    # Faces naming vt / vn indices in a file that has none of them: ignore those indices.
    if vt.shape[0] == 0 and (ti != 0).any():
        doc.count("ignored_texcoord_indices")
        ti = np.zeros_like(ti)
    if vn is None and (ni != 0).any():
        doc.count("ignored_normal_indices")
        ni = np.zeros_like(ni)
    ti = _resolve(spath, ti, sc.face_nvt[corner_face], vt.shape[0], "vt")
    ni = _resolve(spath, ni, sc.face_nvn[corner_face], n_vn, "vn")
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
    tri_group = sc.face_group[poly]
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
        inside = obj_dir.resolve() in target.resolve().parents
    except OSError as e:  # e.g. a symlink loop: fail closed
        raise InputError(path, f"map_Kd {fname!r}: cannot resolve the path ({e})") from e
    if not inside:
        raise InputError(path, f"map_Kd {fname!r} leaves the directory of the OBJ file")
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
