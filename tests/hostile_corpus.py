"""The hostile-input corpus of issue 14: build every case, run each in a subprocess under an
address-space limit and a time limit, and count the outcomes.

    python tests/hostile_corpus.py OUT_DIR          # build, run, print counts (exit 1 if unexpected)

Outcomes: ``typed`` (a BpsError: the clean refusal), ``accepted`` (the operation succeeded),
``crash`` (any other exception, or death by a signal), ``over limit`` (MemoryError reaching
the top, or the time limit). Each case says which outcome it must get. The items of issue 14
that other helpers own (1: checkpoints, 3: navmesh sizes) are not here.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
AS_LIMIT = 1 << 30
TIME_LIMIT = 120.0
OUTCOMES = ("typed", "accepted", "crash", "over limit")
_EXIT = {0: "accepted", 3: "typed", 4: "over limit", 5: "crash"}


@dataclass(frozen=True)
class Case:
    name: str
    item: str            # issue 14 item (or "15" for issue 15's container errors)
    op: str              # an operation of OPS below, run in the child
    args: tuple
    expect: str          # the outcome it must get
    unprivileged: bool = False  # drop root's permission bypass (read-only folders)
    fsize: int | None = None    # RLIMIT_FSIZE for the child


# ------------------------------------------------------------------------------ child side

def _op_read_scene(path):
    from bps_assets.packed_scene import read_packed_scene

    read_packed_scene(path)


def _verify(manifest, deep, strict):
    from bps_assets.errors import CorruptFileError
    from bps_assets.pipeline.verify import verify_manifest

    rep = verify_manifest(manifest, deep=deep, jobs=2, strict=strict)
    probs = [p for s in rep.scenes for f in s.files for p in f.problems]
    if probs:  # the report is the typed outcome of verify (CLI: exit 1 with these lines)
        raise CorruptFileError(manifest, probs[0])


def _op_verify_deep(manifest):
    _verify(manifest, True, False)


def _op_verify_strict(manifest):
    _verify(manifest, False, True)


def _op_read_episodes(path):
    from bps_assets.nav.episodes import read_pointnav_dataset

    read_pointnav_dataset(path)


def _op_load_source(path):
    from bps_assets.readers import load

    load(path)


def _op_resume_check(out_root, manifest):
    from bps_assets.errors import CorruptFileError
    from bps_assets.pipeline.resume_check import problems_by_output

    doc = json.loads(Path(manifest).read_text())
    for name, e in doc["scenes"].items():
        probs = list(problems_by_output(Path(out_root), e).values())
        if probs:
            raise CorruptFileError(manifest, f"{name}: would not be kept: {probs[0]}")


def _op_convert(src, out_dir):
    from bps_assets.packed_scene import ConvertOptions, convert_file

    convert_file(src, Path(out_dir) / "out.bps", ConvertOptions(dataset="gibson"), overwrite=True)
    left = list(Path(out_dir).glob(".out.bps.*.tmp"))
    if left:
        raise AssertionError(f"stale temp files left: {left}")


def _op_read_annotation(fmt, mesh, table):
    from bps_assets.readers.semantic_files import SemanticSource, read_annotation

    read_annotation(SemanticSource(fmt, str(mesh), str(table)))


def _op_convert_annotated(src, out_dir):
    """Convert a scan with its annotation pair beside it; a failure must leave nothing."""
    from bps_assets.packed_scene import ConvertOptions, convert_file

    out = Path(out_dir) / "out.bps"
    try:
        convert_file(src, out, ConvertOptions(dataset="generic"), overwrite=True)
    finally:
        left = list(Path(out_dir).glob(".out.bps.*.tmp"))
        if left:
            raise AssertionError(f"stale temp files left: {left}")


def _op_write_container(path, kind):
    import numpy as np

    from bps_assets.container import write_container

    write_container(path, kind, {}, {"a": np.zeros(3, np.float32)})


def _op_read_section(path, name):
    from bps_assets.container import Container

    with Container(path) as c:
        c.read(name)


def _op_read_missing_section(path):
    from bps_assets.container import Container

    with Container(path) as c:
        c.read("no_such_section")


OPS = {k[4:]: v for k, v in globals().items() if k.startswith("_op_")}


def child_main(argv):
    import resource

    from bps_assets.errors import BpsError

    op, *args = argv
    lim = int(os.environ.get("BPS_CORPUS_AS", AS_LIMIT))
    resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
    fs = os.environ.get("BPS_CORPUS_FSIZE")
    if fs:
        resource.setrlimit(resource.RLIMIT_FSIZE, (int(fs), int(fs)))
    try:
        OPS[op](*args)
    except BpsError as e:
        print(json.dumps({"detail": f"{type(e).__name__}: {e}"[:500]}))
        return 3
    except MemoryError as e:
        print(json.dumps({"detail": f"MemoryError: {e}"[:500]}))
        return 4
    except BaseException as e:  # noqa: BLE001 - classified, not hidden
        print(json.dumps({"detail": f"{type(e).__name__}: {e}"[:500]}))
        return 5
    print(json.dumps({"detail": "ok"}))
    return 0


# ------------------------------------------------------------------------------ parent side

def _prefix(case: Case) -> list[str] | None:
    if not case.unprivileged or os.geteuid() != 0:
        return []
    if not shutil.which("setpriv"):
        return None  # cannot make file modes apply to root here
    return ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--"]


def run_case(case: Case, time_limit: float = TIME_LIMIT, as_limit: int = AS_LIMIT) -> tuple[str, str, float]:
    """(outcome, detail, seconds) of one case in a fresh child process."""
    prefix = _prefix(case)
    if prefix is None:
        return "skipped", "root without setpriv", 0.0
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{HERE}", "OPENBLAS_NUM_THREADS": "1",
           "OMP_NUM_THREADS": "1", "BPS_CORPUS_AS": str(as_limit)}
    if case.fsize:
        env["BPS_CORPUS_FSIZE"] = str(case.fsize)
    t0 = time.perf_counter()
    try:
        r = subprocess.run([*prefix, sys.executable, str(Path(__file__)), "--child", case.op,
                            *map(str, case.args)], env=env, capture_output=True, text=True,
                           timeout=time_limit, cwd=REPO)
    except subprocess.TimeoutExpired:
        return "over limit", f"more than {time_limit} s", time.perf_counter() - t0
    dt = time.perf_counter() - t0
    lines = [x for x in r.stdout.strip().splitlines() if x.startswith("{")]
    detail = json.loads(lines[-1])["detail"] if lines else (r.stderr.strip().splitlines() or ["?"])[-1]
    if r.returncode < 0:
        return "crash", f"killed by signal {-r.returncode}: {detail}", dt
    return _EXIT.get(r.returncode, "crash"), detail, dt


def run_corpus(cases, jobs: int = 2, **kw) -> list[tuple[Case, str, str, float]]:
    with ThreadPoolExecutor(jobs) as ex:
        res = list(ex.map(lambda c: run_case(c, **kw), cases))
    return [(c, *r) for c, r in zip(cases, res)]


def counts(results) -> dict[str, int]:
    out = {k: 0 for k in OUTCOMES}
    for _, outcome, _, _ in results:
        out[outcome] = out.get(outcome, 0) + 1
    return out


# ------------------------------------------------------------------------------ the cases

def _one_scene_dataset(root: Path, scene: Path, episodes: Path | None = None, kind: str = "SCEN") -> Path:
    """A manifest in ``root`` over a copy of ``scene`` (and an episode file): what verify reads."""
    from hostile_cases import manifest_over

    (root / "scenes").mkdir(parents=True)
    shutil.copy(scene, root / "scenes" / "s.bps")
    outs = {"scene": (root / "scenes" / "s.bps", kind)}
    if episodes is not None:
        shutil.copy(episodes, root / "e.json.gz")
        outs["episodes"] = (root / "e.json.gz", "habitat-pointnav-v1")
    return manifest_over(root, {"s": outs})


def build_corpus(d: Path) -> list[Case]:
    """Write every input under ``d`` and return the cases (a few seconds, ~200 MB of disk)."""
    import gzip

    import numpy as np

    from bps_assets.container import Container, write_container
    from hostile_cases import (gltf_with_data_uri, gzip_bomb, manifest_over, rewrite, small_scene,
                               with_bomb_section, wrapping_ranges)

    d.mkdir(parents=True, exist_ok=True)
    cases: list[Case] = []
    scene = small_scene(d / "scene.bps")
    cases.append(Case("valid scene", "control", "read_scene", (scene,), "accepted"))

    # item 2: a kept output replaced by garbage of the same size
    ds = d / "resume"
    (ds / "scenes").mkdir(parents=True)
    shutil.copy(scene, ds / "scenes" / "A.bps")
    m = manifest_over(ds, {"A": {"scene": (ds / "scenes" / "A.bps", "SCEN")}})
    (ds / "scenes" / "A.bps").write_bytes(os.urandom((ds / "scenes" / "A.bps").stat().st_size))
    cases.append(Case("resume: same-size garbage scene", "2", "resume_check", (ds, m), "typed"))

    # item 4: decompression bombs
    GIB = 1 << 30
    bombs = {
        "tex_blocks 4 GiB in 131 KB": with_bomb_section(scene, d / "b_tex.bps", "tex_blocks", 4 * GIB),
        "unknown section 4 GiB": with_bomb_section(scene, d / "b_extra.bps", "extra", 4 * GIB),
        "frame 2 GiB, table 1000 B": with_bomb_section(scene, d / "b_frame.bps", "extra", 2 * GIB, 1000),
        "frame 2 GiB no size, table 1000 B": with_bomb_section(scene, d / "b_frame2.bps", "extra", 2 * GIB,
                                                               1000, content_size=False),
    }
    for name, p in bombs.items():
        if "table 1000" in name:  # an unknown section: read_packed_scene never decodes it
            cases.append(Case(f"zstd bomb: {name}: read it", "4", "read_section", (p, "extra"), "typed"))
            cases.append(Case(f"zstd bomb: {name}: read scene", "4", "read_scene", (p,), "accepted"))
        else:
            cases.append(Case(f"zstd bomb: {name}: read", "4", "read_scene", (p,), "typed"))
        cases.append(Case(f"zstd bomb: {name}: verify --deep", "4", "verify_deep",
                          (_one_scene_dataset(d / f"m_{p.stem}", p),), "typed"))
    # a 4 GiB bomb in a container of a kind no reader knows: deep verify streams it (bounded)
    odd = d / "odd.bps"
    write_container(odd, "ODDK", {}, {"a": np.zeros(4, np.uint8)})
    odd_bomb = with_bomb_section(odd, d / "odd_bomb.bps", "big", 4 * GIB, 4 * GIB - 1)
    cases.append(Case("zstd bomb: unknown kind, table 1 B short: verify --deep (streamed)", "4", "verify_deep",
                      (_one_scene_dataset(d / "m_odd", odd_bomb, kind="ODDK"),), "typed"))

    # items 4-5: gzip episode files
    ep = d / "episodes" / "train"
    ep.mkdir(parents=True)
    good = ep / "train.json.gz"
    good.write_bytes(gzip.compress(json.dumps({"episodes": []}).encode()))
    cases.append(Case("valid 40-byte episodes .json.gz", "5", "read_episodes", (good,), "accepted"))
    bomb_dir = d / "episodes_bomb" / "train"
    bomb_dir.mkdir(parents=True)
    gb = gzip_bomb(bomb_dir / "train.json.gz", 3 * GIB)
    cases.append(Case("gzip bomb 3 GiB episodes", "4", "read_episodes", (gb,), "typed"))
    cases.append(Case("gzip bomb 3 GiB episodes: verify --deep", "4", "verify_deep",
                      (_one_scene_dataset(d / "m_gz", scene, gb),), "typed"))
    cases.append(Case("valid dataset: verify --deep", "5", "verify_deep",
                      (_one_scene_dataset(d / "m_gz_ok", scene, good),), "accepted"))
    # item 5: a 128 MB data: URI behind a 36-byte buffer
    cases.append(Case("glTF data: URI 128 MB for 36 bytes", "5", "load_source",
                      (gltf_with_data_uri(d / "uri.gltf", 128 << 20),), "typed"))

    # item 6: int64 wrap-around in ranges (checksums valid)
    for sec, p in wrapping_ranges(scene, d).items():
        cases.append(Case(f"wrap: {sec}", "6", "read_scene", (p,), "typed"))
        cases.append(Case(f"wrap: {sec}: verify --deep", "6", "verify_deep",
                          (_one_scene_dataset(d / f"m_wrap_{sec}", p),), "typed"))
    with Container(scene) as c:
        counts_ = dict(c.header["counts"])
    big = rewrite(scene, d / "counts_lie.bps", header={"counts": {**counts_, "triangles": 2**40}})
    cases.append(Case("header counts: 2^40 triangles", "4", "read_scene", (big,), "typed"))

    # item 8: write failures
    from packed_scene_fixtures import grid_mesh
    from packed_scene_glb import write_glb

    p_, t_, uv_ = grid_mesh(40, z_up=True, split=True)
    glb = write_glb(d / "src" / "gibson" / "Allensville.glb", p_, t_, uv_)
    ro = d / "readonly"
    ro.mkdir()
    ro.chmod(0o555)
    cases.append(Case("convert into a read-only folder", "8", "convert", (glb, ro), "typed", unprivileged=True))
    cases.append(Case("convert under ulimit -f 4 KiB", "8", "convert", (glb, d / "fsize"), "typed", fsize=4096))

    # item 9: a scenes/ folder linked out of the dataset (verify --strict), content_scenes_path
    root = d / "m_link"
    root.mkdir()
    (d / "outside").mkdir()
    shutil.copy(scene, d / "outside" / "s.bps")
    os.symlink(d / "outside", root / "scenes")
    cases.append(Case("scenes/ linked outside: verify --strict", "9", "verify_strict",
                      (manifest_over(root, {"s": {"scene": (root / "scenes" / "s.bps", "SCEN")}}),), "typed"))
    for i, pat in enumerate(("{data_path.__class__}/{scene}.json.gz", "{data_path}/../../../../etc/{scene}")):
        sd = d / f"ep_pat{i}" / "train"
        (sd / "content").mkdir(parents=True)
        (sd / "train.json.gz").write_bytes(gzip.compress(json.dumps(
            {"episodes": [], "content_scenes_path": pat}).encode()))
        cases.append(Case(f"content_scenes_path {pat}", "9", "read_episodes", (sd / "train.json.gz",), "typed"))

    # item 11: convert over a killed run's temp file
    st = d / "stale"
    st.mkdir()
    (st / ".out.bps.k1ll3d.tmp").write_bytes(b"half")
    cases.append(Case("convert removes a killed run's temp", "11", "convert", (glb, st), "accepted"))

    _semantic_cases(d / "semantic", cases)

    # issue 15: container writer misuse, missing section
    cases.append(Case("write_container bad kind", "15", "write_container", (d / "w.bps", "bad!"), "typed"))
    cases.append(Case("read a section the file lacks", "15", "read_missing_section", (scene,), "typed"))
    return cases


def _semantic_cases(d: Path, cases: list) -> None:
    """Issue 22: hostile HM3D / MP3D annotation files, and damaged or oversized semantic sections."""
    from bps_assets.container import Container
    from hostile_cases import bad_annotations, rewrite, semantic_scene, warned_annotations, with_bomb_section

    d.mkdir(parents=True, exist_ok=True)
    for name, (fmt, mesh, table) in bad_annotations(d / "bad").items():
        cases.append(Case(f"annotation {name}", "22", "read_annotation", (fmt, mesh, table), "typed"))
        out = d / "out" / name.replace(" ", "_").replace(":", "")
        out.mkdir(parents=True)
        cases.append(Case(f"annotation {name}: convert", "22", "convert_annotated",
                          (mesh.parent / "grid.glb", out), "typed"))
    for name, (fmt, mesh, table, _) in warned_annotations(d / "warn").items():
        cases.append(Case(f"annotation {name} (counted warning)", "22", "read_annotation", (fmt, mesh, table),
                          "accepted"))
    scene = semantic_scene(d / "scene")
    cases.append(Case("semantic scene", "control", "read_scene", (scene,), "accepted"))
    with Container(scene) as c:
        hdr = dict(c.header)
        tri = c.read("tri_object").copy()
        ids = c.read("object_ids").copy()
    sem = hdr["semantics"]
    tri[::7] = 2**31 - 1
    damaged = {
        "tri_object id not in the table": rewrite(scene, d / "s_tri.bps", {"tri_object": tri}),
        "object ids not increasing": rewrite(scene, d / "s_ids.bps", {"object_ids": ids[::-1].copy()}),
        "header: 2^40 objects": rewrite(scene, d / "s_many.bps", header={"semantics": {**sem, "objects": 2**40}}),
        "header: 2^20 points per object": rewrite(scene, d / "s_pts.bps",
                                                  header={"semantics": {**sem, "points_per_object": 1 << 20}}),
        "tri_object i4 4 GiB bomb": with_bomb_section(scene, d / "s_bomb.bps", "tri_object", 4 << 30, dtype="i4"),
        "object_points f4 [N,3] 2 GiB frame, table 1200 B": with_bomb_section(
            scene, d / "s_bomb2.bps", "object_points", 2 << 30, 1200, dtype="f4", tail=(3,)),
    }
    for name, p in damaged.items():
        cases.append(Case(f"semantic section: {name}", "22", "read_scene", (p,), "typed"))
        cases.append(Case(f"semantic section: {name}: verify --deep", "22", "verify_deep",
                          (_one_scene_dataset(d / f"m_{p.stem}", p),), "typed"))


def main(argv) -> int:
    if argv and argv[0] == "--child":
        return child_main(argv[1:])
    out = Path(argv[0] if argv else "hostile-corpus")
    if out.exists():
        shutil.rmtree(out)
    cases = build_corpus(out)
    t0 = time.perf_counter()
    results = run_corpus(cases)
    bad = 0
    for c, outcome, detail, dt in results:
        flag = "  " if outcome == c.expect else "!!"
        bad += outcome != c.expect
        print(f"{flag} [{c.item:>7}] {c.name:<62} {outcome:<10} {dt:5.1f} s  {detail[:110]}")
    print(json.dumps(counts(results)), f"{len(results)} cases in {time.perf_counter() - t0:.1f} s, "
          f"{bad} unexpected")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
