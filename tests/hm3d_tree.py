"""A small HM3D v0.2-layout source tree for tests: synth scans turned Y-up (as HM3D's basis
GLBs are), one texture replaced by a real KTX2 file carried by KHR_texture_basisu, and a real
habitat .navmesh shipped as ``{ID}.basis.navmesh`` for one scan."""
from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "assets"
KTX2_DXT = SHARED / "habitat-sim" / "scenes" / "batch-four-squares.4x.dxt.ktx2"
NAVMESH = SHARED / "habitat_test_scenes_navmesh" / "van-gogh-room.navmesh"

# (split folder, index, id, synth scene, ships a navmesh)
SCANS = [("train", "00000", "kfPV7w3FaU5", "Allensville", False),
         ("val", "00800", "TEEsavR23oF", "Collierville", True),
         ("val", "00801", "HaxA7YrQdEC", "Beechwood", False)]


def scan_dir(root: Path, folder: str, index: str, sid: str) -> Path:
    return root / "hm3d" / folder / f"{index}-{sid}"


def _use_basisu(glb: bytes, ktx_textures: list[int]) -> bytes:
    """Rewrite the GLB's JSON so the given textures name their image through
    KHR_texture_basisu (as HM3D's *.basis.glb files do)."""
    jlen = struct.unpack_from("<I", glb, 12)[0]
    doc = json.loads(glb[20:20 + jlen])
    rest = glb[20 + jlen:]
    for t in ktx_textures:
        tex = doc["textures"][t]
        tex.setdefault("extensions", {})["KHR_texture_basisu"] = {"source": tex.pop("source")}
    doc["extensionsUsed"] = sorted(set(doc.get("extensionsUsed", [])) | {"KHR_texture_basisu"})
    doc["extensionsRequired"] = sorted(set(doc.get("extensionsRequired", [])) | {"KHR_texture_basisu"})
    js = json.dumps(doc, separators=(",", ":")).encode()
    js += b" " * (-len(js) % 4)
    body = struct.pack("<II", len(js), 0x4E4F534A) + js + rest
    return struct.pack("<III", 0x46546C67, 2, 12 + len(body)) + body


def write_scan(path: Path, synth_name: str, ktx2: Path | None = KTX2_DXT, seed: int = 0) -> dict:
    """Write a Y-up synth scan as an HM3D ``.basis.glb``; returns facts for assertions."""
    from bps_assets import synth
    from bps_assets.writers.glb import build_glb

    doc, encoded, info = synth.build_scene("gibson", synth_name, seed, "small")
    for m in doc.meshes:  # synth writes Z-up like Gibson; HM3D stages are Y-up
        p = m.positions
        m.positions = np.stack([p[:, 0], p[:, 2], -p[:, 1]], axis=1).astype(np.float32)
    ktx = []
    if ktx2 is not None and encoded:
        encoded = list(encoded)
        encoded[0] = (ktx2.read_bytes(), "image/ktx2")
        ktx = [0]
    glb = b"".join(bytes(c) for c in build_glb(doc, encoded_images=encoded))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(_use_basisu(glb, ktx))
    return {"info": info, "triangles": doc.triangle_count, "textures": len(doc.textures)}


def build_tree(root: Path, scans=SCANS) -> dict:
    """The HM3D tree under ``root/hm3d`` (with companions and a stray file); returns
    ``{id: facts}``."""
    out = {}
    for folder, index, sid, synth_name, nav in scans:
        d = scan_dir(root, folder, index, sid)
        out[sid] = write_scan(d / f"{sid}.basis.glb", synth_name)
        (d / f"{sid}.semantic.txt").write_text("HM3D Semantic Annotations\n")
        (d / f"{sid}.semantic.glb").write_bytes(b"")
        if nav:
            (d / f"{sid}.basis.navmesh").write_bytes(NAVMESH.read_bytes())
        out[sid].update(folder=folder, index=index, navmesh=nav)
    (root / "hm3d" / "README.txt").write_text("not a scan\n")
    return out
