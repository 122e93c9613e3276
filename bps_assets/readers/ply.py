"""PLY reader (ascii, binary little and big endian) -> SceneDocument.

Reads ``vertex`` x/y/z, optional colours (red/green/blue[/alpha], integers normalized by their
type's maximum), UVs (s,t / u,v / texture_u,texture_v / texture_s,texture_t), and ``face``
index lists (``vertex_indices`` or ``vertex_index``), fan-triangulating polygons. A per-corner
``texcoord`` face list (Blender / MeshLab) unwelds the corners. ``comment TextureFile NAME``
attaches that image as the base colour texture. Other elements are parsed and ignored.

Speed: elements are read as numpy structured/strided arrays; lists whose lengths are all equal
(the usual all-triangle or all-quad face list) are read in one vectorized step. Only lists of
varying lengths walk the records in Python (their offsets depend on every earlier count).
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np

from ..errors import InputError, UnsupportedFormatError
from ..scene import Material, Mesh, SceneDocument, Texture
from .guard import guarded, read_source, text_pieces
from .images import decode_image
from .polygons import fan_triangulate

PLY_TYPES = {
    "char": "i1", "int8": "i1", "uchar": "u1", "uint8": "u1", "short": "i2", "int16": "i2",
    "ushort": "u2", "uint16": "u2", "int": "i4", "int32": "i4", "uint": "u4", "uint32": "u4",
    "float": "f4", "float32": "f4", "double": "f8", "float64": "f8",
}
MAX_HEADER = 1 << 20
UV_NAMES = (("s", "t"), ("u", "v"), ("texture_u", "texture_v"), ("texture_s", "texture_t"))


class _Elem:
    def __init__(self, name, count):
        self.name, self.count, self.props = name, count, []  # props: (name, type) / (name, ctype, itype)


def _parse_header(path, data: bytes):
    if not data.startswith(b"ply"):
        raise UnsupportedFormatError(path, "not a PLY file (missing 'ply' magic)")
    m = re.search(rb"end_header[ \t]*\r?\n", data[:MAX_HEADER])
    if m is None:
        raise InputError(path, "PLY header has no end_header line (or is longer than 1 MiB)")
    header = data[:m.start()].decode("ascii", "replace").splitlines()
    fmt, elems, comments = None, [], []
    for ln in header[1:]:
        tok = ln.split()
        if not tok:
            continue
        kw = tok[0]
        if kw == "format" and len(tok) >= 2:
            fmt = tok[1]
        elif kw in ("comment", "obj_info"):
            comments.append(ln.split(None, 1)[1] if len(tok) > 1 else "")
        elif kw == "element":
            if len(tok) != 3 or not tok[2].isdigit():
                raise InputError(path, f"PLY: malformed element line {ln!r}")
            elems.append(_Elem(tok[1], int(tok[2])))
        elif kw == "property":
            if not elems:
                raise InputError(path, f"PLY: property before any element: {ln!r}")
            if len(tok) == 5 and tok[1] == "list":
                if tok[2] not in PLY_TYPES or tok[3] not in PLY_TYPES:
                    raise InputError(path, f"PLY: unknown property type in {ln!r}")
                elems[-1].props.append((tok[4], PLY_TYPES[tok[2]], PLY_TYPES[tok[3]]))
            elif len(tok) == 3 and tok[1] in PLY_TYPES:
                elems[-1].props.append((tok[2], PLY_TYPES[tok[1]]))
            else:
                raise InputError(path, f"PLY: malformed property line {ln!r}")
        else:
            raise InputError(path, f"PLY: unknown header line {ln!r}")
    for e in elems:
        names = [p[0] for p in e.props]
        if len(set(names)) != len(names):
            raise InputError(path, f"PLY element {e.name!r} declares a property twice")
    if len({e.name for e in elems}) != len(elems):
        raise InputError(path, "PLY header declares an element twice")
    if fmt not in ("ascii", "binary_little_endian", "binary_big_endian"):
        raise UnsupportedFormatError(path, f"PLY format {fmt!r} is not ascii/binary_little_endian/binary_big_endian")
    return fmt, elems, comments, m.end()


def _read_binary(path, mv: memoryview, off: int, elems, endian: str) -> dict:
    out = {}
    for e in elems:
        scal = [p for p in e.props if len(p) == 2]
        lists = [p for p in e.props if len(p) == 3]
        remaining = len(mv) - off
        rec_min = sum(np.dtype(p[1]).itemsize for p in e.props)
        if e.count * rec_min > remaining:
            raise InputError(path, f"PLY element {e.name!r}: {e.count} records need at least "
                                   f"{e.count * rec_min} bytes, {remaining} remain")
        if e.count == 0:
            out[e.name] = {p[0]: (np.zeros(0, p[1]) if len(p) == 2 else (np.zeros(0, np.int64), np.zeros(0, p[2])))
                           for p in e.props}
            continue
        if not lists:
            dt = np.dtype([(p[0], endian + p[1]) for p in e.props])
            arr = np.frombuffer(mv, dt, e.count, off)
            out[e.name] = {p[0]: arr[p[0]] for p in e.props}
            off += dt.itemsize * e.count
            continue
        # Fixed-length fast path: take the list lengths of the first record, read everything
        # as one structured array, then verify every record has the same lengths.
        fields, pos, lens = [], off, {}
        for i, p in enumerate(e.props):
            if len(p) == 2:
                fields.append((f"f{i}", endian + p[1]))
                pos += np.dtype(p[1]).itemsize
            else:
                if pos + np.dtype(p[1]).itemsize > len(mv):
                    raise InputError(path, f"PLY element {e.name!r} truncated")
                n = int(np.frombuffer(mv, endian + p[1], 1, pos)[0])
                lens[i] = n
                fields.append((f"c{i}", endian + p[1]))
                fields.append((f"l{i}", endian + p[2], (n,)) if n else (f"l{i}", endian + p[2], (0,)))
                pos += np.dtype(p[1]).itemsize + n * np.dtype(p[2]).itemsize
        dt = np.dtype(fields)
        ok = dt.itemsize * e.count <= len(mv) - off
        if ok:
            arr = np.frombuffer(mv, dt, e.count, off)
            ok = all((arr[f"c{i}"] == n).all() for i, n in lens.items())
        if ok:
            d = {}
            for i, p in enumerate(e.props):
                if len(p) == 2:
                    d[p[0]] = arr[f"f{i}"]
                else:
                    d[p[0]] = (np.full(e.count, lens[i], np.int64), arr[f"l{i}"].reshape(-1))
            out[e.name] = d
            off += dt.itemsize * e.count
            continue
        if len(lists) == 1 and lists[0][1] == "u1":
            out[e.name], off = _walk_one_list(path, mv, off, e, endian)
        else:
            out[e.name], off = _walk_binary(path, mv, off, e, endian)
        del scal
    return out


def _walk_one_list(path, mv, off, e, endian):
    """Records with one uchar-counted list of varying length (e.g. mixed triangles and quads):
    a Python loop finds only the record offsets (one byte read each); every value is then
    gathered with numpy."""
    li = next(i for i, p in enumerate(e.props) if len(p) == 3)
    before = sum(np.dtype(p[1]).itemsize for p in e.props[:li])
    after = sum(np.dtype(p[1]).itemsize for p in e.props[li + 1:])
    isz = np.dtype(e.props[li][2]).itemsize
    n, size = e.count, len(mv)
    offsets = np.empty(n, np.int64)
    counts = np.empty(n, np.int64)
    step = before + 1 + after
    for i in range(n):
        if off + before >= size:
            raise InputError(path, f"PLY element {e.name!r} truncated at record {i}")
        c = mv[off + before]
        offsets[i] = off
        counts[i] = c
        off += step + c * isz
    if off > size:
        raise InputError(path, f"PLY element {e.name!r} runs past the end of the file")
    raw = np.frombuffer(mv, np.uint8)

    def gather(starts, nbytes, dtype):
        idx = starts[:, None] + np.arange(nbytes)[None, :]
        return raw[idx.reshape(-1)].view(dtype)

    d, pos = {}, 0
    for i, p in enumerate(e.props):
        if i == li:
            total = int(counts.sum())
            first = np.repeat(offsets + before + 1, counts)
            k = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
            d[p[0]] = (counts, gather(first + k * isz, isz, endian + p[2]))
            continue
        sz = np.dtype(p[1]).itemsize
        rel = pos if i < li else None
        starts = offsets + rel if i < li else offsets + before + 1 + counts * isz + (pos - before)
        d[p[0]] = gather(starts, sz, endian + p[1])
        pos += sz
    return d, off


def _walk_binary(path, mv, off, e, endian):
    """Records with lists of varying length: walk them (offsets depend on earlier counts)."""
    cols = {p[0]: [] for p in e.props}
    counts = {p[0]: [] for p in e.props if len(p) == 3}
    size = len(mv)
    import struct

    fmt_char = {"i1": "b", "u1": "B", "i2": "h", "u2": "H", "i4": "i", "u4": "I", "f4": "f", "f8": "d"}
    bo = "<" if endian == "<" else ">"
    plan = []
    for p in e.props:
        if len(p) == 2:
            plan.append((p[0], struct.Struct(bo + fmt_char[p[1]]), None))
        else:
            plan.append((p[0], struct.Struct(bo + fmt_char[p[1]]), (fmt_char[p[2]], np.dtype(p[2]).itemsize)))
    try:
        for _ in range(e.count):
            for name, st, item in plan:
                (v,) = st.unpack_from(mv, off)
                off += st.size
                if item is None:
                    cols[name].append(v)
                else:
                    n = int(v)
                    if n < 0 or off + n * item[1] > size:
                        raise InputError(path, f"PLY element {e.name!r}: list of {n} items runs past the end")
                    cols[name].append(bytes(mv[off:off + n * item[1]]))
                    counts[name].append(n)
                    off += n * item[1]
    except struct.error:
        raise InputError(path, f"PLY element {e.name!r} truncated") from None
    d = {}
    for p in e.props:
        if len(p) == 2:
            d[p[0]] = np.asarray(cols[p[0]], p[1])
        else:
            flat = np.frombuffer(b"".join(cols[p[0]]), endian + p[2])
            d[p[0]] = (np.asarray(counts[p[0]], np.int64), flat)
    return d, off


def _read_ascii(path, body: bytes, elems) -> dict:
    """One record per line (extra trailing values on a line are ignored, as some writers
    emit them). The text goes through in ``guard.TEXT_PIECE`` pieces, each piece's lines of an
    element converted to float arrays at once before the next piece (bounded temporaries, junk
    refused early), then each element's blocks are joined."""
    blocks: list[list[dict]] = [[] for _ in elems]
    ei, seen = 0, 0

    def next_element():
        nonlocal ei, seen
        while ei < len(elems) and seen >= elems[ei].count:
            ei, seen = ei + 1, 0

    next_element()
    for piece in text_pieces(body):
        if ei >= len(elems):
            break
        lines = [ln for ln in piece.split(b"\n") if ln.strip()]
        i = 0
        while i < len(lines) and ei < len(elems):
            e = elems[ei]
            take = min(e.count - seen, len(lines) - i)
            blocks[ei].append(_ascii_block(path, e, lines[i:i + take]))
            i, seen = i + take, seen + take
            next_element()
    if ei < len(elems):
        e = elems[ei]
        raise InputError(path, f"PLY element {e.name!r}: {e.count} records but only {seen} lines remain")
    return {e.name: _join_blocks(e, b) if b else _ascii_rows(path, e, []) for e, b in zip(elems, blocks)}


def _ascii_block(path, e, block: list[bytes]) -> dict:
    rows = [ln.split() for ln in block]
    widths = {len(r) for r in rows}
    try:
        if len(widths) == 1:
            arr = np.array(rows, dtype=np.float64).reshape(len(rows), widths.pop())
            return _ascii_columns(path, e, arr)
        return _ascii_rows(path, e, rows)
    except ValueError:
        raise InputError(path, f"PLY element {e.name!r} has a non-numeric value") from None


def _join_blocks(e, blocks: list[dict]) -> dict:
    if len(blocks) == 1:
        return blocks[0]
    d = {}
    for p in e.props:
        if len(p) == 2:
            d[p[0]] = np.concatenate([b[p[0]] for b in blocks])
        else:
            d[p[0]] = (np.concatenate([b[p[0]][0] for b in blocks]), np.concatenate([b[p[0]][1] for b in blocks]))
    return d


def _ascii_columns(path, e, arr):
    """All lines equally wide: slice columns, assuming every list has the first row's length
    (verified; otherwise fall back to row by row)."""
    d, col = {}, 0
    for p in e.props:
        if col >= arr.shape[1] and arr.shape[0]:
            raise InputError(path, f"PLY element {e.name!r}: lines have too few values")
        if len(p) == 2:
            d[p[0]] = arr[:, col].astype(p[1]) if arr.shape[0] else np.zeros(0, p[1])
            col += 1
        else:
            n = int(arr[0, col]) if arr.shape[0] else 0
            if arr.shape[0] and (not (arr[:, col] == n).all() or col + 1 + n > arr.shape[1] or n < 0):
                return _ascii_rows(path, e, [list(r) for r in arr])
            d[p[0]] = (np.full(arr.shape[0], n, np.int64), arr[:, col + 1:col + 1 + n].reshape(-1).astype(p[2]))
            col += 1 + n
    return d


def _ascii_rows(path, e, rows):
    cols = {p[0]: [] for p in e.props}
    counts = {p[0]: [] for p in e.props if len(p) == 3}
    for r in rows:
        pos = 0
        for p in e.props:
            if pos >= len(r):
                raise InputError(path, f"PLY element {e.name!r}: a line has too few values")
            if len(p) == 2:
                cols[p[0]].append(float(r[pos]))
                pos += 1
            else:
                n = int(float(r[pos]))
                if n < 0 or pos + 1 + n > len(r):
                    raise InputError(path, f"PLY element {e.name!r}: list of {n} items runs past the line")
                cols[p[0]].append(np.asarray(r[pos + 1:pos + 1 + n], np.float64))
                counts[p[0]].append(n)
                pos += 1 + n
    d = {}
    for p in e.props:
        if len(p) == 2:
            d[p[0]] = np.asarray(cols[p[0]], np.float64).astype(p[1])
        else:
            flat = np.concatenate(cols[p[0]]) if cols[p[0]] else np.zeros(0)
            d[p[0]] = (np.asarray(counts[p[0]], np.int64), flat.astype(p[2]))
    return d


def _unit(a: np.ndarray) -> np.ndarray:
    if np.issubdtype(a.dtype, np.integer):
        return a.astype(np.float32) / float(np.iinfo(a.dtype).max)
    return a.astype(np.float32)


@guarded("PLY")
def read_elements(path: str | os.PathLike) -> tuple[str, dict, list[str]]:
    """(the file's path, its elements {name: {property: array}}, its header comments) of a PLY
    file, ASCII or binary; InputError naming the file on any damage."""
    spath, data = read_source(path, "PLY")
    fmt, elems, comments, start = _parse_header(spath, data)
    if fmt == "ascii":
        return spath, _read_ascii(spath, data[start:], elems), comments
    return spath, _read_binary(spath, memoryview(data), start, elems,
                               "<" if fmt.endswith("little_endian") else ">"), comments


def read_ply(path: str | os.PathLike, *, textures: bool = True) -> SceneDocument:
    spath, els, comments = read_elements(path)
    doc = SceneDocument(source_path=spath, source_format="ply")
    vert = els.get("vertex")
    if vert is None or not all(k in vert for k in "xyz"):
        if vert is None and "face" not in els:
            return doc
        raise InputError(spath, "PLY vertex element needs x, y and z properties")
    pos = np.stack([vert["x"], vert["y"], vert["z"]], axis=1).astype(np.float32)
    nv = pos.shape[0]
    uvs = None
    for su, sv in UV_NAMES:
        if su in vert and sv in vert:
            uvs = np.stack([vert[su], vert[sv]], axis=1).astype(np.float32)
            break
    colors = None
    cn = next((c for c in (("red", "green", "blue"), ("r", "g", "b"), ("diffuse_red", "diffuse_green", "diffuse_blue"))
               if all(k in vert for k in c)), None)
    if cn is not None:
        rgb = [_unit(vert[k]) for k in cn]
        alpha_key = "alpha" if cn[0] == "red" else ("a" if cn[0] == "r" else "diffuse_alpha")
        a = _unit(vert[alpha_key]) if alpha_key in vert else np.ones(nv, np.float32)
        colors = np.clip(np.stack(rgb + [a], axis=1), 0, 1).astype(np.float32)
    normals = None
    if all(k in vert for k in ("nx", "ny", "nz")):
        normals = np.stack([vert["nx"], vert["ny"], vert["nz"]], axis=1).astype(np.float32)

    face = els.get("face", {})
    lst = face.get("vertex_indices", face.get("vertex_index"))
    if lst is None:
        doc.count("skipped_points", nv)
        return doc
    counts, flat = lst
    if counts.size == 0:
        doc.count("skipped_points", nv)
        return doc
    if not np.issubdtype(flat.dtype, np.integer):
        flat = flat.astype(np.int64)
    flat = flat.astype(np.int64)
    if flat.size and (int(flat.max()) >= nv or int(flat.min()) < 0):
        bad = int(flat.max()) if int(flat.max()) >= nv else int(flat.min())
        raise InputError(spath, f"PLY face index {bad} out of range for {nv} vertices")
    small = int((counts < 3).sum())
    if small:
        doc.count("skipped_degenerate_faces", small)
    tc = face.get("texcoord")
    if tc is not None and uvs is None and tc[1].size == 2 * flat.size:
        # Per-corner UVs: one vertex per face corner.
        corner_uv = tc[1].astype(np.float32).reshape(-1, 2)
        pos, colors, normals = pos[flat], None if colors is None else colors[flat], None if normals is None else normals[flat]
        uvs = corner_uv
        tris, _ = fan_triangulate(counts, np.arange(flat.size, dtype=np.int64))
    else:
        tris, _ = fan_triangulate(counts, flat)
    mat_index = None
    tex_name = next((c.split(None, 1)[1].strip() for c in comments
                     if c.lower().startswith("texturefile") and len(c.split(None, 1)) > 1), None)
    if tex_name and uvs is not None:
        mat = Material(name=tex_name)
        if textures:
            mat.texture = _load_texture(doc, spath, tex_name)
        doc.materials.append(mat)
        mat_index = 0
    if tris.shape[0]:
        doc.meshes.append(Mesh(positions=np.ascontiguousarray(pos), indices=tris.astype(np.uint32),
                               uvs=uvs, colors=colors, normals=normals, material=mat_index,
                               name=Path(spath).stem))
    return doc


def _load_texture(doc: SceneDocument, path: str, name: str) -> int | None:
    base = Path(path).parent.resolve()
    target = (base / name).resolve()
    if os.path.isabs(name) or ".." in name.replace("\\", "/").split("/") or base not in target.parents:
        raise InputError(path, f"texture {name!r} is outside the directory of the PLY file")
    try:
        data = target.read_bytes()
    except OSError:
        raise InputError(path, f"texture file {name!r} not found (looked for {target})") from None
    doc.textures.append(Texture(rgba=decode_image(data, path, f"texture {name!r}"), source=name, name=name))
    return len(doc.textures) - 1
