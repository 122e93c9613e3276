"""`bps-assets episodes`: PointNav, ObjectNav or InstanceImageNav episodes (habitat's layouts) from
navmeshes."""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
import traceback
from collections import Counter
from pathlib import Path

import click

from bps_assets.errors import BpsError, ConfigError, OutputExistsError, did_you_mean
from bps_assets.habitat_names import habitat_scene_name   # a NAVFILE's scene, as preprocess / convert name it
from bps_assets.nav import episodes as ep
from bps_assets.nav import objectnav_episodes as on
from bps_assets.nav.indoor import episode_islands
from bps_assets.nav import instance_imagenav_episodes as iin_episodes
from bps_assets.nav.instance_imagenav_files import write_instance_imagenav_dataset
from bps_assets.nav.objectnav_files import write_objectnav_dataset
from bps_assets.readers.semantic_categories import GOAL_SETS, goal_categories, mpcat40

from .options import Finite

D = ep.DEFAULTS
TASKS = ("pointnav", "objectnav", "instance_imagenav")
SEMANTIC_TASKS = ("objectnav", "instance_imagenav")   # goals are objects: need the packed scene


def packed_scene_path(navfile: Path, name: str, scenes_dir: Path | None) -> Path:
    """The packed scene of scene ``name`` (NAVFILE's): ``NAME.bps`` in ``scenes_dir`` (default:
    ``../scenes`` beside the NAVFILE's folder). When it is missing but the name older runs of
    ``convert`` gave (NAVFILE's name less its navmesh suffix: ``X.basis.navmesh.bps`` ->
    ``X.basis.bps``) is there, that one, with a one-line note on stderr."""
    folder = scenes_dir or navfile.resolve().parent.parent / "scenes"
    packed = folder / f"{name}.bps"
    if packed.exists():
        return packed
    base = navfile.name
    for suffix in (".navmesh.bps", ".navmesh", ".navm"):
        if base.endswith(suffix) and len(base) > len(suffix):
            old = folder / f"{base[:-len(suffix)]}.bps"
            if old != packed and old.is_file():
                click.echo(f"note: {name}: no {packed.name} in {folder}; using {old.name}, the name an older "
                           f"convert gave it (convert again to get {packed.name})", err=True)
                return old
            break
    return packed


def preprocess_entries(navfiles) -> dict[Path, dict]:
    """``{"scene_id", "subset"}`` of each NAVFILE that ``bps-assets preprocess`` wrote (OUT/navmeshes/
    beside OUT/manifest.json), as its manifest records them. ``scene_id`` is habitat's: the scan's
    path under the source root (``hm3d/val/00800-ID/ID.basis.glb``), which no --dataset rule can
    rebuild from the name. A NAVFILE elsewhere, or an unreadable manifest, is absent (left to
    --dataset)."""
    from bps_assets.pipeline.manifest import load_manifest

    out: dict[Path, dict] = {}
    by_nav: dict[Path, dict[Path, dict]] = {}
    for p in navfiles:
        root = Path(p).resolve().parent.parent
        if root not in by_nav:
            by_nav[root] = {}
            if (root / "manifest.json").is_file():
                try:
                    man = load_manifest(root)
                except BpsError:
                    continue
                for e in (man.doc.get("scenes") or {}).values():
                    nav = ((e.get("outputs") or {}).get("navmesh") or {}).get("path")
                    src = ((e.get("sources") or {}).get("scene") or {}).get("path")
                    if nav:
                        by_nav[root][Path(man.resolve(nav)).resolve()] = {"scene_id": src,
                                                                         "subset": e.get("subset")}
        entry = by_nav[root].get(Path(p).resolve())
        if entry:
            out[Path(p)] = entry
    return out


_SUBSETS = ("train", "val", "test")


def split_navfiles(navfiles, entries: dict, split: str) -> tuple[list, list]:
    """(kept, left out): a NAVFILE whose preprocess manifest puts its scene in another of the
    train / val / test subsets than ``split`` is left out, so val episodes are never made on
    train scenes; NAVFILEs without a manifest, and split names other than those three, keep all."""
    def other(p):
        sub = entries.get(Path(p), {}).get("subset")
        return split in _SUBSETS and sub in _SUBSETS and sub != split

    return [p for p in navfiles if not other(p)], [p for p in navfiles if other(p)]


def _scene_episodes(path: Path, name: str, dataset: str, per_scene: int, seed: int, opts,
                    task: str = "pointnav", packed: Path | None = None, categories: dict | None = None,
                    scene_id: str | None = None):
    t0 = time.perf_counter()
    from bps_assets.nav.sources import open_navmesh

    nm = open_navmesh(path)  # the file's magic bytes say which reader
    stats: dict = {"agent": {"radius": float(nm.settings.agent_radius), "height": float(nm.settings.agent_height)}}
    sid, sseed = scene_id or ep.habitat_scene_id(dataset, name), ep.scene_seed(seed, name)
    if task in SEMANTIC_TASKS:
        v, t, tri_object, table = on.semantic_scene(packed)
        table = on.task_table(table, categories)   # its categories as the task map names them
        st = Counter()
        if task == "objectnav":
            out = on.objectnav_scene(nm, v, t, tri_object, table, sid, per_scene, sseed, categories,
                                     on.ObjectNavOptions(all_islands=opts.all_islands), stats=st)
        else:
            io = iin_episodes.DEFAULTS
            io = dataclasses.replace(io, objectnav=dataclasses.replace(io.objectnav, all_islands=opts.all_islands))
            out = iin_episodes.instance_imagenav_scene(nm, v, t, tri_object, table, sid, per_scene, sseed,
                                                       None if categories is None else list(categories),
                                                       io, stats=st)
        stats.update(st)
        stats["targets"] = st["starts"]
        if categories is not None:   # what the task map leaves out (e.g. ReplicaCAD's wall_cabinet)
            present = {table.category_name(i) for i in range(len(table))} - {""}
            stats["unmapped_categories"] = sorted(present - set(categories))
            stats["absent_categories"] = sorted(set(categories) - present)   # no object of them here
        stats["where"] = ep.where_episodes_start(nm, episode_islands(nm, opts.all_islands), out.episodes,
                                                 opts.all_islands)
    else:
        out = ep.generate_episodes(nm, sid, per_scene, sseed, opts, stats=stats)
    stats["seconds"] = round(time.perf_counter() - t0, 3)
    return out, stats


def _category_map(text: str) -> dict:
    """--categories: a named set ("hm3d": habitat's six, "mp3d": its 21, "all": every mpcat40
    object class; ``semantic_categories.goal_categories``: ids that do not depend on the scenes)
    or "a,b,c" (task ids in that order)."""
    if text in GOAL_SETS:   # from data_manifests/semantics/categories.json
        return goal_categories(text)
    names = [c.strip() for c in text.split(",") if c.strip()]
    if not names or len(set(names)) != len(names):
        raise click.BadParameter("a comma-separated list of distinct category names", param_hint="--categories")
    return {c: i for i, c in enumerate(names)}


def _category_hint(name: str, known) -> str:
    """" (did you mean 'tv_monitor'?)" for a category ``name``: difflib's close matches, else the
    names that have it as a word ('tv' -> 'tv_monitor'); "" when none."""
    hint = did_you_mean(name, known) or did_you_mean(
        name, [k for k in known if name.lower() in k.split("_")], cutoff=0)
    return f" ({hint})" if hint else ""


def check_category_case(cats: dict) -> None:
    """Before any scene is read: a --categories name that is an mpcat40 name but for its case or
    separators ('Chair', 'tv monitor') is a ConfigError naming it (names match exactly)."""
    names = mpcat40()
    for c in cats:
        norm = c.strip().lower().replace(" ", "_").replace("-", "_")
        if c not in names and norm in names:
            raise ConfigError(None, f"--categories {c!r} is not a category name; did you mean {norm!r}? "
                                    "(names match exactly: mpcat40's, lower case, words joined by '_')")


def listed_categories_absent(report: list[dict], cats: dict) -> list[str]:
    """The typed --categories that no generated scene has an object of (``absent_categories`` of
    every row of ``report``), in --categories order; a name that is neither an mpcat40 category
    nor any of these scenes' is a ConfigError naming it, with the close names (nothing written)."""
    absent = [c for c in cats if all(c in r.get("absent_categories", ()) for r in report)]
    known = set(mpcat40()) | {c for r in report for c in r.get("unmapped_categories", ())}
    unknown = [c for c in absent if c not in known]
    if unknown:
        raise ConfigError(None, "--categories " + "; ".join(f"{c!r}{_category_hint(c, known)}" for c in unknown)
                          + ": not an mpcat40 category nor one of the scenes' (docs/TASKS.md); nothing written")
    return absent


def _other_agent(task: str, report: list[dict]) -> str:
    """One warning line when navmeshes were built for another agent than the task's (habitat's,
    what bps-train uses and refuses a dataset for); "" when they match. A warning, not a refusal:
    ``make()``'s task options take any agent, and such a run wants these episodes."""
    from bps_assets.nav.settings import agent_diffs
    from bps_runtime.tasks.options import task_agent   # the task's agent without torch / Warp

    radius, height = task_agent(task)
    off = [r for r in report if agent_diffs(r["agent"]["radius"], r["agent"]["height"], radius, height)]
    if not off:
        return ""
    a = off[0]["agent"]
    names = ", ".join(r["scene"] for r in off[:5]) + (" ..." if len(off) > 5 else "")
    return (f"warning: {len(off)} navmesh(es) ({names}) were built for another agent (radius {a['radius']:g} m, "
            f"height {a['height']:g} m) than {task}'s (radius {radius:g} m, height {height:g} m): "
            f"bps-train --task {task} refuses their dataset; preprocess with --agent-radius {radius:g} "
            f"--agent-height {height:g} for it (episodes written all the same: make() takes any agent in the "
            "task options)")


def _unmapped_summary(report: list[dict], categories: str, shown: int = 12) -> str:
    """One line naming the scenes' object categories that --categories leaves out (no goals of
    them), most common first, with how many scenes have each ("" when there are none)."""
    n = Counter(c for r in report for c in r.get("unmapped_categories", ()))
    if not n:
        return ""
    names = sorted(n, key=lambda c: (-n[c], c))
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return (f"{len(names)} object categories of the scenes are not in --categories {categories} (no "
            f"goals of them): " + ", ".join(f"{c} ({n[c]} scene{'s' * (n[c] > 1)})" for c in names[:shown])
            + more)


def _write_objectnav(out_dir, split, by_scene, overwrite):
    """The datasets of every scene under one task map (their union if the scenes' maps differ:
    ids renumbered over the sorted names); each content file keeps its scene's
    annotation map (indices into its own category list, which differ between composed scenes)."""
    task = {}
    for ds in by_scene.values():
        for k, v in ds.category_to_task_category_id.items():
            task.setdefault(k, v)
    if len({tuple(sorted(ds.category_to_task_category_id.items())) for ds in by_scene.values()}) > 1:
        task = {k: i for i, k in enumerate(sorted(task))}
    return write_objectnav_dataset(out_dir, split, by_scene, task, overwrite=overwrite, per_scene_annotation=True)


@click.command("episodes")
@click.argument("navfiles", nargs=-1, required=True,
                type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="dataset root: writes OUT/SPLIT/SPLIT.json.gz and OUT/SPLIT/content/")
@click.option("--split", required=True, help="split name (train, val, ...)")
@click.option("--per-scene", "per_scene", required=True, type=click.IntRange(min=1),
              help="episodes per scene")
@click.option("--seed", default=0, show_default=True, type=int, help="seed of the episode sampler")
@click.option("--dataset", type=click.Choice(["gibson", "mp3d", "generic"]), default="generic",
              show_default=True,
              help="scene_id layout: gibson/NAME.glb, mp3d/NAME/NAME.glb or NAME.glb (NAVFILEs of a "
                   "preprocess output take the scan's path from its manifest instead, hm3d too)")
@click.option("--goal-radius", type=Finite(), default=D.goal_radius, show_default=True,
              help="goals[].radius written (habitat-lab's generator writes 0.2)")
@click.option("--task", type=click.Choice(TASKS), default="pointnav", show_default=True,
              help="pointnav, or objectnav / instance_imagenav (need each scene's packed scene with "
                   "semantics)")
@click.option("--scenes", "scenes_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="objectnav / instance_imagenav: folder of the packed scenes NAME.bps [default: "
                   "NAVFILE's ../scenes, "
                   "the preprocess layout]")
@click.option("--categories", default="hm3d", show_default=True,
              help="objectnav / instance_imagenav goal categories: hm3d (habitat's HM3D six: chair, bed, "
                   "plant, toilet, tv_monitor, sofa), mp3d (habitat's MP3D 21), all (every mpcat40 object "
                   "class, fixed ids; not wall, floor, ceiling, void, unlabeled), or a comma-separated "
                   "list (task ids in order) of exact names: mpcat40's or the scenes' own")
@click.option("--all-islands", is_flag=True, default=D.all_islands,
              help="start and end episodes on any island (default: the largest indoor one, as "
                   "habitat's newer generators; docs/NAVMESH.md section 9)")
@click.option("--overwrite", is_flag=True, help="replace an existing split")
@click.option("--json", "as_json", is_flag=True, help="print per-scene statistics as JSON")
@click.option("--any-subset", is_flag=True,
              help="use every NAVFILE (default: leave out those a preprocess manifest puts in another "
                   "subset than --split, e.g. train scenes from --split val)")
def episodes_cmd(navfiles, out_dir, split, per_scene, seed, dataset, goal_radius, task, scenes_dir,
                 categories, all_islands, overwrite, as_json, any_subset):
    """Generate PointNav or ObjectNav episodes with habitat-lab's rules from NAVFILE... (packed
    navmeshes or habitat .navmesh files; the scene name is the file name without its navmesh
    suffixes: Allensville.navmesh.bps and Allensville.navmesh are scene Allensville), or
    InstanceImageNav episodes. ObjectNav and InstanceImageNav read each scene's objects from its
    packed scene (--scenes) and write habitat's ObjectNav v1 layout (goals_by_category, view
    points, category maps) or InstanceImageNav-v1 layout (goals with view points and goal
    cameras; docs/TASKS.md).

    A scene that cannot give episodes is reported on one line and the others are still
    written; the exit status is non-zero if any scene failed.
    """
    entries = preprocess_entries(navfiles)
    navfiles, left_out = (navfiles, []) if any_subset else split_navfiles(navfiles, entries, split)
    if left_out:
        what = ", ".join(f"{habitat_scene_name(p)} ({entries[Path(p)]['subset']})" for p in left_out[:8])
        click.echo(f"left out {len(left_out)} scene(s) that the manifest puts in another subset than "
                   f"{split}: {what}{' ...' if len(left_out) > 8 else ''} (--any-subset keeps them)", err=True)
        if not navfiles:
            raise click.UsageError(f"no NAVFILE belongs to the {split} subset of its manifest "
                                   "(--any-subset to use them anyway)")
    hint = did_you_mean(split, _SUBSETS, n=1) if split not in _SUBSETS and entries else ""
    if hint:   # a free split name keeps every NAVFILE: a typo of a subset would mix train and val scenes
        click.echo(f"warning: split {split!r} is none of the manifest's subsets ({', '.join(_SUBSETS)}): "
                   f"every NAVFILE is used; {hint}", err=True)
    names = [habitat_scene_name(p) for p in navfiles]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise click.UsageError(f"two NAVFILEs give the same scene name: {', '.join(sorted(dup))}")
    target = ep.split_file(out_dir, split)
    if target.exists() and not overwrite:  # fail before the (slow) generation
        raise OutputExistsError(target, "already exists (pass --overwrite to replace the split)")
    opts = ep.EpisodeOptions(goal_radius=goal_radius, all_islands=all_islands)
    cats = _category_map(categories) if task in SEMANTIC_TASKS else None
    by_scene, report, failed = {}, [], []
    scene_ids = {p: e["scene_id"] for p, e in entries.items() if e["scene_id"]}
    listed = task in SEMANTIC_TASKS and categories not in GOAL_SETS   # names typed, not a named set
    if listed:
        check_category_case(cats)
    for path, name in zip(navfiles, names):
        packed = packed_scene_path(Path(path), name, scenes_dir) if task in SEMANTIC_TASKS else None
        # one scene that cannot give episodes must not cost the others theirs
        try:
            by_scene[name], stats = _scene_episodes(path, name, dataset, per_scene, seed, opts, task,
                                                    packed, cats, scene_ids.get(Path(path)))
        except BpsError as e:
            failed.append({"scene": name, "navfile": str(path), "error": str(e), "exit_code": e.exit_code})
        except Exception as e:  # noqa: BLE001 - a bug on one navmesh: reported, the others go on
            if os.environ.get("BPS_DEBUG"):
                traceback.print_exc()
            failed.append({"scene": name, "navfile": str(path), "exit_code": 1,
                           "error": f"{path}: internal error ({type(e).__name__}: {e}); "
                                    "set BPS_DEBUG=1 for a traceback"})
        else:
            report.append({"scene": name, **stats})
            if not as_json:
                click.echo(f"{name}: {stats['episodes']} episodes from {stats['targets']} "
                           f"{'starts' if task in SEMANTIC_TASKS else 'targets'} in {stats['seconds']:.1f} s; "
                           f"{stats['where']}" + (f"; {stats['objects_with_shared_ids']} object(s) no goal: habitat "
                                                  f"id(s) {stats['shared_ids']} shared in the scene"
                                                  if stats.get("shared_ids") else ""))
            continue
        click.echo(f"error: {name}: {failed[-1]['error']}", err=True)
    absent = listed_categories_absent(report, cats) if listed and report else []
    if absent:
        click.echo(f"warning: no scene has an object of --categories {', '.join(absent)}: no goals of "
                   f"{'it' if len(absent) == 1 else 'them'} (the task ids are kept)", err=True)
    other = _other_agent(task, report)
    if other:
        click.echo(other, err=True)
    unmapped = _unmapped_summary(report, categories)
    if unmapped and not as_json:
        click.echo(unmapped, err=True)
    write = {"objectnav": _write_objectnav,
             "instance_imagenav": lambda o, sp, b, overwrite: write_instance_imagenav_dataset(
                 o, sp, b, overwrite=overwrite)}.get(
        task, lambda o, sp, b, overwrite: ep.write_pointnav_dataset(o, sp, b, overwrite=overwrite))
    from bps_assets.container import remove_stale_temps  # killed runs' temps (a live writer's is locked, kept)

    for p in [target, *(target.parent / ep.CONTENT_DIR / f"{n}{ep.SUFFIX}" for n in names)]:
        remove_stale_temps(p)
    written = write(out_dir, split, by_scene, overwrite=overwrite) if by_scene else []
    if as_json:
        click.echo(json.dumps({"split_file": str(written[0]) if written else None, "scenes": report,
                               "failed": failed}, indent=2))
    elif written:
        click.echo(f"wrote {written[0]} and {len(written) - 1} content file(s)"
                   + (f"; {len(failed)} scene(s) failed: {', '.join(f['scene'] for f in failed)}"
                      if failed else ""), err=bool(failed))
    else:
        click.echo(f"no episodes written: all {len(failed)} scene(s) failed", err=True)
    if failed:
        sys.exit(max(f["exit_code"] for f in failed))


commands = [episodes_cmd]
