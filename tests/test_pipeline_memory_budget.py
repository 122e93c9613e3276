"""The preprocess pool never starts more workers than the largest scan's budget allows."""
from __future__ import annotations

from pipeline_fakes import FakeBackend, make_source

from bps_assets.pipeline import memory_budget as mb
from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess

GiB = 1 << 30


def test_pool_fits_the_largest_scan_in_available_memory():
    big = 400 << 20  # a 400 MiB scan: 8.1 GiB budget
    assert mb.workers_for([10 << 20, big], 16, 24 * GiB) == (2, mb.workers_for([big], 16, 24 * GiB)[1])
    n, why = mb.workers_for([big], 16, 24 * GiB)
    assert n == int(0.8 * 24 * GiB) // mb.scan_budget(big) == 2
    assert "2 workers instead of 16" in why and "400 MiB" in why
    assert mb.workers_for([big], 2, 64 * GiB) == (2, None)    # enough memory: what was asked
    assert mb.workers_for([big], 8, 1 * GiB)[0] == 1            # never fewer than one
    assert mb.workers_for([big], 8, None) == (8, None)          # unknown memory: what was asked
    assert mb.workers_for([], 8, 1 * GiB) == (8, None)


def test_available_memory_reads_the_kernel():
    avail = mb.available_memory()
    assert avail is None or 0 < avail < 1 << 50


def test_preprocess_says_when_it_shrinks_the_pool(tmp_path, monkeypatch):
    import bps_assets.pipeline.preprocess as pp

    src = make_source(tmp_path / "src", ["Allensville", "Beechwood", "Swormville"])
    monkeypatch.setattr(pp, "available_memory", lambda: mb.scan_budget(0) * 1.3)  # room for one worker
    lines = []
    res = preprocess(src, tmp_path / "out", "gibson", "tiny", PreprocessOptions(workers=2, episodes=0),
                     backend=FakeBackend(), log=lines.append)
    assert any("1 worker instead of 2" in s for s in lines), lines
    assert {r.status for r in res.results if r.name in ("Allensville", "Beechwood", "Swormville")} == {"ok"}
