"""A scan that is a symlink to a file outside the source folder follows the symlink rule of
every input (docs/PIPELINE.md): preprocess accepts it with a warning and the manifest names the
target (``sources.ROLE.link_target``); ``verify`` warns, and ``--strict`` refuses it in both."""
from __future__ import annotations

import os

from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess
from bps_assets.pipeline.verify import verify_manifest
from pipeline_fakes import FakeBackend, make_source


def _linked(tmp_path):
    src = make_source(tmp_path / "src", ["Allensville", "Beechwood"])
    outside = make_source(tmp_path / "elsewhere", ["Allensville"])
    (src / "gibson" / "Allensville.glb").unlink()
    os.symlink(outside / "gibson" / "Allensville.glb", src / "gibson" / "Allensville.glb")
    return src, outside / "gibson" / "Allensville.glb"


def test_a_scan_linked_out_of_the_source_is_named_in_the_manifest_and_verify_warns(tmp_path):
    src, target = _linked(tmp_path)
    out = tmp_path / "out"
    res = preprocess(src, out, "gibson", "tiny", PreprocessOptions(workers=1, in_process=True),
                     backend=FakeBackend())
    entry = {r.name: r for r in res.results}["Allensville"]
    assert entry.status == "ok"
    assert entry.entry["sources"]["scene"]["link_target"] == str(target.resolve())
    assert any("resolves through a symlink" in w for w in entry.entry["stats"]["warnings"])
    assert "link_target" not in {r.name: r for r in res.results}["Beechwood"].entry["sources"]["scene"]
    rep = verify_manifest(out / "manifest.json")
    assert any("Allensville: source scene" in w and str(target.resolve()) in w for w in rep.warnings)
    rep = verify_manifest(out / "manifest.json", strict=True)
    assert not rep.ok and any("refused: --strict" in p for s in rep.scenes for p in s.problems)


def test_strict_preprocess_refuses_the_linked_scan(tmp_path):
    src, target = _linked(tmp_path)
    res = preprocess(src, tmp_path / "out", "gibson", "tiny",
                     PreprocessOptions(workers=1, in_process=True, strict=True), backend=FakeBackend())
    r = {r.name: r for r in res.results}
    assert r["Allensville"].status == "failed" and "outside the source folder" in r["Allensville"].error
    assert r["Beechwood"].status == "ok"
