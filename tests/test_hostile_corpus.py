"""Issue 14's hostile-input corpus: every case in its own process under a 1 GiB address-space
limit and a time limit; the counted outcomes must be exactly the expected ones (no crash, no
over-limit, every attack a typed error, every valid control accepted)."""
from __future__ import annotations

import pytest

from hostile_corpus import build_corpus, counts, run_corpus


@pytest.mark.slow
def test_hostile_corpus_outcomes(tmp_path):
    cases = build_corpus(tmp_path / "corpus")
    results = [r for r in run_corpus(cases) if r[1] != "skipped"]
    unexpected = [(c.name, outcome, detail) for c, outcome, detail, _ in results if outcome != c.expect]
    assert unexpected == []
    got = counts(results)
    want = {k: sum(c.expect == k for c, *_ in results) for k in got}
    assert got == want and got["crash"] == 0 and got["over limit"] == 0
    assert got["typed"] >= 28 and got["accepted"] >= 6
    items = {c.item for c, *_ in results}
    assert {"2", "4", "5", "6", "8", "9", "11", "15"} <= items
