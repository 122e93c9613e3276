"""Peak RSS and time of reading big episode files (what make(episodes=PATH) parses first), this
tree against a git revision's (``--before``), each read in its own process.

    python benchmarks/bench_episode_files.py [--before 9b8a679] [--scale 1.0] [--keep DIR]

Files (generated, gzip level 1, habitat's float repr): ObjectNav with 3M view points (~580 MB
of JSON: over the 1M-per-file cap), with 1M (at the cap) and with 500k episodes (at that cap),
PointNav with 1M episodes (~400 MB: over the 500k cap) and with 500k (at the cap); ``--scale``
shrinks every count. Prints per file
and tree: outcome (episodes read or the typed error), seconds, peak RSS, RSS / JSON bytes, and
the after / before ratios.
"""
from __future__ import annotations

import argparse
import gzip
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

READ = """
import resource, sys, time
sys.path.insert(0, sys.argv[1])
from bps_assets.errors import BpsError
kind, path = sys.argv[2], sys.argv[3]
from bps_assets.nav.objectnav_files import read_objectnav_dataset
from bps_assets.nav.episodes import read_pointnav_dataset
t = time.perf_counter()
try:
    if kind == "objectnav":
        ds = read_objectnav_dataset(path)
        n = len(ds.episodes)
        for e in ds.episodes[:1]:   # the first episode's view points are read (and checked) too
            ds.view_points_of(e)
        out = f"{n} episodes"
    else:   # what make() holds: the table where the tree has one (read_pointnav_table), else dicts
        from bps_assets.nav import episodes
        out = f"{len(getattr(episodes, 'read_pointnav_table', read_pointnav_dataset)(path))} episodes"
except BpsError as e:
    out = f"{type(e).__name__}: {str(e)[-70:]}"
dt = time.perf_counter() - t
print(f"{dt:.2f}\\t{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}\\t{out}")
"""


def _f(rng: random.Random, lo=-10.0, hi=10.0) -> str:
    return repr(rng.uniform(lo, hi))


def write_objectnav(path: Path, n_view_points: int, n_episodes: int, per_goal: int = 10_000) -> int:
    """An ObjectNav v1 file (one scene, 6 categories); -> its JSON bytes."""
    rng = random.Random(1)
    vps = [(f'{{"agent_state": {{"position": [{_f(rng)}, {_f(rng, 0, 0.2)}, {_f(rng)}], "rotation": '
            f'[0.0, {_f(rng, -1, 1)}, 0.0, {_f(rng, -1, 1)}]}}, "iou": {_f(rng, 0, 1)}}}') for _ in range(5000)]
    cats = ["chair", "bed", "plant", "toilet", "tv_monitor", "sofa"]
    n_goals = max(len(cats), n_view_points // per_goal)
    per_goal = n_view_points // n_goals
    size = 0
    with gzip.open(path, "wt", compresslevel=1) as f:
        def w(s):
            nonlocal size
            size += len(s)
            f.write(s)
        w('{"episodes": [')
        for i in range(n_episodes):
            w(("" if i == 0 else ", ") + json.dumps({
                "episode_id": str(i), "scene_id": "hm3d/val/00800-TEEsavR23oF/TEEsavR23oF.basis.glb",
                "start_position": [rng.uniform(-5, 5), 0.1, rng.uniform(-5, 5)], "start_rotation": [0, 0.6, 0, 0.8],
                "info": {"geodesic_distance": rng.uniform(1, 9)}, "goals": [], "start_room": None,
                "shortest_paths": None, "object_category": cats[i % len(cats)]}))
        maps = json.dumps({c: k for k, c in enumerate(cats)})
        w(f'], "category_to_task_category_id": {maps}, "category_to_scene_annotation_category_id": {maps}, '
          '"goals_by_category": {')
        k = 0
        for c, cat in enumerate(cats):
            w(("" if c == 0 else ", ") + f'"TEEsavR23oF.basis.glb_{cat}": [')
            mine = range(c, n_goals, len(cats))
            for j, g in enumerate(mine):
                w(("" if j == 0 else ", ") + f'{{"position": [{_f(rng)}, 0.5, {_f(rng)}], "radius": null, '
                  f'"object_id": {g}, "object_name": "{cat}_{g}", "object_name_id": null, "object_category": '
                  f'"{cat}", "room_id": null, "room_name": null, "view_points": [')
                n = per_goal if g < n_goals - 1 else n_view_points - per_goal * (n_goals - 1)
                w(", ".join(vps[(k + x) % len(vps)] for x in range(n)))
                k += n
                w("]}")
            w("]")
        w("}}")
    return size


def write_pointnav(path: Path, n_episodes: int) -> int:
    """A PointNav v1 file (one scene); -> its JSON bytes."""
    rng = random.Random(2)
    size = 0
    with gzip.open(path, "wt", compresslevel=1) as f:
        f.write('{"episodes": [')
        for i in range(n_episodes):
            s = ("" if i == 0 else ", ") + json.dumps({
                "episode_id": str(i), "scene_id": "data/scene_datasets/gibson/Allensville.glb",
                "start_position": [rng.uniform(-5, 5), 0.16337069869041443, rng.uniform(-5, 5)],
                "start_rotation": [0, 0.6, 0, 0.8], "info": {"geodesic_distance": rng.uniform(1, 9)},
                "goals": [{"position": [rng.uniform(-5, 5), 0.16337069869041443, rng.uniform(-5, 5)],
                           "radius": None}], "shortest_paths": None, "start_room": None})
            size += len(s)
            f.write(s)
        f.write("]}")
        size += 3
    return size


def _tree(rev: str, work: Path) -> Path:
    out = work / f"tree-{rev}"
    out.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "bps_assets"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive, check=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", default="9b8a679", help="git revision to compare with ('' for none)")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every count (default 1)")
    ap.add_argument("--keep", type=Path, default=None, help="write the files here and keep them")
    a = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bps-bench-episodes-"))
    folder = a.keep or work
    folder.mkdir(parents=True, exist_ok=True)
    s = a.scale
    files = [("objectnav", "objectnav_3M_vp", lambda p: write_objectnav(p, int(3e6 * s), int(5e4 * s))),
             ("objectnav", "objectnav_1M_vp", lambda p: write_objectnav(p, int(1e6 * s), int(5e4 * s))),
             ("objectnav", "objectnav_500k_ep", lambda p: write_objectnav(p, int(6e4 * s), int(5e5 * s))),
             ("pointnav", "pointnav_1M_ep", lambda p: write_pointnav(p, int(1e6 * s))),
             ("pointnav", "pointnav_500k_ep", lambda p: write_pointnav(p, int(5e5 * s)))]
    trees = [("after", REPO)] + ([("before", _tree(a.before, work))] if a.before else [])
    print(f"{'file':<18}{'JSON MB':>9}  {'tree':<7}{'s':>8}{'peak MiB':>10}{'RSS/JSON':>9}  outcome")
    for kind, name, make in files:
        p = folder / f"{name}.json.gz"
        nbytes = make(p) if not p.exists() else len(gzip.open(p).read())
        res = {}
        for label, root in trees:
            r = subprocess.run([sys.executable, "-c", READ, str(root), kind, str(p)], capture_output=True, text=True)
            if r.returncode != 0:
                res[label] = (float("nan"), float("nan"), f"rc {r.returncode}: {r.stderr.strip()[-80:]}")
            else:
                dt, rss, out = r.stdout.strip().split("\t")
                res[label] = (float(dt), int(rss), out)
            dt, rss, out = res[label]
            print(f"{name:<18}{nbytes / 1e6:>9.0f}  {label:<7}{dt:>8.2f}{rss / 2**20:>10.0f}{rss / nbytes:>9.2f}  {out}",
                  flush=True)
        if len(res) == 2:
            (t1, m1, _), (t0, m0, _) = res["after"], res["before"]
            print(f"{'':<18}{'':>9}  after/before: time {t1 / t0:.2f}x, peak RSS {m1 / m0:.2f}x", flush=True)
        if a.keep is None:
            p.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
