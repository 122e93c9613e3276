"""The semantic sensor through make() (issue 22 item 3): a synth --semantic dataset, preprocessed;
the env's semantic observations equal the renderer's at the poses the step reports (Embree after
the step, Warp's frame launched inside it, captured with it in one graph), and the env's category table maps them to the
categories of each scene's object table on the device."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from cli.main import main

SENSORS = ("depth", "rgb", "semantic")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """Two synth gibson scans annotated in the HM3D-Semantics format, preprocessed."""
    root = tmp_path_factory.mktemp("semantic_env")
    for args in (["synth", root / "src", "-n", "2", "--semantic"],
                 ["preprocess", root / "src", "-o", root / "ds", "--dataset", "gibson", "--split", "tiny",
                  "--workers", "1", "--episodes", "4"]):
        r = CliRunner().invoke(main, [str(a) for a in args])
        assert r.exit_code == 0, r.output
    return root / "ds" / "manifest.json"


def _tables(manifest):
    from bps_assets.packed_scene import read_packed_scene
    from bps_assets.pipeline.manifest import load_manifest

    return {e.name: read_packed_scene(e.scene).semantics for e in load_manifest(manifest).scenes(None)}


@pytest.mark.parametrize("renderer,capture", [("embree", False), ("warp", False), ("warp", True)])
def test_semantic_observations_are_the_renderers_and_the_table_maps_them(dataset, renderer, capture, monkeypatch):
    from bps_runtime import make, observation_space
    from bps_runtime.step import fused as fused_step

    tables = _tables(dataset)
    assert all(t is not None and len(t) > 0 for t in tables.values())
    if capture:   # Warp records CPU graphs too: the captured step + frame path, as test_capture_graph
        monkeypatch.setattr(fused_step, "CAPTURE_DEVICES", ("cuda", "cpu"))
    env = make(dataset, split=None, num_envs=4, sensors=SENSORS, resolution=(24, 24), renderer=renderer, seed=1,
               capture_graph=capture, threads=1 if capture else None)
    space = observation_space(4, SENSORS, (24, 24))
    assert space["semantic"].shape == (4, 24, 24, 1) and space["semantic"].dtype == np.int32
    with env:
        obs = env.reset()
        rng = np.random.default_rng(0)
        seen = 0
        for step in range(12):
            obs, _, _, info = env.step(rng.integers(1, 4, 4))
            sem = obs["semantic"]
            assert sem.dtype == torch.int32 and tuple(sem.shape) == (4, 24, 24, 1)
            # the renderer's pixels at the poses the step reports
            ref = env.world.renderer.render(info["scene_index"], info["position"], info["rotation"], SENSORS)
            for k in SENSORS:
                assert torch.equal(obs[k], ref[k]), (k, step)
            # categories on the device, as each scene's object table says
            cats = env.category_table.lookup(info["scene_index"], sem)
            assert tuple(cats.shape) == tuple(sem.shape) and cats.dtype == torch.int32
            for e in range(4):
                t = tables[info["scene_id"][e]]
                ids = sem[e].reshape(-1).numpy()
                c = cats[e].reshape(-1).numpy()
                assert (c[ids == 0] == -1).all()
                row = {int(i): env.categories.index(t.categories[int(k)]) for i, k in zip(t.ids, t.category)}
                hit = np.flatnonzero(ids)
                assert set(ids[hit].tolist()) <= set(row)
                assert np.array_equal(c[hit], np.array([row[int(i)] for i in ids[hit]], np.int32))
                seen += hit.size
        assert seen > 100   # objects were in view
        assert env.capture_status.startswith("captured") == capture, env.capture_status


def test_depth_only_env_has_no_semantic_parts(dataset):
    from bps_runtime import make

    with make(dataset, split=None, num_envs=2, resolution=(8, 8)) as env:
        obs = env.reset()
        assert set(obs) == {"depth", "pointgoal"} and env.category_table is None and env.categories is None
        assert "semantic" not in env.observation_space.spaces
