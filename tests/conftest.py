"""Datasets that several test files build the same way, built once per test process
(session scope; each xdist worker builds its own when it needs one).

- ``dataset``: 3 synthetic Gibson-layout scenes (2 train, 1 val) through the demo's preprocess
  step (test_train_smoke, test_video, test_video_goals, test_hostile_runs; a file with a
  ``dataset`` fixture of its own uses that one instead).
- ``manifest``: the runtime's preprocessed dataset (test_runtime_api, test_runtime_threads,
  test_runtime_env_throughput; files with a ``manifest`` of their own use theirs).
- ``objectnav_dataset``: synth --semantic -> preprocess for ObjectNav's agent -> episodes
  (test_objectnav_make, test_video_goals).
- ``box_rooms_manifest``: tests/pointnav_trace.py's box rooms (test_trace_stable,
  test_seeded_swaps).
- ``synth_pair``: `bps-assets synth -n 2`'s source tree, not preprocessed (test_cli_navmesh_checks,
  test_cli_preprocess_inputs, test_cli_messages).

The ``slow`` marker (registered here) marks the few tests that took 30 s or more each on the
shared 2-core machine (load ~8): ``pytest -m "not slow"`` leaves them out. Fixtures only read these
datasets; a test that changes one works on a copy.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: 30 s or more on the shared 2-core machine (pytest -m \"not slow\" leaves it out)")


@pytest.fixture(scope="session")
def dataset(tmp_path_factory):
    """3 synthetic Gibson-layout scenes (2 train, 1 val) through the demo's preprocess step
    (packed scenes, navmeshes, PointNav episodes), from ``bps_assets.synth.generate``.
    BPS_TRAIN_TEST_DATASET=path/manifest.json uses an existing dataset instead."""
    if os.environ.get("BPS_TRAIN_TEST_DATASET"):
        return Path(os.environ["BPS_TRAIN_TEST_DATASET"])
    from bps_assets.pipeline import demo

    def synthesize(ctx):
        from bps_assets.synth import generate

        ctx.src_root = ctx.outdir / "src"
        generate(ctx.src_root, "gibson", 3, seed=0, size="small")  # 2 train + 1 val scene of "tiny"

    out = tmp_path_factory.mktemp("train_data") / "demo"
    steps = [demo.DemoStep("synthesize", "synthesize", synthesize)]
    steps += [s for s in demo.DEFAULT_STEPS if s.name == "preprocess"]
    assert demo.run_demo(out, scenes=3, workers=1, echo=lambda s: None, steps=steps)
    from bps_assets.pipeline.manifest import load_manifest

    m = load_manifest(out / "manifest.json")
    assert len(m.scenes("train")) == 2 and len(m.scenes("val")) == 1
    return out / "manifest.json"


@pytest.fixture(scope="session")
def manifest(tmp_path_factory):
    """test_runtime_api's dataset: its NAMES synthesized (box rooms without bps_assets.synth),
    train and val preprocessed with 6 PointNav episodes each."""
    from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess
    from test_runtime_api import NAMES, _glb_rooms

    root = tmp_path_factory.mktemp("runtime_api")
    try:
        from bps_assets import synth
        made = synth.generate(root / "src", "gibson", len(NAMES), seed=0, size="small")
        assert sorted(i.name for i in made) == sorted(NAMES)
    except (ImportError, AttributeError):
        _glb_rooms(root / "src")
    res = preprocess(root / "src", root / "out", "gibson", "tiny",
                     PreprocessOptions(episodes=6, episode_seed=0, workers=1, subsets=("train", "val")),
                     log=lambda s: None)
    return res.manifest_path


@pytest.fixture(scope="session")
def box_rooms_manifest(tmp_path_factory):
    """``pointnav_trace.build_manifest``'s dataset (the seeded PointNav trace's)."""
    import pointnav_trace

    return pointnav_trace.build_manifest(tmp_path_factory.mktemp("box_rooms"))


@pytest.fixture(scope="session")
def objectnav_dataset(tmp_path_factory):
    """(preprocessed output folder, ObjectNav val split file): test_objectnav_make's."""
    from test_objectnav_make import build_objectnav_dataset

    return build_objectnav_dataset(tmp_path_factory.mktemp("objnav"))


@pytest.fixture(scope="session")
def synth_pair(tmp_path_factory):
    """Two synth gibson scenes of the tiny split (Allensville train, Collierville val), as
    `bps-assets synth DIR -n 2` writes them."""
    from click.testing import CliRunner

    from cli.main import main

    root = tmp_path_factory.mktemp("synth") / "ds"
    r = CliRunner().invoke(main, ["synth", str(root), "-n", "2"])
    assert r.exit_code == 0, r.output
    return root
