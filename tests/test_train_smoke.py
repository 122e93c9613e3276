"""bps-train end to end with tiny totals on a tiny synthetic dataset (built once per session):
the loss is finite, the checkpoint reloads and a resumed run continues the counters, --eval
reports success and SPL, and 2 gloo processes under torchrun train on disjoint scenes."""
from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

TINY = ["--resolution", "32", "--width", "4", "--hidden", "32", "--num-envs", "4", "--rollout-steps", "8",
        "--sim-only-steps", "2", "--threads", "1", "--save-every", "1"]


@pytest.fixture(scope="session")
def dataset(tmp_path_factory):
    """3 synthetic Gibson-layout scenes (2 train, 1 val) through the demo's preprocess step
    (packed scenes, navmeshes, PointNav episodes), from ``bps_assets.synth.generate``.
    BPS_TRAIN_TEST_DATASET=path/manifest.json
    uses an existing dataset instead."""
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


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_train_resume_and_eval(dataset, tmp_path, capsys):
    from bps_train.train import run as main

    out = tmp_path / "run"
    base = ["--dataset", str(dataset), "--out-dir", str(out), *TINY]
    res = main([*base, "--total-steps", "64"])  # 2 updates of 4 envs x 8 steps
    assert res["updates"] == 2 and res["global_step"] == 64
    assert math.isfinite(res["loss"]) and res["sim_fps"] > 0
    rows = _rows(out / "log.csv")
    assert [int(r["update"]) for r in rows] == [1, 2]
    assert all(math.isfinite(float(r["loss"])) and float(r["fps"]) > 0 and float(r["fps_ratio"]) > 0 for r in rows)
    sim = [json.loads(line) for line in (out / "sim_only.jsonl").read_text().splitlines()]
    assert len(sim) == 2 and all(m["uniform"] > 0 and m["no_stop"] > 0 for m in sim)  # at start and end
    assert sim[1]["end_to_end_fps"] > 0

    ckpt = torch.load(out / "checkpoint.pt", weights_only=False)
    assert ckpt["update"] == 2 and ckpt["global_step"] == 64 and len(ckpt["rng"]) == 1
    from bps_train.train import Args, build_policy
    from bps_train.args import parse

    pol = build_policy(parse(Args, TINY), "cpu")
    pol.load_state_dict(ckpt["policy"])  # the weights reload into a freshly built policy
    assert any(s["step"] == 4 for s in ckpt["optimizer"]["state"].values())  # 2 updates x 2 minibatches

    # resume: counters, optimizer steps and weights continue; the log is appended to
    res = main([*base, "--total-steps", "96"])
    assert res["updates"] == 3 and res["global_step"] == 96
    assert "resumed" in capsys.readouterr().out
    assert [int(r["update"]) for r in _rows(out / "log.csv")] == [1, 2, 3]
    ckpt2 = torch.load(out / "checkpoint.pt", weights_only=False)
    assert any(s["step"] == 6 for s in ckpt2["optimizer"]["state"].values())
    assert ckpt2["seconds"] > ckpt["seconds"]

    # eval on the held-out val scene: every distinct episode of the split once
    res = main(["--dataset", str(dataset), "--eval", str(out / "checkpoint.pt"), "--eval-split", "val",
                "--eval-episodes", "6", "--num-envs", "6", "--threads", "1"])
    assert res["episodes"] == 6 and 0 <= res["success"] <= 1 and 0 <= res["spl"] <= res["success"] + 1e-9
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["episodes"] == 6 and "spl" in line


def test_resume_restores_rng_streams(dataset, tmp_path):
    """The checkpoint's RNG state is what the process continues with."""
    from bps_train.train import run as main

    out = tmp_path / "run"
    base = ["--dataset", str(dataset), "--out-dir", str(out), *TINY, "--sim-only-steps", "0"]
    main([*base, "--total-steps", "32"])
    ckpt = torch.load(out / "checkpoint.pt", weights_only=False)
    saved = ckpt["rng"][0]["torch"]
    torch.manual_seed(12345)  # anything else
    from bps_train.train import set_rng_state

    set_rng_state(ckpt["rng"][0])
    assert torch.equal(torch.get_rng_state(), saved)


def test_two_gloo_processes_train_on_disjoint_scenes(dataset, tmp_path):
    out = tmp_path / "ddp"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "bps_train.train", "--dataset", str(dataset), "--out-dir", str(out), *TINY,
           "--total-steps", "128"]  # 2 ranks x 4 envs x 8 steps = 64 per update -> 2 updates
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    rows = _rows(out / "log.csv")
    assert [int(r_["global_step"]) for r_ in rows] == [64, 128]
    assert all(math.isfinite(float(r_["loss"])) for r_ in rows)
    ckpt = torch.load(out / "checkpoint.pt", weights_only=False)
    assert ckpt["world"] == 2 and len(ckpt["rng"]) == 2
    assert not torch.equal(ckpt["rng"][0]["torch"], ckpt["rng"][1]["torch"])
    scenes = [json.loads(line.split(" ", 1)[1]) for line in r.stdout.splitlines() if line.startswith("SCENES ")]
    assert len(scenes) == 2 and not set(scenes[0]) & set(scenes[1]) and all(scenes)
