"""Memory budget of converting one large HM3D-layout scan (issue 16 item 4).

Generates one scan the size of a large HM3D v0.2 ``.basis.glb`` -- ``--triangles`` (2 M)
triangles in ``--textures`` (40) textured submeshes, each a noisy Y-up height field with
``--texture-px`` (2048) px JPEG textures (no Basis encoder here; the decoded RGBA, which
dominates memory, is the same size as for KTX2) -- writes it as
``hm3d/val/00800-BENCHmem0001/BENCHmem0001.basis.glb`` and converts it with the options
``preprocess --dataset hm3d`` uses, in a fresh child process per run so the peak RSS is that
conversion's. Prints the numbers and the ratios a worker-pool rule needs:
peak RSS / GLB size, peak RSS / decoded texture bytes, output / input.

    python benchmarks/bench_hm3d_memory.py                       # 2 M triangles, 40 x 2048 px
    python benchmarks/bench_hm3d_memory.py --triangles 500000 --textures 10 --texture-px 1024
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SCAN_ID = "BENCHmem0001"

CHILD = r"""
import dataclasses, json, sys, time
from bps_assets import packed_scene
import numpy, PIL.Image  # baseline: interpreter and libraries, before the conversion
def vm(key):
    for ln in open("/proc/self/status"):
        if ln.startswith(key + ":"):
            return int(ln.split()[1])
base = vm("VmRSS")  # resident now (imports can peak higher and give memory back)
opts = dataclasses.replace(packed_scene.DEFAULTS, dataset="generic", up="y")
t = time.perf_counter()
res = packed_scene.convert_file(sys.argv[1], sys.argv[2], opts, overwrite=True)
sec = time.perf_counter() - t
peak = vm("VmHWM")  # not ru_maxrss: Linux carries the forking parent's peak across exec
st = dict(getattr(res, "stats", None) or {})
print(json.dumps({"baseline_kib": base, "peak_kib": peak, "seconds": sec,
                  "triangles_out": int(st.get("triangles_out", st.get("triangles", 0)) or 0),
                  "texture_bytes": int(st.get("texture_bytes", 0) or 0)}))
"""


def make_scan(path: Path, triangles: int, textures: int, px: int, seed: int = 0) -> dict:
    """Write the scan; returns its facts (triangles, textures, decoded texture bytes)."""
    from bps_assets.scene import Material, Mesh, SceneDocument, Texture
    from bps_assets.writers.glb import DEFAULTS as GLB_DEFAULTS, encode_image, write_glb

    rng = np.random.default_rng(seed)
    doc = SceneDocument(source_path=str(path), source_format="bench")
    encoded = []
    per = triangles // textures
    n = max(2, int(np.sqrt(per / 2)) + 1)  # an n x n vertex grid has 2 (n-1)^2 triangles
    yy, xx = np.mgrid[0:px, 0:px].astype(np.float32) / px
    for k in range(textures):
        # smooth colour field plus grain: compresses like a photo texture, not like noise
        base = np.stack([np.sin(6.28 * (xx * (k % 5 + 1) + yy)), np.cos(6.28 * yy * (k % 3 + 1)),
                         np.sin(6.28 * (xx - yy) * 2)], -1)
        rgb = (127 + 100 * base + rng.normal(0, 12, (px, px, 3))).clip(0, 255).astype(np.uint8)
        rgba = np.concatenate([rgb, np.full((px, px, 1), 255, np.uint8)], -1)
        encoded.append(encode_image(rgba, "jpeg", GLB_DEFAULTS))
        doc.textures.append(Texture(rgba[:1, :1].copy(), source=f"bench:{k}", name=f"t{k}"))
        doc.materials.append(Material(name=f"m{k}", base_color=np.ones(4, np.float32), texture=k))
        gx, gz = np.meshgrid(np.linspace(0, 4, n, dtype=np.float32), np.linspace(0, 4, n, dtype=np.float32))
        gy = rng.normal(0, 0.02, gx.shape).astype(np.float32) + (k // 8) * 3.0  # storeys along +Y
        pos = np.stack([gx + 4.0 * (k % 8), gy, gz], -1).reshape(-1, 3)
        uv = np.stack([gx / 4, gz / 4], -1).reshape(-1, 2).astype(np.float32)
        i = np.arange(n * n, dtype=np.uint32).reshape(n, n)[:-1, :-1].ravel()
        quads = np.stack([i, i + n, i + 1, i + 1, i + n, i + n + 1], -1).reshape(-1, 3)
        doc.meshes.append(Mesh(positions=pos, indices=quads.astype(np.uint32), uvs=uv, colors=None,
                               material=k, name=f"g{k}"))
    path.parent.mkdir(parents=True, exist_ok=True)
    size = write_glb(doc, path, overwrite=True, encoded_images=encoded)
    return {"triangles": doc.triangle_count, "textures": textures, "texture_px": px,
            "decoded_texture_bytes": textures * px * px * 4, "glb_bytes": size}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--triangles", type=int, default=2_000_000)
    ap.add_argument("--textures", type=int, default=40)
    ap.add_argument("--texture-px", type=int, default=2048)
    ap.add_argument("--runs", type=int, default=1, help="conversions (each in a fresh process)")
    ap.add_argument("--workdir", default=None, help="keep the scan here (default: a temp dir)")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(a.workdir or tmp)
        scan = root / "hm3d" / "val" / f"00800-{SCAN_ID}" / f"{SCAN_ID}.basis.glb"
        t = time.perf_counter()
        facts = make_scan(scan, a.triangles, a.textures, a.texture_px)
        print(f"scan: {facts['triangles']:,} triangles, {a.textures} x {a.texture_px}^2 textures, "
              f"{facts['glb_bytes'] / 2**20:.1f} MiB GLB ({time.perf_counter() - t:.1f} s to write)")
        out = root / "out.bps"
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                           os.environ.get("PYTHONPATH", "")]))
        for r in range(a.runs):
            p = subprocess.run([sys.executable, "-c", CHILD, str(scan), str(out)], capture_output=True,
                               text=True, env=env)
            if p.returncode:
                print(p.stderr[-3000:], file=sys.stderr)
                return 1
            m = json.loads(p.stdout.strip().splitlines()[-1])
            peak, base = m["peak_kib"] * 1024, m["baseline_kib"] * 1024
            outb = out.stat().st_size
            print(f"run {r}: convert {m['seconds']:.1f} s; peak RSS {peak / 2**20:.0f} MiB "
                  f"(baseline {base / 2**20:.0f} MiB, conversion {(peak - base) / 2**20:.0f} MiB); "
                  f"output {outb / 2**20:.1f} MiB, {m['triangles_out']:,} triangles")
            print(f"  ratios: peak/GLB {peak / facts['glb_bytes']:.2f}, (peak-baseline)/GLB "
                  f"{(peak - base) / facts['glb_bytes']:.2f}, (peak-baseline)/decoded textures "
                  f"{(peak - base) / facts['decoded_texture_bytes']:.2f}, output/GLB "
                  f"{outb / facts['glb_bytes']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
