"""The docs say what the code does (issue 35 items 5, 7, 8): no stale "not done" or PointNav-only
titles, the demo's split sizes from data_manifests, and the how-tos linked from the README."""
from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"
README = DOCS.parent / "README.md"


def test_split_sizes_in_pipeline_md_are_the_manifests():
    from bps_assets.pipeline import demo
    from bps_assets.pipeline.datasets import load_dataset

    counts = load_dataset("gibson").subset_counts("tiny")
    text = " ".join((DOCS / "PIPELINE.md").read_text().split())
    m = re.search(r"synthesizes (\d+) of the (\d+) scenes of split `tiny`'s train and val subsets; (\d+) with test", text)
    assert m, "PIPELINE.md: the demo's split sizes"
    assert [int(g) for g in m.groups()] == [demo.DEMO_N, counts["train"] + counts["val"], sum(counts.values())]
    m = re.search(r"the subsets' other (\d+) scenes are absent", text)
    assert m and int(m.group(1)) == counts["train"] + counts["val"] - demo.DEMO_N


def test_task_docs_are_current():
    from bps_runtime.tasks import TASKS

    env_title = (DOCS / "ENV.md").read_text().splitlines()[0]
    assert "PointNav" not in env_title and "navigation environment" in env_title
    head = (DOCS / "ENV.md").read_text()[:800]
    assert all(t.lower() in head.lower() for t in ("PointNav", "ObjectNav", "ImageNav")) and len(TASKS) >= 3
    tasks = (DOCS / "TASKS.md").read_text()
    assert "Not done" not in tasks and "What remains" not in tasks and "runtime will use" not in tasks
    assert 'sensors=("rgb",\n"semantic")' in tasks or 'sensors=("rgb", "semantic")' in " ".join(tasks.split())


def test_readme_links_the_howtos():
    text = README.read_text()
    for page in ("docs/OBJECTNAV.md", "docs/HABITAT_LAB.md"):
        assert page in text and (DOCS.parent / page).is_file()
    assert "DATASET.DATA_PATH` at" not in (DOCS / "PIPELINE.md").read_text()
