"""Same-seed PointNav traces through the public API (``make``, ``reset``, ``step``): one digest
per step of everything a step returns (observations, reward, done, every info entry).

Used by tests/test_trace_stable.py (a run without swaps must stay bit-identical to the trace
recorded at base commit 2243483, tests/data/pointnav_trace_2243483.json) and by
tests/test_seeded_swaps.py (a run with swaps repeats whatever the loader timing and threads).

Record (at the base commit): ``python tests/pointnav_trace.py --record tests/data/X.json``.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import platform
import sys
from pathlib import Path

import numpy as np
import torch

NAMES = ["Allensville", "Beechwood", "Collierville"]
STEPS = 300
# the observation and info keys of the base commit (later tasks may add keys; these must stay)
OBS_KEYS = ("depth", "rgb", "pointgoal")
INFO_KEYS = ("env_id", "scene_index", "scene_id", "position", "rotation", "distance_to_goal",
             "waited_for_load", "success", "spl", "truncated")
EPISODE_KEYS = ("return", "length", "success", "spl", "distance_to_goal", "start_distance",
                "path_length", "episode_id", "scene_id")
# runs without swaps: every scene resident (slots >= scenes), sampled and dataset episodes
CONFIGS = {
    "sample": dict(split=None, num_envs=8, batch_size=4, resolution=(16, 16), sensors=("depth", "rgb"),
                   seed=5, episodes="sample", cache=3, threads=2),
    "dataset": dict(split=None, num_envs=6, batch_size=6, resolution=(12, 16), sensors=("depth", "rgb"),
                    seed=2, episodes="dataset", cache=3, threads=1),
}


def build_manifest(root: Path, names=NAMES, episodes: int = 6) -> Path:
    """Box rooms (tests/test_runtime_api._glb_rooms) preprocessed into a dataset -> manifest."""
    from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_runtime_api import _glb_rooms

    _glb_rooms(root / "src", names)
    res = preprocess(root / "src", root / "out", "gibson", "tiny",
                     PreprocessOptions(episodes=episodes, episode_seed=0, workers=1, subsets=("train", "val")),
                     log=lambda s: None)
    return Path(res.manifest_path)


def _digest(h, v) -> None:
    if isinstance(v, torch.Tensor):
        t = v.detach().cpu().contiguous()
        h.update(str(t.dtype).encode() + str(tuple(t.shape)).encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    elif isinstance(v, (bool, int, float, str)):
        h.update(repr(v).encode())
    else:   # LazyNames and lists of names
        h.update(json.dumps([str(x) for x in v]).encode())


def step_digest(obs, reward, done, info, skip=()) -> str:
    """One hex digest of a step's outputs (the base commit's keys, in a fixed order; info keys
    in ``skip`` left out)."""
    h = hashlib.sha256()
    for k in OBS_KEYS:
        if k in obs:
            h.update(k.encode())
            _digest(h, obs[k])
    _digest(h, reward)
    _digest(h, done)
    for k in INFO_KEYS:
        if k in skip:
            continue
        h.update(k.encode())
        _digest(h, info[k])
    for k in EPISODE_KEYS:
        h.update(b"episode." + k.encode())
        _digest(h, info["episode"][k])
    return h.hexdigest()[:16]


def actions_for(seed: int, steps: int, batch: int) -> torch.Tensor:
    """The seeded random actions of a trace [steps, batch] (a STOP in one step of four)."""
    g = torch.Generator().manual_seed(1000 + seed)
    return torch.randint(0, 4, (steps, batch), generator=g)


def step_trace(env, steps: int, obs, info, seed: int = 0, skip=()) -> list[str]:
    """The digest of a reset's outputs (``obs``, ``info = env.last_info``) and of ``steps``
    steps of ``env`` after it, on the random actions of ``actions_for(seed)`` (info keys in
    ``skip`` left out)."""
    out = [step_digest(obs, torch.zeros(env.num_envs), torch.zeros(env.num_envs, dtype=torch.bool), info, skip)]
    acts = actions_for(seed, steps, env.batch_size)
    for t in range(steps):
        out.append(step_digest(*env.step(acts[t]), skip))
    return out


def run_trace(manifest, steps: int = STEPS, skip=(), **make_kw) -> list[str]:
    """make(**make_kw) -> reset -> ``steps`` seeded random steps (``step_trace``, on the env's
    seed): the digest of the reset and of every step (info keys in ``skip`` left out)."""
    from bps_runtime import make

    env = make(manifest, **make_kw) if manifest is not None else make(**make_kw)
    try:
        obs = env.reset()
        return step_trace(env, steps, obs, env.last_info, env.config.seed, skip)
    finally:
        env.close()


def machine() -> dict:
    """What a bit-identical trace depends on besides our code: CPU features and library versions."""
    import embreex
    import warp

    flags = set()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    return {"machine": platform.machine(), "avx512f": "avx512f" in flags, "avx2": "avx2" in flags,
            "fma": "fma" in flags, "torch": torch.__version__.split("+")[0], "warp": warp.__version__,
            "embreex": getattr(embreex, "__version__", "?"), "numpy": np.__version__}


def main(argv=None):
    import tempfile

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--record", type=Path, help="write the traces as JSON here")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        m = build_manifest(Path(d))
        traces = {name: run_trace(m, **kw) for name, kw in CONFIGS.items()}
    doc = {"base_commit": "2243483", "steps": STEPS, "machine": machine(), "traces": traces}
    if a.record:
        a.record.parent.mkdir(parents=True, exist_ok=True)
        a.record.write_text(json.dumps(doc, indent=1) + "\n")
    else:
        print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
