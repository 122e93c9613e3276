"""Small packed scenes (real ``PackedScene`` objects) built in memory for the runtime tests
(habitat frame, Y up).

Textures are real BC1 blocks made with etcpak (the same encoder the packer uses), mip chains
included, so the renderers' texel decode is exercised against Pillow's decoder.
"""
from __future__ import annotations

import numpy as np

from bps_assets.packed_scene import PackedScene


def bc1_chain(rgba: np.ndarray) -> list[tuple[int, int, bytes]]:
    """RGBA8 [H,W,4] (power-of-two, >= 4) -> [(w, h, bc1 bytes)] for every mip level down to 4x4."""
    import etcpak
    from PIL import Image

    out = []
    img = Image.fromarray(rgba, "RGBA")
    while True:
        w, h = img.size
        out.append((w, h, etcpak.compress_bc1(np.ascontiguousarray(np.asarray(img)).tobytes(), w, h)))
        if w <= 4 or h <= 4:
            break
        img = img.resize((w // 2, h // 2), Image.BOX)
    return out


def checker(n: int = 64, cells: int = 8, a=(230, 60, 40), b=(40, 90, 220)) -> np.ndarray:
    y, x = np.mgrid[0:n, 0:n]
    m = ((x * cells // n + y * cells // n) % 2).astype(bool)
    img = np.empty((n, n, 4), np.uint8)
    img[...] = (*a, 255)
    img[m] = (*b, 255)
    return img


def _quad(p0, p1, p2, p3, uv_scale=1.0):
    """Two triangles, counter-clockwise p0 p1 p2 p3; uvs (0,0)-(s,s)."""
    v = np.array([p0, p1, p2, p3], np.float32)
    uv = np.array([[0, 0], [uv_scale, 0], [uv_scale, uv_scale], [0, uv_scale]], np.float32)
    return v, uv, np.array([[0, 1, 2], [0, 2, 3]], np.int64)


def room_scene(size=(8.0, 3.0, 6.0), textured=True, vertex_colors=True, scene_id="room"):
    """A closed box room [0,sx]x[0,sy]x[-sz,0]: floor, ceiling, 4 walls, each its own material.

    Materials: 0 floor (checker texture), 1 walls (grey, texture 1), 2 ceiling (plain colour).
    """
    sx, sy, sz = size
    quads = [  # (corners, material, uv scale)
        (((0, 0, 0), (sx, 0, 0), (sx, 0, -sz), (0, 0, -sz)), 0, sx / 2),      # floor y=0
        (((0, sy, 0), (0, sy, -sz), (sx, sy, -sz), (sx, sy, 0)), 2, 1.0),      # ceiling
        (((0, 0, -sz), (sx, 0, -sz), (sx, sy, -sz), (0, sy, -sz)), 1, 2.0),   # back wall z=-sz
        (((0, 0, 0), (0, sy, 0), (sx, sy, 0), (sx, 0, 0)), 1, 2.0),           # front wall z=0
        (((0, 0, 0), (0, 0, -sz), (0, sy, -sz), (0, sy, 0)), 1, 2.0),         # left wall x=0
        (((sx, 0, 0), (sx, sy, 0), (sx, sy, -sz), (sx, 0, -sz)), 1, 2.0),     # right wall x=sx
    ]
    pos, uvs, idx, mats = [], [], [], []
    for corners, m, s in quads:
        v, uv, t = _quad(*corners, uv_scale=s)
        idx.append(t + sum(len(p) for p in pos))
        pos.append(v)
        uvs.append(uv)
        mats += [m, m]
    positions = np.concatenate(pos)
    colors = None
    if vertex_colors:
        rng = np.random.default_rng(0)
        colors = rng.integers(150, 256, size=(len(positions), 4)).astype(np.uint8)
        colors[:, 3] = 255
    blocks, levels = bytearray(), []
    tex_imgs = [checker(64, 8), checker(32, 4, (200, 200, 190), (120, 110, 100))] if textured else []
    for t, img in enumerate(tex_imgs):
        for lvl, (w, h, data) in enumerate(bc1_chain(img)):
            levels.append((t, lvl, w, h, len(blocks), 1))
            blocks += data
    return PackedScene(
        header={"scene_id": scene_id, "frame": "habitat"}, positions=positions, indices=np.concatenate(idx).astype(np.uint32), uvs=np.concatenate(uvs),
        colors=colors, tri_material=np.array(mats, np.int32),
        material_color=np.array([[1, 1, 1, 1], [0.9, 0.9, 0.9, 1], [0.8, 0.7, 0.6, 1]], np.float32),
        material_texture=np.array([0, 1, -1] if textured else [-1, -1, -1], np.int32),
        tex_blocks=np.frombuffer(bytes(blocks), np.uint8), tex_levels=np.array(levels, np.int64).reshape(-1, 6),
        chunk_tris=np.array([[0, len(mats)]], np.int64), chunk_spheres=np.zeros((1, 4), np.float32))


def room_document(size=(8.0, 3.0, 6.0)):
    """The same room as a bps_assets SceneDocument (Y-up, RGBA textures) for convert_scene."""
    from bps_assets.scene import Material, Mesh, SceneDocument, Texture

    s = room_scene(size, textured=True, vertex_colors=False)
    tex = [Texture(rgba=checker(64, 8), name="floor"),
           Texture(rgba=checker(32, 4, (200, 200, 190), (120, 110, 100)), name="wall")]
    mats = [Material(name=f"m{i}", base_color=s.material_color[i].copy(),
                     texture=(None if s.material_texture[i] < 0 else int(s.material_texture[i])))
            for i in range(3)]
    meshes = []
    for m in range(3):
        tris = s.indices[s.tri_material == m]
        used, inv = np.unique(tris, return_inverse=True)
        meshes.append(Mesh(positions=s.positions[used].copy(), indices=inv.reshape(-1, 3).astype(np.uint32),
                           uvs=s.uvs[used].copy(), material=m, name=f"part{m}"))
    return SceneDocument(meshes=meshes, materials=mats, textures=tex, source_path="room.synthetic",
                         source_format="synthetic")


class MemoryReader:
    """A reader for SceneCache/SceneLoader tests: path -> scene object, 'bad*' paths raise."""

    def __init__(self, scenes: dict):
        self.scenes = scenes
        self.calls = []

    def __call__(self, path):
        from bps_assets.errors import CorruptFileError

        self.calls.append(path)
        if path not in self.scenes:
            raise CorruptFileError(path, "checksum mismatch (corrupt file)", section="indices")
        return self.scenes[path]
