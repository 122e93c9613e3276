"""Mutation fuzzing of every reader on real files, for a given time or count; prints outcome counts.

    python benchmarks/fuzz.py --seconds 300 [--workers 2] [--mem-gib 1] [--timeout 20] [--keep DIR]
    python benchmarks/fuzz.py --kinds annotation,objectnav,imagenav,instance_imagenav,checkpoint --mutants 10000

Seeds: ../shared/assets scene files and habitat navmeshes, packed files made from them, synth
semantic scans (both annotation formats) with their packed scenes, a composed scene with its
asset library, a scan packed with levels of detail, ObjectNav / ImageNav / InstanceImageNav
episode files and bps-train checkpoints made here. Mutants: random byte edits, structure-aware edits of
packed files behind valid checksums, of episode JSON (values, types, repeated entries), of
annotation tables (lines and fields) and of checkpoints (fields, tensors, RNG states; half with
the checksum recomputed). Each mutant is read by its type's reader in a worker under
``--mem-gib`` (above the worker's own mapping after imports) and ``--timeout``; outcomes: typed
error, accepted, crash (kept in ``--keep``), over limit; the workers' peak RSS is printed.
Seed kinds and mutation rules in full: docs/PERFORMANCE.md, "Benchmark methods".
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
EPISODE_KINDS = {"objectnav", "imagenav", "instance_imagenav"}
PACKED_KINDS = ("SCEN", "SCEN+sem", "SCEN+composed", "SCEN+lod")   # packed scene files (bps_assets.packed_scene)
BOUNDARY = (0, -1, 1, 2**31, 2**32 + 1, 2**62, 2**63 - 8, -(2**63), 1e308)


# ------------------------------------------------------------------------------ worker

def _read(path: str, kind: str, other: str = ""):
    if kind == "objectnav":
        from bps_assets.nav.objectnav_files import read_objectnav_dataset

        ds = read_objectnav_dataset(path)
        for e in ds.episodes:   # what the runtime asks of every episode
            ds.view_points_of(e), ds.task_category_id(e)
    elif kind == "imagenav":   # the runtime's table and the list of dicts, both
        from bps_assets.nav.episodes import read_pointnav_dataset, read_pointnav_table
        from bps_assets.nav.imagenav import goal_rotation

        for e in read_pointnav_table(path):
            goal_rotation(e["episode_id"])
        read_pointnav_dataset(path)
    elif kind == "instance_imagenav":
        from bps_assets.nav.instance_imagenav_files import read_instance_imagenav_dataset

        ds = read_instance_imagenav_dataset(path)
        for e in ds.episodes:
            ds.view_points_of(e), ds.image_goal_of(e)
    elif kind == "checkpoint":
        from bps_train import checkpoint

        ckpt = checkpoint.load(path)
        model, opt = tiny_policy()
        checkpoint.restore(path, ckpt, model, opt)
        for r in ckpt["rng"]:
            checkpoint.set_rng_state(r)
        import torch

        model(torch.ones(2, 8)).sum().backward()   # the first step after a resume
        opt.step()
    elif kind.startswith("annotation"):
        from bps_assets.readers.semantic_files import SemanticSource, read_annotation

        _, fmt, role = kind.split(":")
        mesh, table = (path, other) if role == "mesh" else (other, path)
        read_annotation(SemanticSource(fmt, mesh, table))
    elif kind == "SCEN+lod":   # the full mesh, then every level the header lists
        from bps_assets.lod_section import levels
        from bps_assets.packed_scene import read_lod_level, read_packed_scene

        ps = read_packed_scene(path, threads=1)
        for k in range(len(levels(path, ps.header))):
            read_lod_level(path, k, threads=1)
    elif kind in PACKED_KINDS:
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


def tiny_policy():
    """The model and optimizer the checkpoint seeds were saved from (a Linear layer and LAMB)."""
    import torch

    from bps_train.lamb import Lamb

    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    return model, Lamb(model.parameters(), lr=1e-3)


def _status(key: str) -> int:
    """A ``/proc/self/status`` figure in bytes (VmSize, VmHWM): per process image, so not
    carried over from the parent as ``ru_maxrss`` is."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def worker(mem_bytes: int, with_torch: bool = False) -> int:
    import resource

    import bps_assets.nav  # noqa: F401  (imports before the limit: they are not the input's cost)
    import bps_assets.nav.objectnav_files  # noqa: F401
    import bps_assets.packed_scene  # noqa: F401
    import bps_assets.readers  # noqa: F401
    import bps_assets.readers.semantic_files  # noqa: F401
    from bps_assets.errors import BpsError

    if with_torch:
        import bps_train.checkpoint  # noqa: F401
        tiny_policy()
    # the limit counts from what the imports mapped (torch alone maps more than a GiB of address
    # space it never touches): --mem-gib is what one input may add
    limit = _status("VmSize") + mem_bytes
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    sys.stdout.write(json.dumps(["ready", 0]) + "\n")   # the first input's clock starts after the imports
    sys.stdout.flush()
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
    sys.stdout.write(json.dumps(["peak", _status("VmHWM")]) + "\n")
    sys.stdout.flush()
    return 0


class Worker:
    def __init__(self, mem_bytes: int, with_torch: bool = False):
        self.mem, self.torch = mem_bytes, with_torch
        self.peak = 0   # the largest VmHWM of this slot's worker processes (bytes)
        self.start()

    def start(self):
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
               "PYTHONPATH": str(REPO)}
        self.p = subprocess.Popen([sys.executable, __file__, "--worker", str(self.mem)]
                                  + (["--worker-torch"] if self.torch else []), stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
                                  bufsize=1)
        self.p.stdout.readline()   # "ready": imports done (minutes on a loaded machine, not the input's time)

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
            self._note_peak()
            code = self.p.wait()
            self.start()
            return "crash", f"worker died (exit {code})"
        return tuple(json.loads(line))

    def _note_peak(self):
        """The worker's VmHWM, read from outside (it is about to be killed or has died)."""
        try:
            with open(f"/proc/{self.p.pid}/status") as f:
                hwm = next((ln for ln in f if ln.startswith("VmHWM:")), "")
            self.peak = max(self.peak, int(hwm.split()[1]) * 1024 if hwm else 0)
        except OSError:
            pass

    def restart(self):
        self._note_peak()
        self.p.kill()
        self.p.wait()
        self.start()

    def close(self):
        self.p.stdin.close()
        for line in self.p.stdout:
            got = json.loads(line)
            if got[0] == "peak":
                self.peak = max(self.peak, int(got[1]))
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
    return seeds + semantic_seeds(work) + composed_seeds(work) + lod_seeds(work)


def lod_seeds(work: Path) -> list[tuple[Path, str]]:
    """A small synth scan converted with two levels of detail (``convert --lod 0.02,0.1``):
    ``SCEN+lod``, read in full and then level by level (``read_lod_level``)."""
    from bps_assets import synth
    from bps_assets.packed_scene import ConvertOptions, convert_file

    info = synth.generate(work / "lod", layout="gibson", scenes=1, overwrite=True)[0]
    dst = work / "seeds" / "lod.bps"
    dst.parent.mkdir(parents=True, exist_ok=True)
    convert_file(info.path, dst, ConvertOptions(dataset="gibson", max_texture=256, lod=(0.02, 0.1)), overwrite=True)
    return [(dst, "SCEN+lod")]


def composed_seeds(work: Path) -> list[tuple[Path, str]]:
    """A composed scene (``SCEN+composed``): a box-room stage, two rigid crates (one mirrored)
    and a two-link articulated crate, packed as ``work/cscenes/crates.bps`` with its asset
    library in ``work/assets`` (its mutants are written beside it, so they find the library)."""
    from bps_assets.scene_dataset.habitat import read_dataset_config, read_scene_instance
    from bps_assets.scene_dataset.packing import pack_scene
    from bps_assets.scene_dataset.standin import write_box_room

    src = work / "composed_src"
    write_box_room(src / "room.glb", (-3, 0, -3), (3, 2.5, 3))
    write_box_room(src / "crate.glb", (-0.3, 0, -0.3), (0.3, 0.6, 0.3))
    vis = '<visual><geometry><mesh filename="crate.glb"/></geometry></visual>'
    (src / "box.urdf").write_text(f'<robot name="box"><link name="a">{vis}</link><link name="b">{vis}</link>'
                                  '<joint name="j" type="revolute"><origin xyz="0 1 0"/><parent link="a"/>'
                                  '<child link="b"/></joint></robot>')
    (src / "room.stage_config.json").write_text(json.dumps({"render_asset": "room.glb"}))
    (src / "crate.object_config.json").write_text(json.dumps({"render_asset": "crate.glb", "COM": [0, 0, 0],
                                                              "semantic_id": 3, "category": "crate"}))
    (src / "crates.scene_instance.json").write_text(json.dumps({
        "stage_instance": {"template_name": "room"},
        "object_instances": [{"template_name": "crate", "translation": [1, 0, 1], "motion_type": "STATIC"},
                             {"template_name": "crate", "translation": [-1, 0, 1], "non_uniform_scale": [-1, 1, 1]}],
        "articulated_object_instances": [{"template_name": "box", "translation": [0, 0, -1],
                                          "initial_joint_pose": [0.5]}]}))
    cfg = src / "c.scene_dataset_config.json"
    cfg.write_text(json.dumps({k: {"paths": {ext: ["."]}} for k, ext in (
        ("stages", ".json"), ("objects", ".json"), ("articulated_objects", ".urdf"), ("scene_instances", ".json"))}))
    dst = work / "cscenes" / "crates.bps"
    dst.parent.mkdir(parents=True, exist_ok=True)
    pack_scene(read_scene_instance(read_dataset_config(cfg), "crates"), dst, work / "assets")
    return [(dst, "SCEN+composed")]


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


def episode_seeds(work: Path) -> list[tuple[Path, str]]:
    """An ObjectNav v1 content file (two scenes' worth of goals and episodes, habitat's layout),
    an ImageNav (PointNav v1) split file and an InstanceImageNav-v1 content file, written by our
    writers from hand-made episodes."""
    from bps_assets.nav import objectnav_files as on
    from bps_assets.nav.episodes import make_episode, write_pointnav_dataset
    from bps_assets.nav.imagenav import goal_rotation

    q = [0.0, 0.0, 0.0, 1.0]
    goals, eps = {}, []
    for k, cat in enumerate(("chair", "bed", "toilet")):
        vps = [on.make_view_point([0.5 * j, 0.0, 1.0 + k], q, 0.1 * j) for j in range(1, 5)]
        goals[on.goals_key("hm3d/a.basis.glb", cat)] = [
            on.make_object_goal([0.5, 0.5, 1.0 + k], 10 * k + j, cat, vps) for j in range(2)]
    for i in range(12):
        cat = ("chair", "bed", "toilet")[i % 3]
        eps.append(on.make_objectnav_episode(i, "hm3d/a.basis.glb", [0.1 * i, 0.0, 0.0], q, cat,
                                             {"geodesic_distance": 1.0 + i}))
    ds = on.ObjectNavDataset(eps, goals)
    cats = {"chair": 0, "bed": 1, "toilet": 3}
    on.write_objectnav_dataset(work / "objectnav", "val", {"a": ds}, cats, {"chair": 3, "bed": 11, "toilet": -1},
                               overwrite=True)
    pn = [make_episode(i, "gibson/b.glb", [0.1 * i, 0.0, 0.0], goal_rotation(i), [1.0, 0.0, 0.2 * i], 1.5)
          for i in range(12)]
    files = write_pointnav_dataset(work / "imagenav", "val", {"b": pn}, overwrite=True)
    split = next(f for f in files if f.parent.name == "val")
    from bps_assets.nav import instance_imagenav_files as ii

    cams = [ii.make_image_goal([0.2 * j, 1.2, 0.5], q, 79.0, (64, 48), 0.5, 0.25) for j in range(3)]
    igoals = {ii.goal_key("hm3d/c.basis.glb", k): ii.make_instance_goal(
        on.make_object_goal([0.5, 0.5, 1.0 + k], k, "chair", [on.make_view_point([0.5 * j, 0.0, 1.0 + k], q, 0.2)
                                                              for j in range(1, 4)]), cams, 1.5) for k in range(3)}
    ieps = [ii.make_instance_imagenav_episode(i, "hm3d/c.basis.glb", [0.1 * i, 0.0, 0.0], q, i % 3, i % 3, "chair")
            for i in range(9)]
    ifiles = ii.write_instance_imagenav_dataset(work / "instance_imagenav", "val",
                                                {"c": ii.InstanceImageNavDataset(ieps, igoals)}, overwrite=True)
    return [(work / "objectnav" / "val" / "content" / "a.json.gz", "objectnav"),
            (split if not (split.parent / "content").is_dir() else files[-1], "imagenav"),
            (ifiles[-1], "instance_imagenav")]


def checkpoint_seeds(work: Path) -> list[tuple[Path, str]]:
    """Checkpoints of ``tiny_policy`` after one LAMB step (moments in the optimizer state), one
    rank and two ranks' RNG streams."""
    import torch

    from bps_train import checkpoint

    out = []
    for world in (1, 2):
        model, opt = tiny_policy()
        model(torch.ones(3, 8)).sum().backward()
        opt.step()
        state = {"policy": model.state_dict(), "optimizer": opt.state_dict(), "update": 3, "global_step": 96,
                 "seconds": 12.5, "world": world, "args": {"task": "pointnav", "hidden": 4, "lr": 1e-3},
                 "identity": {"dataset_sha256": "0" * 64, "num_envs": 4},
                 "rng": [checkpoint.rng_state() for _ in range(world)]}
        p = work / "seeds" / f"ckpt_{world}.pt"
        p.parent.mkdir(parents=True, exist_ok=True)
        checkpoint.save(p, state)
        out.append((p, "checkpoint"))
    return out


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


def mutate_packed(src: Path, dst: Path, rng: random.Random, focus: tuple = ()) -> str:
    """Structure-aware: a header number or one section's values set to a boundary value,
    re-written with valid checksums (so the mutant gets past the CRC check). ``focus``: names
    (sections and header keys) to pick from, half of the time."""
    import numpy as np

    from bps_assets.container import Container

    with Container(src) as c:
        arrays = c.read_many()
        header = json.loads(json.dumps(c.header))
        kind = c.kind
    val = rng.choice(BOUNDARY)
    if "composed" in header and rng.random() < 0.3:   # the instance table's header: keys, types, lengths
        return _write_packed(dst, kind, header, arrays, "composed: " + mutate_json(header["composed"], rng))
    if rng.random() < 0.5:
        paths = [p for p, v in _nodes(header) if isinstance(v, (int, float)) and not isinstance(v, bool)]
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
    return _write_packed(dst, kind, header, arrays, what)


def _write_packed(dst: Path, kind: str, header: dict, arrays: dict, what: str) -> str:
    from bps_assets.container import SectionSpec, write_container

    write_container(dst, kind, header, arrays, {n: SectionSpec("zstd", level=1) for n in arrays},
                    overwrite=True)
    return what


ODD_VALUES = (None, True, "x", "", [], {}, -1, 2**70, -(2**63), 1e30, -1e308, 0.5, float("nan"))
HUGE_INTS = (10**400, -(10**400))   # JSON integers beyond float range: float() raises OverflowError


def _nodes(obj, path=()):
    """Every (path, value) of a JSON document or a loaded checkpoint, containers included."""
    yield path, obj
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _nodes(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _nodes(v, path + (i,))


def _pick(doc, rng: random.Random, skip=()):
    """A random node below the root (not under the top-level keys ``skip``): (path, its
    container, its key there, its value)."""
    where = rng.choice([p for p, _ in _nodes(doc) if p and p[0] not in skip])
    parent = doc
    for k in where[:-1]:
        parent = parent[k]
    return where, parent, where[-1], parent[where[-1]]


def mutate_json(doc, rng: random.Random) -> str:
    """One structure-aware edit of a JSON document, in place: a value set to a boundary number
    or another type, a key or element removed, an element repeated (a duplicate id), a list
    emptied, or a string made long."""
    where, parent, key, val = _pick(doc, rng)
    r = rng.random()
    if r < 0.35:
        parent[key] = rng.choice(BOUNDARY + ODD_VALUES + HUGE_INTS)
        return f"{'.'.join(map(str, where))} = {parent[key]!r}"[:200]
    if r < 0.5:
        del parent[key]
        return f"del {'.'.join(map(str, where))}"
    if r < 0.7 and isinstance(parent, list):
        parent.insert(rng.randrange(len(parent) + 1), json.loads(json.dumps(val)))
        return f"repeat {'.'.join(map(str, where))}"
    if r < 0.8 and isinstance(val, (list, dict)):
        val.clear()
        return f"empty {'.'.join(map(str, where))}"
    if r < 0.9 and isinstance(val, str):
        parent[key] = val * rng.choice((2, 1000, 100_000))
        return f"long string at {'.'.join(map(str, where))}"
    if isinstance(val, (int, float)) and not isinstance(val, bool):
        parent[key] = -val if rng.random() < 0.5 else val * 1e12
        return f"{'.'.join(map(str, where))} scaled"
    parent[key] = rng.choice(ODD_VALUES)
    return f"{'.'.join(map(str, where))} = {parent[key]!r}"


def mutate_episode_file(src: Path, dst: Path, rng: random.Random) -> str:
    """The gunzipped JSON edited by ``mutate_json`` 1-3 times (or its text bytes, a fifth of
    the time), gzipped again."""
    import gzip

    raw = gzip.decompress(src.read_bytes())
    if rng.random() < 0.2:
        data, what = mutate_bytes(raw, rng)
    else:
        doc = json.loads(raw)
        what = "; ".join(mutate_json(doc, rng) for _ in range(rng.randint(1, 3)))
        data = json.dumps(doc).encode()
    dst.write_bytes(gzip.compress(data, compresslevel=1))
    return what


def mutate_table(src: Path, dst: Path, rng: random.Random) -> str:
    """A line of an annotation table (``.semantic.txt`` / ``.house``) repeated, dropped or
    swapped, or one field set to a boundary number, a long or quoted value, or removed."""
    lines = src.read_text().splitlines()
    i = rng.randrange(1, len(lines)) if len(lines) > 1 else 0
    sep = "," if src.suffix == ".txt" else " "
    r = rng.random()
    if r < 0.15:
        lines.insert(i, lines[i])
        what = f"repeat line {i + 1}"
    elif r < 0.25:
        del lines[i]
        what = f"drop line {i + 1}"
    elif r < 0.35:
        j = rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
        what = f"swap lines {i + 1}, {j + 1}"
    else:
        f = lines[i].split(sep)
        k = rng.randrange(len(f))
        new = rng.choice([str(v) for v in BOUNDARY] + ["3e9", "1" + "0" * 20, "nan", "-0", '"', '"open',
                                                      "x" * 200_000, "", "#", "FFFFFF", "zz"])
        if rng.random() < 0.1:
            del f[k]
            what = f"line {i + 1} field {k} removed"
        else:
            f[k] = new
            what = f"line {i + 1} field {k} = {new[:20]!r}"
        lines[i] = sep.join(f)
    dst.write_text("\n".join(lines) + "\n")
    return what


def mutate_checkpoint(src: Path, dst: Path, rng: random.Random) -> str:
    """A checkpoint field, tensor or RNG state changed (a leaf set to a boundary or odd value, a
    tensor resized, retyped or poisoned, a key added or removed), re-saved with the checksum
    recomputed half of the time (so the field checks behind it are reached)."""
    import torch

    from bps_train import checkpoint

    ckpt = torch.load(src, weights_only=True)
    where, parent, key, val = _pick(ckpt, rng, skip=("format", "checksum"))
    r = rng.random()
    if isinstance(val, torch.Tensor) and r < 0.6:
        t = val.clone()
        c = rng.random()
        if c < 0.3 and t.numel():
            t.view(-1)[rng.randrange(t.numel())] = float("nan") if t.is_floating_point() else -1
        elif c < 0.55:
            t = t.reshape(-1)[: max(0, t.numel() - rng.randint(1, 3))]
        elif c < 0.7:
            t = t.to(rng.choice((torch.float64, torch.int32, torch.uint8, torch.bool)))
        elif c < 0.85:
            t = torch.cat([t.reshape(-1), t.reshape(-1)])
        else:
            t = torch.zeros(0)
        parent[key] = t
        what = f"tensor {'/'.join(map(str, where))} -> {tuple(t.shape)} {t.dtype}"
    elif r < 0.85:
        parent[key] = rng.choice(BOUNDARY + ODD_VALUES + (-5, 10**12, torch.zeros(2)))
        what = f"{'/'.join(map(str, where))} = {parent[key]!r}"[:120]
    elif isinstance(parent, dict) and rng.random() < 0.5:
        del parent[key]
        what = f"del {'/'.join(map(str, where))}"
    elif isinstance(parent, dict):
        parent[f"extra_{rng.randrange(99)}"] = torch.zeros(3)
        what = f"extra key beside {'/'.join(map(str, where))}"
    else:
        parent.append(parent[key] if isinstance(parent, list) else None)
        what = f"repeat {'/'.join(map(str, where))}"
    if rng.random() < 0.5:
        try:
            ckpt["checksum"] = checkpoint.payload_checksum(ckpt)
            what += " (checksum recomputed)"
        except Exception:  # noqa: BLE001 - a payload the checksum cannot walk: saved as it is
            pass
    torch.save(ckpt, dst)
    return what


SEMANTIC_NAMES = ("semantics", "tri_object", "object_ids", "object_category", "object_region",
                  "object_source_ids", "object_aabb", "object_points")
COMPOSED_NAMES = ("composed", "instance_asset", "instance_transform", "instance_semantic",
                  "instance_category", "instance_motion", "instance_group")
LOD_NAMES = ("lods",) + tuple(f"lod{k}.{f}" for k in range(2) for f in ("positions_q", "indices", "tri_material",
                                                                         "uvs_q", "colors", "tri_object"))
FOCUS = {"SCEN+sem": SEMANTIC_NAMES, "SCEN+composed": COMPOSED_NAMES, "SCEN+lod": LOD_NAMES}


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
    ap.add_argument("--kinds", default="", help="comma-separated seed kinds to fuzz (default: all; e.g. "
                                                "annotation,objectnav,imagenav,instance_imagenav,checkpoint)")
    ap.add_argument("--mutants", type=int, default=0,
                    help="stop once every kind has this many mutants (then --seconds is only a cap)")
    ap.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--worker-torch", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker is not None:
        return worker(a.worker, a.worker_torch)
    if a.mutants and "--seconds" not in (argv if argv is not None else sys.argv[1:]):
        a.seconds = float("inf")
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
    wanted = {k for k in a.kinds.split(",") if k}
    scene_kinds = {"source", "detour", "NAVM", *PACKED_KINDS}
    seeds = collect_seeds(work) if not wanted or wanted & scene_kinds else \
        (semantic_seeds(work) if "annotation" in wanted else [])
    if not wanted or wanted & EPISODE_KINDS:
        seeds += episode_seeds(work)
    if not wanted or "checkpoint" in wanted:
        seeds += checkpoint_seeds(work)
    seeds = [(p, k) for p, k in seeds if not wanted or k.split(":")[0] in wanted]
    blobs = {p: p.read_bytes() for p, _ in seeds}
    kinds = Counter(k for _, k in seeds)
    by_kind = defaultdict(list)
    for p, k in seeds:
        by_kind["annotation" if k.startswith("annotation") else k].append((p, k))
    kind_names = sorted(by_kind)
    done, skipped = Counter(), Counter()   # mutants per kind (--mutants); mutations not written
    how = f"{a.mutants} mutants per kind" if a.mutants else f"{a.seconds:.0f} s"
    print(f"{len(seeds)} seed files ({', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))}), "
          f"setup {time.perf_counter() - t_setup:.1f} s; fuzzing {how} on {a.workers} workers, "
          f"{a.mem_gib:g} GiB address space, {a.timeout:g} s per input", flush=True)
    workers = [Worker(int(a.mem_gib * (1 << 30)), "checkpoint" in kind_names) for _ in range(a.workers)]
    lock = __import__("threading").Lock()
    counts: dict[str, Counter] = defaultdict(Counter)
    kept: list[str] = []
    deadline = time.perf_counter() + a.seconds

    def loop(i: int):
        rng = random.Random(a.seed * 1000 + i)
        w = workers[i]
        n = 0
        while time.perf_counter() < deadline:
            with lock:
                todo = [k for k in kind_names if not a.mutants or done[k] < a.mutants]
                if not todo:
                    break
                kind = rng.choice(todo)  # each kind an equal share, whatever its seed count
                done[kind] += 1
            src, read_as = rng.choice(by_kind[kind])
            two = kind == "NAVM" or kind in EPISODE_KINDS   # .navmesh.bps, .json.gz
            dst = (src.parent if kind == "SCEN+composed" else work) / \
                f"w{i}_{n}{''.join(src.suffixes[-2:]) if two else src.suffix}"   # composed: beside its library
            structured = mutate_episode_file if kind in EPISODE_KINDS else \
                {"checkpoint": mutate_checkpoint}.get(kind)
            if kind == "annotation" and src.suffix in (".txt", ".house") and rng.random() < 0.5:
                structured = mutate_table
            if structured is not None and (kind != "checkpoint" or rng.random() < 0.7):
                try:
                    what = structured(src, dst, rng)
                except Exception as e:  # noqa: BLE001 - a mutation that cannot be written: another one
                    with lock:
                        skipped[f"{kind}: {type(e).__name__}"] += 1
                        done[kind] -= 1
                    continue
                label = "struct"
            elif kind in EPISODE_KINDS:   # bytes of the JSON, gzipped again (a CRC otherwise)
                import gzip

                data, what = mutate_bytes(gzip.decompress(blobs[src]), rng)
                dst.write_bytes(gzip.compress(data, compresslevel=1))
                label = "bytes"
            elif kind in ("NAVM", *PACKED_KINDS) and rng.random() < 0.5:
                try:
                    what = mutate_packed(src, dst, rng, FOCUS.get(kind, ()))
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
    print(f"\n{'seed kind / mutation':<26}" + "".join(f"{o:>13}" for o in OUTCOMES))
    for k in sorted(counts):
        c = counts[k]
        overall.update({o: c[o] for o in OUTCOMES})
        print(f"{k:<26}" + "".join(f"{c[o]:>13}" for o in OUTCOMES))
    print(f"{'all':<26}" + "".join(f"{overall[o]:>13}" for o in OUTCOMES))
    print(f"\n{total} mutants in {dt:.0f} s ({total / dt:.1f}/s); per kind: "
          + ", ".join(f"{k} {sum(c[o] for kk, c in counts.items() if kk.split('/')[0] == k for o in OUTCOMES)}"
                      for k in kind_names)
          + f"; workers' peak RSS {max(w.peak for w in workers) / 2**20:.0f} MiB")
    if skipped:
        print("mutations that could not be written (replaced by others): "
              + ", ".join(f"{k} {n}" for k, n in sorted(skipped.items())))
    for line in kept[:20]:
        print("  " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
