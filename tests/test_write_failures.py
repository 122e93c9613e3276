"""Issue 14 items 8 and 11: write failures are one-line typed errors naming the file or
folder and the cause, with nothing partial left; convert removes temps of killed runs.

Permission cases drop root's permission-bypass capabilities when the tests run as root; the
file-size case uses RLIMIT_FSIZE (Python ignores SIGXFSZ, so writes fail
with EFBIG)."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from bps_assets.container import atomic_write, remove_stale_temps
from bps_assets.errors import OutputWriteError

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"


def _unprivileged():
    """Command prefix under which file modes apply: root ignores them, so as root the
    permission-bypass capabilities are dropped from the bounding set (util-linux setpriv)."""
    if os.geteuid() != 0:
        return []
    if not shutil.which("setpriv"):
        pytest.skip("running as root without setpriv: file permissions cannot be tested")
    return ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--"]


def _cli(args):
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{TESTS}", "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([*_unprivileged(), sys.executable, "-m", "cli.main", *map(str, args)], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=300)


def _read_only_dir(p: Path) -> Path:
    p.mkdir(parents=True, exist_ok=True)
    p.chmod(0o555)
    return p


def _one_line_error(r):
    lines = [x for x in r.stderr.strip().splitlines() if x.strip()]
    assert r.returncode != 0
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr + r.stdout
    return lines


def _glb(d: Path) -> Path:
    from packed_scene_fixtures import grid_mesh
    from packed_scene_glb import write_glb

    p, t, uv = grid_mesh(12, z_up=True)
    return write_glb(d / "src" / "gibson" / "Allensville.glb", p, t, uv)


def test_convert_into_a_read_only_folder_names_it(tmp_path):
    src = _glb(tmp_path)
    out = _read_only_dir(tmp_path / "ro")
    r = _cli(["convert", src, "-o", out, "--dataset", "gibson"])
    text = r.stdout + r.stderr
    _one_line_error(r)
    assert str(out) in text and "Permission denied" in text and "OutputWriteError" not in text
    assert list(out.iterdir()) == []


def test_preprocess_into_a_read_only_folder_names_it(tmp_path):
    _glb(tmp_path)
    out = _read_only_dir(tmp_path / "ro")
    r = _cli(["preprocess", tmp_path / "src", "-o", out, "--dataset", "gibson", "--split", "tiny",
              "--workers", "1", "--no-progress"])
    lines = _one_line_error(r)
    assert len(lines) == 1 and str(out / ".bps-state") in lines[0] and "Permission denied" in lines[0]
    assert list(out.iterdir()) == []


FSIZE_SCRIPT = """
import resource, sys
from pipeline_fakes import FakeBackend, make_source
from bps_assets.errors import BpsError
from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess, summary_table
if __name__ == "__main__":
    src, out, limit, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    from pathlib import Path
    make_source(Path(src), ["Allensville", "Beechwood", "Coffeen", "Collierville", "Corozal"], size=size)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    try:
        res = preprocess(src, out, "gibson", "tiny", PreprocessOptions(workers=1, in_process=True),
                         backend=FakeBackend(), progress=False)
    except BpsError as e:
        print("TYPED", type(e).__name__, e)
        sys.exit(2)
    print(summary_table(res))
    for r in res.results:
        if r.status == "failed":
            print("ERROR", r.error)
"""


def _fsize_run(tmp_path, limit, size):
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{TESTS}"}
    return subprocess.run([sys.executable, "-c", FSIZE_SCRIPT, tmp_path / "src", tmp_path / "out",
                           str(limit), str(size)], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)


def _temps(root: Path):
    return [p for p in root.rglob("*.tmp")]


def test_file_size_limit_fails_the_manifest_write_with_a_typed_error(tmp_path):
    # sources of 100 bytes: every scene output fits in 4 KiB, the 5-scene manifest does not
    r = _fsize_run(tmp_path, 4096, 100)
    assert r.returncode == 2, r.stderr
    line = r.stdout.strip().splitlines()[-1]
    assert line.startswith("TYPED OutputWriteError") and "manifest.json" in line
    assert "File too large" in line and "ulimit -f" in line
    out = tmp_path / "out"
    assert not (out / "manifest.json").exists() and _temps(out) == []


def test_file_size_limit_per_scene_errors_are_one_line(tmp_path):
    # sources of 20 KB (random: they do not compress) cannot be written under 8 KiB
    r = _fsize_run(tmp_path, 8192, 20_000)
    assert r.returncode == 0, r.stderr
    errors = [x for x in r.stdout.splitlines() if x.startswith("ERROR ")]
    assert len(errors) == 5, r.stdout
    assert all("File too large" in x and "scenes/" in x and "[Errno" not in x for x in errors)
    assert _temps(tmp_path / "out") == []


def test_convert_removes_temps_of_killed_runs_but_not_live_ones(tmp_path):
    import fcntl

    dst = tmp_path / "Allensville.bps"
    dead = tmp_path / ".Allensville.bps.abc123.tmp"
    dead.write_bytes(b"half a file")
    live = tmp_path / ".Allensville.bps.live99.tmp"
    live.write_bytes(b"being written")
    other = tmp_path / ".Other.bps.abc.tmp"
    other.write_bytes(b"another scene's")
    with open(live, "rb") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        # a lock held by another process is what a live writer has: take it in a child
        child = subprocess.Popen([sys.executable, "-c", "import fcntl,sys,time\n"
                                  f"f=open({str(live)!r},'rb'); fcntl.flock(f.fileno(), fcntl.LOCK_EX)\n"
                                  "print('locked', flush=True); time.sleep(60)"],
                                 stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "locked"
        from cli.main import main
        from click.testing import CliRunner

        src = _glb(tmp_path)
        r = CliRunner().invoke(main, ["convert", str(src), "-o", str(tmp_path), "--dataset", "gibson"])
        assert r.exit_code == 0, r.output
        assert dst.is_file() and not dead.exists() and live.exists() and other.exists()
    finally:
        child.kill()
        child.wait()
    assert remove_stale_temps(dst) == [live]  # its writer is gone now


def test_atomic_write_failure_leaves_nothing(tmp_path):
    def boom(f):
        f.write(b"partial")
        raise OSError(28, "No space left on device")

    with pytest.raises(OutputWriteError, match="No space left on device"):
        atomic_write(tmp_path / "x.bin", boom)
    assert list(tmp_path.iterdir()) == []
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(OutputWriteError, match="cannot create the folder"):
        atomic_write(blocker / "sub" / "x.bin", lambda f: f.write(b"x"))
    assert stat.S_ISREG(blocker.stat().st_mode)


def test_make_dirs_names_the_file_in_the_way(tmp_path):
    """Journey L5: a file where the output folder goes said "File exists"; it is named, for
    `preview -o afile/x.png`, `convert -o afile/sub` and `bps-train --out-dir afile` alike
    (bps-train's: test_hostile_runs.py)."""
    from bps_assets.container import make_dirs

    f = tmp_path / "afile"
    f.write_text("x")
    with pytest.raises(OutputWriteError, match=r"afile: cannot create the folder: it is a file, not a folder$"):
        make_dirs(f)
    with pytest.raises(OutputWriteError, match=f"cannot create the folder: {f} is a file, not a folder$"):
        make_dirs(f / "sub" / "deeper")
    assert f.read_text() == "x"
