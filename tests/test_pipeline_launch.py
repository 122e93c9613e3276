"""The submitit launcher, run locally: the same job array SLURM would run."""
import os
from pathlib import Path

import pytest

pytest.importorskip("submitit")

from bps_assets.pipeline.launch import SlurmOptions, launch  # noqa: E402
from bps_assets.pipeline.manifest import load_manifest  # noqa: E402
from bps_assets.pipeline.preprocess import PreprocessOptions  # noqa: E402
from bps_assets.pipeline.verify import verify_manifest  # noqa: E402

from pipeline_fakes import FakeBackend, make_source  # noqa: E402

NAMES = ["Allensville", "Beechwood", "Benevolence", "Coffeen", "Collierville"]
REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("executor", ["debug", "local"])
def test_launch_job_array_and_merge(tmp_path, monkeypatch, executor):
    # local jobs are fresh interpreters: they must import the fake backend's module
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(Path(__file__).parent), str(REPO),
                                                      os.environ.get("PYTHONPATH", "")]))
    src = make_source(tmp_path / "src", NAMES)
    out = tmp_path / "out"
    lines = []
    res = launch(src, out, "gibson", "tiny", 3, PreprocessOptions(workers=1, in_process=True, episodes=2),
                 SlurmOptions(time_min=5, cpus_per_task=1, mem_gb=1), executor=executor,
                 log=lines.append, backend=FakeBackend())
    assert res.ok, lines
    assert len(res.jobs) == 3 and all(p.is_file() for p in res.shard_manifests)
    m = load_manifest(res.manifest)
    assert res.manifest == out / "manifest.json" and m.names() == NAMES and m.shard is None
    assert verify_manifest(m.path, deep=True).ok
    assert sum("shard" in line for line in lines) == 3

    # a failing scene: its shard reports it, the merge still happens, the result is not ok
    res = launch(src, tmp_path / "out2", "gibson", "tiny", 2, PreprocessOptions(workers=1, in_process=True),
                 executor=executor, backend=FakeBackend(fail={"Coffeen"}))
    assert not res.ok and res.failed_scenes == 1 and res.manifest is not None
    assert [s.name for s in load_manifest(res.manifest).scenes(status="failed")] == ["Coffeen"]


def test_unknown_executor_is_a_config_error(tmp_path):
    pytest.importorskip("submitit")
    from bps_assets.errors import ConfigError
    from bps_assets.pipeline.launch import SlurmOptions, make_executor

    with pytest.raises(ConfigError, match="executor 'pbs'"):
        make_executor("pbs", tmp_path, SlurmOptions())


def test_launch_passes_skip_missing_assets_to_each_task(tmp_path):
    """`bps-assets launch --skip-missing-assets` (issue 31): each task's preprocess drops the
    composed scene's instance whose GLB is missing, as `preprocess --skip-missing-assets` does;
    without it the scene fails and the launch exits 1."""
    import json
    import subprocess
    import sys

    from test_composed_scenes import _crate_room

    cfg = _crate_room(tmp_path / "src", [{"template_name": "crate", "translation": [1, 0, 1]},
                                         {"template_name": "ghost", "translation": [0, 0, 0]}])
    (tmp_path / "src" / "objects" / "ghost.object_config.json").write_text(json.dumps({"render_asset": "ghost.glb"}))
    scenes = {}
    for out, extra in (("fail", ()), ("skip", ("--skip-missing-assets",))):
        r = subprocess.run([sys.executable, "-m", "cli.main", "launch", str(tmp_path / "src"), "-o", str(tmp_path / out),
                            "--dataset", str(cfg), "--shards", "1", "--executor", "debug", "--cpus-per-task", "1",
                            *extra], capture_output=True, text=True, cwd=REPO, timeout=300)
        assert r.returncode == (1 if out == "fail" else 0), r.stdout[-2000:] + r.stderr[-2000:]
        scenes[out] = json.loads((tmp_path / out / "manifest.json").read_text())["scenes"]["s"]
    assert scenes["fail"]["status"] == "failed" and "MissingAssetsError" in scenes["fail"]["error"]
    assert [m["template"] for m in scenes["skip"]["stats"]["skipped_instances"]] == ["ghost"]
    assert scenes["skip"]["stats"]["instances"] == 1


def test_launch_on_a_partial_download_and_a_failed_tasks_cause(tmp_path, monkeypatch):
    """2 of split tiny's 35 scans over 6 shards: every task succeeds (its missing scenes are
    reported) and the merge lists all 33 missing. A task that fails (--require-all here) is
    reported with its error and its stderr log, not only the path of its stdout."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(Path(__file__).parent), str(REPO),
                                                      os.environ.get("PYTHONPATH", "")]))
    src = make_source(tmp_path / "src", ["Allensville", "Collierville"])
    res = launch(src, tmp_path / "out", "gibson", "tiny", 6, PreprocessOptions(workers=1, in_process=True),
                 executor="local", backend=FakeBackend())
    assert res.ok and len(load_manifest(res.manifest).missing) == 33
    lines = []
    res = launch(src, tmp_path / "o2", "gibson", "tiny", 2,
                 PreprocessOptions(workers=1, in_process=True, require_all=True),
                 executor="local", backend=FakeBackend(), log=lines.append)
    assert not res.ok and res.manifest is None and len(res.failed_shards) == 2
    for i, msg in res.failed_shards:
        assert "DatasetError" in msg and "--require-all" in msg, msg
        log = Path(msg.split("; log: ")[1].split(" (stdout")[0])
        assert log.name.endswith("_log.err") and "--require-all" in log.read_text()
    assert any("task failed: bps_assets.errors.DatasetError" in line for line in lines), lines
    assert "not merged: 2 shard task(s) failed; fix what their errors name, then launch again" in lines[-1]
