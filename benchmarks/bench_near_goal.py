"""The cost of exact reads near goals in the step's Warp ``geodesic`` (bps_runtime/nav/kernels.py):
the same field row read at the same points with its goals (the near rule on) and with its goal
count set to 0 (the field read alone, as before), alternating, in one run; Warp's CPU device.

    python benchmarks/bench_near_goal.py [--points 200000 --goals 1,100,1000 --repeats 5 --gate 0.5]
    python benchmarks/bench_near_goal.py --accuracy NAVFILE [--num-goals 150]
    python benchmarks/bench_near_goal.py --env MANIFEST --episodes FILE [--num-envs 64 --steps 600]

Points lie within the row's gate (``--gate`` m: 0.5, ``NEAR_EXACT``; ImageNav's 1.0 m success
distance: 1.3) of a goal (every read takes the near branch: the worst case, an
env at its goal on every step) or anywhere (the usual case). Prints one JSON line per case with
the ratio near-rule / field-only of the median times. ``--accuracy``: instead, the error of
``distance_at`` against the exact straight line at points within 0.5 m of random goals that see
them, with the near rule and with the read alone, by distance. ``--env``: ObjectNav env steps
(random actions, the episodes of FILE, ``make(..., split="val")``) in alternating blocks of 20
(``--steps`` / 2 when fewer than 40) with every field row's goals and with their counts set to 0
(the near rule off), in one process: median step times and the fraction of env steps within
``NEAR_EXACT``. Results: docs/PERFORMANCE.md, docs/NAVMESH.md section 6.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # nav_queries, inmemory_scenes


def _floor(seed: int = 0):
    """10 x 10 m of 0.5 m floor tiles, ~15 % left out (walls, corners)."""
    from bps_assets.nav import NavMesh
    from inmemory_scenes import floor_tiles

    rng = np.random.default_rng(seed)
    holes = [(0.5 * i, -0.5 * j - 0.5, 0.5 * i + 0.5, -0.5 * j) for i in range(20) for j in range(20)
             if rng.random() < 0.15 and (i, j) != (0, 0)]
    return NavMesh.from_walkable_triangles(*floor_tiles(10.0, 10.0, holes))


BINS = ((0, .05), (.05, .1), (.1, .2), (.2, .45), (.45, .5))


def accuracy(path: str, num_goals: int) -> None:
    """One JSON line per distance bin: pairs, mean / max error of the read alone, max |error|
    and pairs off by > 1 um with the near rule (metres)."""
    from bps_assets.nav import load_navmesh

    nav = load_navmesh(path)
    rng = np.random.default_rng(0)
    goals = nav.snap_point(nav.sample_navigable_point(num_goals, seed=1))
    err = {b: ([], []) for b in BINS}
    for g in goals:
        f = nav.distance_field(g)
        r, a = rng.uniform(0, 0.5, 64), rng.uniform(0, 2 * np.pi, 64)
        p = g + np.stack([r * np.cos(a), 0 * r, r * np.sin(a)], 1)
        p = nav.snap_point(p[np.asarray(nav.is_navigable(p))])
        d = np.linalg.norm(p - g, axis=1)
        exact = nav.geodesic_distance(np.repeat(g[None], len(p), 0), p)
        sees = np.abs(exact - d) < 1e-9          # exact: the straight line
        old, new = nav.distance_at(f, p[sees], gate=0.0), nav.distance_at(f, p[sees])   # gate 0: the read alone
        for lo, hi in BINS:
            m = (d[sees] >= lo) & (d[sees] < hi)
            err[(lo, hi)][0].extend(old[m] - exact[sees][m])
            err[(lo, hi)][1].extend(new[m] - exact[sees][m])
    for (lo, hi), (o, n) in err.items():
        o, n = np.array(o), np.abs(np.array(n))
        print(json.dumps({"from_m": lo, "to_m": hi, "pairs": len(o), "read_alone_mean": round(float(o.mean()), 5),
                          "read_alone_max": round(float(o.max()), 5), "near_rule_max": round(float(n.max()), 5),
                          "near_rule_off": int((n > 1e-6).sum())}))


def env_steps(manifest: str, episodes: str, num_envs: int, steps: int) -> None:
    """One JSON line: median env step ms with the near rule and without, their ratio."""
    import bps_runtime
    from bps_assets.nav.geodesic import NEAR_EXACT
    from bps_runtime.nav.buffers import T_COUNT, TABLE_WIDTH

    torch.set_num_threads(1)
    env = bps_runtime.make(manifest, split="val", num_envs=num_envs, task="objectnav", episodes=episodes,
                           resolution=(8, 8), seed=0)
    nav = env.world.nav
    gen = torch.Generator().manual_seed(0)

    def counts(on: bool) -> None:
        for f in list(nav.fields.values()):
            for row, near in list(f.near.items()):
                nav.goal_table.buf[f.goal_base + TABLE_WIDTH * row + T_COUNT] = len(near) if on else 0

    times, near = {True: [], False: []}, []
    try:
        env.reset()
        for _ in range(60):   # warm: compile, first fields
            env.step(torch.randint(1, 6, (num_envs,), generator=gen))
        gate = max((f.gate for f in nav.fields.values()), default=NEAR_EXACT)   # the task's near-goal gate
        block = min(20, steps // 2)   # both settings get steps, however few
        for t in range(steps):
            on = (t // block) % 2 == 0
            counts(on)
            a = torch.randint(1, 6, (num_envs,), generator=gen)
            t0 = time.perf_counter()
            _, _, _, info = env.step(a)
            times[on].append(time.perf_counter() - t0)
            near.append(float((info["distance_to_goal"] < gate).float().mean()))
    finally:
        env.close()
    med = {k: float(np.median(v)) for k, v in times.items()}
    print(json.dumps({"num_envs": num_envs, "steps": steps, "near_fraction": round(float(np.mean(near)), 4),
                      "near_rule_ms": round(1e3 * med[True], 3), "field_only_ms": round(1e3 * med[False], 3),
                      "ratio": round(med[True] / med[False], 3)}))


def main(argv=None) -> int:
    """Run the cases; one JSON line each."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=200_000)
    ap.add_argument("--goals", default="1,100,1000", help="goals per field row (1: PointNav; more: view points)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--gate", type=float, default=None, help="the rows' near-goal gate, m (default NEAR_EXACT)")
    ap.add_argument("--accuracy", metavar="NAVFILE", help="measure the error near goals on this navmesh instead")
    ap.add_argument("--num-goals", type=int, default=150)
    ap.add_argument("--env", metavar="MANIFEST", help="time ObjectNav env steps on this dataset instead")
    ap.add_argument("--episodes", help="--env: an ObjectNav episodes file of the manifest's val scenes")
    ap.add_argument("--num-envs", type=int, default=64)
    ap.add_argument("--steps", type=int, default=600)
    a = ap.parse_args(argv)
    if a.env:
        if a.steps < 2:
            ap.error("--env needs --steps >= 2 (the near rule on, then off)")
        env_steps(a.env, a.episodes, a.num_envs, a.steps)
        return 0
    if a.accuracy:
        accuracy(a.accuracy, a.num_goals)
        return 0
    from bps_assets.nav.geodesic import NEAR_EXACT
    from bps_runtime.nav.buffers import T_COUNT, TABLE_WIDTH, GoalFields, NavBuffers, SceneNav
    from nav_queries import NavQueries

    nm = _floor()
    b = NavBuffers(capacity=1)
    s = SceneNav(nm, b)
    gate = NEAR_EXACT if a.gate is None else a.gate
    fields = GoalFields(s, capacity=4, gate=gate)
    b.publish(0, s, fields)
    q = NavQueries(b)
    rng = np.random.default_rng(1)
    for n_goals in (int(x) for x in a.goals.split(",")):
        goals = np.asarray(nm.snap_point(nm.sample_navigable_point(n_goals, seed=2)), np.float64)
        row = fields.add(goals[0] if n_goals == 1 else goals)
        count_at = fields.goal_base + TABLE_WIDTH * row + T_COUNT
        n_real = int(b.goal_table.buf[count_at])
        anywhere = nm.sample_navigable_point(a.points, seed=3)
        r = gate * np.sqrt(rng.random(a.points))
        ang = rng.uniform(0, 2 * np.pi, a.points)
        near = goals[rng.integers(n_goals, size=a.points)] + np.stack([r * np.cos(ang), 0 * r, r * np.sin(ang)], 1)
        near = near[np.asarray(nm.is_navigable(near))]
        for where, pts in (("near", near), ("anywhere", anywhere)):
            p = torch.from_numpy(np.asarray(pts, np.float32))
            keys, rows = torch.zeros(len(p), dtype=torch.int32), torch.full((len(p),), row, dtype=torch.int32)
            times = {"near_rule": [], "field_only": []}
            q.geodesic(keys, rows, p)   # compile / warm
            for _ in range(a.repeats):
                for case, count in (("near_rule", n_real), ("field_only", 0)):
                    b.goal_table.buf[count_at] = count
                    t0 = time.perf_counter()
                    q.geodesic(keys, rows, p)
                    times[case].append(time.perf_counter() - t0)
            b.goal_table.buf[count_at] = n_real
            med = {k: float(np.median(v)) for k, v in times.items()}
            print(json.dumps({"goals_per_row": n_goals, "gate": gate, "points": where, "n": len(p),
                              "near_rule_ms": round(1e3 * med["near_rule"], 2),
                              "field_only_ms": round(1e3 * med["field_only"], 2),
                              "ratio": round(med["near_rule"] / med["field_only"], 3)}))
        fields.release(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
