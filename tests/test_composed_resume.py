"""Resuming a composed dataset whose shared asset library is damaged (journey finding P1):
a damaged asset is re-converted (also damage only in its padding), ``--force`` re-converts
the assets once per run, and a scene whose redo fails keeps its previous outputs."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from bps_assets.container import Container
from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess
from bps_assets.pipeline.verify import verify_manifest
from bps_assets.scene_dataset.standin import write_box_room

ASSET = "assets/objects__crate.glb.bps"


def _two_scenes(src: Path) -> Path:
    """A generated composed dataset: scenes ``a`` and ``b``, a box-room stage each with a crate
    (one shared asset); returns its scene dataset config."""
    write_box_room(src / "stages" / "room.glb", (-3, 0, -3), (3, 2.5, 3))
    write_box_room(src / "objects" / "crate.glb", (-0.3, 0, -0.3), (0.3, 0.6, 0.3))
    (src / "stages" / "room.stage_config.json").write_text(json.dumps({"render_asset": "room.glb"}))
    (src / "objects" / "crate.object_config.json").write_text(json.dumps({"render_asset": "crate.glb"}))
    (src / "scenes").mkdir()
    for name, x in (("a", 1), ("b", -1)):
        (src / "scenes" / f"{name}.scene_instance.json").write_text(json.dumps({
            "stage_instance": {"template_name": "room"},
            "object_instances": [{"template_name": "crate", "translation": [x, 0, 1], "motion_type": "STATIC"}]}))
    cfg = src / "d.scene_dataset_config.json"
    cfg.write_text(json.dumps({"stages": {"paths": {".json": ["stages"]}}, "objects": {"paths": {".json": ["objects"]}},
                               "scene_instances": {"paths": {".json": ["scenes"]}}}))
    return cfg


def _flip(path: Path, where: str) -> None:
    with Container(path) as c:
        s = c.sections["indices"]
        off = s.offset + 3 if where == "section" else s.offset + s.stored_length + 1
        assert where == "section" or off % 256   # a padding byte, not the next section's
    b = bytearray(path.read_bytes())
    b[off] ^= 0xFF
    path.write_bytes(bytes(b))


def _outputs(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and ".bps-state" not in p.parts and p.name != "manifest.json"}


@pytest.fixture
def made(tmp_path):
    src = tmp_path / "src"
    cfg = _two_scenes(src)
    out = tmp_path / "out"
    res = preprocess(src, out, str(cfg), options=PreprocessOptions(in_process=True, episodes=2))
    assert res.ok and [r.status for r in res.results] == ["ok", "ok"]
    return src, cfg, out


@pytest.mark.parametrize("where", ["section", "padding"])
def test_a_damaged_shared_asset_is_reconverted(made, where):
    src, cfg, out = made
    good = _outputs(out)
    _flip(out / ASSET, where)
    assert not verify_manifest(out / "manifest.json").ok   # verify sees it: the resume check must too
    res = preprocess(src, out, str(cfg), options=PreprocessOptions(in_process=True, episodes=2))
    # both fail the resume check; a re-converts the asset, after which b's kept outputs pass
    assert sorted(res.redone) == ["a", "b"]
    assert [r.status for r in res.results] == ["ok", "skipped"], [r.error for r in res.results]
    assert sum(r.entry["stats"]["assets_converted"] for r in res.results) == 1   # once, not per scene
    assert _outputs(out) == good   # the conversion is deterministic: every file as it was
    assert verify_manifest(out / "manifest.json").ok


def test_force_reconverts_the_shared_assets_once(made):
    src, cfg, out = made
    ino = (out / ASSET).stat().st_ino
    res = preprocess(src, out, str(cfg), options=PreprocessOptions(in_process=True, episodes=2, force=True))
    assert [r.status for r in res.results] == ["ok", "ok"]
    assert (out / ASSET).stat().st_ino != ino
    assert sum(r.entry["stats"]["assets_converted"] for r in res.results) == 1


def test_a_failed_redo_keeps_the_previous_outputs(made, monkeypatch):
    from bps_assets.errors import DatasetError
    from bps_assets.scene_dataset import packing

    src, cfg, out = made
    good = _outputs(out)

    def broken(scene, *a, **k):
        raise DatasetError(scene.source, "an asset cannot be converted")

    monkeypatch.setattr(packing, "pack_assets", broken)
    res = preprocess(src, out, str(cfg), options=PreprocessOptions(in_process=True, episodes=2, force=True))
    assert [r.status for r in res.results] == ["failed", "failed"]
    # nothing new was written: the scenes' earlier outputs and the shared asset stay as they were
    assert {k: v for k, v in _outputs(out).items() if "/train.json.gz" not in k} == \
        {k: v for k, v in good.items() if "/train.json.gz" not in k}
    monkeypatch.undo()
    res = preprocess(src, out, str(cfg), options=PreprocessOptions(in_process=True, episodes=2))
    assert [r.status for r in res.results] == ["ok", "ok"] and _outputs(out) == good


def test_sizes_count_each_shared_asset_once(made):
    """The summary's and `manifest show`'s totals count the shared asset once, as du does
    (journey finding P4), not once per scene that uses it."""
    import re

    from click.testing import CliRunner

    from bps_assets.pipeline.manifest import load_manifest
    from bps_assets.pipeline.preprocess import summary_table
    from cli.main import main

    src, cfg, out = made
    m = load_manifest(out / "manifest.json")
    files = {o["path"] for _, _, o in m.files()}
    assert ASSET in files and sum(o["path"] == ASSET for _, _, o in m.files()) == 2
    du = sum((out / f).stat().st_size for f in files)
    assert m.output_bytes() == du
    res = preprocess(src, out, str(cfg), options=PreprocessOptions(in_process=True, episodes=2))
    line = summary_table(res).splitlines()[-1]
    assert f"{du / 1e6:.1f} MB of outputs (each file once)" in line, line
    r = CliRunner().invoke(main, ["manifest", "show", str(out / "manifest.json")])
    assert r.exit_code == 0 and re.search(rf"{du / 1e6:.1f} MB of outputs \(each file once\)", r.output), r.output
    r = CliRunner().invoke(main, ["manifest", "show", str(out / "manifest.json"), "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["bytes"] == du   # exact: the asset once


def test_a_resumed_composed_run_says_one_thing(made):
    """An unchanged composed dataset is up to date in the plan line, the table and the totals
    (it was "0 up to date, 2 to process", then "skipped", then "2 up to date": P5), and the
    table's triangles are the scene's: its stage and its instances."""
    from bps_assets.pipeline.preprocess import summary_table
    from bps_assets.packed_scene import read_packed_scene
    from bps_assets.scene_dataset.packing import read_composed

    src, cfg, out = made
    lines = []
    res = preprocess(src, out, str(cfg), options=PreprocessOptions(in_process=True, episodes=2), log=lines.append)
    assert "  2 up to date, 0 to process" in lines, lines
    table = summary_table(res).splitlines()
    assert table[-1].startswith("0 processed, 2 up to date,")
    stage, tab, assets = read_composed(out / "scenes" / "a.bps")
    crate = read_packed_scene(assets[int(tab.asset[0])], ["indices"], expand=False).indices.shape[0]
    want = stage.indices.shape[0] + len(tab.asset) * crate
    assert res.results[0].entry["stats"]["instance_triangles"] == len(tab.asset) * crate > 0
    row = next(x.split() for x in table if x.startswith("a "))
    assert row[2:6] == ["up", "to", "date", str(want)], table


def test_verify_kept_reconverts_an_asset_whose_header_value_changed(made):
    """A header value changed into another valid one is seen only by a full hash: with
    --verify-kept the asset is re-converted although its own header and CRCs look fine."""
    src, cfg, out = made
    good = _outputs(out)
    data = (out / ASSET).read_bytes()
    at = data.index(b'"objects__crate.glb"')
    (out / ASSET).write_bytes(data[:at] + b'"objects__crate.glc"' + data[at + 20:])
    res = preprocess(src, out, str(cfg), options=PreprocessOptions(in_process=True, episodes=2))
    assert [r.status for r in res.results] == ["skipped", "skipped"]   # the cheap check cannot see it
    res = preprocess(src, out, str(cfg), options=PreprocessOptions(in_process=True, episodes=2, verify_kept=True))
    assert sorted(res.redone) == ["a", "b"] and "sha256 differs" in res.redone["a"][0]
    assert [r.status for r in res.results] == ["ok", "skipped"]
    assert _outputs(out) == good and verify_manifest(out / "manifest.json").ok


def test_a_restored_missing_asset_redoes_the_scenes_that_skipped_it(tmp_path):
    """--skip-missing-assets drops the crate of both scenes (its render asset is missing, so no
    record lists it); once the user restores the file, a rerun redoes them with the crate
    instead of keeping them as up to date."""
    src, out = tmp_path / "src", tmp_path / "out"
    cfg = _two_scenes(src)
    crate = src / "objects" / "crate.glb"
    crate.rename(tmp_path / "crate.glb")
    opts = PreprocessOptions(in_process=True, episodes=2, skip_missing_assets=True)
    res = preprocess(src, out, str(cfg), options=opts)
    assert [(r.status, r.entry["stats"]["instances"]) for r in res.results] == [("ok", 0), ("ok", 0)]
    assert res.results[0].entry["stats"]["skipped_instances"]
    res = preprocess(src, out, str(cfg), options=opts)   # still missing: nothing to redo
    assert [r.status for r in res.results] == ["skipped", "skipped"]
    (tmp_path / "crate.glb").rename(crate)
    res = preprocess(src, out, str(cfg), options=opts)
    assert [(r.status, r.entry["stats"]["instances"]) for r in res.results] == [("ok", 1), ("ok", 1)]
    assert "skipped_instances" not in res.results[0].entry["stats"]


def test_force_goes_by_the_file_systems_clock(made, monkeypatch):
    """--force re-converts each asset once per run also when the output file system's clock is
    behind this host's (an NFS server an hour behind): the run's start is read from that file
    system, not from time.time()."""
    import time
    import types

    from bps_assets.pipeline import preprocess as pp

    src, cfg, out = made
    host = types.SimpleNamespace(time=lambda: time.time() + 3600, perf_counter=time.perf_counter)
    monkeypatch.setattr(pp, "time", host)
    res = preprocess(src, out, str(cfg), options=PreprocessOptions(in_process=True, episodes=2, force=True))
    assert [r.status for r in res.results] == ["ok", "ok"]
    assert sum(r.entry["stats"]["assets_converted"] for r in res.results) == 1


def test_the_resume_check_reads_a_shared_asset_once(made, monkeypatch):
    """Both scenes use the crate asset: a resumed run checks its file once, not once per scene,
    and both scenes are still judged by it."""
    from bps_assets.pipeline import resume_check

    src, cfg, out = made
    real, seen = resume_check.output_problem, []

    def counted(out_root, rec, *a, **k):
        seen.append(rec.get("path"))
        return real(out_root, rec, *a, **k)

    monkeypatch.setattr(resume_check, "output_problem", counted)
    res = preprocess(src, out, str(cfg), options=PreprocessOptions(in_process=True, episodes=2))
    assert [r.status for r in res.results] == ["skipped", "skipped"]
    assert seen.count(ASSET) == 1 and seen.count("scenes/a.bps") == seen.count("scenes/b.bps") == 1
    _flip(out / ASSET, "section")
    got = resume_check.check_many(out, {r.name: r.entry for r in res.results})
    assert all(any(ASSET in p for p in probs) for probs in got.values()) and len(got) == 2
