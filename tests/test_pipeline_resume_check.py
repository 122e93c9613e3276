"""Issue 14 item 2: a resumed preprocess checks what it keeps and redoes damaged scenes."""
import json
import os

from bps_assets.container import Container
from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess
from bps_assets.pipeline.resume_check import problems_by_output

from pipeline_fakes import FakeBackend, make_source

NAMES = ["Allensville", "Beechwood", "Coffeen", "Collierville"]
OPTS = PreprocessOptions(workers=1, in_process=True, episodes=2)


def _run(src, out, log, **kw):
    if log.exists():
        log.unlink()
    r = preprocess(src, out, "gibson", "tiny", PreprocessOptions(**{**OPTS.__dict__, **kw}),
                   backend=FakeBackend(log=log))
    done = log.read_text().split() if log.exists() else []
    return r, done


def _same_size_garbage(p):
    n = p.stat().st_size
    p.write_bytes(os.urandom(n))


def _flip_inside_section(p, section=None):
    with Container(p) as c:
        s = c.sections[section or next(iter(c.sections))]
    data = bytearray(p.read_bytes())
    data[s.offset + s.stored_length // 2] ^= 0x20
    p.write_bytes(bytes(data))


def _flip_in_header_padding(p):
    # a byte no CRC covers (the header's space padding): only a full hash sees it
    data = bytearray(p.read_bytes())
    hlen = int.from_bytes(data[16:24], "little")
    with Container(p) as c:
        first = min(s.offset for s in c.sections.values())
    assert first > 32 + hlen
    data[32 + hlen] = ord("\t")  # JSON whitespace: still a valid header
    p.write_bytes(bytes(data))


def test_resume_redoes_kept_outputs_that_fail_the_check(tmp_path):
    src = make_source(tmp_path / "src", NAMES, size=20_000)
    out, log = tmp_path / "out", tmp_path / "log"
    r, done = _run(src, out, log)
    assert sorted(done) == sorted(NAMES) and r.ok
    r, done = _run(src, out, log)
    assert done == [] and r.count("skipped") == 4 and r.redone == {}

    _same_size_garbage(out / "scenes" / "Allensville.bps")           # issue 14's case
    _flip_inside_section(out / "navmeshes" / "Beechwood.navmesh.bps")  # one bit: section CRC
    ep = out / "episodes" / "pointnav" / "train" / "content" / "Coffeen.json.gz"
    data = bytearray(ep.read_bytes())
    data[-9] ^= 1                                                    # gzip episode file: sha256
    ep.write_bytes(bytes(data))
    r, done = _run(src, out, log)
    assert sorted(done) == ["Allensville", "Beechwood", "Coffeen"]
    assert r.count("skipped") == 1 and r.count("ok") == 3 and r.ok
    assert "bad magic" in r.redone["Allensville"][0]
    assert "checksum mismatch" in r.redone["Beechwood"][0]
    assert "sha256 differs" in r.redone["Coffeen"][0]
    # redone outputs are intact again and the manifest records their new hashes
    m = json.loads((out / "manifest.json").read_text())
    for n in NAMES:
        assert problems_by_output(out, m["scenes"][n], full=True) == {}


def _change_in_header_text(p, old: bytes, new: bytes):
    # a value in the header's JSON changed, still valid JSON of the same length: no CRC covers it
    data = p.read_bytes()
    hlen = int.from_bytes(data[16:24], "little")
    at = data.index(old, 32, 32 + hlen)
    p.write_bytes(data[:at] + new + data[at + len(old):])


def test_verify_kept_hashes_what_the_cheap_check_cannot_see(tmp_path):
    # contract changed (journey finding P1): damaged padding, which verify's sha256 sees, is now
    # seen by the cheap check too (Container.check_padding); what stays for the full hash is a
    # header value changed into another valid one
    src = make_source(tmp_path / "src", NAMES[:2], size=20_000)
    out, log = tmp_path / "out", tmp_path / "log"
    _run(src, out, log)
    _change_in_header_text(out / "scenes" / "Beechwood.bps", b'"Beechwood"', b'"Beechwooe"')
    r, done = _run(src, out, log)
    assert done == [] and r.count("skipped") == 2  # header and CRCs still fine
    r, done = _run(src, out, log, verify_kept=True)
    assert done == ["Beechwood"] and "sha256 differs" in r.redone["Beechwood"][0]


def test_the_cheap_check_sees_damaged_padding(tmp_path):
    src = make_source(tmp_path / "src", NAMES[:2], size=20_000)
    out, log = tmp_path / "out", tmp_path / "log"
    _run(src, out, log)
    _flip_in_header_padding(out / "scenes" / "Beechwood.bps")
    p = out / "navmeshes" / "Allensville.navmesh.bps"
    with Container(p) as c:
        end = max(s.offset + s.stored_length for s in c.sections.values())
    assert end % 256   # zeros follow the last section up to the next multiple of 256
    data = bytearray(p.read_bytes())
    data[end] = 1
    p.write_bytes(bytes(data))
    r, done = _run(src, out, log)
    assert done == ["Allensville", "Beechwood"]
    assert "damaged padding" in r.redone["Beechwood"][0] and "damaged padding" in r.redone["Allensville"][0]


def test_worker_side_check_also_redoes(tmp_path):
    # a touched source sends the scene to the worker; its own check must not keep damage
    src = make_source(tmp_path / "src", NAMES[:1], size=20_000)
    out, log = tmp_path / "out", tmp_path / "log"
    _run(src, out, log)
    _same_size_garbage(out / "scenes" / "Allensville.bps")
    os.utime(src / "gibson" / "Allensville.glb", ns=(1, 1))
    r, done = _run(src, out, log)
    assert done == ["Allensville"] and r.count("ok") == 1


def _pad_copy(a, b):
    """Another scene's file ``a`` in ``b``'s place, zero-padded to ``b``'s size (sound CRCs)."""
    n = b.stat().st_size
    data = a.read_bytes()
    assert len(data) <= n
    b.write_bytes(data + bytes(n - len(data)))


def test_resume_redoes_a_kept_file_of_another_scene_with_the_right_size(tmp_path):
    """Journey L2: a scene's packed file (or navmesh) replaced by another scene's, padded to the
    recorded size, passes size and CRCs: the header's identity (source sha256, navmesh source)
    finds it, so the scene is redone instead of kept forever."""
    from bps_assets import synth

    names = ["Allensville", "Beechwood"]
    synth.generate(tmp_path / "src", "gibson", names, seed=0, size="small")
    out = tmp_path / "out"
    opts = PreprocessOptions(workers=1, in_process=True, episodes=2, subsets=("train",))
    run = lambda: preprocess(tmp_path / "src", out, "gibson", "tiny", opts, log=lambda s: None)  # noqa: E731
    assert run().ok
    for sub, suffix in (("scenes", ".bps"), ("navmeshes", ".navmesh.bps")):
        a, b = (out / sub / f"{n}{suffix}" for n in names)
        small, big = sorted((a, b), key=lambda p: p.stat().st_size)
        _pad_copy(small, big)
        victim = big.name.split(".")[0]
        r = run()
        assert r.count("skipped") == 1 and r.ok, r.results
        why = r.redone[victim][0]
        assert ("packed from another source" in why) if sub == "scenes" else ("built from" in why), why
        assert problems_by_output(out, json.loads((out / "manifest.json").read_text())["scenes"][victim], full=True) == {}
        assert run().count("skipped") == 2


def test_a_failed_redo_removes_outputs_the_check_found_damaged(tmp_path):
    """A scene redone for a damaged navmesh whose redo fails before writing anything (disk full)
    keeps none of its earlier outputs: not the damaged navmesh, nor episodes on it."""
    import errno

    from bps_assets.errors import OutputWriteError

    src, out = make_source(tmp_path / "src", NAMES[:1], size=20_000), tmp_path / "out"
    r, _ = _run(src, out, tmp_path / "log")
    assert r.ok
    nav = out / "navmeshes" / f"{NAMES[0]}.navmesh.bps"
    _flip_inside_section(nav)

    class Full(FakeBackend):
        def convert(self, src, dst, *a, **k):
            raise OutputWriteError(dst, "cannot write: No space left on device", errno=errno.ENOSPC)

    r = preprocess(src, out, "gibson", "tiny", OPTS, backend=Full())
    assert [x.status for x in r.results if x.status != "missing"] == ["failed"]
    assert not nav.exists() and not (out / "scenes" / f"{NAMES[0]}.bps").exists()
    assert not (out / "episodes/pointnav/train/content" / f"{NAMES[0]}.json.gz").exists()
    assert not (out / ".bps-state/scenes" / f"{NAMES[0]}.json").exists()
    r, _ = _run(src, out, tmp_path / "log")   # the disk has room again: the scene is whole again
    assert r.ok and not problems_by_output(out, next(x for x in r.results if x.name == NAMES[0]).entry)


def test_a_redo_sweeps_only_temps_no_live_writer_holds(tmp_path):
    """A redone (and failing) scene removes its dead writers' temps, never a temp whose writer
    still holds its lock (another worker or shard writing the same output)."""
    import fcntl

    from bps_assets.errors import DatasetError

    src, out = make_source(tmp_path / "src", NAMES[:1], size=20_000), tmp_path / "out"
    assert _run(src, out, tmp_path / "log")[0].ok
    _flip_inside_section(out / "scenes" / f"{NAMES[0]}.bps")   # damage: the scene is redone
    live, dead = (out / "scenes" / f".{NAMES[0]}.bps.{w}.tmp" for w in ("live", "dead"))
    live.write_bytes(b"being written")
    dead.write_bytes(b"left by a killed writer")

    class Broken(FakeBackend):
        def convert(self, src, dst, *a, **k):
            raise DatasetError(src, "cannot convert")

    with open(live, "rb") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        r = preprocess(src, out, "gibson", "tiny", OPTS, backend=Broken())
    assert [x.status for x in r.results if x.status != "missing"] == ["failed"]
    assert live.exists() and not dead.exists()
