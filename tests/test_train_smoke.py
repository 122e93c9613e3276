"""bps-train end to end with tiny totals on a tiny synthetic dataset (built once per session):
the loss is finite, the checkpoint reloads and a resumed run continues the counters, --eval
reports success and SPL, and 2 gloo processes under torchrun train on disjoint scenes."""
from __future__ import annotations

import csv
import json
import math
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

TINY = ["--resolution", "32", "--width", "4", "--hidden", "32", "--num-envs", "4", "--rollout-steps", "8",
        "--sim-only-steps", "2", "--threads", "1", "--save-every", "1"]


def _box(x0, y0, x1, y1, z0, z1):
    v = np.array([[x0, y0, z0], [x1, y0, z0], [x1, y1, z0], [x0, y1, z0],
                  [x0, y0, z1], [x1, y0, z1], [x1, y1, z1], [x0, y1, z1]], np.float32)
    t = np.array([[0, 2, 1], [0, 3, 2], [4, 5, 6], [4, 6, 7], [0, 1, 5], [0, 5, 4], [1, 2, 6], [1, 6, 5],
                  [2, 3, 7], [2, 7, 6], [3, 0, 4], [3, 4, 7]], np.uint32)
    return v, t


def _write_room_glb(path: Path, seed: int):
    """A Z-up (Gibson-like) room with a pillar, as a minimal GLB: used only when
    bps_assets.synth is not available, so the smoke test never depends on it."""
    rng = np.random.default_rng(seed)
    w, d, h = rng.uniform(4, 6), rng.uniform(4, 6), 2.5
    px, py = rng.uniform(1.5, w - 1.5), rng.uniform(1.5, d - 1.5)
    parts = [_box(-0.2, -0.2, w + 0.2, d + 0.2, -0.1, 0), _box(-0.2, -0.2, w + 0.2, d + 0.2, h, h + 0.1),
             _box(-0.2, -0.2, 0, d + 0.2, 0, h), _box(w, -0.2, w + 0.2, d + 0.2, 0, h),
             _box(0, -0.2, w, 0, 0, h), _box(0, d, w, d + 0.2, 0, h), _box(px, py, px + 0.6, py + 0.6, 0, h)]
    v = np.concatenate([p[0] for p in parts])
    t = np.concatenate([p[1] + 8 * i for i, p in enumerate(parts)])
    vb, ib = v.tobytes(), t.tobytes()
    doc = {"asset": {"version": "2.0"}, "scene": 0, "scenes": [{"nodes": [0]}], "nodes": [{"mesh": 0}],
           "meshes": [{"primitives": [{"attributes": {"POSITION": 0}, "indices": 1}]}],
           "buffers": [{"byteLength": len(vb) + len(ib)}],
           "bufferViews": [{"buffer": 0, "byteOffset": 0, "byteLength": len(vb)},
                           {"buffer": 0, "byteOffset": len(vb), "byteLength": len(ib)}],
           "accessors": [{"bufferView": 0, "componentType": 5126, "count": len(v), "type": "VEC3",
                          "min": v.min(0).tolist(), "max": v.max(0).tolist()},
                         {"bufferView": 1, "componentType": 5125, "count": t.size, "type": "SCALAR"}]}
    js = json.dumps(doc).encode()
    js += b" " * (-len(js) % 4)
    blob = vb + ib
    path.write_bytes(struct.pack("<III", 0x46546C67, 2, 28 + len(js) + len(blob))
                     + struct.pack("<II", len(js), 0x4E4F534A) + js + struct.pack("<II", len(blob), 0x004E4942) + blob)


@pytest.fixture(scope="session")
def dataset(tmp_path_factory):
    """3 synthetic Gibson-layout scenes (2 train, 1 val) through the demo's preprocess step
    (packed scenes, navmeshes, PointNav episodes). Scenes from ``bps_assets.synth.generate``
    when it exists, else minimal rooms written here. BPS_TRAIN_TEST_DATASET=path/manifest.json
    uses an existing dataset instead."""
    if os.environ.get("BPS_TRAIN_TEST_DATASET"):
        return Path(os.environ["BPS_TRAIN_TEST_DATASET"])
    from bps_assets.pipeline import demo

    def synthesize(ctx):
        ctx.src_root = ctx.outdir / "src"
        try:
            from bps_assets.synth import generate
        except ImportError:
            generate = None
        if generate is not None:  # names by its rule: 2 train + 1 val scene of split "tiny"
            generate(ctx.src_root, "gibson", 3, seed=0, size="small")
            return
        (ctx.src_root / "gibson").mkdir(parents=True, exist_ok=True)
        for i, name in enumerate(demo.demo_scene_names(3)):  # 2 train + 1 val
            _write_room_glb(ctx.src_root / "gibson" / f"{name}.glb", seed=i)

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
