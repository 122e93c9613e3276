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


def test_linked_sources_are_one_warning_line_with_a_count(tmp_path):
    """A source folder whose every scan is a symlink (habitat users link data/): verify prints one
    line for all of them (count and an example), preprocess one warning per scene; the manifest
    still names every target."""
    from click.testing import CliRunner

    from cli.main import main

    names = ["Allensville", "Beechwood", "Coffeen"]
    src, outside = make_source(tmp_path / "src", names), make_source(tmp_path / "elsewhere", names)
    for n in names:
        (src / "gibson" / f"{n}.glb").unlink()
        os.symlink(outside / "gibson" / f"{n}.glb", src / "gibson" / f"{n}.glb")
    out = tmp_path / "out"
    res = preprocess(src, out, "gibson", "tiny", PreprocessOptions(workers=1, in_process=True),
                     backend=FakeBackend())
    done = [r for r in res.results if r.name in names]
    assert len(done) == 3
    for r in done:
        assert r.entry["stats"]["warnings"] == [f"1 source file resolves through a symlink outside the source "
                                                f"folder (each target is the manifest's sources.*.link_target; "
                                                f"--strict refuses them), e.g. {r.name}: source scene "
                                                f"gibson/{r.name}.glb -> {(outside / 'gibson' / f'{r.name}.glb').resolve()}"]
        assert r.entry["sources"]["scene"]["link_target"] == str((outside / "gibson" / f"{r.name}.glb").resolve())
    r = CliRunner().invoke(main, ["verify", str(out / "manifest.json")])
    assert r.exit_code == 0, r.output
    lines = [ln for ln in r.output.splitlines() if "symlink" in ln]
    assert len(lines) == 1 and lines[0].startswith("warning: 3 source files of 3 scenes resolve through a symlink")
