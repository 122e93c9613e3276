"""Mutation fuzzing of every reader on real files, for a given time; prints outcome counts.

    python benchmarks/fuzz.py --seconds 300 [--workers 2] [--mem-gib 1] [--timeout 20] [--keep DIR]

Seeds: ../shared/assets scene files and habitat navmeshes, packed files made from them, and
synth semantic scans (both annotation formats) with their packed scenes. Mutants: random byte
edits, and for packed files structure-aware edits behind valid checksums. Each mutant is read by
its type's reader in a worker under ``--mem-gib`` and ``--timeout``; outcomes: typed error,
accepted, crash (kept in ``--keep``), over limit. Seed kinds and mutation rules in full:
docs/PERFORMANCE.md, "Benchmark methods".
"""
from __future__ import annotations

import argparse
import json
import os
import random
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "assets"
OUTCOMES = ("typed error", "accepted", "crash", "over limit")
BOUNDARY = (0, -1, 1, 2**31, 2**32 + 1, 2**62, 2**63 - 8, -(2**63), 1e308)


# ------------------------------------------------------------------------------ worker

def _read(path: str, kind: str, other: str = ""):
    if kind.startswith("annotation"):
        from bps_assets.readers.semantic_files import SemanticSource, read_annotation

        _, fmt, role = kind.split(":")
        mesh, table = (path, other) if role == "mesh" else (other, path)
        read_annotation(SemanticSource(fmt, mesh, table))
    elif kind in ("SCEN", "SCEN+sem"):
        from bps_assets.packed_scene import read_packed_scene

        read_packed_scene(path, threads=1)
    elif kind == "NAVM":
        from bps_assets.nav import load_navmesh

        load_navmesh(path)
    elif kind == "detour":
        from bps_assets.nav.detour import read_detour_navmesh

        read_detour_navmesh(path)
    else:
        from bps_assets.readers import load

        load(path)


def worker(mem_bytes: int) -> int:
    import resource

    import bps_assets.nav  # noqa: F401  (imports before the limit: they are not the input's cost)
    import bps_assets.packed_scene  # noqa: F401
    import bps_assets.readers  # noqa: F401
    from bps_assets.errors import BpsError

    resource.setrlimit(resource.RLIMIT_AS, (mem_bytes, mem_bytes))
    for line in sys.stdin:
        req = json.loads(line)
        try:
            _read(req["path"], req["kind"], req.get("other", ""))
            out = ("accepted", "")
        except BpsError as e:
            out = ("typed error", str(e)[:300])
        except MemoryError as e:
            out = ("over limit", f"MemoryError {e}"[:300])
        except Exception as e:  # noqa: BLE001 - counted as a crash
            out = ("crash", f"{type(e).__name__}: {e}"[:300])
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()
    return 0


class Worker:
    def __init__(self, mem_bytes: int):
        self.mem = mem_bytes
        self.start()

    def start(self):
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
               "PYTHONPATH": str(REPO)}
        self.p = subprocess.Popen([sys.executable, __file__, "--worker", str(self.mem)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
                                  bufsize=1)

    def run(self, path: str, kind: str, timeout: float, other: str = "") -> tuple[str, str]:
        try:
            self.p.stdin.write(json.dumps({"path": path, "kind": kind, "other": other}) + "\n")
            self.p.stdin.flush()
        except BrokenPipeError:
            self.restart()
            return "crash", "worker died before the input"
        ready, _, _ = select.select([self.p.stdout], [], [], timeout)
        if not ready:
            self.restart()
            return "over limit", f"more than {timeout} s"
        line = self.p.stdout.readline()
        if not line:
            code = self.p.wait()
            self.start()
            return "crash", f"worker died (exit {code})"
        return tuple(json.loads(line))

    def restart(self):
        self.p.kill()
        self.p.wait()
        self.start()

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=10)


# ------------------------------------------------------------------------------ seeds

def _self_contained_gltf(p: Path) -> bool:
    try:
        doc = json.loads(p.read_text("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return False
    uris = [x.get("uri") for k in ("buffers", "images") for x in doc.get(k, []) if isinstance(x, dict)]
    return all(u is None or (isinstance(u, str) and u.startswith("data:")) for u in uris)


def collect_seeds(work: Path, max_bytes: int = 4 << 20, n_scenes: int = 4) -> list[tuple[Path, str]]:
    seeds: list[tuple[Path, str]] = []
    for p in sorted(SHARED.rglob("*")):
        if not p.is_file() or p.stat().st_size > max_bytes or "edge" in p.parts:
            continue
        ext = p.suffix.lower()
        if ext in (".glb", ".ply") or (ext == ".obj" and not (p.with_suffix(".mtl")).exists()):
            seeds.append((p, "source"))
        elif ext == ".gltf" and _self_contained_gltf(p):
            seeds.append((p, "source"))
        elif ext == ".navmesh":
            seeds.append((p, "detour"))
    from bps_assets.errors import BpsError
    from bps_assets.packed_scene import ConvertOptions, convert_file

    made = 0
    for p, kind in list(seeds):
        if made >= n_scenes or kind != "source" or p.suffix.lower() != ".glb":
            continue
        dst = work / "seeds" / f"{made}_{p.stem}.bps"
        dst.parent.mkdir(parents=True, exist_ok=True)
        try:
            convert_file(p, dst, ConvertOptions(max_texture=256), overwrite=True)
        except BpsError:
            continue
        seeds.append((dst, "SCEN"))
        made += 1
    try:
        from bps_assets.nav.detour import import_detour

        nav = import_detour(SHARED / "habitat_test_scenes_navmesh" / "van-gogh-room.navmesh")
        dst = work / "seeds" / "van-gogh-room.navmesh.bps"
        nav.save(dst, overwrite=True)
        seeds.append((dst, "NAVM"))
    except Exception as e:  # noqa: BLE001 - the benchmark still runs on the other seeds
        print(f"(no NAVM seed: {type(e).__name__}: {e})", file=sys.stderr)
    return seeds + semantic_seeds(work)


def semantic_seeds(work: Path) -> list[tuple[Path, str]]:
    """Annotated synth scans (an HM3D pair beside a gibson-layout scan, an MP3D pair beside an
    mp3d one), each annotation file a seed of kind ``annotation:FMT:ROLE``, and their packed
    scenes (``SCEN+sem``)."""
    from bps_assets import synth
    from bps_assets.packed_scene import ConvertOptions, convert_file
    from bps_assets.synth import semantic as ssem

    out = []
    for layout in ("gibson", "mp3d"):
        info = synth.generate(work / "sem", layout=layout, scenes=1, overwrite=True)[0]
        stem = info.path.name.split(".")[0]
        if layout == "mp3d":
            ssem.write_mp3d(info.path, layout, info.name, overwrite=True)
            pair = ("mp3d", info.path.with_name(stem + "_semantic.ply"), info.path.with_name(stem + ".house"))
        else:
            ssem.write_hm3d(info.path, layout, info.name, overwrite=True)
            pair = ("hm3d", info.path.with_name(stem + ".semantic.glb"), info.path.with_name(stem + ".semantic.txt"))
        fmt, mesh, table = pair
        OTHER[mesh], OTHER[table] = table, mesh
        out += [(mesh, f"annotation:{fmt}:mesh"), (table, f"annotation:{fmt}:table")]
        dst = work / "seeds" / f"sem_{layout}.bps"
        dst.parent.mkdir(parents=True, exist_ok=True)
        convert_file(info.path, dst, ConvertOptions(dataset=layout, max_texture=256), overwrite=True)
        out.append((dst, "SCEN+sem"))
    return out


OTHER: dict = {}  # annotation seed -> the other file of its pair


# ------------------------------------------------------------------------------ mutations

def mutate_bytes(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    d = bytearray(data)
    r = rng.random()
    if r < 0.6 or len(d) < 16:
        n = rng.randint(1, 8)
        for _ in range(n):
            d[rng.randrange(len(d))] = rng.randrange(256)
        return bytes(d), f"set {n} bytes"
    if r < 0.75:
        return bytes(d[: rng.randrange(len(d))]), "truncate"
    a = rng.randrange(len(d))
    b = min(len(d), a + rng.randint(1, 4096))
    if r < 0.9:
        return bytes(d[:b] + d[a:]), "duplicate a range"
    return bytes(d[:a] + d[b:]), "delete a range"


def _numbers(obj, path=()):
    if isinstance(obj, bool):
        return
    if isinstance(obj, (int, float)):
        yield path
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _numbers(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _numbers(v, path + (i,))


def mutate_packed(src: Path, dst: Path, rng: random.Random, focus: tuple = ()) -> str:
    """Structure-aware: a header number or one section's values set to a boundary value,
    re-written with valid checksums (so the mutant gets past the CRC check). ``focus``: names
    (sections and header keys) to pick from, half of the time."""
    import numpy as np

    from bps_assets.container import Container, SectionSpec, write_container

    with Container(src) as c:
        arrays = c.read_many()
        header = json.loads(json.dumps(c.header))
        kind = c.kind
    val = rng.choice(BOUNDARY)
    if rng.random() < 0.5:
        paths = list(_numbers(header))
        if focus and rng.random() < 0.5:
            paths = [p for p in paths if p and p[0] in focus] or paths
        where = rng.choice(paths)
        node = header
        for k in where[:-1]:
            node = node[k]
        node[where[-1]] = val
        what = f"header {'.'.join(map(str, where))} = {val}"
    else:
        names = [n for n, a in arrays.items() if a.size]
        if focus and rng.random() < 0.5:
            names = [n for n in names if n in focus] or names
        name = rng.choice(names)
        a = np.array(arrays[name])
        flat = a.reshape(-1)
        k = rng.randrange(flat.size)
        if a.dtype.kind == "f":
            flat[k] = rng.choice((np.inf, -np.inf, np.nan, 3e38, -3e38))
        else:
            info = np.iinfo(a.dtype)
            flat[k] = int(min(max(int(val) if isinstance(val, int) else info.max, info.min), info.max))
        arrays[name] = a
        what = f"section {name}[{k}] = {flat[k]}"
    write_container(dst, kind, header, arrays, {n: SectionSpec("zstd", level=1) for n in arrays},
                    overwrite=True)
    return what


SEMANTIC_NAMES = ("semantics", "tri_object", "object_ids", "object_category", "object_region",
                  "object_source_ids", "object_aabb", "object_points")


# ------------------------------------------------------------------------------ driver

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for flag, typ, default, what in (("--seconds", float, 60.0, "how long to fuzz"),
                                     ("--workers", int, 2, "reader processes"),
                                     ("--mem-gib", float, 1.0, "address-space limit of each reader"),
                                     ("--timeout", float, 20.0, "seconds per input"),
                                     ("--seed", int, 0, "random seed")):
        ap.add_argument(flag, type=typ, default=default, help=f"{what} (default {default})")
    ap.add_argument("--keep", type=Path, default=None, help="keep crash / over-limit mutants here")
    ap.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker is not None:
        return worker(a.worker)
    if not SHARED.is_dir():
        print(f"no shared assets at {SHARED}", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="bps-fuzz-"))
    try:
        return _fuzz(a, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _fuzz(a, work: Path) -> int:
    from concurrent.futures import ThreadPoolExecutor

    t_setup = time.perf_counter()
    seeds = collect_seeds(work)
    blobs = {p: p.read_bytes() for p, _ in seeds}
    kinds = Counter(k for _, k in seeds)
    by_kind = defaultdict(list)
    for p, k in seeds:
        by_kind["annotation" if k.startswith("annotation") else k].append((p, k))
    kind_names = sorted(by_kind)
    print(f"{len(seeds)} seed files ({', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))}), "
          f"setup {time.perf_counter() - t_setup:.1f} s; fuzzing {a.seconds:.0f} s on {a.workers} workers, "
          f"{a.mem_gib:g} GiB address space, {a.timeout:g} s per input", flush=True)
    workers = [Worker(int(a.mem_gib * (1 << 30))) for _ in range(a.workers)]
    counts: dict[str, Counter] = defaultdict(Counter)
    kept: list[str] = []
    deadline = time.perf_counter() + a.seconds

    def loop(i: int):
        rng = random.Random(a.seed * 1000 + i)
        w = workers[i]
        n = 0
        while time.perf_counter() < deadline:
            kind = rng.choice(kind_names)  # each kind an equal share, whatever its seed count
            src, read_as = rng.choice(by_kind[kind])
            dst = work / f"w{i}_{n}{''.join(src.suffixes[-2:]) if kind == 'NAVM' else src.suffix}"
            if kind in ("SCEN", "NAVM", "SCEN+sem") and rng.random() < 0.5:
                try:
                    what = mutate_packed(src, dst, rng, SEMANTIC_NAMES if kind == "SCEN+sem" else ())
                except Exception:  # noqa: BLE001 - a mutation the writer refuses: skip it
                    counts[kind]["(mutation refused by writer)"] += 1
                    continue
                label = "struct"
            else:
                data, what = mutate_bytes(blobs[src], rng)
                dst.write_bytes(data)
                label = "bytes"
            outcome, detail = w.run(str(dst), read_as, a.timeout, str(OTHER.get(src, "")))
            counts[f"{kind}/{label}"][outcome] += 1
            if outcome in ("crash", "over limit") and a.keep is not None:
                a.keep.mkdir(parents=True, exist_ok=True)
                keep = a.keep / f"{outcome.replace(' ', '_')}_{len(kept)}_{src.name}"
                shutil.copy(dst, keep)
                kept.append(f"{keep}: {what}: {detail}")
            elif outcome in ("crash", "over limit"):
                kept.append(f"{src.name}: {what}: {detail}")
            dst.unlink(missing_ok=True)
            n += 1
        return n

    t0 = time.perf_counter()
    with ThreadPoolExecutor(a.workers) as ex:
        total = sum(ex.map(loop, range(a.workers)))
    dt = time.perf_counter() - t0
    for w in workers:
        w.close()
    overall = Counter()
    print(f"\n{'seed kind / mutation':<22}" + "".join(f"{o:>13}" for o in OUTCOMES))
    for k in sorted(counts):
        c = counts[k]
        overall.update({o: c[o] for o in OUTCOMES})
        print(f"{k:<22}" + "".join(f"{c[o]:>13}" for o in OUTCOMES))
    print(f"{'all':<22}" + "".join(f"{overall[o]:>13}" for o in OUTCOMES))
    print(f"\n{total} mutants in {dt:.0f} s ({total / dt:.1f}/s)")
    for line in kept[:20]:
        print("  " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
