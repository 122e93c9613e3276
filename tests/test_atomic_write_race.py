"""Two processes writing one file with ``atomic_write`` while each sweeps the other's temps
(``remove_stale_temps``), as two preprocess workers converting one shared asset do: no write
fails, the file is always whole, and a dead writer's temp is still swept (journey finding P2)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bps_assets.container import remove_stale_temps

REPO = Path(__file__).resolve().parents[1]

# one writer: sweep the temps, then write the file whole (a byte repeated: a torn or mixed
# file shows), N times; prints the errors it met
WRITER = r"""
import sys
from pathlib import Path
from bps_assets.container import atomic_write, remove_stale_temps
dst, n, tag = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3].encode()
errs = 0
for i in range(n):
    try:
        remove_stale_temps(dst)
        atomic_write(dst, lambda f: f.write(tag * 65536), overwrite=True)
        data = dst.read_bytes()
        if len(data) != 65536 or len(set(data)) != 1:
            print("TORN", len(data), flush=True)
            errs += 1
    except Exception as e:
        print(type(e).__name__, e, flush=True)
        errs += 1
print("ERRORS", errs, flush=True)
"""


def test_two_writers_sweeping_each_other_never_fail(tmp_path):
    dst = tmp_path / "objects__bowl.glb.bps"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    n = 1500   # the window is microseconds wide: before the fix about 1 in 100 writes failed here
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(dst), str(n), tag], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for tag in ("a", "b")]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    for out in outs:
        assert out.strip().splitlines()[-1] == "ERRORS 0", out[-2000:]
    assert dst.stat().st_size == 65536
    assert [p.name for p in tmp_path.iterdir()] == [dst.name]   # no temp left behind


def test_a_dead_writers_temp_is_swept_at_once(tmp_path):
    dst = tmp_path / "x.bps"
    code = ("import os,sys,tempfile,fcntl\n"
            f"fd,t=tempfile.mkstemp(prefix='.x.bps.',suffix='.tmp',dir={str(tmp_path)!r})\n"
            "fcntl.flock(fd,fcntl.LOCK_EX); os.write(fd,b'half'); os._exit(0)")
    subprocess.run([sys.executable, "-c", code], check=True)
    temps = list(tmp_path.glob(".x.bps.*.tmp"))
    assert len(temps) == 1
    assert remove_stale_temps(dst) == temps


def _flock_failing(monkeypatch, err):
    import errno
    import fcntl

    def flock(fd, op):   # e.g. a file system without flock (Lustre -o noflock, NFSv3 without lockd)
        raise OSError(getattr(errno, err), os.strerror(getattr(errno, err)))

    monkeypatch.setattr(fcntl, "flock", flock)


def test_without_flock_writes_go_on_and_the_sweep_goes_by_age(tmp_path, monkeypatch):
    from bps_assets.container import atomic_write

    _flock_failing(monkeypatch, "ENOLCK")
    dst = tmp_path / "x.bps"
    for i in range(3):
        atomic_write(dst, lambda f: f.write(b"data%d" % i), overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.bps"] and dst.read_bytes() == b"data2"
    fresh, old = tmp_path / ".x.bps.fresh.tmp", tmp_path / ".x.bps.old.tmp"
    fresh.write_bytes(b"a live writer's, maybe")
    old.write_bytes(b"a dead writer's")
    os.utime(old, (1, 1))
    assert remove_stale_temps(dst) == [old]   # the lock cannot tell: only the old one goes
    assert fresh.exists()


def test_a_failing_flock_leaves_no_temp(tmp_path, monkeypatch):
    import pytest
    from bps_assets.container import atomic_write
    from bps_assets.errors import OutputWriteError

    _flock_failing(monkeypatch, "EIO")   # a real error, not "no flock here": the write fails
    for _ in range(3):
        with pytest.raises(OutputWriteError):
            atomic_write(tmp_path / "x.bps", lambda f: f.write(b"data"))
    assert list(tmp_path.iterdir()) == []


def _race_new_file(dst, n=2):
    """``n`` threads atomic_write(overwrite=False) one new path, all past the early existence
    check and done writing (a barrier in write_fn) before any publishes: {tag: 'ok' | error}."""
    import threading

    from bps_assets.container import atomic_write

    barrier, out = threading.Barrier(n), {}

    def write(tag):
        def fn(f):
            f.write(tag * 4096)
            barrier.wait(timeout=30)
        try:
            atomic_write(dst, fn)
            out[tag] = "ok"
        except Exception as e:
            out[tag] = e

    ts = [threading.Thread(target=write, args=(bytes([97 + i]),)) for i in range(n)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    return out


def _one_winner(tmp_path, dst, out):
    from bps_assets.errors import OutputExistsError

    won = [t for t, r in out.items() if r == "ok"]
    assert len(won) == 1, out
    for t, r in out.items():
        if t not in won:
            assert isinstance(r, OutputExistsError) and str(dst) in str(r) and "already exists" in str(r)
    assert dst.read_bytes() == won[0] * 4096   # the winner's file, not replaced by a loser
    assert [p.name for p in tmp_path.iterdir()] == [dst.name]   # the losers' temps are removed


def test_racing_new_file_writers_one_wins_the_others_get_output_exists(tmp_path):
    """overwrite=False is checked again when the temp is published (journey f finding 4: both
    writers once returned 'ok' and the second replaced the first's file)."""
    dst = tmp_path / "merged.json"
    _one_winner(tmp_path, dst, _race_new_file(dst, 3))


@pytest.mark.parametrize("renameat2", [True, False])
def test_without_hard_links_the_publish_still_never_replaces(tmp_path, monkeypatch, renameat2):
    """A file system without hard links: renameat2(RENAME_NOREPLACE) where there is one (still
    race-free), else a last check and rename (an existing file is still refused)."""
    import errno

    from bps_assets import container
    from bps_assets.errors import OutputExistsError

    def no_link(src, dst, **kw):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(container.os, "link", no_link)
    dst = tmp_path / "x.bin"
    if renameat2:
        (tmp_path / "probe").write_bytes(b"")
        if container._rename_noreplace(str(tmp_path / "probe"), tmp_path / "probe2") is None:
            pytest.skip("no renameat2(RENAME_NOREPLACE) here")
        (tmp_path / "probe2").unlink()
        _one_winner(tmp_path, dst, _race_new_file(dst, 2))
    else:
        monkeypatch.setattr(container, "_rename_noreplace", lambda tmp, path: None)
        container.atomic_write(dst, lambda f: f.write(b"first"))
        with pytest.raises(OutputExistsError):
            container.atomic_write(dst, lambda f: f.write(b"second"))
        assert dst.read_bytes() == b"first" and [p.name for p in tmp_path.iterdir()] == [dst.name]


def test_a_merge_whose_output_appears_meanwhile_refuses_it(tmp_path, monkeypatch):
    """Two `manifest merge -o SAME` at once: the one finishing second gets OutputExistsError,
    and the first one's manifest is kept (both once exited 0, the second replacing the first)."""
    from bps_assets.errors import OutputExistsError
    from bps_assets.pipeline import manifest as M
    from test_pipeline_manifest import _shards

    _, paths = _shards(tmp_path, 2)
    out = tmp_path / "out" / "manifest.json"
    real = M.new_manifest

    def other_merge_finishes_first(**kw):
        out.write_text("the other merge's manifest")
        return real(**kw)

    monkeypatch.setattr(M, "new_manifest", other_merge_finishes_first)
    with pytest.raises(OutputExistsError, match="already exists"):
        M.merge_manifests(paths, out)
    assert out.read_text() == "the other merge's manifest"
    assert not list(out.parent.glob(".manifest.json*.tmp"))


def test_a_dangling_symlink_output_is_refused_as_existing(tmp_path):
    """``path.exists()`` is False for a dangling link, yet the name is taken: the usual 'already
    exists' error, not the 'another writer made it meanwhile' one; nothing written."""
    from bps_assets.container import atomic_write
    from bps_assets.errors import OutputExistsError

    dst = tmp_path / "scene.bps"
    dst.symlink_to(tmp_path / "gone.bps")
    with pytest.raises(OutputExistsError, match="already exists") as e:
        atomic_write(dst, lambda f: f.write(b"x"))
    assert "another writer" not in str(e.value) and str(dst) in str(e.value)
    assert dst.is_symlink() and not (tmp_path / "gone.bps").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scene.bps"]


def test_a_temp_that_cannot_be_removed_after_publishing_is_no_error(tmp_path, monkeypatch):
    """Once the hard link published the file, failing to unlink the temp must not raise (the
    output is there); the temp is left for ``remove_stale_temps``."""
    from bps_assets import container

    real_unlink = os.unlink

    def no_unlink(p, *a, **k):
        if str(p).endswith(".tmp"):
            raise PermissionError(13, "Permission denied", str(p))
        return real_unlink(p, *a, **k)

    monkeypatch.setattr(container.os, "unlink", no_unlink)
    dst = tmp_path / "scene.bps"
    container.atomic_write(dst, lambda f: f.write(b"whole"))
    assert dst.read_bytes() == b"whole"
