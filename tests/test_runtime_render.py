"""Batch renderer: analytic depth, camera conventions, BC1 texels, mips, and every shader
(the Embree bridge's C shading, the Warp kernel on Embree hits and in the Warp renderer) held
to the numpy reference in shading_reference.py."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from bps_assets.errors import ConfigError
from bps_runtime.render import RenderOptions, build_shading_data, make_renderer
from bps_runtime.render.camera import yaw_to_quaternion
from runtime_scenes import bc1_chain, checker, room_scene
from shading_reference import decode_bc1_texels, reference_rgb

BACKENDS = ["embree", "warp"]


def _renderer(backend, scene, options=RenderOptions(), sid=0, **kw):
    if backend == "warp" or kw.get("shading") == "warp":
        import warp  # noqa: F401  (a dependency the test extra installs: missing is a failure, not a skip)
    if kw.get("shading") == "native":
        from bps_runtime.render import embree_bridge
        if not embree_bridge.available():
            pytest.skip("the Embree bridge was not compiled")
    r = make_renderer(backend, options, **kw)
    sd = build_shading_data(scene)
    r.attach(sid, sd, r.prepare(sd, scene.positions, scene.indices))
    return r


def _expected_room_depth(h, w, dist, cam_y=1.25, ceil=3.0):
    """Agent facing the back wall ``dist`` metres away in the 8x3x6 room (HFOV 90)."""
    ys = 1.0 - (np.arange(h) + 0.5) * 2.0 / h
    row = np.where(dist * ys >= ceil - cam_y, (ceil - cam_y) / np.where(ys == 0, 1, ys),
                   np.where(dist * ys <= -cam_y, cam_y / np.where(ys == 0, 1, -ys), dist))
    return np.repeat(row[:, None], w, axis=1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_depth_matches_analytic_room(backend):
    r = _renderer(backend, room_scene())
    out = r.render(torch.zeros(2, dtype=torch.long), torch.tensor([[4.0, 0, -3], [4.0, 0, -4.5]]),
                   torch.zeros(2), ("depth",))
    d = out["depth"]
    assert d.shape == (2, 64, 64, 1) and d.dtype == torch.float32
    np.testing.assert_allclose(d[0, :, :, 0].numpy(), _expected_room_depth(64, 64, 3.0), rtol=1e-5)
    np.testing.assert_allclose(d[1, :, :, 0].numpy(), _expected_room_depth(64, 64, 1.5), rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_yaw_and_quaternion_agree_and_turn_left(backend):
    r = _renderer(backend, room_scene(), RenderOptions(resolution=(16, 24)))
    pos = np.array([[1.0, 0, -3], [7.0, 0, -3]], np.float32)
    yaw = np.array([np.pi / 2, -np.pi / 2], np.float32)  # +90 deg = turn left: look along -X
    a = r.render([0, 0], pos, yaw)["depth"].numpy()
    b = r.render([0, 0], pos, yaw_to_quaternion(yaw))["depth"].numpy()
    np.testing.assert_allclose(a, b, rtol=1e-5)
    # both look at a side wall 1 m away: the centre rows are all 1.0 (z-depth, not ray length)
    np.testing.assert_allclose(a[:, 6:10, :, 0], 1.0, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_misses_are_zero_and_normalized_depth(backend):
    s = room_scene()
    keep = s.tri_material == 0  # floor only: everything above the horizon is a miss
    s.indices, s.tri_material = s.indices[keep], s.tri_material[keep]
    o = RenderOptions(resolution=(32, 32), normalize_depth=True)
    r = _renderer(backend, s, o)
    out = r.render([0], [[4.0, 0, -3]], [0.0], ("depth", "rgb"))
    d, rgb = out["depth"][0, :, :, 0].numpy(), out["rgb"][0].numpy()
    assert np.all(d[:16] == 0) and np.all(rgb[:16] == 0)
    assert np.all(d[24:] > 0) and np.all(d <= 1.0)  # floor within 3 m ahead
    # normalized = clip(z, 0, 10) / 10; bottom row: floor 1.25 m below
    ys = 1.0 - (31 + 0.5) * 2.0 / 32
    np.testing.assert_allclose(d[31], 1.25 / -ys / 10.0, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_depth_is_clipped_to_the_sensor_range_normalized_or_not(backend):
    """habitat-lab's depth sensor: np.clip(depth, min_depth, max_depth) always, then / range only
    when normalized (a miss, 0, reads min_depth); raw_depth (the frame depth noise reads): the
    rays' z-depth unclipped, misses 0."""
    floor = room_scene()
    keep = floor.tri_material == 0               # floor only: the top half misses
    floor.indices, floor.tri_material = floor.indices[keep], floor.tri_material[keep]
    for scene in (room_scene(), floor):
        opts = RenderOptions(resolution=(32, 32), min_depth=0.5, max_depth=2.5, raw_depth=True)
        raw = _renderer(backend, scene, opts).render([0], [[4.0, 0, -3]], [0.0])["depth"][0, :, :, 0].numpy()
        if scene is floor:
            assert (raw[:16] == 0).all() and (raw > 2.5).any()
        else:   # back wall 3 m away, ceiling / floor nearer: beyond max_depth in the middle rows
            np.testing.assert_allclose(raw, _expected_room_depth(32, 32, 3.0), rtol=1e-5)
        for normalize in (False, True):
            o = RenderOptions(resolution=(32, 32), min_depth=0.5, max_depth=2.5, normalize_depth=normalize)
            d = _renderer(backend, scene, o).render([0], [[4.0, 0, -3]], [0.0])["depth"][0, :, :, 0].numpy()
            clipped = np.clip(raw, 0.5, 2.5)
            assert clipped.max() == 2.5 and (clipped.min() == 0.5) == (scene is floor)
            np.testing.assert_array_equal(d, (clipped - np.float32(0.5)) / np.float32(2.0) if normalize else clipped)


def test_bc1_texel_decode_matches_pillow():
    from PIL import Image

    rng = np.random.default_rng(3)
    img = rng.integers(0, 256, (16, 16, 4), dtype=np.uint8)
    img[..., 3] = 255
    (w, h, data), *_ = bc1_chain(img)
    ref = np.asarray(Image.frombytes("RGBA", (w, h), data, "bcn", 1))
    y, x = np.mgrid[0:h, 0:w]
    n = x.size
    got = decode_bc1_texels(np.frombuffer(data, np.uint8), np.zeros(n, np.int64), np.full(n, w, np.int64),
                            x.reshape(-1).astype(np.int64), y.reshape(-1).astype(np.int64))
    np.testing.assert_array_equal(got[:, :3], ref.reshape(-1, 4)[:, :3])


def _embree_rgb(shading, scene, options, positions, rotations):
    """uint8 [N,H,W,3] frames of one scene: the Embree renderer with ``shading``, or the test
    reference (``shading="reference"``)."""
    if shading == "reference":
        return reference_rgb(scene, positions, rotations, options)
    r = _renderer("embree", scene, options, shading=shading)
    return r.render(np.zeros(len(positions), np.int64), positions, rotations, ("rgb",))["rgb"].numpy()


@pytest.mark.parametrize("shading", ["reference", "warp", "native"])
def test_rgb_texture_mips_and_material_colour(shading):
    s = room_scene(vertex_colors=False)
    rgb = _embree_rgb(shading, s, RenderOptions(resolution=(128, 128)), [[4.0, 0, -0.5]], [0.0])[0].astype(int)
    pure = {(230, 60, 40), (40, 90, 220)}  # the floor checker's two colours (BC1 may shift a bit)
    near = rgb[120:, 40:88].reshape(-1, 3)
    dist_to_pure = np.min([np.abs(near - np.array(c)).sum(1) for c in pure], axis=0)
    assert np.mean(dist_to_pure < 24) > 0.95  # level 0 near the camera
    far = rgb[70:74, 40:88].reshape(-1, 3)  # floor close to the back wall: coarse mips blend
    far_dist = np.min([np.abs(far - np.array(c)).sum(1) for c in pure], axis=0)
    assert np.mean(far_dist > 60) > 0.5
    # ceiling: untextured material colour (0.8, 0.7, 0.6)
    np.testing.assert_allclose(rgb[0, 64], [204, 178.5, 153], atol=0.5)


@pytest.mark.parametrize("shading", ["reference", "warp", "native"])
@pytest.mark.parametrize("packed", [False, True])
def test_backends_agree_pixel_for_pixel(packed, shading, tmp_path):
    import warp  # noqa: F401  (a dependency the test extra installs: missing is a failure, not a skip)
    if packed:  # through the real packed format (quantized positions, BC1 from the packer)
        from bps_assets.packed_scene import convert_scene, read_packed_scene
        from runtime_scenes import room_document
        convert_scene(room_document(), tmp_path / "room.bps")
        scene = read_packed_scene(tmp_path / "room.bps")
    else:
        scene = room_scene()
    o = RenderOptions(resolution=(48, 40))
    rng = np.random.default_rng(7)
    n = 12
    pos = np.c_[rng.uniform(0.5, 7.5, n), rng.uniform(-0.3, 0.5, n), rng.uniform(-5.5, -0.5, n)]
    q = rng.normal(size=(n, 4))  # arbitrary orientations: floor, ceiling, corners, grazing angles
    w = _renderer("warp", scene, o, sid=5).render(np.full(n, 5), pos, q, ("depth", "rgb"))
    if shading == "reference":
        rgb = reference_rgb(scene, pos, q, o)
    else:
        e = _renderer("embree", scene, o, sid=5, shading=shading).render(np.full(n, 5), pos, q, ("depth", "rgb"))
        de, dw = e["depth"].numpy(), w["depth"].numpy()
        np.testing.assert_array_equal(de == 0, dw == 0)
        hit = de > 0
        assert hit.mean() > 0.5
        np.testing.assert_allclose(dw[hit], de[hit], rtol=1e-4)
        rgb = e["rgb"].numpy()
    diff = np.abs(rgb.astype(int) - w["rgb"].numpy().astype(int)).max(-1)
    assert (diff <= 1).mean() > 0.99, (diff <= 1).mean()


def test_render_errors_are_precise():
    r = _renderer("embree", room_scene())
    with pytest.raises(ConfigError, match="unknown sensors"):
        r.render([0], [[1.0, 0, -1]], [0.0], ("normals",))
    with pytest.raises(ConfigError, match="not resident"):
        r.render([3], [[1.0, 0, -1]], [0.0])
    with pytest.raises(ConfigError, match="disagree on N"):
        r.render([0, 0], [[1.0, 0, -1]], [0.0, 0.0])
    with pytest.raises(ConfigError, match=r"\[N, 3\]"):
        r.render([0], [[1.0, 0]], [0.0])
    with pytest.raises(ConfigError, match="zero quaternion"):
        r.render([0], [[1.0, 0, -1]], [[0.0, 0, 0, 0]])
    with pytest.raises(ConfigError, match="CPU"):
        make_renderer("embree", device="cuda")
    # the numpy shader is a test reference (shading_reference.py), not a product option
    with pytest.raises(ConfigError, match="shading must be one of auto, native, warp; got 'numpy'"):
        make_renderer("embree", shading="numpy")


def test_bc7_textures_are_expanded_and_all_shaders_agree_with_the_reference():
    import warp  # noqa: F401  (a dependency the test extra installs: missing is a failure, not a skip)
    import etcpak
    from PIL import Image

    s = room_scene(vertex_colors=True)
    img = checker(16, 4, (250, 20, 20), (20, 250, 20))
    data = etcpak.compress_bc7(np.ascontiguousarray(img).tobytes(), 16, 16)
    off = s.tex_blocks.size
    s.tex_blocks = np.concatenate([s.tex_blocks, np.frombuffer(data, np.uint8)])
    s.tex_levels = np.vstack([s.tex_levels, [[2, 0, 16, 16, off, 7]]])
    s.material_texture = np.array([2, 1, -1], np.int32)  # the floor uses the BC7 texture
    sd = build_shading_data(s)
    assert sd.tex_format[2] == 0  # expanded to RGBA8 at load
    ref = np.asarray(Image.frombytes("RGBA", (16, 16), data, "bcn", 7))
    o = sd.level_info[2, 0, 0]
    np.testing.assert_array_equal(sd.tex_data[o:o + 16 * 16 * 4].reshape(16, 16, 4), ref)
    opts = RenderOptions(resolution=(32, 32))
    outs = [_renderer("embree", s, opts, shading="warp"), _renderer("warp", s, opts),
            _renderer("embree", s, opts, shading="native")]
    pos, yaw = [[4.0, 0, -1], [2.0, 0.5, -4]], [0.2, 2.5]
    rgb = [reference_rgb(s, pos, yaw, opts).astype(int)]
    rgb += [r.render([0, 0], pos, yaw, ("rgb",))["rgb"].numpy().astype(int) for r in outs]
    floor = rgb[0][:, 20:]  # lower rows: floor
    assert (floor[..., 0] > 150).any() and (floor[..., 1] > 150).any()  # both checker colours seen
    for other in rgb[1:]:
        assert (np.abs(other - rgb[0]).max(-1) <= 1).mean() > 0.99


def test_bad_cross_references_are_corrupt_file_errors():
    from bps_assets.errors import CorruptFileError

    s = room_scene()
    s.tri_material = s.tri_material.copy()
    s.tri_material[3] = 7
    with pytest.raises(CorruptFileError, match="tri_material"):
        build_shading_data(s, "x.bps")
    s = room_scene()
    s.tex_levels = s.tex_levels.copy()
    s.tex_levels[0, 4] = 10**9
    with pytest.raises(CorruptFileError, match="outside tex_blocks"):
        build_shading_data(s, "x.bps")
    s = room_scene()
    s.indices = s.indices.copy()
    s.indices[0, 0] = 10**6
    with pytest.raises(CorruptFileError, match="out of range"):
        build_shading_data(s, "x.bps")
