import json
import os
import struct

import numpy as np
import pytest

from bps_assets import container as C
from bps_assets.errors import CorruptFileError, FormatVersionError, InputError, OutputExistsError


def _arrays():
    rng = np.random.default_rng(0)
    return {
        "q": rng.integers(0, 60000, (5000, 3)).astype(np.uint16),
        "f": rng.random((7, 4), dtype=np.float32),
        "i": np.arange(-50, 50, dtype=np.int32),
        "empty": np.zeros((0, 3), np.uint32),
    }


SPECS = {"q": C.SectionSpec(filter="delta+shuffle"), "i": C.SectionSpec(codec="raw", filter="shuffle")}


def _write(path, **kw):
    return C.write_container(path, "SCEN", {"scene_id": "x"}, _arrays(), SPECS, **kw)


def test_roundtrip_exact_and_aligned(tmp_path):
    p = tmp_path / "a.bps"
    _write(p)
    with C.Container(p, "SCEN") as c:
        assert c.header == {"scene_id": "x"}
        got = c.read_many()
        for k, v in _arrays().items():
            assert got[k].dtype == v.dtype and got[k].shape == v.shape
            np.testing.assert_array_equal(got[k], v)
        assert all(s.offset % C.ALIGN == 0 for s in c.sections.values())
        c.verify(deep=True)


def test_refuses_overwrite_and_leaves_no_temp(tmp_path):
    p = tmp_path / "a.bps"
    _write(p)
    before = p.read_bytes()
    with pytest.raises(OutputExistsError):
        _write(p)
    assert p.read_bytes() == before
    _write(p, overwrite=True)
    assert sorted(os.listdir(tmp_path)) == ["a.bps"]


def test_wrong_kind_and_not_a_file(tmp_path):
    p = tmp_path / "a.bps"
    _write(p)
    with pytest.raises(CorruptFileError, match="expected 'NAVM'"):
        C.Container(p, "NAVM")
    with pytest.raises(InputError, match="no such file"):
        C.Container(tmp_path / "missing.bps")
    (tmp_path / "t.txt").write_text("hello world, not a pack" * 3)
    with pytest.raises(CorruptFileError, match="bad magic"):
        C.Container(tmp_path / "t.txt")


def test_truncated_file_names_section(tmp_path):
    p = tmp_path / "a.bps"
    _write(p)
    data = p.read_bytes()
    with C.Container(p) as c:
        last = max(c.sections.values(), key=lambda s: s.offset + s.stored_length if s.stored_length else 0)
    (tmp_path / "t.bps").write_bytes(data[: last.offset + 1])
    with pytest.raises(CorruptFileError, match=last.name):
        C.Container(tmp_path / "t.bps")


def test_flipped_byte_is_checksum_error(tmp_path):
    p = tmp_path / "a.bps"
    _write(p)
    with C.Container(p) as c:
        s = c.sections["q"]
    data = bytearray(p.read_bytes())
    data[s.offset + 10] ^= 0xFF
    p.write_bytes(bytes(data))
    with C.Container(p) as c:
        c.read("f")  # other sections still fine
        with pytest.raises(CorruptFileError, match="'q': checksum"):
            c.read("q")
        with pytest.raises(CorruptFileError):
            c.verify(deep=True)


def _rewrite_header(p, mutate):
    data = p.read_bytes()
    _, ver, kind, hlen, _ = C.PREAMBLE.unpack(data[: C.PREAMBLE.size])
    hdr = json.loads(data[C.PREAMBLE_SIZE: C.PREAMBLE_SIZE + hlen])
    first = hdr["sections"][0]["offset"]
    mutate(hdr)
    new = json.dumps(hdr).encode()
    pad = first - C.PREAMBLE_SIZE - len(new)
    assert pad >= 0
    out = C.PREAMBLE.pack(C.MAGIC, ver, kind, len(new), 0).ljust(C.PREAMBLE_SIZE, b"\0") + new + b" " * pad
    p.write_bytes(out + data[len(out):])


@pytest.mark.parametrize("mutate,msg", [
    (lambda h: h["sections"][0].update(shape=[1 << 40, 1 << 20]), "cap"),
    (lambda h: h["sections"][0].update(raw_length=12), "raw_length"),
    (lambda h: h["sections"][0].update(offset=1 << 40), "outside the file"),
    (lambda h: h["sections"][0].update(dtype="object"), "dtype"),
    (lambda h: h["sections"][0].update(codec="lz4"), "codec"),
    (lambda h: h["sections"][1].update(offset=h["sections"][0]["offset"]), "overlaps"),
    (lambda h: h["sections"][0].update(name="../../etc"), "name"),
    # FORMAT.md 2: offsets are multiples of 256 (before, read_packed_scene and check_padding took it)
    (lambda h: h["sections"][0].update(offset=h["sections"][0]["offset"] + 1), "offset .* not a multiple of 256"),
])
def test_absurd_header_values_are_refused_before_allocating(tmp_path, mutate, msg):
    p = tmp_path / "a.bps"
    _write(p)
    _rewrite_header(p, mutate)
    with pytest.raises(CorruptFileError, match=msg):
        C.Container(p)


def test_future_version_and_huge_header(tmp_path):
    p = tmp_path / "a.bps"
    _write(p)
    data = bytearray(p.read_bytes())
    struct.pack_into("<I", data, 8, 99)
    (tmp_path / "v.bps").write_bytes(bytes(data))
    with pytest.raises(FormatVersionError, match="version 99"):
        C.Container(tmp_path / "v.bps")
    data = bytearray(p.read_bytes())
    struct.pack_into("<Q", data, 16, 1 << 50)
    (tmp_path / "h.bps").write_bytes(bytes(data))
    with pytest.raises(CorruptFileError, match="header length"):
        C.Container(tmp_path / "h.bps")


def test_filters_compress_smooth_quantized_data(tmp_path):
    t = np.linspace(0, 50, 200_000)
    q = (np.stack([np.sin(t), np.cos(t), t / 50], 1) * 30000 + 32768).astype(np.uint16)
    plain = C.write_container(tmp_path / "p.bps", "SCEN", {}, {"q": q})
    filt = C.write_container(tmp_path / "f.bps", "SCEN", {}, {"q": q}, {"q": C.SectionSpec(filter="delta+shuffle")})
    assert filt < plain * 0.6
    with C.Container(tmp_path / "f.bps") as c:
        np.testing.assert_array_equal(c.read("q"), q)


def test_delta_filter_on_a_float_section_is_refused(tmp_path):
    """FORMAT.md section 2: ``delta+shuffle`` is for integer dtypes only (the native and numpy
    decoders would disagree on a float one)."""
    p = tmp_path / "a.bps"
    _write(p)

    def to_float(h):
        (q,) = [s for s in h["sections"] if s["name"] == "q"]
        assert q["filter"] == "delta+shuffle" and q["dtype"] == "u2"
        q["dtype"] = "f2"   # same item size: raw_length still matches
    _rewrite_header(p, to_float)
    with pytest.raises(CorruptFileError, match=r"filter 'delta\+shuffle' on dtype f2 \(integer dtypes only\)") as e:
        C.Container(p)
    assert e.value.section == "q" and "q" in str(e.value)


def _with_gap(tmp_path, gap: int):
    """A one-section file whose section starts ``gap`` bytes past where the writer puts it (the
    gap after the header filled with spaces, as padding there is): sound CRCs and fill."""
    p = tmp_path / "a.bps"
    C.write_container(p, "SCEN", {"x": 1}, {"s": np.arange(10, dtype=np.uint8)}, overwrite=True)
    raw = p.read_bytes()
    h = json.loads(raw[32:32 + struct.unpack("<Q", raw[16:24])[0]])
    s = h["sections"][0]
    blob = raw[s["offset"]:s["offset"] + s["stored_length"]]
    for _ in range(3):   # the offset's digits change the header's length: settle
        hdr = json.dumps(h, separators=(",", ":")).encode()
        s["offset"] = C._align(32 + len(hdr)) + gap
    hdr = json.dumps(h, separators=(",", ":")).encode()
    assert s["offset"] == C._align(32 + len(hdr)) + gap
    data = C.PREAMBLE.pack(C.MAGIC, C.CONTAINER_VERSION, b"SCEN", len(hdr), 0).ljust(32, b"\0") + hdr
    data += b" " * (s["offset"] - len(data)) + blob
    q = tmp_path / "b.bps"
    q.write_bytes(data + b"\0" * (C._align(len(data)) - len(data)))
    return q


def test_a_gap_of_align_bytes_or_more_is_refused_unread(tmp_path):
    import tracemalloc

    with C.Container(_with_gap(tmp_path, 0)) as c:   # the control: as the writer lays it out
        c.check_checksums()
        c.check_padding()
    with C.Container(_with_gap(tmp_path, C.ALIGN)) as c:
        c.check_checksums()
        with pytest.raises(CorruptFileError, match="a gap of"):
            c.check_padding()
    with C.Container(_with_gap(tmp_path, 16 << 20)) as c:
        tracemalloc.start()
        try:
            with pytest.raises(CorruptFileError, match="a gap of"):
                c.check_padding()
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < 1 << 20   # before: the gap read whole and a fill string as long (32 MiB)
