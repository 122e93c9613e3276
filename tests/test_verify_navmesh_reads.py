"""`bps-assets verify` decodes each navmesh once, plain and ``--deep``: the deep check's load of
the file samples the points the fit check needs (``nav.validate.fit_points``), so the fit check
does not load it again; plain verify loads it once, for the fit. Counted per file and section
on conftest's preprocessed ``manifest`` (every scene with a navmesh)."""
from __future__ import annotations

import collections
import os

import numpy as np
import pytest
from click.testing import CliRunner

from bps_assets.container import Container
from bps_assets.nav import load_navmesh
from bps_assets.pipeline.manifest import load_manifest
from cli.main import main

NAV_SECTIONS = {"height", "neighbors", "island", "island_area", "island_radius"}


@pytest.fixture
def decodes(monkeypatch):
    """(file name, section) -> times its bytes were decompressed (read or streamed)."""
    counts = collections.Counter()
    real_read, real_stream = Container.read, Container.verify_section

    def read(self, name, *a, **k):
        counts[os.path.basename(self.path), name] += 1
        return real_read(self, name, *a, **k)

    def stream(self, name):
        counts[os.path.basename(self.path), name] += 1
        return real_stream(self, name)

    monkeypatch.setattr(Container, "read", read)
    monkeypatch.setattr(Container, "verify_section", stream)
    return counts


@pytest.mark.parametrize("deep", [False, True])
def test_verify_decodes_each_navmesh_once(manifest, decodes, deep):
    m = load_manifest(manifest)
    navs = {os.path.basename(m.resolve(e.get("outputs", {})["navmesh"]["path"]))
            for e in m.doc["scenes"].values() if e.get("status") == "ok"}
    assert len(navs) >= 2
    r = CliRunner().invoke(main, ["verify", str(manifest), "--jobs", "1"] + (["--deep"] if deep else []))
    assert r.exit_code == 0, r.output
    for nav in navs:
        seen = {sec: n for (f, sec), n in decodes.items() if f == nav}
        assert set(seen) == NAV_SECTIONS, (nav, seen)   # plain: the fit's load; deep: the check's
        assert all(n == 1 for n in seen.values()), (nav, seen)


def test_the_points_deep_keeps_give_the_fit_checks_answer(manifest, monkeypatch):
    """The points --deep samples while it checks each navmesh (and hands the fit check instead
    of a second load) are those of a fresh load of the same file, and answer as the check on
    that load does, also for bounds the navmesh does not fit. Plain verify hands none."""
    import bps_assets.pipeline.scene_checks as scene_checks
    from bps_assets.nav.validate import fit_points, navmesh_misfit, points_misfit

    kept = {}
    real = scene_checks.navmesh_fit

    def spy(scene, navmesh_path, packed_scene, points=None):
        kept[os.path.realpath(navmesh_path)] = points
        return real(scene, navmesh_path, packed_scene, points)

    monkeypatch.setattr(scene_checks, "navmesh_fit", spy)
    m = load_manifest(manifest)
    navs = {os.path.realpath(m.resolve(e["outputs"]["navmesh"]["path"]))
            for e in m.doc["scenes"].values() if e.get("status") == "ok"}
    r = CliRunner().invoke(main, ["verify", str(manifest), "--jobs", "1"])
    assert r.exit_code == 0, r.output
    assert set(kept) == navs and all(v is None for v in kept.values())   # plain: the fit loads it
    kept.clear()
    r = CliRunner().invoke(main, ["verify", str(manifest), "--jobs", "1", "--deep"])
    assert r.exit_code == 0, r.output
    assert set(kept) == navs
    for path in sorted(navs):
        pts = kept[path]
        nav = load_navmesh(path)   # a fresh load, not the one --deep made
        assert pts.shape[1] == 3 and 0 < len(pts) <= 256 and np.array_equal(pts, fit_points(nav))
        lo, hi = pts.min(0), pts.max(0)
        for bounds in [(lo - 1, hi + 1), (lo + 3, hi + 3), (lo - [0, 2, 0], hi - [0, 2, 0]), None]:
            assert points_misfit(pts, bounds) == navmesh_misfit(nav, bounds)
        assert points_misfit(pts, (lo + 3, hi + 3)) is not None


def test_the_report_keeps_no_fit_points(manifest):
    """--deep's fit points serve the fit check, then are let go: not held by the report."""
    from bps_assets.pipeline.verify import verify_manifest

    rep = verify_manifest(manifest, deep=True, jobs=1)
    files = [f for s in rep.scenes for f in s.files] + rep.extra_files
    assert rep.ok and any(f.role == "navmesh" for f in files)
    assert all(f.fit_points is None for f in files)
