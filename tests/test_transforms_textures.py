"""textures: power-of-two cap, full mip chains, BC1/BC7 sizes, PSNR measured with Pillow."""
from __future__ import annotations

import numpy as np
import pytest

from bps_assets.errors import ConfigError
from bps_assets.scene import Texture
from bps_assets.transforms import textures as tx
from packed_scene_fixtures import natural_image


def test_target_size_is_power_of_two_and_capped():
    assert tx.target_size(2048, 2048, 2048) == (2048, 2048)
    assert tx.target_size(4096, 1000, 2048) == (2048, 1024)
    assert tx.target_size(3000, 700, 1024) == (1024, 512)
    assert tx.target_size(1, 3, 2048) == (1, 4)


def test_mip_chain_goes_to_1x1_and_bc1_is_half_a_byte_per_texel():
    img = natural_image(256)
    levels, info = tx.encode_texture(img[:, :200].copy(), tx.Options(max_texture=128))
    sizes = [(w, h) for w, h, _ in levels]
    assert sizes == [(128, 128), (64, 64), (32, 32), (16, 16), (8, 8), (4, 4), (2, 2), (1, 1)]
    for w, h, data in levels:
        assert len(data) == max(1, w // 4) * max(1, h // 4) * 8
    assert len(levels[0][2]) == 128 * 128 // 2  # BC1: 0.5 byte per texel
    assert info["src_width"] == 200 and info["width"] == 128 and info["levels"] == 8


def test_non_square_chain_and_bc7_sizes():
    img = natural_image(128)
    rect = np.ascontiguousarray(img[:64])  # 128 x 64
    levels, info = tx.encode_texture(rect, tx.Options(format="bc7"))
    assert [(w, h) for w, h, _ in levels] == [(128, 64), (64, 32), (32, 16), (16, 8), (8, 4), (4, 2), (2, 1), (1, 1)]
    assert len(levels[0][2]) == 128 * 64  # BC7: 1 byte per texel
    assert len(levels[-1][2]) == 16       # 1x1 padded to one block
    _, info1 = tx.encode_texture(rect)
    assert info["psnr_db"] > info1["psnr_db"] + 3  # BC7 is the high-quality option


def test_psnr_on_a_natural_image_meets_30db_and_detects_damage():
    img = natural_image(512, seed=3)
    levels, info = tx.encode_texture(img)
    assert info["psnr_db"] >= 30.0
    # the measurement is real: decoding damaged blocks gives a much lower PSNR
    w, h, data = levels[0]
    bad = bytearray(data)
    bad[::7] = b"\xff" * len(bad[::7])
    dec = tx.decode_blocks(bytes(bad), w, h, 1)
    assert tx.psnr(dec[..., :3], img[..., :3]) < info["psnr_db"] - 5
    # and mip 1 decodes to roughly the 2x2 average of mip 0
    dec1 = tx.decode_blocks(levels[1][2], 256, 256, 1).astype(np.float64)
    avg = img[..., :3].astype(np.float64).reshape(256, 2, 256, 2, 3).mean((1, 3))
    assert np.abs(dec1[..., :3] - avg).mean() < 6


def test_texture_set_offsets_and_rows():
    texs = [Texture(natural_image(64, s)) for s in range(3)]
    ts = tx.textures(tx.Options(max_texture=32))(texs)
    lv = ts.tex_levels
    assert lv.shape == (3 * 6, 6)  # 32,16,8,4,2,1
    assert (lv[:, 5] == 1).all()
    assert (lv[:, 4] % 16 == 0).all()
    ends = lv[:, 4] + [tx.block_bytes(w, h, 1) for w, h in lv[:, 2:4]]
    assert ends.max() <= ts.tex_blocks.size
    assert (lv[1:, 4] >= ends[:-1]).all()  # no overlap


def test_bad_options_are_config_errors():
    with pytest.raises(ConfigError):
        tx.check_options(tx.Options(max_texture=1000))
    with pytest.raises(ConfigError):
        tx.check_options(tx.Options(format="astc"))
