"""Reader speed: time from a Gibson-size file to a SceneDocument, and how much of it is Python.

    python benchmarks/bench_readers.py [--triangles 600000] [--textures 4] [--tex-size 2048] [--repeat 5]

Builds (in a temporary directory) the same Gibson-size GLB as bench_packed_scene.py (about
600K triangles, 4 x 2048^2 JPEG textures, Z-up), a binary PLY and an OBJ of the same geometry,
then reports medians of:
  - plain read of the file bytes (the I/O floor),
  - ``load(glb, textures=False)``: geometry only (parse, accessors, node transforms), with
    identity nodes and with every node rotated (the float64 world transform path),
  - ``load(glb)``: with every image decoded to RGBA, and the time Pillow alone needs to decode
    those JPEGs, so ``load - decode`` is the reader's own overhead,
  - ``load(ply)`` (binary, vectorized) and ``load(obj)`` (text; Python dispatches lines).
"""
from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def median_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def write_ply(path: Path, pos: np.ndarray, tris: np.ndarray) -> None:
    head = (f"ply\nformat binary_little_endian 1.0\nelement vertex {len(pos)}\nproperty float x\n"
            f"property float y\nproperty float z\nelement face {len(tris)}\n"
            f"property list uchar int vertex_indices\nend_header\n").encode()
    rec = np.zeros(len(tris), [("n", "u1"), ("v", "<i4", (3,))])
    rec["n"], rec["v"] = 3, tris
    path.write_bytes(head + pos.astype("<f4").tobytes() + rec.tobytes())


def write_obj(path: Path, pos: np.ndarray, tris: np.ndarray) -> None:
    buf = io.StringIO()
    np.savetxt(buf, pos, fmt="v %.6f %.6f %.6f")
    np.savetxt(buf, tris + 1, fmt="f %d %d %d")
    path.write_text(buf.getvalue())


def with_node_rotation(glb: bytes) -> bytes:
    import json
    import struct

    n = struct.unpack_from("<I", glb, 12)[0]
    j = json.loads(glb[20:20 + n])
    for node in j.get("nodes", []):
        node["rotation"] = [-0.7071068, 0, 0, 0.7071068]
    js = json.dumps(j).encode()
    js += b" " * (-len(js) % 4)
    rest = glb[20 + n:]
    body = struct.pack("<II", len(js), 0x4E4F534A) + js + rest
    return struct.pack("<4sII", b"glTF", 2, 12 + len(body)) + body


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--triangles", type=int, default=600_000)
    ap.add_argument("--textures", type=int, default=4)
    ap.add_argument("--tex-size", type=int, default=2048)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)

    from PIL import Image

    from bench_packed_scene import build_scene_glb
    from bps_assets.readers import load
    from bps_assets.readers.gltf_container import open_gltf

    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        glb = d / "scene.glb"
        desc = build_scene_glb(glb, args.triangles, args.textures, args.tex_size)
        doc = load(glb)
        pos = np.concatenate([m.positions for m in doc.meshes])
        offs = np.cumsum([0] + [len(m.positions) for m in doc.meshes[:-1]])
        tris = np.concatenate([m.indices.astype(np.int64) + o for m, o in zip(doc.meshes, offs)])
        write_ply(d / "scene.ply", pos, tris)
        write_obj(d / "scene.obj", pos, tris)

        rotated = d / "rotated.glb"  # same scene, every node rotated (Z-up -> Y-up)
        rotated.write_bytes(with_node_rotation(glb.read_bytes()))

        g = open_gltf(glb)
        jpegs = [bytes(g.buffer(0)[v["byteOffset"]:v["byteOffset"] + v["byteLength"]])
                 for v in (g.json["bufferViews"][im["bufferView"]] for im in g.json["images"])]

        def decode_jpegs():
            for b in jpegs:
                np.asarray(Image.open(io.BytesIO(b)).convert("RGBA"))

        rows = {
            "read GLB bytes": median_time(lambda: glb.read_bytes(), args.repeat),
            "load(glb, textures=False)": median_time(lambda: load(glb, textures=False), args.repeat),
            "load(glb, textures=False), nodes rotated": median_time(lambda: load(rotated, textures=False),
                                                                     args.repeat),
            "load(glb)": median_time(lambda: load(glb), args.repeat),
            "Pillow decode of its JPEGs only": median_time(decode_jpegs, args.repeat),
            "load(ply) binary": median_time(lambda: load(d / "scene.ply"), args.repeat),
            "load(obj)": median_time(lambda: load(d / "scene.obj"), max(1, args.repeat // 2)),
        }
        sizes = {k: (d / f"scene.{k}").stat().st_size for k in ("glb", "ply", "obj")}
    print(f"scene: {desc}; {doc.triangle_count} triangles, {len(pos)} vertices; "
          f"GLB {sizes['glb'] / 1e6:.1f} MB, PLY {sizes['ply'] / 1e6:.1f} MB, OBJ {sizes['obj'] / 1e6:.1f} MB")
    print(f"medians of {args.repeat} runs")
    print("| step | time |\n|---|---|")
    for k, v in rows.items():
        print(f"| {k} | {v * 1000:.0f} ms |")
    overhead = rows["load(glb)"] - rows["Pillow decode of its JPEGs only"]
    print(f"\nreader overhead beyond JPEG decoding: {overhead * 1000:.0f} ms; "
          f"geometry-only load / plain read: {rows['load(glb, textures=False)'] / rows['read GLB bytes']:.1f}x")


if __name__ == "__main__":
    main()
