"""preprocess orchestration with a fast fake backend: isolation of failures and crashes,
resume after kill -9, change detection, manifest schema."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bps_assets.errors import DatasetError, OutputExistsError
from bps_assets.pipeline.manifest import load_manifest
from bps_assets.pipeline.plan import Shard
from bps_assets.pipeline.preprocess import STATE_DIR, PreprocessOptions, preprocess, summary_table

from pipeline_fakes import FakeBackend, make_source

REPO = Path(__file__).resolve().parents[1]
SCHEMA = json.loads((REPO / "docs" / "manifest.schema.json").read_text())
TRAIN = ["Allensville", "Beechwood", "Benevolence", "Coffeen", "Cosmos"]
VAL = ["Collierville", "Corozal"]


def validate_schema(path):
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    jsonschema.validate(json.loads(Path(path).read_text()), SCHEMA, cls=jsonschema.Draft202012Validator)


def _log(path):
    return Path(path).read_text().split() if Path(path).exists() else []


def test_failures_and_crashes_are_isolated(tmp_path):
    src = make_source(tmp_path / "src", TRAIN + VAL, navmesh=["Allensville"])
    out = tmp_path / "out"
    be = FakeBackend(fail={"Coffeen"}, crash={"Cosmos"}, log=tmp_path / "log")
    res = preprocess(src, out, "gibson", "tiny", PreprocessOptions(workers=2, episodes=4), backend=be)
    st = {r.name: r.status for r in res.results}
    assert st["Coffeen"] == "failed" and st["Cosmos"] == "failed"
    assert all(st[n] == "ok" for n in ["Allensville", "Beechwood", "Benevolence"] + VAL)
    assert sum(s == "missing" for s in st.values()) == 35 - 7
    errs = {r.name: r.error for r in res.results}
    assert "fake failure" in errs["Coffeen"] and "worker process died" in errs["Cosmos"]
    assert "fake failure" in (out / STATE_DIR / "logs" / "Coffeen.log").read_text()
    assert not res.ok
    table = summary_table(res)
    assert "5 processed, 0 up to date, 2 failed, 28 missing" in table and "Coffeen" in table

    validate_schema(res.manifest_path)
    m = load_manifest(out)
    assert [s.name for s in m.scenes("val")] == VAL
    assert {s.name for s in m.scenes(status="failed")} == {"Coffeen", "Cosmos"}
    a = m.scene("Allensville")
    assert os.fspath(a) == str(out / "scenes" / "Allensville.bps") and a.navmesh.is_file()
    assert a.stats["navmesh_source"] == "imported" and m.scene("Beechwood").stats["navmesh_source"] == "built"
    assert a.outputs["scene"]["format"] == "SCEN" and a.outputs["navmesh"]["format"] == "NAVM"
    assert a.episodes == out / "episodes/pointnav/train/content/Allensville.json.gz"
    assert m.episodes_path("val").is_file() and m.episodes_path("test") is None
    assert m.doc["scenes"]["Allensville"]["sources"]["navmesh"]["path"] == "gibson/Allensville.navmesh"

    # the rerun redoes only the failed scenes (the fake no longer fails)
    (tmp_path / "log").unlink()
    res2 = preprocess(src, out, "gibson", "tiny", PreprocessOptions(workers=1, in_process=True, episodes=4),
                      backend=FakeBackend(log=tmp_path / "log"))
    assert sorted(_log(tmp_path / "log")) == ["Coffeen", "Cosmos"]
    assert res2.ok and res2.count("skipped") == 5 and res2.count("ok") == 2
    validate_schema(res2.manifest_path)


def test_changes_are_detected(tmp_path):
    src = make_source(tmp_path / "src", TRAIN[:3] + VAL[:1])
    out, log = tmp_path / "out", tmp_path / "log"
    opts = PreprocessOptions(workers=1, in_process=True)
    preprocess(src, out, "gibson", "tiny", opts, backend=FakeBackend(log=log))
    assert len(_log(log)) == 4
    log.unlink()
    # unchanged -> nothing; touched but identical -> re-hashed, not redone
    os.utime(src / "gibson" / "Beechwood.glb", ns=(1, 1))
    r = preprocess(src, out, "gibson", "tiny", opts, backend=FakeBackend(log=log))
    assert _log(log) == [] and r.count("skipped") == 4
    # changed content -> that scene only; a new .navmesh beside a scene (auto imports it) too
    (src / "gibson" / "Allensville.glb").write_bytes(b"glTF changed")
    (src / "gibson" / "Collierville.navmesh").write_bytes(b"MSET new")
    r = preprocess(src, out, "gibson", "tiny", opts, backend=FakeBackend(log=log))
    assert sorted(_log(log)) == ["Allensville", "Collierville"]
    assert load_manifest(out).scene("Collierville").stats["navmesh_source"] == "imported"
    log.unlink()
    # a damaged output (wrong size) is redone even though its record exists
    with open(out / "navmeshes" / "Benevolence.navmesh.bps", "ab") as f:
        f.write(b"junk")
    preprocess(src, out, "gibson", "tiny", opts, backend=FakeBackend(log=log))
    assert _log(log) == ["Benevolence"]
    log.unlink()
    # different settings -> every scene
    preprocess(src, out, "gibson", "tiny", opts, backend=FakeBackend(log=log, knob=2))
    assert len(_log(log)) == 4
    log.unlink()
    preprocess(src, out, "gibson", "tiny", opts, backend=FakeBackend(log=log, knob=2))
    assert _log(log) == []
    preprocess(src, out, "gibson", "tiny", PreprocessOptions(workers=1, in_process=True, force=True),
               backend=FakeBackend(log=log, knob=2))
    assert len(_log(log)) == 4


KILL_SCRIPT = """
import sys
from pipeline_fakes import FakeBackend
from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess
if __name__ == "__main__":
    src, out, log, workers = sys.argv[1:5]
    preprocess(src, out, "gibson", "tiny", PreprocessOptions(workers=int(workers), episodes=2),
               backend=FakeBackend(sleep=0.5, log=log), progress=False)
"""


@pytest.mark.parametrize("workers", [1, 2])
def test_resume_after_kill_9(tmp_path, workers):
    names = TRAIN + VAL
    src = make_source(tmp_path / "src", names, size=200_000)
    out, log = tmp_path / "out", tmp_path / "log"
    script = tmp_path / "run.py"
    script.write_text(KILL_SCRIPT)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), str(REPO)]))
    p = subprocess.Popen([sys.executable, str(script), str(src), str(out), str(log), str(workers)],
                         env=env, start_new_session=True, stderr=subprocess.PIPE)
    deadline = time.time() + 60
    while len(_log(log)) < 4 and time.time() < deadline and p.poll() is None:
        time.sleep(0.02)
    os.killpg(p.pid, signal.SIGKILL)  # the whole job, workers included, as a node failure would
    p.wait()
    assert p.returncode == -signal.SIGKILL, p.stderr.read().decode()[-2000:]
    done = sorted(f.stem for f in (out / STATE_DIR / "scenes").glob("*.json"))
    started = _log(log)
    assert 0 < len(done) < len(names) and len(started) >= 4
    assert not (out / "manifest.json").exists()  # written at the end only

    # what a crash inside a write leaves: a temp file, or (a non-atomic writer) a truncated file
    todo = sorted(set(names) - set(done))
    (out / "scenes").mkdir(exist_ok=True)
    (out / "scenes" / f".{todo[0]}.bps.x1y2.tmp").write_bytes(b"half")
    (out / "scenes" / f"{todo[-1]}.bps").write_bytes(b"\x89BPS trunc")
    log.unlink()
    res = preprocess(src, out, "gibson", "tiny", PreprocessOptions(workers=1, in_process=True, episodes=2),
                     backend=FakeBackend(log=log))
    assert sorted(_log(log)) == sorted(set(names) - set(done))  # exactly the unfinished ones
    assert res.ok and res.count("skipped") == len(done)
    # no temp file survives for a redone scene, every output verifies
    assert not list(out.rglob("*.tmp"))
    from bps_assets.pipeline.verify import verify_manifest

    assert verify_manifest(res.manifest_path, deep=True).ok


def test_missing_scenes_and_output_guards(tmp_path):
    src = make_source(tmp_path / "src", ["Allensville"])
    with pytest.raises(DatasetError, match="34 scene\\(s\\) of split 'tiny' are missing.*--require-all"):
        preprocess(src, tmp_path / "o1", "gibson", "tiny", PreprocessOptions(require_all=True),
                   backend=FakeBackend())
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "thesis.tex").write_text("keep me")
    with pytest.raises(OutputExistsError, match="not empty"):
        preprocess(src, foreign, "gibson", "tiny", backend=FakeBackend())
    out = tmp_path / "o2"
    preprocess(src, out, "gibson", "tiny", PreprocessOptions(workers=1, in_process=True), backend=FakeBackend())
    with pytest.raises(OutputExistsError, match="manifest of another run"):
        preprocess(src, out, "gibson", "medium", PreprocessOptions(workers=1, in_process=True), backend=FakeBackend())
    with pytest.raises(Exception, match="inside the source tree"):
        preprocess(src, src / "gibson" / "out", "gibson", "tiny", backend=FakeBackend())
    # --navmesh import without a .navmesh fails that scene, with the reason
    r = preprocess(src, tmp_path / "o3", "gibson", "tiny", PreprocessOptions(navmesh="import", workers=1),
                   backend=FakeBackend())
    assert r.results[0].status == "failed" and "no .navmesh" in r.results[0].error


def test_shards_write_their_own_manifests(tmp_path):
    src = make_source(tmp_path / "src", TRAIN + VAL)
    out = tmp_path / "out"
    for i in range(3):
        r = preprocess(src, out, "gibson", "tiny", PreprocessOptions(workers=1, in_process=True), Shard(i, 3),
                       backend=FakeBackend())
        assert r.manifest_path.name == f"manifest.shard-{i}-of-3.json"
        validate_schema(r.manifest_path)
    names = [n for i in range(3) for n in load_manifest(out / f"manifest.shard-{i}-of-3.json").names()]
    assert sorted(names) == sorted(TRAIN + VAL)
    assert not (out / "manifest.json").exists()


def test_a_shard_whose_scenes_are_all_missing_writes_its_manifest(tmp_path):
    """A partial download (2 of split tiny's 35 scans, held by shards 0 and 4 of 6): every shard
    writes its manifest, the empty ones listing their missing scenes (reported, not fatal, as for
    a whole-split run); the merge counts all 33 missing. --require-all still refuses an empty
    shard, and a source holding no scene of the split is still an error."""
    from bps_assets.pipeline.manifest import merge_manifests

    src = make_source(tmp_path / "src", ["Allensville", "Collierville"])
    out, opts = tmp_path / "out", PreprocessOptions(workers=1, in_process=True)
    res = [preprocess(src, out, "gibson", "tiny", opts, Shard(i, 6), backend=FakeBackend()) for i in range(6)]
    assert [r.count("ok") for r in res] == [1, 0, 0, 0, 1, 0]
    assert sum(r.count("missing") for r in res) == 33
    for r in res:
        validate_schema(r.manifest_path)
    assert "0 processed" in summary_table(res[1]) and "scene  subset" not in summary_table(res[1])
    from bps_assets.pipeline.verify import verify_manifest

    rep = verify_manifest(res[1].manifest_path)   # a shard of a partial download is not broken
    assert rep.ok and any("shard 1/6 holds no scene: its 6 scene(s) are missing" in w for w in rep.warnings)
    m = merge_manifests(sorted(out.glob("manifest.shard-*-of-6.json")), out / "manifest.json")
    assert m.names() == ["Allensville", "Collierville"] and len(m.missing) == 33
    validate_schema(m.path)
    with pytest.raises(DatasetError, match="6 scene\\(s\\) of split 'tiny' are missing.*--require-all"):
        preprocess(src, tmp_path / "o2", "gibson", "tiny", PreprocessOptions(require_all=True), Shard(1, 6),
                   backend=FakeBackend())
    empty = make_source(tmp_path / "empty", [])
    with pytest.raises(DatasetError, match="no scene of gibson split 'tiny' \\(train/val/test\\) shard 1/6 found"):
        preprocess(empty, tmp_path / "o3", "gibson", "tiny", opts, Shard(1, 6), backend=FakeBackend())
    partial = merge_manifests([out / "manifest.shard-0-of-6.json"], tmp_path / "p.json", allow_partial=True)
    assert partial.doc["absent_shards"] == {"count": 6, "index": [1, 2, 3, 4, 5]}
    validate_schema(partial.path)
    from click.testing import CliRunner

    from cli.main import main

    r = CliRunner().invoke(main, ["manifest", "merge", str(out / "manifest.shard-1-of-6.json"),
                                  "-o", str(tmp_path / "p1.json"), "--allow-partial"])
    assert r.exit_code == 0 and "0 ok scenes, 0 failed, 6 missing; shard(s) 0, 2, 3, 4, 5 of 6 absent: " \
        "their scenes are neither listed nor counted missing" in r.output, r.output


def test_one_worker_still_isolates_a_crash(tmp_path):
    src = make_source(tmp_path / "src", ["Allensville", "Beechwood", "Collierville"])
    res = preprocess(src, tmp_path / "out", "gibson", "tiny", PreprocessOptions(workers=1),
                     backend=FakeBackend(crash={"Beechwood"}))
    st = {r.name: r.status for r in res.results if r.status != "missing"}
    assert st == {"Allensville": "ok", "Beechwood": "failed", "Collierville": "ok"}


def test_concurrent_runs_of_one_shard_are_refused(tmp_path):
    from bps_assets.errors import ConfigError
    from bps_assets.pipeline.preprocess import _lock_run

    src = make_source(tmp_path / "src", ["Allensville"])
    out = tmp_path / "out"
    opts = PreprocessOptions(workers=1, in_process=True)
    preprocess(src, out, "gibson", "tiny", opts, backend=FakeBackend())
    held = _lock_run(out / STATE_DIR / "manifest.lock")  # as another process's run would
    try:
        with pytest.raises(ConfigError, match="another preprocess run"):
            preprocess(src, out, "gibson", "tiny", opts, backend=FakeBackend())
        # another shard is not blocked
        preprocess(src, out, "gibson", "tiny", opts, Shard(0, 2), backend=FakeBackend())
    finally:
        held.release()
    assert preprocess(src, out, "gibson", "tiny", opts, backend=FakeBackend()).ok


def test_run_lock_without_any_lock_api_warns(tmp_path, monkeypatch):
    # no fcntl and no msvcrt: the run goes on, but says that nothing guards OUT_ROOT
    import sys as _sys

    from bps_assets.pipeline import preprocess as pp

    monkeypatch.setitem(_sys.modules, "fcntl", None)
    monkeypatch.setitem(_sys.modules, "msvcrt", None)
    with pytest.warns(RuntimeWarning, match="neither fcntl nor msvcrt"):
        f = pp._lock_run(tmp_path / "manifest.lock")
    f.release()


def test_run_lock_refuses_a_second_run(tmp_path):
    from bps_assets.pipeline import preprocess as pp

    (tmp_path / "state").mkdir()
    first = pp._lock_run(tmp_path / "state" / "manifest.lock")
    child = subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; "
                            "from bps_assets.pipeline.preprocess import _lock_run; "
                            f"_lock_run(Path({str(tmp_path / 'state' / 'manifest.lock')!r}))"],
                           capture_output=True, text=True)
    first.release()
    assert child.returncode != 0 and "another preprocess run" in child.stderr


PREPROCESS_HOLD = """
import sys, time
from pathlib import Path
from bps_assets.pipeline.preprocess import _lock_run
lock = _lock_run(Path(sys.argv[1]))
print("held", flush=True)
time.sleep(120)
"""


def test_preprocess_takes_the_same_lock_pid_named_and_stale_taken_over(tmp_path, capsys):
    """One lock for both layers (bps_assets.pipeline.run_lock): preprocess's refusal names the
    holder's pid, and its lock left by kill -9 is taken over with one line."""
    from bps_assets.errors import ConfigError
    from bps_assets.pipeline.preprocess import _lock_run

    (tmp_path / "state").mkdir()
    path = tmp_path / "state" / "manifest.lock"
    p = subprocess.Popen([sys.executable, "-c", PREPROCESS_HOLD, str(path)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    try:
        with pytest.raises(ConfigError, match=rf"another preprocess run \(pid {p.pid}\) is writing this OUT_ROOT"):
            _lock_run(path)
    finally:
        p.kill()
        p.wait()
    lock = _lock_run(path)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"pid {p.pid}" in err[0] and "taking over" in err[0] and err[0].startswith("preprocess")
    lock.release()
    assert path.read_text() == ""


def _children(pid: int) -> list[int]:
    """Live (not zombie) processes whose parent is ``pid``, from /proc."""
    out = []
    for d in Path("/proc").iterdir():
        try:
            stat = (d / "stat").read_text()
        except (OSError, ValueError):
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if fields[0] != "Z" and int(fields[1]) == pid:
            out.append(int(d.name))
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_die_with_a_killed_run(tmp_path):
    """kill -9 of the run itself (not its process group): its workers end within seconds
    instead of blocking for ever on a pipe no one reads (journey finding P3)."""
    src = make_source(tmp_path / "src", TRAIN)
    out, log = tmp_path / "out", tmp_path / "log"
    script = tmp_path / "run.py"
    script.write_text(KILL_SCRIPT.replace("sleep=0.5", "sleep=60"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), str(REPO)]))
    p = subprocess.Popen([sys.executable, str(script), str(src), str(out), str(log), "2"], env=env,
                         stderr=subprocess.PIPE)
    kids = []
    try:
        deadline = time.time() + 60
        while len(_log(log)) < 2 and time.time() < deadline and p.poll() is None:
            time.sleep(0.05)
        assert len(_log(log)) == 2, p.stderr.read().decode()[-2000:] if p.poll() is not None else "no start"
        kids = _children(p.pid)
        assert len(kids) >= 2   # two workers (and multiprocessing's resource tracker)
        p.kill()
        p.wait()
        deadline = time.time() + 10
        while any(_alive(k) for k in kids) and time.time() < deadline:
            time.sleep(0.1)
        assert not [k for k in kids if _alive(k)]
    finally:
        for k in kids:   # without the fix they would outlive the test
            if _alive(k):
                os.kill(k, signal.SIGKILL)
        if p.poll() is None:
            p.kill()


def test_navmesh_import_without_a_navmesh_names_the_scan_and_converts_nothing(tmp_path):
    """Journey L3: the error named the packed copy (then deleted) and came after converting."""
    src = make_source(tmp_path / "src", TRAIN[:2], navmesh=TRAIN[:1])
    log = tmp_path / "log"
    r = preprocess(src, tmp_path / "o", "gibson", "tiny",
                   PreprocessOptions(navmesh="import", workers=1, in_process=True), backend=FakeBackend(log=log))
    by = {x.name: x for x in r.results}
    bad = by[TRAIN[1]]
    assert bad.status == "failed" and f"{src / 'gibson' / TRAIN[1]}.glb: --navmesh import" in bad.error, bad.error
    assert log.read_text().split() == [TRAIN[0]]   # only the scene with a .navmesh was converted
    assert not (tmp_path / "o" / "scenes" / f"{TRAIN[1]}.bps").exists()


def test_a_navmesh_over_the_grid_cap_names_the_users_scan(tmp_path):
    """Journey L3: the grid cap named our packed copy (``big.bps``), not the user's scan."""
    import numpy as np
    from bps_assets.pipeline.datasets import scan_folder_name
    from packed_scene_glb import write_glb

    s = 160.0   # m: (160 / 0.05)^2 cells > the 8388608 cap
    v = np.array([[0, 0, 0], [s, 0, 0], [s, 0, -s], [0, 0, -s]], np.float32)
    scan = write_glb(tmp_path / "scans" / "big.glb", v, np.array([[0, 1, 2], [0, 2, 3]], np.uint32))
    r = preprocess(tmp_path / "scans", tmp_path / "o", scan_folder_name(tmp_path / "scans"), None,
                   PreprocessOptions(workers=1, in_process=True, episodes=0))
    (res,) = r.results
    assert res.status == "failed" and res.error.startswith(f"ResourceLimitError: {scan}: building this navmesh"), \
        res.error
