import gzip
import json
import struct

import pytest

from bps_assets.container import Container
from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess
from bps_assets.pipeline.verify import format_report, format_source_report, verify_manifest, verify_source

from pipeline_fakes import FakeBackend, make_source

NAMES = ["Allensville", "Beechwood", "Coffeen", "Collierville"]


@pytest.fixture()
def out(tmp_path):
    src = make_source(tmp_path / "src", NAMES, size=100_000)
    preprocess(src, tmp_path / "out", "gibson", "tiny", PreprocessOptions(workers=1, in_process=True, episodes=3),
               backend=FakeBackend())
    return tmp_path / "out"


def _problems(rep, name):
    s = next(s for s in rep.scenes if s.name == name)
    return s.problems + [p for f in s.files for p in f.problems]


def test_intact_dataset_verifies(out):
    rep = verify_manifest(out / "manifest.json", deep=True, jobs=3)
    assert rep.ok and len(rep.scenes) == 4 and rep.bytes > 4 * 100_000
    text = format_report(rep)
    assert text.splitlines()[-1].startswith("OK: 4 scenes, 14 files")
    assert "missing from the source" in text  # the tiny split's other scenes: a warning
    assert rep.to_json()["ok"] is True


def test_each_kind_of_damage_is_reported_per_scene(out):
    scenes = out / "scenes"
    # 1. missing file
    (out / "navmeshes" / "Allensville.navmesh.bps").unlink()
    # 2. same size, one byte flipped inside a compressed section: sha256 catches it
    p = scenes / "Beechwood.bps"
    with Container(p) as c:
        off = c.sections["bytes"].offset + 10
    data = bytearray(p.read_bytes())
    data[off] ^= 0xFF
    p.write_bytes(bytes(data))
    # 3. truncated file
    p = scenes / "Coffeen.bps"
    p.write_bytes(p.read_bytes()[:-100])
    # 4. unsupported container version, with the manifest updated to match: only the header check sees it
    p = scenes / "Collierville.bps"
    data = bytearray(p.read_bytes())
    struct.pack_into("<I", data, 8, 99)
    p.write_bytes(bytes(data))
    import hashlib

    doc = json.loads((out / "manifest.json").read_text())
    doc["scenes"]["Collierville"]["outputs"]["scene"]["sha256"] = hashlib.sha256(data).hexdigest()
    (out / "manifest.json").write_text(json.dumps(doc))

    rep = verify_manifest(out / "manifest.json")
    assert not rep.ok
    assert any("missing" in x for x in _problems(rep, "Allensville"))
    assert any("sha256 differs" in x for x in _problems(rep, "Beechwood"))
    assert any("size" in x and "truncated" in x for x in _problems(rep, "Coffeen"))
    assert any("container version 99" in x for x in _problems(rep, "Collierville"))
    text = format_report(rep)
    assert sum(line.startswith("FAIL ") for line in text.splitlines()) == 4
    assert text.splitlines()[-1].startswith("FAILED")


def test_deep_checks_section_checksums(out):
    # corrupt a section but record the new sha256: only --deep (section CRC) can tell
    p = out / "scenes" / "Beechwood.bps"
    with Container(p) as c:
        off = c.sections["bytes"].offset + 5
    data = bytearray(p.read_bytes())
    data[off] ^= 0x01
    p.write_bytes(bytes(data))
    import hashlib

    doc = json.loads((out / "manifest.json").read_text())
    doc["scenes"]["Beechwood"]["outputs"]["scene"]["sha256"] = hashlib.sha256(data).hexdigest()
    # and an episode file whose count disagrees with the manifest
    ep = out / doc["scenes"]["Coffeen"]["outputs"]["episodes"]["path"]
    raw = gzip.compress(json.dumps({"episodes": []}).encode())
    ep.write_bytes(raw)
    doc["scenes"]["Coffeen"]["outputs"]["episodes"].update(size=len(raw), sha256=hashlib.sha256(raw).hexdigest())
    (out / "manifest.json").write_text(json.dumps(doc))
    assert verify_manifest(out / "manifest.json").ok
    rep = verify_manifest(out / "manifest.json", deep=True)
    assert any("checksum mismatch" in x for x in _problems(rep, "Beechwood"))
    assert any("0 episodes, manifest says 3" in x for x in _problems(rep, "Coffeen"))


def test_deep_reads_episode_files_under_their_caps(out, monkeypatch):
    """--deep streams an episode file one episode at a time under the episode files' caps
    (nav.episodes.read_json), not the whole JSON as objects: past a cap (here lowered) is a
    problem naming the file; a file without an episodes list is one too."""
    import hashlib

    import bps_assets.nav.episodes as pn

    doc = json.loads((out / "manifest.json").read_text())
    rec = doc["scenes"]["Coffeen"]["outputs"]["episodes"]
    ep = out / rec["path"]
    n = len(json.loads(gzip.decompress(ep.read_bytes()))["episodes"])
    assert verify_manifest(out / "manifest.json", deep=True).ok
    monkeypatch.setattr(pn, "MAX_EPISODES_PER_FILE", n - 1)
    problems = _problems(verify_manifest(out / "manifest.json", deep=True), "Coffeen")
    assert any(str(ep) in x and f"episodes in one file, more than the cap of {n - 1}" in x for x in problems), problems
    monkeypatch.undo()
    raw = gzip.compress(json.dumps({"episodes": {"not": "a list"}}).encode())
    ep.write_bytes(raw)
    rec.update(size=len(raw), sha256=hashlib.sha256(raw).hexdigest())
    (out / "manifest.json").write_text(json.dumps(doc))
    problems = _problems(verify_manifest(out / "manifest.json", deep=True), "Coffeen")
    assert any(str(ep) in x and "episodes" in x for x in problems), problems


def test_source_mode(tmp_path):
    src = make_source(tmp_path, ["Allensville", "Collierville", "Adrian"], navmesh=["Allensville"],
                      extra=["gibson/Foo.glb", "gibson/readme.txt"])
    rep = verify_source(src, "gibson", "tiny")
    assert not rep.ok and len(rep.missing) == 33 and rep.expected == 35
    assert rep.unknown == ["gibson/Foo.glb"] and rep.stray == ["gibson/readme.txt"]
    assert rep.no_navmesh == ["Collierville"]
    text = format_source_report(rep, limit=5)
    assert "missing scenes (33):" in text and "... 28 more" in text and "gibson/Foo.glb" in text
    assert text.splitlines()[-1].startswith("INCOMPLETE: gibson split 'tiny': 2/35 scenes present")
    # a complete (one-subset) selection is ok
    assert verify_source(src, "gibson", "tiny", subsets=("val",)).missing != []
