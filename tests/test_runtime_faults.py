"""Fault injection into the runtime (issue 26, items 1-4, 7, 8; issue 25 item 1 from make()):
a budget-limited cache, files replaced or damaged while a run goes on, hostile arguments.

Data are generated (5 synth scenes through preprocess). What could hang runs in a subprocess
under a timeout: a binding budget never deadlocks, close() from another thread returns, and the
interpreter exits without close(). Damaged scenes make ``make()`` refuse when they are among the
scenes it loads first and are quarantined, with the reason logged, when a later swap loads them.
"""
from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from bps_assets.errors import ConfigError, CorruptFileError, DatasetError, NavError
from cli.main import main

ROOT = Path(__file__).resolve().parents[1]
SMALL = dict(split=None, resolution=(8, 8))


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """5 synth gibson scenes, preprocessed with 8 PointNav episodes each."""
    root = tmp_path_factory.mktemp("faults")
    r = CliRunner().invoke(main, ["synth", str(root / "src"), "-n", "5"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["preprocess", str(root / "src"), "-o", str(root / "ds"), "--dataset", "gibson",
                                  "--split", "tiny", "--workers", "1", "--episodes", "8"])
    assert r.exit_code == 0, r.output
    return root / "ds" / "manifest.json"


def _copy(manifest: Path, tmp_path: Path) -> Path:
    shutil.copytree(manifest.parent, tmp_path / "ds")
    return tmp_path / "ds" / "manifest.json"


def _rerecord(manifest: Path, name: str, role: str) -> None:
    """Write the manifest's size and sha256 of a replaced file (as an attacker who reruns the
    hashes would; ``verify`` then passes)."""
    from bps_assets.hashing import sha256_file

    doc = json.loads(manifest.read_text())
    rec = doc["scenes"][name]["outputs"][role]
    rec["sha256"], rec["size"] = sha256_file(manifest.parent / rec["path"])
    manifest.write_text(json.dumps(doc))


def _files(manifest: Path, name: str) -> dict:
    doc = json.loads(manifest.read_text())
    return {k: manifest.parent / v["path"] for k, v in doc["scenes"][name]["outputs"].items()}


def _python(code: str, timeout: float):
    """Run ``code`` in a fresh interpreter; fail the test if it does not end within ``timeout``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    try:
        return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                              timeout=timeout, cwd=ROOT, env=env)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"hung: ran past {timeout} s\n{e.stdout}\n{e.stderr}")


# ------------------------------------------------------------------------------ item 1: budget

def _needed_budget(manifest) -> int:
    from bps_runtime import make

    with pytest.raises(ConfigError, match=r"give budget_bytes >= \d+") as e:
        make(manifest, num_envs=8, cache={"slots": 2, "swap_every": 2, "budget_bytes": 2_000_000}, **SMALL)
    return int(re.search(r"budget_bytes >= (\d+)", str(e.value)).group(1))


def test_a_budget_too_small_is_refused_at_make_and_the_one_it_names_runs_without_deadlock(dataset):
    need = _needed_budget(dataset)
    # the budget it names: 40 steps, swaps every 2 rounds, episodes of 6 steps; no close() at the end
    # (the interpreter must exit even while loads wait for room in the budget)
    p = _python(f"""
        import numpy as np
        from bps_runtime import make
        from bps_runtime.tasks.pointnav import TaskOptions
        env = make({str(dataset)!r}, split=None, resolution=(8, 8), num_envs=8,
                   cache={{"slots": 2, "swap_every": 2, "budget_bytes": {need}}},
                   task=TaskOptions(max_episode_steps=6))
        env.reset()
        rng = np.random.default_rng(0)
        for _ in range(40):
            obs, rew, done, info = env.step(rng.integers(0, 4, 8))
        c = env.world.scenes
        print("stepped", env.stats["steps"], c.peak_bytes <= {need}, bool(np.isfinite(rew.numpy()).all()))
        """, timeout=240)
    assert p.returncode == 0, p.stderr
    assert "stepped 40 True True" in p.stdout, p.stdout + p.stderr


def test_a_script_that_exits_without_close_ends_quietly(dataset):
    """Journey L7: loads still running when a script ends without ``env.close()`` failed on the
    exiting interpreter's pools ("cannot schedule new futures after interpreter shutdown") and
    were logged as quarantined scenes; they end quietly."""
    p = _python(f"""
        from bps_runtime import make
        env = make({str(dataset)!r}, split=None, resolution=(8, 8), num_envs=2)
        print("made")
        """, timeout=240)
    assert p.returncode == 0 and "made" in p.stdout, p.stderr
    assert "quarantined" not in p.stderr and "interpreter shutdown" not in p.stderr, p.stderr


def test_close_from_another_thread_returns_while_a_step_waits_for_a_load(dataset):
    need = _needed_budget(dataset)
    p = _python(f"""
        import threading, time
        import numpy as np
        from bps_runtime import make
        env = make({str(dataset)!r}, split=None, resolution=(8, 8), num_envs=8,
                   cache={{"slots": 2, "swap_every": 1, "budget_bytes": {need}}})
        env.reset()
        # from now on every load is slow: a due swap waits for its load (a blocked step)
        loader = env.world.scenes.loader
        read, read_navmesh = loader.reader, loader.navmesh_loader
        loader.reader = lambda path: (time.sleep(3.0), read(path))[1]
        loader.navmesh_loader = lambda path: (time.sleep(3.0), read_navmesh(path))[1]
        errors = []

        def stepping():
            try:
                while True:
                    env.step(np.ones(8, np.int64))
            except Exception as e:
                errors.append(type(e).__name__)

        t = threading.Thread(target=stepping, daemon=True)
        t.start()
        time.sleep(2.0)
        closer = threading.Thread(target=env.close)
        t0 = time.monotonic()
        closer.start()
        closer.join(30)
        t.join(30)
        print("closed", not closer.is_alive(), round(time.monotonic() - t0, 1), "stepper ended", not t.is_alive(),
              errors)
        """, timeout=180)
    assert p.returncode == 0, p.stderr
    m = re.search(r"closed True ([\d.]+) stepper ended True \['ConfigError'\]", p.stdout)
    assert m, p.stdout + p.stderr
    assert float(m.group(1)) < 20, p.stdout


# ------------------------------------------------------------------------------ items 2, 3: files

def _start_scenes(manifest, **kw) -> set:
    """The scenes make() loads first (the start-up loads and the first prefetched ones) for a seed."""
    from bps_runtime import make

    with make(manifest, **kw) as env:
        c = env.world.scenes
        while c.loading:
            time.sleep(0.05)
        return set(c.resident_scene_ids())


def _damage(manifest: Path, names: list) -> dict:
    """Damage three scenes three ways; -> scene -> what its quarantine reason must say."""
    from bps_assets.nav import load_navmesh

    a, b, c = names[:3]
    other = [n for n in json.loads(manifest.read_text())["scenes"] if n not in (a, b, c)][0]
    # a: its packed scene replaced by another scene's (the manifest untouched)
    shutil.copy(_files(manifest, other)["scene"], _files(manifest, a)["scene"])
    # b: a navmesh whose origin is 1e300, hashes rewritten (verify --deep --strict passes)
    nav = load_navmesh(_files(manifest, b)["navmesh"])
    nav.origin = np.array([1e300, -1e300])
    nav.save(_files(manifest, b)["navmesh"], overwrite=True)
    _rerecord(manifest, b, "navmesh")
    # c: every dataset episode 60 m away from its navmesh
    ep = _files(manifest, c)["episodes"]
    doc = json.loads(gzip.decompress(ep.read_bytes()))
    for e in doc["episodes"]:
        e["start_position"] = [60.0, 0.0, 60.0]
        e["goals"][0]["position"] = [61.0, 0.0, 60.0]
    ep.write_bytes(gzip.compress(json.dumps(doc).encode()))
    _rerecord(manifest, c, "episodes")
    return {a: "!= recorded", b: "beyond 1e+06 m", c: "episode"}


def test_damaged_scenes_are_quarantined_with_a_reason_and_the_run_goes_on(dataset, tmp_path, caplog):
    from bps_runtime import make
    from bps_runtime.tasks.pointnav import TaskOptions

    manifest = _copy(dataset, tmp_path)
    kw = dict(num_envs=2, cache={"slots": 1, "swap_every": 2}, seed=3, task=TaskOptions(max_episode_steps=5),
              **SMALL)
    first = _start_scenes(manifest, **kw)
    names = sorted(set(json.loads(manifest.read_text())["scenes"]) - first)
    assert len(names) >= 3
    want = _damage(manifest, names)
    with make(manifest, **kw) as env:
        env.reset()
        rng = np.random.default_rng(0)
        for _ in range(120):
            obs, rew, done, info = env.step(rng.integers(0, 4, 2))
            assert np.isfinite(rew.numpy()).all() and np.isfinite(info["distance_to_goal"].numpy()).all()
            if set(want) <= set(env.world.scenes.quarantined):
                break
        q = dict(env.world.scenes.quarantined)
        for _ in range(10):   # and stepping goes on on the others
            env.step(rng.integers(0, 4, 2))
        assert set(env.world.scenes.resident_scene_ids()) <= first | set(names) - set(want)
    assert set(q) == set(want), q
    for name, why in want.items():
        assert why in q[name], (name, q[name])
        assert f"scene {name!r} quarantined" in caplog.text


def test_a_scene_file_replaced_by_another_of_the_same_size_is_caught_by_its_header(dataset, tmp_path):
    """The header check: another scene's .bps / navmesh copied in, sizes and hashes re-recorded
    (so only identity can tell): make() refuses when it is a scene it loads first."""
    from bps_runtime import make

    for role, why in (("scene", "converted from another scan"), ("navmesh", "another scene's file")):
        manifest = _copy(dataset, tmp_path / role)
        first = sorted(_start_scenes(manifest, num_envs=2, cache={"slots": 1}, **SMALL))
        victim = first[0]
        donor = next(n for n in json.loads(manifest.read_text())["scenes"] if n not in first)
        shutil.copy(_files(manifest, donor)[role], _files(manifest, victim)[role])
        _rerecord(manifest, victim, role)
        with pytest.raises(CorruptFileError, match=why) as e:
            make(manifest, num_envs=2, cache={"slots": 1}, **SMALL)
        assert victim in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("damage,error,why", [
    ("origin", CorruptFileError, r"beyond 1e\+06 m of the origin"),
    ("cell_size", CorruptFileError, "cell_size 1e-300 m is outside"),
    ("elsewhere", NavError, "does not fit the scene"),
])
def test_make_refuses_a_start_up_scene_whose_navmesh_is_unusable(dataset, tmp_path, damage, error, why):
    from bps_assets.nav import load_navmesh
    from bps_runtime import make

    manifest = _copy(dataset, tmp_path)
    names = sorted(json.loads(manifest.read_text())["scenes"])
    for name in names:   # every scene: whichever make() loads first is damaged
        path = _files(manifest, name)["navmesh"]
        nav = load_navmesh(path)
        if damage == "origin":
            nav.origin = np.array([1e300, -1e300])
        elif damage == "cell_size":
            nav.cell_size = 1e-300
        else:
            nav.origin = np.asarray(nav.origin) + 40.0
        nav.save(path, overwrite=True)
        _rerecord(manifest, name, "navmesh")
    with pytest.raises(error, match=why) as e:
        make(manifest, num_envs=2, **SMALL)
    assert "\n" not in str(e.value)


# ------------------------------------------------------------------------------ items 4, 7, 8: arguments

def test_num_envs_beyond_memory_is_refused_before_allocating(dataset):
    from bps_runtime import make

    with pytest.raises(ConfigError, match=r"num_envs=10000000 needs about .* at most num_envs=\d+ fits"):
        make(dataset, num_envs=10**7, split=None)


@pytest.mark.parametrize("seed", [-1, "abc", 1.5, True, 2**64])
def test_bad_seeds_are_one_line_config_errors(dataset, seed):
    from bps_runtime import make

    with pytest.raises(ConfigError, match="seed=.*expected an int in"):
        make(dataset, num_envs=2, seed=seed, **SMALL)


@pytest.mark.parametrize("batch_size", [None, 1])
def test_step_before_reset_and_reset_after_close_are_refused(dataset, batch_size):
    from bps_runtime import make

    env = make(dataset, num_envs=2, batch_size=batch_size, **SMALL)
    b = env.batch_size
    with pytest.raises(ConfigError, match=r"before reset\(\)"):
        env.step(np.ones(b, np.int64))
    env.reset()
    env.step(np.ones(b, np.int64))
    env.close()
    env.close()   # twice is fine
    for call in (env.reset, env.async_reset, lambda: env.step(np.ones(b, np.int64))):
        with pytest.raises(ConfigError, match="closed environment"):
            call()
    with pytest.raises(ConfigError, match="seed=-1"):
        env.seed(-1)


def test_a_dataset_built_for_another_agent_is_refused(dataset):
    from bps_runtime import make
    from bps_runtime.tasks.pointnav import TaskOptions

    with pytest.raises(DatasetError, match=r"built for another agent \(radius 0.1 m, not 0.18 m; height 1.5 m, "
                                           r"not 0.88 m\): preprocess again with --agent-radius 0.18"):
        make(dataset, num_envs=2, task=TaskOptions(agent_radius=0.18, agent_height=0.88), **SMALL)


# ------------------------------------------------------------------------------ item 1: scenes larger later

def test_loads_that_never_fit_next_to_the_active_scenes_are_skipped_and_swaps_go_on():
    """Scenes larger than the start-up ones can wait for room that no scene will ever free (no
    slot has a next scene, none drains): the cache gives those loads up for this pass of the
    order, so the slots keep swapping through the scenes that fit."""
    from bps_runtime.render import build_shading_data, make_renderer
    from bps_runtime.scenes.cache import CacheOptions, SceneCache
    from bps_runtime.scenes.loader import SceneSource
    from runtime_scenes import MemoryReader, room_scene

    r = make_renderer("embree")
    scenes, sources = {}, []
    for i in range(8):
        s = room_scene((4.0 + i, 3.0, 5.0), scene_id=f"s{i}")
        if i >= 6:   # two scenes with 3x the triangles of the others
            s.indices, s.tri_material = np.tile(s.indices, (3, 1)), np.tile(s.tri_material, 3)
        scenes[f"mem/{i}"] = s
        sources.append(SceneSource(f"s{i}" if i < 6 else f"big{i}", f"mem/{i}"))

    from bps_runtime.scenes.footprint import accel_bytes

    def cost(s):
        return build_shading_data(s).nbytes + accel_bytes(r, len(s.positions), len(s.indices))

    small, big = cost(scenes["mem/0"]), cost(scenes["mem/6"])
    budget = 3 * small + (big - small) // 2   # K=2 small actives + 1 small next; a big one never fits next to them
    assert 2 * small + big > budget
    seed = next(sd for sd in range(50) if _starts_small(sources, r, budget, sd))
    num_envs = 8
    with SceneCache(sources, r, num_envs, CacheOptions(slots=2, budget_bytes=budget, swap_every=2, seed=seed),
                    reader=MemoryReader(scenes)) as cache:
        cache.start()
        rng = np.random.default_rng(0)
        env_scene = cache.assign_next(np.arange(num_envs))
        swaps, reasons, seen = [], [], set()
        for step in range(300):
            time.sleep(0.005)   # a step's time: loads progress between rounds as in a run
            done = np.flatnonzero(rng.random(num_envs) < 0.3)
            if done.size:
                new = cache.assign_next(done)
                cache.release_scenes(env_scene[done])
                env_scene[done] = new
            cache.after_round()
            rep = cache.take_report()
            swaps.append(rep.swaps)
            reasons += rep.reasons
            seen.update(cache.scene(i).scene_id for i in cache.resident_scene_indices)
            assert cache.resident_bytes <= budget
    assert any("skipped this pass" in x for x in reasons), reasons
    assert sum(swaps[200:]) >= 3, swaps   # still swapping late in the run
    assert len({x for x in seen if x.startswith("s")}) >= 5 and not cache.quarantined


def _starts_small(sources, r, budget, seed) -> bool:
    """Whether a cache of this seed starts on two small scenes (the order is seeded)."""
    import numpy as np

    order = np.random.default_rng(seed).permutation(len(sources)).tolist()
    return all(not sources[i].scene_id.startswith("big") for i in order[:2])
