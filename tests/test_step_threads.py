"""The CPU step over several threads (``step_kernels.CpuLaunches``: the step kernel as disjoint
env ranges launched side by side) gives bit for bit what one thread gives, and the launcher
itself covers every env once, runs the ranges on distinct threads and reports errors."""
from __future__ import annotations

import threading
import time

import pytest
import torch

from inmemory_scenes import house_scene, make_env, room
from bps_runtime.step.kernels import CpuLaunches
from bps_runtime.tasks.pointnav import TaskOptions
from test_fused_step import _policy

FIELDS = ("position", "rotation", "distance_to_goal", "scene_index", "success", "spl", "truncated")
EPISODE = ("return", "length", "distance_to_goal", "start_distance", "path_length")


def _episode_sequence(threads: int, num_envs: int, batch_size: int | None, steps: int):
    """Every output of a seeded run (sliding, stairs, STOPs on and off the goal, truncations,
    automatic resets): per step, per group."""
    scenes = [room("pillars", 4.0, 5.0, pillars=[(1.5, -3.0, 2.5, -2.0), (0.5, -1.0, 1.0, -0.5)]),
              house_scene(), room("long", 2.0, 7.0)]
    env = make_env(scenes, num_envs=num_envs, batch_size=batch_size, seed=5, goal_pool=6, threads=threads)
    env.task = TaskOptions(max_episode_steps=25)
    assert env.fused._cpu.threads == threads and env.world.threads == threads
    gen = torch.Generator().manual_seed(7)
    out = []
    try:
        obs = env.reset()
        info = env.last_info
        out.append({k: v.clone() for k, v in obs.items()})
        b = env.batch_size
        # the latest observation of each group (the policy's input), groups stepped in turn
        last = [({"pointgoal": obs["pointgoal"][g * b:(g + 1) * b]},
                 {"distance_to_goal": info["distance_to_goal"][g * b:(g + 1) * b]}) for g in range(num_envs // b)]
        for s in range(steps):
            g = s % len(last)
            a = _policy(last[g][1], last[g][0], gen, b)
            obs, r, d, info = env.step(a)
            last[g] = ({"pointgoal": obs["pointgoal"].clone()}, {"distance_to_goal": info["distance_to_goal"].clone()})
            rec = {"obs_" + k: v.clone() for k, v in obs.items()}
            rec.update(reward=r.clone(), done=d.clone(), env_id=info["env_id"].clone())
            rec.update({k: info[k].clone() for k in FIELDS})
            rec.update({"ep_" + k: info["episode"][k].clone() for k in EPISODE})
            rec["episode_id"] = list(info["episode"]["episode_id"])
            out.append(rec)
        # the run covered what matters (else the comparison proves little)
        # the counts that follow from the seed (not the timing-dependent waits and reservoir misses)
        stats = {k: env.stats[k] for k in ("steps", "episodes", "waited_steps")}
    finally:
        env.close()
    return out, stats


def _assert_same(a, b):
    assert len(a) == len(b)
    for i, (x, y) in enumerate(zip(a, b)):
        assert x.keys() == y.keys()
        for k in x:
            if isinstance(x[k], torch.Tensor):
                assert x[k].dtype == y[k].dtype and torch.equal(x[k], y[k]), (i, k)
            else:
                assert x[k] == y[k], (i, k)


@pytest.mark.parametrize("threads,num_envs,batch_size", [(2, 96, None), (3, 100, 50)])
def test_threaded_step_is_bit_identical_to_one_thread(threads, num_envs, batch_size):
    """Same seed, same actions: positions, rotations, rewards, dones, success, SPL, episode
    statistics and observations (depth, pointgoal) are equal bit for bit. 100 envs over 3
    threads gives uneven ranges; batch_size 50 gives two groups (ranges offset by env0)."""
    one, s1 = _episode_sequence(1, num_envs, batch_size, 70)
    many, sn = _episode_sequence(threads, num_envs, batch_size, 70)
    assert s1 == sn
    dones = sum(int(r["done"].sum()) for r in one[1:])
    succ = sum(int(r["success"].sum()) for r in one[1:])
    trunc = sum(int(r["truncated"].sum()) for r in one[1:])
    assert dones > 100 and succ > 3 and trunc > 10, (dones, succ, trunc)
    _assert_same(one, many)


def test_ranges_cover_every_env_once():
    for threads in (1, 2, 3, 16):
        cl = CpuLaunches(threads)
        try:
            for n in (1, 2, 5, 64, 100, 1024):
                parts = cl.ranges(n)
                assert len(parts) == min(threads, n)
                assert parts[0][0] == 0 and parts[-1][1] == n
                assert all(a[1] == b[0] for a, b in zip(parts, parts[1:]))
                sizes = [hi - lo for lo, hi in parts]
                assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1
        finally:
            cl.close()


def test_first_launch_is_serial_then_ranges_run_side_by_side():
    cl = CpuLaunches(3)
    seen = []
    lock = threading.Lock()
    barrier = threading.Barrier(3, timeout=20)

    def first(lo, hi):
        seen.append((lo, hi, threading.get_ident()))

    def later(lo, hi):
        barrier.wait()            # only passes if all three ranges are running at once
        with lock:
            seen.append((lo, hi, threading.get_ident()))

    try:
        cl.run("k", first, 30)
        assert [s[:2] for s in seen] == [(0, 10), (10, 20), (20, 30)]
        assert {s[2] for s in seen} == {threading.get_ident()}     # module load / lookup: one thread
        seen.clear()
        cl.run("k", later, 30)
        assert sorted(s[:2] for s in seen) == [(0, 10), (10, 20), (20, 30)]
        assert len({s[2] for s in seen}) == 3 and threading.get_ident() in {s[2] for s in seen}
    finally:
        cl.close()


def test_an_error_in_one_range_is_raised_after_all_ranges_finished():
    cl = CpuLaunches(2)
    done = []

    def launch(lo, hi):
        if lo == 0:
            raise RuntimeError("range 0 failed")
        time.sleep(0.2)
        done.append(lo)

    try:
        cl.run("k", lambda lo, hi: None, 10)
        with pytest.raises(RuntimeError, match="range 0 failed"):
            cl.run("k", launch, 10)
        assert done == [5]          # the other range had finished writing before the raise
    finally:
        cl.close()


DEBUG_RUN = r"""
import warp
warp.config.mode = "debug"          # bounds checks, and the tile-storage exit check that crashed
import torch
from inmemory_scenes import house_scene, make_env, room

def run(threads):
    env = make_env([room("a", 4.0, 5.0, pillars=[(1.5, -3.0, 2.5, -2.0)]), house_scene()], num_envs=64,
                   seed=1, threads=threads)
    gen = torch.Generator().manual_seed(0)
    out = []
    env.reset()
    for _ in range(30):
        a = torch.multinomial(torch.tensor([0.1, 0.6, 0.15, 0.15]), 64, True, generator=gen)
        obs, r, d, info = env.step(a)
        out.append((info["position"].clone(), r.clone(), d.clone(), obs["depth"].clone()))
    env.close()
    return out

one, two = run(1), run(2)
assert all(torch.equal(x, y) for a, b in zip(one, two) for x, y in zip(a, b))
print("same")
"""


def test_side_by_side_launches_survive_warp_debug_mode(tmp_path):
    """The crash that once kept the CPU step on one thread: in Warp's debug build two launches
    of the module side by side segfaulted in the launch's exit check (see step_kernels'
    NO_TILE_STORAGE). Runs in a child process (debug mode is process-wide, and a crash must
    fail this test, not end the test run)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "debug_run.py"
    script.write_text(DEBUG_RUN)
    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), str(root / "tests"), os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=900, env=env)
    assert p.returncode == 0 and p.stdout.strip().endswith("same"), (p.returncode, p.stderr[-3000:])
