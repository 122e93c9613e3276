"""Preprocess decodes an imported habitat ``.navmesh`` once: the worker imported it and checked its
fit against the scene, then decoded the packed navmesh it had just written to check the fit again
(``_check_scene``, the net under any backend); now the backend hands its ``fit_points`` on and
the net uses them. A run in process no longer decodes every Detour file for a worker pool it
does not start. Same outputs: the packed scene, the packed navmesh and the manifest's stats are
byte for byte those of the net's own read (the pre-change path)."""
from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

ASSETS = Path(__file__).resolve().parents[1].parent / "shared" / "assets"
ROOM = ASSETS / "habitat-sim" / "scenes" / "simple_room.glb"
NAVMESH = ASSETS / "habitat_test_scenes_navmesh" / "van-gogh-room.navmesh"

pytestmark = pytest.mark.skipif(not ROOM.is_file() or not NAVMESH.is_file(), reason="../shared/assets absent")


def _src(root: Path) -> Path:
    g = root / "gibson"
    g.mkdir(parents=True)
    shutil.copy(ROOM, g / "Allensville.glb")
    shutil.copy(NAVMESH, g / "Allensville.navmesh")
    return root


def _run(src: Path, out: Path, monkeypatch, withhold_fit=False):
    """Preprocess ``src`` in process (2 workers asked); -> ({what: decodes}, {output: sha256}, stats)."""
    import bps_assets.nav as nav
    import bps_assets.nav.detour as detour
    from bps_assets.pipeline.backend import Backend
    from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess

    calls = {"detour": 0, "packed": 0}
    read, load = detour.read_detour_navmesh, nav.load_navmesh

    def counting_read(*a, **k):
        calls["detour"] += 1
        return read(*a, **k)

    def counting_load(*a, **k):
        calls["packed"] += 1
        return load(*a, **k)
    with monkeypatch.context() as m:
        m.setattr(detour, "read_detour_navmesh", counting_read)
        m.setattr(nav, "load_navmesh", counting_load)   # what scene_checks.navmesh_fit reads with
        backend = Backend()
        if withhold_fit:   # the net reads the written file itself, as before the change
            real = backend.navmesh
            m.setattr(backend, "navmesh", lambda *a: {k: v for k, v in real(*a).items() if k != "fit_points"})
        res = preprocess(src, out, "gibson", "tiny", PreprocessOptions(workers=2, in_process=True, subsets=("train",)),
                         backend=backend)
    (r,) = [r for r in res.results if r.name == "Allensville"]
    assert r.status == "ok" and r.entry["stats"]["navmesh_source"] == "imported", r.error
    files = {p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
             for p in sorted((out / "scenes").glob("*.bps")) + sorted((out / "navmeshes").glob("*.bps"))}
    stats = {k: v for k, v in r.entry["stats"].items() if not k.endswith("seconds")}   # timings
    return calls, files, stats


def test_an_imported_navmesh_is_decoded_once_with_the_same_outputs(tmp_path, monkeypatch):
    src = _src(tmp_path / "src")
    calls, files, stats = _run(src, tmp_path / "once", monkeypatch)
    assert calls == {"detour": 1, "packed": 0}, calls
    assert sorted(files) == ["navmeshes/Allensville.navmesh.bps", "scenes/Allensville.bps"]
    before, files_before, stats_before = _run(src, tmp_path / "net", monkeypatch, withhold_fit=True)
    assert before == {"detour": 1, "packed": 1}
    assert files == files_before and stats == stats_before
    assert "fit_points" not in stats   # the points are not recorded


def test_a_misfit_is_still_caught_from_the_points(tmp_path):
    """The points handed on are the imported navmesh's: the net refuses a navmesh that does not
    fit its scene from them as it did from the file (the backend checks first: its own error)."""
    import numpy as np

    from bps_assets.pipeline.backend import Backend
    from bps_assets.pipeline.scene_checks import navmesh_fit

    src = _src(tmp_path / "src")
    b = Backend()
    out = tmp_path / "out"
    out.mkdir()
    b.convert(src / "gibson" / "Allensville.glb", out / "A.bps", "Allensville", "gibson")
    got = b.navmesh("import", out / "A.bps", src / "gibson" / "Allensville.navmesh", out / "A.navmesh.bps")
    pts = got["fit_points"]
    assert pts.shape[1] == 3 and len(pts) > 0
    assert navmesh_fit("Allensville", out / "A.navmesh.bps", out / "A.bps", pts) is None
    assert navmesh_fit("Allensville", out / "A.navmesh.bps", out / "A.bps") is None
    far = pts + np.array([50.0, -3.0, 0.0])
    assert "does not fit the scene" in navmesh_fit("Allensville", out / "A.navmesh.bps", out / "A.bps", far)
