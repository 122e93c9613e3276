"""Temps left by killed writers (``.NAME.*.tmp``, ``container.atomic_write``'s) are swept by
every command that writes NAME, not only convert and preprocess (journey f item 7): ``navmesh``,
``episodes`` and ``manifest merge``; a temp whose writer is alive (locked) is kept."""
import fcntl
import os

from click.testing import CliRunner

from bps_assets.pipeline.plan import Shard
from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess
from cli.main import main

from pipeline_fakes import FakeBackend, make_source


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def dead_and_live(path):
    """A temp of a killed writer of ``path`` and one of a live writer (its lock held: keep the
    returned file open)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    dead = path.parent / f".{path.name}.k1lled.tmp"
    dead.write_bytes(b"junk")
    live = path.parent / f".{path.name}.l1ve.tmp"
    live.write_bytes(b"busy")
    f = open(live, "rb")
    fcntl.flock(f.fileno(), fcntl.LOCK_EX)
    return dead, live, f


def test_navmesh_and_episodes_sweep_their_outputs_stale_temps(synth_pair, tmp_path):
    nav = tmp_path / "nav" / "Allensville.navmesh.bps"
    dead, live, lock = dead_and_live(nav)
    with lock:
        r = run("navmesh", synth_pair / "gibson" / "Allensville.glb", "-o", tmp_path / "nav", "--dataset", "gibson")
        assert r.exit_code == 0, r.output
        assert nav.is_file() and not dead.exists() and live.exists()
    split = tmp_path / "eps" / "train" / "train.json.gz"
    content = split.parent / "content" / "Allensville.json.gz"
    dead, live, lock = dead_and_live(split)
    dead_c, live_c, lock_c = dead_and_live(content)
    with lock, lock_c:
        r = run("episodes", nav, "-o", tmp_path / "eps", "--split", "train", "--per-scene", "2", "--any-subset")
        assert r.exit_code == 0, r.output
        assert split.is_file() and content.is_file()
        assert not dead.exists() and not dead_c.exists() and live.exists() and live_c.exists()


def test_manifest_merge_sweeps_its_outputs_stale_temps(tmp_path):
    src = make_source(tmp_path / "src", ["Allensville", "Beechwood"])
    for i in range(2):
        preprocess(src, tmp_path / "out", "gibson", "tiny", PreprocessOptions(workers=1, in_process=True), Shard(i, 2),
                   backend=FakeBackend())
    out = tmp_path / "out" / "manifest.json"
    dead, live, lock = dead_and_live(out)
    with lock:
        r = run("manifest", "merge", *sorted((tmp_path / "out").glob("manifest.shard-*.json")), "-o", out)
        assert r.exit_code == 0, r.output
        assert out.is_file() and not dead.exists() and live.exists()
    assert sorted(os.listdir(tmp_path / "out")).count(live.name) == 1
