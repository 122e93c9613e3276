"""Builders of hostile inputs (issue 14): decompression bombs, wrapping ranges, gzip bombs,
oversized data URIs. Everything is generated in a few milliseconds from small pieces; no
blob is checked in. Used by tests/test_hostile_inputs.py and the corpus runner
tests/hostile_corpus.py.
"""
from __future__ import annotations

import gzip
import json
import struct
from pathlib import Path

import numpy as np

from bps_assets.container import Container, SectionSpec, write_container

ZSTD_MAGIC = 0xFD2FB528
RLE_BLOCK = 1 << 17  # the largest zstd block


def zstd_rle_bomb(nbytes: int, content_size: bool = True) -> bytes:
    """A valid zstd frame that inflates to ``nbytes`` zero bytes from 4 bytes per 128 KiB
    (RLE blocks written by hand): 4 GiB from 128 KiB, like the bomb of issue 14 item 4.
    ``content_size``: declare the size in the frame header (as the zstd CLI does)."""
    if content_size:
        head = struct.pack("<IBB", ZSTD_MAGIC, 0xC0, 0x38) + struct.pack("<Q", nbytes)
    else:  # no content size: a decoder learns the size only by decoding
        head = struct.pack("<IBB", ZSTD_MAGIC, 0x00, 0x38)
    out = bytearray(head)
    left = nbytes
    while left > 0:
        n = min(RLE_BLOCK, left)
        left -= n
        out += struct.pack("<I", (1 if left == 0 else 0) | (1 << 1) | (n << 3))[:3] + b"\0"
    return bytes(out)


def small_scene(path: Path) -> Path:
    """A real packed scene with a texture, meshlets and chunks (~30 KB)."""
    from bps_assets.packed_scene import ConvertOptions, convert_scene
    from packed_scene_fixtures import make_doc

    convert_scene(make_doc(12, textures=1, tex_size=32), path, ConvertOptions(max_texture=32),
                  scene_id=path.stem)
    return path


def rewrite(src: Path, dst: Path, arrays: dict | None = None, header: dict | None = None,
            drop=(), filtered: bool = False) -> Path:
    """Copy a packed file with some arrays / header keys replaced (or added), the sections
    ``drop`` left out; checksums stay valid. Sections stored raw, or with write_container's
    default codec and filters when ``filtered`` (the read path of a converted file)."""
    with Container(src) as c:
        arr = c.read_many([n for n in c.sections if n not in drop])
        hdr = dict(c.header)
        kind = c.kind
    arr.update(arrays or {})
    hdr.update(header or {})
    write_container(dst, kind, hdr, arr, None if filtered else {n: SectionSpec("raw") for n in arr})
    return dst


def with_bomb_section(src: Path, dst: Path, name: str, nbytes: int, table_bytes: int | None = None,
                      content_size: bool = True, dtype: str = "u1", tail: tuple = ()) -> Path:
    """``src`` plus (or with replaced) section ``name``: a zstd bomb of ``nbytes`` whose table
    entry declares ``table_bytes`` (default ``nbytes``) as ``dtype`` rows of shape ``tail``
    (default u1 [table_bytes]), CRC valid."""
    import zlib

    data = src.read_bytes()
    _, ver, kind, hlen, _ = struct.unpack("<8sI4sQI", data[:28])
    hdr = json.loads(data[32:32 + hlen])
    secs = [s for s in hdr["sections"] if s["name"] != name]
    body_end = max(s["offset"] + s["stored_length"] for s in secs)
    bomb = zstd_rle_bomb(nbytes, content_size)
    tb = nbytes if table_bytes is None else table_bytes
    # room for the longer header: move every section by a fixed multiple of 256
    shift = 4096
    for s in secs:
        s["offset"] += shift
    off = (body_end + shift + 255) // 256 * 256
    row = int(np.dtype(dtype).itemsize * np.prod(tail, dtype=np.int64))
    secs.append({"name": name, "dtype": dtype, "shape": [tb // row, *tail], "codec": "zstd", "filter": "none",
                 "offset": off, "stored_length": len(bomb), "raw_length": tb, "crc32": zlib.crc32(bomb)})
    hdr["sections"] = secs
    new = json.dumps(hdr).encode()
    first = min(s["offset"] for s in secs)
    assert 32 + len(new) <= first
    old_first = first - shift
    out = bytearray(struct.pack("<8sI4sQI", data[:8], ver, kind, len(new), 0).ljust(32, b"\0"))
    out += new + b" " * (first - 32 - len(new))
    out += data[old_first:body_end]
    out += b"\0" * (off - len(out)) + bomb
    dst.write_bytes(bytes(out))
    return dst


def wrapping_ranges(src: Path, out_dir: Path) -> dict[str, Path]:
    """One file per int64-wrap attack of issue 14 item 6, checksums valid."""
    big = 2**62
    with Container(src) as c:
        ct, mt, cm, lv = (c.read(n).copy() for n in ("chunk_tris", "meshlet_tris", "chunk_meshlets", "tex_levels"))
    out = {}
    for name, a in (("chunk_tris", ct), ("meshlet_tris", mt), ("chunk_meshlets", cm)):
        a[0] = (big, big)
        out[name] = rewrite(src, out_dir / f"wrap_{name}.bps", {name: a})
    lv[0, 4] = 2**63 - 8
    out["tex_levels"] = rewrite(src, out_dir / "wrap_tex_levels.bps", {"tex_levels": lv})
    return out


def gzip_bomb(path: Path, nbytes: int, piece: int = 16 << 20) -> Path:
    """A ``.json.gz`` inflating to about ``nbytes`` of JSON whitespace (one compressed member
    repeated: gzip readers decode every member), written in milliseconds."""
    member = gzip.compress(b" " * piece, compresslevel=9, mtime=0)
    with open(path, "wb") as f:
        f.write(gzip.compress(b'{"episodes": [', mtime=0))
        for _ in range(max(1, nbytes // piece)):
            f.write(member)
        f.write(gzip.compress(b"]}", mtime=0))
    return path


def gltf_with_data_uri(path: Path, uri_bytes: int, byte_length: int = 36) -> Path:
    """A .gltf whose only buffer is a base64 data URI of ``uri_bytes`` characters while its
    ``byteLength`` says ``byte_length`` (a triangle's positions need 36)."""
    pos = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0]], np.float32).tobytes()
    import base64

    enc = base64.b64encode(pos).decode()
    enc += "A" * (uri_bytes - len(enc))
    doc = {"asset": {"version": "2.0"},
           "buffers": [{"byteLength": byte_length, "uri": "data:application/octet-stream;base64," + enc}],
           "bufferViews": [{"buffer": 0, "byteOffset": 0, "byteLength": 36}],
           "accessors": [{"bufferView": 0, "componentType": 5126, "count": 3, "type": "VEC3",
                          "min": [0, 0, 0], "max": [1, 1, 0]}],
           "meshes": [{"primitives": [{"attributes": {"POSITION": 0}}]}],
           "nodes": [{"mesh": 0}], "scenes": [{"nodes": [0]}], "scene": 0}
    path.write_text(json.dumps(doc))
    return path


def manifest_over(root: Path, scenes: dict[str, dict[str, tuple[Path, str | None]]]) -> Path:
    """A manifest in ``root`` listing existing files as scene outputs with their true sizes and
    hashes: ``{name: {role: (path, format)}}``, format a container kind or
    ``habitat-pointnav-v1``. What preprocess would have written for these files."""
    from bps_assets.pipeline import manifest as mf
    from bps_assets.pipeline.backend import container_info
    from bps_assets.hashing import sha256_file

    entries = {}
    for name, outs in scenes.items():
        if "navmesh" not in outs:  # a stand-in (container checks only: it declares no content)
            nav = root / f"{name}.navmesh.bps"
            if not nav.exists():
                write_container(nav, "NAVM", {}, {"h": np.zeros(4, np.float32)})
            outs = {**outs, "navmesh": (nav, "NAVM")}
        o = {}
        for role, (p, fmt) in outs.items():
            digest, size = sha256_file(p)
            rec = {"path": Path(p).relative_to(root).as_posix(), "size": size, "sha256": digest}
            if fmt == "habitat-pointnav-v1":
                rec.update(format=fmt, count=None)
            elif fmt:
                rec.update(container_info(Path(p)))
            o[role] = rec
        entries[name] = {"subset": "train", "status": "ok", "fingerprint": "0" * 64,
                         "sources": {}, "outputs": o, "stats": {}}
    doc = mf.new_manifest(dataset="gibson", split="tiny", subsets=["train"], settings={}, shard=None,
                          source_root=None, scenes=entries, missing=[], episodes={})
    return mf.write_manifest(doc, root / "manifest.json")


# ------------------------------------------------------------------------------ semantic annotations

def annotated_grid(d: Path, n: int = 12) -> dict:
    """A small Y-up grid scan ``d/grid.glb`` with both annotation pairs beside copies of it:
    ``d/hm3d/grid.glb`` + ``grid.semantic.glb/.txt`` and ``d/mp3d/grid.glb`` +
    ``grid_semantic.ply`` / ``grid.house``; 4 objects (chair, bed, plant, toilet) by quadrant."""
    from bps_assets.semantics import ObjectRecord
    from bps_assets.synth.semantic import hm3d_files, mp3d_files
    from packed_scene_fixtures import grid_mesh
    from packed_scene_glb import write_glb

    p, t, uv = grid_mesh(n, z_up=False, split=True)
    c = p[t].mean(1)
    tri_obj = (1 + (c[:, 0] > np.median(c[:, 0])) + 2 * (c[:, 2] > np.median(c[:, 2]))).astype(np.int32)
    objs = [ObjectRecord(i + 1, name, 0, i + 1, 0x200000 + 0x111 * (i + 1))
            for i, name in enumerate(("chair", "bed", "potted plant", "toilet"))]
    out = {"objects": objs, "tri_object": tri_obj}
    for fmt in ("hm3d", "mp3d"):
        (d / fmt).mkdir(parents=True, exist_ok=True)
        write_glb(d / fmt / "grid.glb", p, t, uv)
        if fmt == "hm3d":
            glb, txt = hm3d_files(p, t, tri_obj, objs)
            (d / fmt / "grid.semantic.glb").write_bytes(glb)
            (d / fmt / "grid.semantic.txt").write_text(txt)
        else:
            ply, house = mp3d_files(p, t, tri_obj, objs, "grid")
            (d / fmt / "grid_semantic.ply").write_bytes(ply)
            (d / fmt / "grid.house").write_text(house)
        out[fmt] = d / fmt / "grid.glb"
    return out


def bad_annotations(d: Path) -> dict[str, tuple[str, Path, Path]]:
    """Hostile annotation pairs, each a copy of ``annotated_grid``'s with one defect:
    {case: (format, mesh, table)}."""
    import shutil

    base = annotated_grid(d / "base")
    out = {}

    def variant(name, fmt, edit_table=None, mesh_bytes=None):
        v = d / name.replace(" ", "_").replace(",", "")
        shutil.copytree(base[fmt].parent, v)
        mesh, table = (v / "grid.semantic.glb", v / "grid.semantic.txt") if fmt == "hm3d" else \
            (v / "grid_semantic.ply", v / "grid.house")
        if edit_table is not None:
            table.write_text(edit_table(table.read_text()))
        if mesh_bytes is not None:
            mesh.write_bytes(mesh_bytes(mesh.read_bytes()))
        out[name] = (fmt, mesh, table)

    variant("txt: malformed line", "hm3d", lambda s: s + 'x,FFFFFF,"chair"\n')
    variant("txt: id out of range", "hm3d", lambda s: s + '0,ABCDEF,"chair",0\n')
    variant("txt: id 2^31", "hm3d", lambda s: s + '2147483648,ABCDEF,"chair",0\n')
    variant("txt: bad colour", "hm3d", lambda s: s + '9,GGGGGG,"chair",0\n')
    variant("txt: repeated colour", "hm3d", lambda s: s + "9," + s.splitlines()[1].split(",")[1] + ',"x",0\n')
    variant("txt: wrong header", "hm3d", lambda s: "HM3D Semantic\n" + s.split("\n", 1)[1])
    variant("txt: not UTF-8", "hm3d", None)
    (out["txt: not UTF-8"][2]).write_bytes(b"HM3D Semantic Annotations\n1,FFFFFF,\"\xff\xfe\",0\n")
    variant("glb: truncated", "hm3d", mesh_bytes=lambda b: b[: len(b) // 2])
    variant("house: object_id with no O record", "mp3d",
            lambda s: "\n".join(ln for ln in s.splitlines() if not ln.startswith("O 3 ")) + "\n")
    variant("house: category with no C record", "mp3d",
            lambda s: s.replace("\nC 0 ", "\nC 90 "))
    variant("house: malformed O record", "mp3d", lambda s: s + "O 77 0 zz\n")
    variant("house: wrong header", "mp3d", lambda s: "ASCII 1.0\n" + s.split("\n", 1)[1])
    variant("ply: truncated", "mp3d", mesh_bytes=lambda b: b[: len(b) - 40])
    variant("ply: no object_id", "mp3d", mesh_bytes=lambda b: b.replace(b"property int object_id\n", b""))
    return out


def warned_annotations(d: Path) -> dict[str, tuple[str, Path, Path, str]]:
    """Annotation pairs that convert with counted warnings: {case: (fmt, mesh, table, warning)}."""
    import shutil

    base = annotated_grid(d / "base")
    out = {}
    v = d / "unused_line"
    shutil.copytree(base["hm3d"].parent, v)
    (v / "grid.semantic.txt").write_text((v / "grid.semantic.txt").read_text() + '99,123456,"sofa",1\n')
    out["txt: a line no face uses"] = ("hm3d", v / "grid.semantic.glb", v / "grid.semantic.txt", "unused_objects")
    v = d / "unknown_colour"
    shutil.copytree(base["hm3d"].parent, v)
    lines = (v / "grid.semantic.txt").read_text().splitlines()
    (v / "grid.semantic.txt").write_text("\n".join(lines[:-1]) + "\n")  # drop the toilet's line
    out["glb: a face colour in no line"] = ("hm3d", v / "grid.semantic.glb", v / "grid.semantic.txt",
                                            "unknown_colour_faces")
    return out


def semantic_scene(d: Path) -> Path:
    """A packed scene with a semantic section (the annotated grid, HM3D pair)."""
    from bps_assets.packed_scene import ConvertOptions, convert_file

    g = annotated_grid(d / "src")
    return Path(convert_file(g["hm3d"], d / "semantic.bps", ConvertOptions(dataset="generic")).output)
