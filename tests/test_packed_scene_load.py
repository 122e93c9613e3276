"""The packed-scene read path (issue 32 item 4): dequantization by lookup and by blocks returns
the same float32 bits as the whole-array float64 formula; a filtered section whose frame decodes
to another size than declared is refused; concurrent reads keep their arrays apart."""
from __future__ import annotations

import json
import threading
import zlib

import numpy as np
import pytest
import zstandard

from bps_assets import container as C
from bps_assets.errors import CorruptFileError
from bps_assets.transforms.quantize import Grid, dequantize


def _reference(q, grid):
    return (q.astype(np.float64) * np.asarray(grid.step) + np.asarray(grid.origin)).astype(np.float32)


@pytest.mark.parametrize("n", [0, 1, 16385, 70000])
@pytest.mark.parametrize("dtype", [np.uint16, np.uint32])
def test_dequantize_same_bits_as_float64_formula(n, dtype):
    rng = np.random.default_rng(n)
    hi = 65536 if dtype == np.uint16 else 2**32
    q = rng.integers(0, hi, (n, 3), dtype=np.int64).astype(dtype)
    grid = Grid(tuple(rng.normal(0, 50, 3)), tuple(rng.uniform(1e-6, 1e-3, 3)), "u2" if dtype == np.uint16 else "u4",
                1e-3)
    out = dequantize(q, grid)
    ref = _reference(q, grid)
    assert out.dtype == np.float32 and out.shape == ref.shape
    assert np.array_equal(out.view(np.uint32), ref.view(np.uint32))


def _write(p, arr):
    C.write_container(p, "SCEN", {"scene_id": "x"}, {"q": arr}, {"q": C.SectionSpec(filter="delta+shuffle")})


def _replace_frame(p, frame: bytes):
    """Put ``frame`` where section q's stored bytes are, with a matching length and CRC-32, so
    only the decompressed size can be wrong."""
    data = bytearray(p.read_bytes())
    _, ver, kind, hlen, _ = C.PREAMBLE.unpack(bytes(data[:C.PREAMBLE.size]))
    hdr = json.loads(data[C.PREAMBLE_SIZE:C.PREAMBLE_SIZE + hlen])
    sec = hdr["sections"][0]
    assert len(frame) <= sec["stored_length"]
    data[sec["offset"]:sec["offset"] + len(frame)] = frame
    sec.update(stored_length=len(frame), crc32=zlib.crc32(frame))
    new = json.dumps(hdr).encode()
    assert C.PREAMBLE_SIZE + len(new) <= sec["offset"]
    pre = C.PREAMBLE.pack(C.MAGIC, ver, kind, len(new), 0).ljust(C.PREAMBLE_SIZE, b"\0")
    data[:sec["offset"]] = (pre + new).ljust(sec["offset"], b" ")
    p.write_bytes(bytes(data))


@pytest.mark.parametrize("delta,msg", [(-6, "decompressed to 29994 bytes, expected 30000"),
                                       (+6, "zstd decompression failed")])
def test_filtered_section_of_wrong_decoded_size_is_corrupt(tmp_path, delta, msg):
    p = tmp_path / "a.bps"
    arr = np.arange(2500 * 3, dtype=np.uint32).reshape(2500, 3)  # 30000 bytes, delta+shuffle
    _write(p, arr)
    with C.Container(p) as c:
        np.testing.assert_array_equal(c.read("q"), arr)
    # a frame without its content size passes the frame-size check; the decoded size is counted
    frame = zstandard.ZstdCompressor(write_content_size=False).compress(bytes(30000 + delta))
    _replace_frame(p, frame)
    with C.Container(p) as c, pytest.raises(CorruptFileError, match=f"'q'.*{msg}"):
        c.read("q")
    with C.Container(p) as c, pytest.raises(CorruptFileError):
        c.verify(deep=True)


def test_reads_across_threads_keep_arrays_apart(tmp_path):
    """Arrays read by several threads at once (each with its thread's decompressor) own their
    memory: later reads do not change them."""
    rng = np.random.default_rng(1)
    arrays = [rng.integers(0, 1 << 30, (4000 + 37 * k, 3)).astype(np.uint32) for k in range(6)]
    paths = []
    for k, a in enumerate(arrays):
        paths.append(tmp_path / f"{k}.bps")
        _write(paths[-1], a)
    got = [None] * len(arrays)

    def read(k):
        with C.Container(paths[k]) as c:
            got[k] = c.read("q")

    threads = [threading.Thread(target=read, args=(k,)) for k in range(len(arrays))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(len(arrays)):  # and once more serially
        read(k)
        read((k + 1) % len(arrays))
    for a, g in zip(arrays, got):
        np.testing.assert_array_equal(g, a)
