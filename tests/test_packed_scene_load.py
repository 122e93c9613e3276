"""The packed-scene read path (issue 32 item 4): dequantization by lookup and by blocks returns
the same float32 bits as the whole-array float64 formula; a filtered section whose frame decodes
to another size than declared is refused; concurrent reads keep their arrays apart; the native
unfilter pass (bps_assets/native/_unfilter.c) returns the numpy path's arrays bit for bit, on
generated sections and on real packed files, and refuses lengths that do not match."""
from __future__ import annotations

import json
import threading
import zlib
from pathlib import Path

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


# -------------------------------------------------- the native unfilter pass vs the numpy path

NATIVE = C._native_unfilter() is not None
needs_native = pytest.mark.skipif(not NATIVE, reason="bps_assets/native/_unfilter.c not built")


def _both_paths(fn, monkeypatch):
    """``fn()`` with the C pass, then with the numpy fallback."""
    monkeypatch.setattr(C, "NATIVE_UNFILTER", True)
    a = fn()
    monkeypatch.setattr(C, "NATIVE_UNFILTER", False)
    b = fn()
    monkeypatch.setattr(C, "NATIVE_UNFILTER", True)
    return a, b


def _same_bits(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    assert a.tobytes() == b.tobytes()


SHAPES = [(), (0,), (1,), (5,), (4097,), (3, 0), (1, 3), (4095, 3), (10_000, 3), (6001, 2), (333, 4, 2), (70, 7)]


@needs_native
@pytest.mark.parametrize("dtype,filt", [(d, "shuffle") for d in C.DTYPES] +
                         [(d, "delta+shuffle") for d in C.DTYPES if d[0] in "ui"])  # delta: integers only
def test_native_unfilter_equals_numpy_on_generated_sections(dtype, filt, monkeypatch):
    dt = np.dtype(C.DTYPES[dtype])
    rng = np.random.default_rng(len(dtype) * 7 + len(filt))
    for shape in SHAPES:
        if filt == "delta+shuffle" and shape == ():
            continue  # the writer refuses a 0-d delta section
        raw = rng.integers(0, 256, int(np.prod(shape, dtype=np.int64)) * dt.itemsize, dtype=np.uint8)
        arr = raw.view(dt).reshape(shape)  # any bits: wrap-around deltas, NaNs
        stored = C._apply_filter(arr, filt)
        a, b = _both_paths(lambda: C._undo_filter(stored, filt, dt, shape), monkeypatch)
        _same_bits(a, b)
        _same_bits(a, arr)


@needs_native
@pytest.mark.parametrize("dtype", [np.uint16, np.uint32])
@pytest.mark.parametrize("filt", ["shuffle", "delta+shuffle"])
@pytest.mark.parametrize("cols", [2, 3])
def test_native_dequantize_equals_numpy_bit_for_bit(dtype, filt, cols, monkeypatch):
    rng = np.random.default_rng(cols)
    hi = 65536 if dtype == np.uint16 else 2**32
    for n in (0, 1, 1365, 1366, 4096, 4097, 70_000):  # across the C pass's 4096-element blocks
        q = rng.integers(0, hi, (n, cols), dtype=np.int64).astype(dtype)
        grid = Grid(tuple(rng.normal(0, 50, cols)), tuple(rng.uniform(1e-6, 1e-3, cols)),
                    "u2" if dtype == np.uint16 else "u4", 1e-3)
        stored = C._apply_filter(q, filt)
        a, b = _both_paths(lambda: C._undo_filter_dequantize(stored, filt, np.dtype(dtype), q.shape, grid),
                           monkeypatch)
        _same_bits(a, b)
        _same_bits(a, dequantize(q, grid))


@needs_native
def test_native_unfilter_is_looked_up_once(monkeypatch):
    """Each C pass is resolved once per process, not per section read (a library load takes
    native's lock; its function cache does not); NATIVE_UNFILTER = False still turns both off."""
    import bps_assets.native as N

    f, g = C._native_unfilter(), C._native_unfilter(dequantize=True)
    monkeypatch.setattr(N, "load", lambda *a, **k: pytest.fail("looked up again"))
    monkeypatch.setattr(N, "_lock", None)   # taking the lock would fail
    assert C._native_unfilter() is f and C._native_unfilter(dequantize=True) is g and f is not g
    monkeypatch.setattr(C, "NATIVE_UNFILTER", False)
    assert C._native_unfilter() is None and C._native_unfilter(dequantize=True) is None


@needs_native
def test_native_pass_refuses_lengths_that_do_not_match():
    """Every length the C pass is given is checked against the others before it writes."""
    import ctypes

    f, g = C._native_unfilter(), C._native_unfilter(dequantize=True)
    src = np.arange(64, dtype=np.uint8)
    out = np.full(64, 0xAB, np.uint8)
    step = np.ones(4, np.float64)
    p, o = src.ctypes.data, out.ctypes.data
    for args in [(63, 16, 4, 1), (64, 16, 3, 1), (64, 16, 4, 0), (64, 16, 4, 3), (64, -16, 4, 1),
                 (-64, -16, 4, 1), (64, 2**61, 4, 1), (64, 2**62 + 16, 4, 1), (0, 16, 4, 1)]:
        src_len, n, item, row = args
        assert f(p, src_len, o, n, item, row, 1, -1) == -1, args
        assert g(p, src_len, o, n // 2 if n > 0 else n, item, row, 1, step.ctypes.data, step.ctypes.data) == -1
    assert g(p, 64, o, 32, 2, 65, 1, step.ctypes.data, step.ctypes.data) == -1  # row wider than its buffer
    assert g(p, 64, o, 64, 1, 1, 1, step.ctypes.data, step.ctypes.data) == -1   # 1-byte codes: not a grid
    assert (out == 0xAB).all()
    assert f(p, 64, o, 16, 4, 4, 1, -1) == 0
    top = int(out.view(np.uint32).max())
    assert f(p, 64, o, 16, 4, 4, 1, top + 1) == 0 and f(p, 64, o, 16, 4, 4, 1, top) == -2
    assert f(p, 64, o, 16, 4, 4, 1, 2**40) == 0 and ctypes.sizeof(ctypes.c_int64) == 8


def _scene_arrays(path, monkeypatch):
    from bps_assets.packed_scene import PackedScene, read_packed_scene

    a, b = _both_paths(lambda: read_packed_scene(path, threads=2), monkeypatch)
    for f in PackedScene.ARRAY_FIELDS:
        x, y = getattr(a, f), getattr(b, f)
        assert (x is None) == (y is None), f
        if x is not None:
            _same_bits(x, y)
    return a


@needs_native
def test_native_read_equals_numpy_on_a_converted_scene(tmp_path, monkeypatch):
    from bps_assets.packed_scene import ConvertOptions, convert_scene
    from packed_scene_fixtures import make_doc

    p = tmp_path / "s.bps"
    convert_scene(make_doc(60, z_up=True, textures=2), p, ConvertOptions(dataset="gibson"))
    s = _scene_arrays(p, monkeypatch)
    assert len(s.indices) > 7000 and s.positions.dtype == np.float32 and s.uvs is not None


SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "assets"
REAL = ["replicacad/objects/frl_apartment_chair_01.glb", "trimesh/Duck.glb",
        "habitat-sim/deleted_history/van-gogh-room.mesh.ply", "gltf-transform/view/assets/DamagedHelmet.glb"]


@needs_native
@pytest.mark.shared_assets
@pytest.mark.parametrize("rel", REAL)
def test_native_read_equals_numpy_on_real_packed_files(rel, tmp_path, monkeypatch):
    from bps_assets.packed_scene import ConvertOptions, convert_file

    src = SHARED / rel
    if not src.exists():
        pytest.skip(f"{rel} not in ../shared/assets")
    p = tmp_path / "x.bps"
    convert_file(src, p, ConvertOptions(max_texture=256))
    s = _scene_arrays(p, monkeypatch)
    assert len(s.indices) > 0


@needs_native
def test_damaged_filtered_bytes_decode_alike_on_both_paths(tmp_path, monkeypatch):
    """Filters are bijections on any bytes: a frame of garbage with a valid CRC decodes to the
    same (garbage) array on both paths, and a wrong size is refused on both."""
    p = tmp_path / "a.bps"
    rng = np.random.default_rng(3)
    _write(p, rng.integers(0, 2**32, (2500, 3), dtype=np.int64).astype(np.uint32))  # incompressible
    _replace_frame(p, zstandard.ZstdCompressor().compress(rng.bytes(30000)))
    with C.Container(p) as c:
        a, b = _both_paths(lambda: c.read("q"), monkeypatch)
    _same_bits(a, b)
    _replace_frame(p, zstandard.ZstdCompressor(write_content_size=False).compress(rng.bytes(29996)))
    for flag in (True, False):
        monkeypatch.setattr(C, "NATIVE_UNFILTER", flag)
        with C.Container(p) as c, pytest.raises(CorruptFileError, match="'q'.*decompressed to 29996 bytes"):
            c.read("q")


def _fold_constant(n: int) -> int:
    """reflect32(x^n mod P) << 1 for zlib's CRC-32 polynomial P (the C pass's fold constants)."""
    r = 1
    for _ in range(n):
        r = (r << 1) ^ (0x104C11DB7 if r >> 31 else 0)
    return int(f"{r:032b}"[::-1], 2) << 1


def test_native_crc32_equals_zlib():
    """The folding CRC's constants follow from the polynomial, and its CRC-32 equals zlib's for
    every length around its 16- and 64-byte steps, any alignment and start value."""
    import re

    src = (Path(C.__file__).parent / "native" / "_unfilter.c").read_text()
    for n in (544, 480, 160, 96):
        assert int(re.search(rf"#define K_{n} (0x[0-9a-f]+)ULL", src).group(1), 16) == _fold_constant(n)
    C._crc32(b"")  # looks the native function up
    if not C._crc_native:
        pytest.skip("no native CRC on this CPU / build")
    rng = np.random.default_rng(5)
    big = rng.bytes(5000)
    for n in [*range(0, 200), 1000, 4097, 4999]:
        for off in (0, 1, 3):
            b = big[off:off + n]
            for start in (0, 0xFFFFFFFF, 123456789):
                assert C._crc_native(start, b, len(b)) == zlib.crc32(b, start), (n, off, start)
                assert C._crc32(b, start) == zlib.crc32(b, start), (n, off, start)
            assert C._crc32(b) == zlib.crc32(b)


@pytest.mark.parametrize("native", [True, False])
def test_running_crc_over_pieces_is_zlibs(native, monkeypatch):
    """_crc32's start value: the CRC of a section read in pieces (check_checksums, the copy's
    stream reader) is the CRC of the whole, as zlib gives it."""
    monkeypatch.setattr(C, "NATIVE_UNFILTER", native)
    data = np.random.default_rng(6).bytes(10_000)
    for cut in (0, 1, 63, 4096, 9999):
        assert C._crc32(data[cut:], C._crc32(data[:cut])) == zlib.crc32(data) == C._crc32(data)
        assert C._crc32(data[cut:], 0xFFFFFFFF) == zlib.crc32(data[cut:], 0xFFFFFFFF)


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("filt", ["delta+shuffle", "none"])
def test_index_and_material_ranges_are_checked_in_the_read(native, filt, tmp_path, monkeypatch):
    """indices < vertices and 0 <= tri_material < materials, checked in the read's own pass on
    both paths and for either filter: a bad value is a CorruptFileError naming the section."""
    from bps_assets.packed_scene import ConvertOptions, convert_scene, read_packed_scene
    from packed_scene_fixtures import make_doc

    if native and not NATIVE:
        pytest.skip("bps_assets/native/_unfilter.c not built")
    monkeypatch.setattr(C, "NATIVE_UNFILTER", native)
    src = tmp_path / "s.bps"
    convert_scene(make_doc(12), src, ConvertOptions())
    with C.Container(src) as c:
        arrays, header, specs = c.read_many(), dict(c.header), {}
        n_v, n_m = c.sections["positions_q"].shape[0], c.sections["material_color"].shape[0]
        for n, s in c.sections.items():
            specs[n] = C.SectionSpec(s.codec, s.filter)
    read_packed_scene(src)
    for name, value, shown in (("indices", n_v, n_v), ("tri_material", n_m, n_m), ("tri_material", -1, -1)):
        a = arrays[name].copy()
        a.reshape(-1)[len(a.reshape(-1)) // 2] = value
        bad = tmp_path / f"{name}{value}.bps"
        C.write_container(bad, "SCEN", header, {**arrays, name: a}, {**specs, name: C.SectionSpec(filter=filt)})
        with pytest.raises(CorruptFileError, match=f"value {shown} out of range") as e:
            read_packed_scene(bad)
        assert e.value.section == name


def test_a_helper_built_from_older_sources_gives_none_for_a_new_function():
    """A compiled helper that lacks a function (a checkout updated without reinstalling) is the
    same as a helper not built: ``native.function`` returns None and the caller takes its
    Python path, rather than failing the import of every module that looks the function up."""
    from bps_assets import native

    if native.load("bps_assets.native._unfilter") is None:
        pytest.skip("bps_assets.native._unfilter was not built")
    assert native.function("bps_assets.native._unfilter", "no_such_function_in_this_build", []) is None
