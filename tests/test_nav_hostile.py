"""Navmesh inputs built to exhaust memory or crash the import: caps on every size derived from
file contents (typed errors naming the field), no raw tracebacks, byte-identical outputs of
two clean runs, and a fuzz over every settings layout and mismatched magic / extension pairs
run in a subprocess under a 1 GiB address-space limit, counting outcomes."""
from __future__ import annotations

import json
import os
import resource
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT.parent / "shared" / "assets"
VANGOGH = ASSETS / "habitat_test_scenes_navmesh" / "van-gogh-room.navmesh"
APT0 = ASSETS / "replicacad" / "navmeshes_default" / "apt_0.navmesh"
MESH2 = ASSETS / "navmesh" / "go-detour" / "mesh2.bin"
GLB = ASSETS / "habitat-sim" / "scenes" / "simple_room.glb"
PLY = ASSETS / "trimesh" / "tet.ply"
OBJ = ASSETS / "trimesh" / "joined_tetrahedra.obj"
needs_assets = pytest.mark.skipif(not ASSETS.is_dir(), reason="../shared/assets absent")
LIMIT = 1 << 30  # RLIMIT_AS of the subprocess runs


def _vertex_offset(data: bytes) -> int:
    """Offset of tile 0's first vertex in a v1 single-tile set (40 header + 8 record + 100)."""
    assert data[48:52] == b"VAND"
    return 148


def _limited(code: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """Run python ``code`` with the address space capped at LIMIT."""
    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, preexec_fn=cap, cwd=ROOT, env=env)


def _cli_limited(*args) -> subprocess.CompletedProcess:
    return _limited("import sys; from cli.main import main; sys.argv = ['bps-assets'] + "
                    f"{[str(a) for a in args]!r}; main()")


# ------------------------------------------------------------------ one wild coordinate
@needs_assets
@pytest.mark.parametrize("value", [1e5, 1e6, 1e30, -1e30])
def test_one_wild_vertex_is_a_typed_error_naming_the_field(tmp_path, value):
    data = bytearray(VANGOGH.read_bytes())
    struct.pack_into("<f", data, _vertex_offset(data) + 12 * 3, value)  # vertex 3, x
    p = tmp_path / "wild.navmesh"
    p.write_bytes(data)
    t0 = time.perf_counter()
    r = _cli_limited("nav", "info", p)
    assert r.returncode not in (0, 1) and time.perf_counter() - t0 < 60
    err = r.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert "tile 0: vertex 3 x" in err and "outside the tile bounds" in err


@needs_assets
def test_wild_tile_bounds_are_capped(tmp_path):
    data = bytearray(VANGOGH.read_bytes())
    struct.pack_into("<f", data, 48 + 84 + 0, 1e6)  # tile 0 bmax[0]
    p = tmp_path / "bounds.navmesh"
    p.write_bytes(data)
    r = _cli_limited("nav", "info", p)
    assert r.returncode == 2 and "tile 0: bounds span" in r.stderr and "Traceback" not in r.stderr


def test_scan_with_a_stray_vertex_is_capped():
    from bps_assets.errors import NavError
    from bps_assets.nav import build_navmesh
    from bps_assets.nav.grid import NavMesh
    from bps_assets.nav.reference_scenes import house

    v, t = house().arrays()
    for far in (1e6, 1e30):
        v2 = np.vstack([v, [[far, 0.0, 0.0], [far, 0.0, 1.0]]])
        t2 = np.vstack([t, [[0, len(v), len(v) + 1]]])
        with pytest.raises(NavError, match="scene vertex bounds: .* over the cap"):
            build_navmesh((v2, t2))
        with pytest.raises(NavError, match="walkable surface vertices: .* over the cap"):
            NavMesh.from_walkable_triangles(v2, t2)


def test_navmesh_header_fields_are_checked(tmp_path):
    from bps_assets.container import Container
    from bps_assets.errors import CorruptFileError
    from bps_assets.nav import build_navmesh, load_navmesh
    from bps_assets.nav.reference_scenes import house

    nav = build_navmesh(house().arrays())
    p = tmp_path / "h.navmesh.bps"
    nav.save(p)
    with Container(str(p), kind="NAVM") as f:
        header = dict(f.header)
    assert "build_seconds" not in header  # timings are not part of the file
    for key, bad in (("build_seconds", None), ("build_seconds", "1 s"), ("build_seconds", -1),
                     ("build_seconds", True), ("method", 5), ("origin", [1e400, 0]),
                     ("shape", [1, 10**6, 10**6]), ("source_file", "mesh.ply"),
                     ("source_file", {"path": "/a/mesh.ply"}), ("source_file", {"path": 1, "sha256": "ab"}),
                     ("source_file", {"path": "", "sha256": "ab"})):
        h = dict(header, **{key: bad})
        q = tmp_path / f"bad_{key}.navmesh.bps"
        _rewrite(nav, q, h)
        with pytest.raises(CorruptFileError, match="bad navmesh header"):
            load_navmesh(q)
    # num_islands is checked against the island sections, with or without island_indoor (before,
    # a wrong count was blamed on island_indoor, or ignored when that key was absent)
    no_indoor = {k: v for k, v in header.items() if k != "island_indoor"}
    for base, bad in [(b, v) for b in (header, no_indoor) for v in (nav.num_islands + 1, nav.num_islands - 1, None, "2", True)]:
        h = dict(base, num_islands=bad)
        _rewrite(nav, tmp_path / "isl.navmesh.bps", h)
        with pytest.raises(CorruptFileError, match="bad navmesh header: num_islands"):
            load_navmesh(tmp_path / "isl.navmesh.bps")
    h = dict(header, num_islands=nav.num_islands + 1, island_indoor=[0.5] * (nav.num_islands + 1))
    _rewrite(nav, tmp_path / "isl.navmesh.bps", h)
    with pytest.raises(CorruptFileError, match="num_islands .* does not match"):
        load_navmesh(tmp_path / "isl.navmesh.bps")
    h = dict(header, build_seconds=2.5)  # files written before: a number is read and dropped
    _rewrite(nav, tmp_path / "old.navmesh.bps", h)
    assert load_navmesh(tmp_path / "old.navmesh.bps").num_spans == nav.num_spans


def _rewrite(nav, path, header):
    from bps_assets.container import SectionSpec, write_container

    arrays = {"height": nav.height, "neighbors": nav.neighbors, "island": nav.island,
              "island_area": nav.island_area, "island_radius": nav.island_radius_m}
    write_container(path, "NAVM", header, arrays, {"height": SectionSpec(filter="shuffle")},
                    overwrite=True)


@needs_assets
def test_two_clean_runs_give_identical_files(tmp_path):
    from cli.main import main
    from bps_assets.nav.reference_scenes import house

    v, t = house().arrays()
    obj = tmp_path / "house.obj"
    obj.write_text("".join(f"v {a} {b} {c}\n" for a, b, c in v)
                   + "".join(f"f {a + 1} {b + 1} {c + 1}\n" for a, b, c in t))
    outs = []
    for k in range(2):
        out = tmp_path / f"run{k}"
        r = CliRunner().invoke(main, ["navmesh", str(obj), str(VANGOGH), "-o", str(out)])
        assert r.exit_code == 0, r.output
        outs.append(out)
        time.sleep(0.05)
    for name in ("house.navmesh.bps", "van-gogh-room.navmesh.bps"):
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes(), name


# ------------------------------------------------------------------ fuzz
def _layouts(src: Path) -> dict[str, bytes]:
    """The tiles of ``src`` under every set layout the reader knows, plus an unknown one."""
    data = src.read_bytes()
    off = 40 if data[48:52] == b"VAND" else 96
    ref, size = struct.unpack_from("<Ii", data, off)
    tile = data[off + 8: off + 8 + size]
    head = bytearray(data[:40])
    floats = struct.pack("<13f", 0.05, 0.2, 1.5, 0.1, 0.2, 45, 20, 20, 12, 1.3, 6, 6, 1)

    def with_block(block: bytes, version=2, ref64=False) -> bytes:
        h = bytearray(head)
        struct.pack_into("<i", h, 4, version)
        rec = struct.pack("<Qi4x", ref, size) if ref64 else struct.pack("<Ii", ref, size)
        return bytes(h) + block + rec + tile

    return {"v1": with_block(b"", 1), "v2-3bool": with_block(floats + bytes([1, 1, 1, 118])),
            "v2-4bool": with_block(floats + bytes([1, 1, 1, 0])),
            "v2-unknown": with_block(floats + bytes(12)), "v2-none": with_block(b""),
            "v2-3bool-ref64": with_block(floats + bytes([1, 1, 1, 7]), ref64=True),
            "tile": tile}


def _mutate(data: bytes, rng) -> bytes:
    d = bytearray(data)
    kind = rng.integers(0, 4)
    if kind == 0:  # random bytes
        for pos in rng.integers(0, len(d), size=rng.integers(1, 4)):
            d[pos] = int(rng.integers(0, 256))
    elif kind == 1:  # an aligned float set to an extreme
        pos = int(rng.integers(0, len(d) // 4)) * 4
        struct.pack_into("<f", d, pos, float(rng.choice([1e5, 1e6, 1e30, -1e30, 3e38, np.nan])))
    elif kind == 2:  # an aligned int set to an extreme
        pos = int(rng.integers(0, len(d) // 4)) * 4
        struct.pack_into("<i", d, pos, int(rng.choice([-1, 2**31 - 1, 2**24, 65536, 0])))
    else:  # truncation
        d = d[: int(rng.integers(0, len(d)))]
    return bytes(d)


def _fuzz_main(work: str, n: int, seed: int) -> None:
    """Child process: every input through the navmesh front doors; print outcome counts."""
    import warnings

    from bps_assets.errors import BpsError, FileTypeMismatchError
    from bps_assets.nav.sources import navmesh_from_file, open_navmesh

    warnings.simplefilter("ignore")
    work_dir = Path(work)
    rng = np.random.default_rng(seed)
    srcs = {f"{s.stem}-{k}": b for s in (VANGOGH, APT0) for k, b in _layouts(s).items()}
    counts = {"typed": 0, "accepted": 0, "crash": 0, "over_limit": 0}
    mism = {"typed_mismatch": 0, "other": 0}
    crashes, slowest = [], 0.0
    cases = []
    for i in range(n):
        name = list(srcs)[i % len(srcs)]
        ext = ".bin" if name.endswith("-tile") else ".navmesh"
        cases.append((f"m{i}{ext}", _mutate(srcs[name], rng), False))
    # mismatched magic / extension pairs (intact content)
    scenes = {".glb": GLB.read_bytes(), ".ply": PLY.read_bytes(), ".obj": OBJ.read_bytes()}
    for name, b in srcs.items():
        for ext in (".glb", ".gltf", ".ply", ".obj"):
            cases.append((f"x-{name}{ext}", b, True))
    for ext, b in scenes.items():
        for other in (".navmesh", *[e for e in scenes if e != ext]):
            cases.append((f"x{ext[1:]}{other}", b, True))
    for fname, data, mismatch in cases:
        p = work_dir / fname
        p.write_bytes(data)
        t0 = time.perf_counter()
        try:
            nav = navmesh_from_file(p) if fname.endswith(".bin") else open_navmesh(p)
            nav.info()
            outcome = "accepted"
        except FileTypeMismatchError:
            outcome = "typed"
            mism["typed_mismatch"] += mismatch
        except BpsError:
            outcome = "typed"
            mism["other"] += mismatch
        except MemoryError:
            outcome = "over_limit"
        except Exception as e:  # noqa: BLE001 - what the test counts
            outcome = "crash"
            crashes.append(f"{fname}: {type(e).__name__}: {e}"[:300])
        slowest = max(slowest, time.perf_counter() - t0)
        if not mismatch:
            counts[outcome] += 1
        elif outcome != "typed":
            mism["other"] += 1
        p.unlink()
    print(json.dumps({"counts": counts, "mismatch": mism, "cases": len(cases),
                      "crashes": crashes[:10], "slowest_s": round(slowest, 2)}))


@needs_assets
def test_fuzz_layouts_and_mismatches_under_1gib(tmp_path):
    n = 420
    code = (f"import sys; sys.path.insert(0, {str(ROOT / 'tests')!r}); "
            f"import test_nav_hostile as t; t._fuzz_main({str(tmp_path)!r}, {n}, 12)")
    r = _limited(code, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    c, m = res["counts"], res["mismatch"]
    assert sum(c.values()) == n
    assert c["crash"] == 0 and c["over_limit"] == 0, res["crashes"]
    # the mutants are not all refused (many flips hit data that stays valid) nor all accepted
    assert c["typed"] >= n // 5 and c["accepted"] >= n // 5, c
    # every mismatched pair is refused as a mismatch, naming both
    assert m["other"] == 0 and m["typed_mismatch"] == res["cases"] - n, m
    assert res["slowest_s"] < 30, res
