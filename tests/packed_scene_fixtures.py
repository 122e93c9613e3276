"""In-memory SceneDocuments for the transform / packed-scene tests (no reader needed)."""
from __future__ import annotations

import numpy as np

from bps_assets.scene import Material, Mesh, SceneDocument, Texture


def natural_image(size: int = 256, seed: int = 0) -> np.ndarray:
    """A photo-like RGBA image: smooth multi-scale noise, a few hard edges, mild grain."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    acc = np.zeros((size, size, 3))
    for octave, weight in ((4, 0.5), (16, 0.3), (64, 0.15)):
        small = rng.random((octave, octave, 3))
        img = Image.fromarray((small * 255).astype(np.uint8)).resize((size, size), Image.Resampling.BICUBIC)
        acc += weight * np.asarray(img, np.float64)
    yy, xx = np.mgrid[0:size, 0:size]
    acc[(xx + yy) % (size // 2) < size // 8] *= 0.6             # stripes with hard edges
    acc[(xx - size / 2) ** 2 + (yy - size / 3) ** 2 < (size / 6) ** 2] = (200, 60, 40)  # a disc
    acc += rng.normal(0, 2.0, acc.shape)
    rgb = np.clip(acc / max(acc.max(), 1) * 255, 0, 255).astype(np.uint8)
    return np.concatenate([rgb, np.full((size, size, 1), 255, np.uint8)], 2)


def grid_mesh(n: int, extent: float = 10.0, seed: int = 0, z_up: bool = False, split: bool = False):
    """(positions, indices, uvs) of a bumpy n x n grid; ``split`` gives every triangle its
    own three vertices (like many scan exports), so welding has work to do."""
    rng = np.random.default_rng(seed)
    u, v = np.meshgrid(np.linspace(0, 1, n), np.linspace(0, 1, n))
    h = 0.3 * np.sin(u * 7) * np.cos(v * 5) + rng.normal(0, 0.002, u.shape)
    if z_up:
        p = np.stack([u * extent, v * extent, h], -1)
    else:
        p = np.stack([u * extent, h, v * extent], -1)
    p = p.reshape(-1, 3).astype(np.float32)
    uv = np.stack([u, v], -1).reshape(-1, 2).astype(np.float32) * 3.0
    i = np.arange(n * n).reshape(n, n)
    a, b, c, d = i[:-1, :-1].ravel(), i[:-1, 1:].ravel(), i[1:, :-1].ravel(), i[1:, 1:].ravel()
    t = np.concatenate([np.stack([a, b, c], 1), np.stack([b, d, c], 1)]).astype(np.uint32)
    if split:
        p, uv = p[t.reshape(-1)], uv[t.reshape(-1)]
        t = np.arange(len(p), dtype=np.uint32).reshape(-1, 3)
    return p, t, uv


def make_doc(n: int = 40, z_up: bool = False, textures: int = 1, tex_size: int = 128,
             split: bool = True, extent: float = 10.0) -> SceneDocument:
    """Two meshes (one textured, one plain with vertex colours) sharing a scene."""
    p, t, uv = grid_mesh(n, extent, 0, z_up, split)
    p2, t2, _ = grid_mesh(max(n // 2, 2), extent / 3, 1, z_up, split)
    p2 = p2 + np.float32(extent / 4)
    cols = np.tile(np.array([[0.2, 0.5, 0.9, 1.0]], np.float32), (len(p2), 1))
    texs = [Texture(natural_image(tex_size, k), source=f"tex{k}.png") for k in range(textures)]
    mats = [Material("textured", np.array([1, 1, 1, 1], np.float32), texture=0 if textures else None),
            Material("plain", np.array([0.8, 0.7, 0.6, 1], np.float32))]
    return SceneDocument(
        meshes=[Mesh(p, t, uvs=uv, material=0), Mesh(p2, t2, colors=cols, material=1)],
        materials=mats, textures=texs, source_path="", source_format="test")
