"""Dataset commands: datasets, preprocess, verify, manifest merge/show, launch (SLURM)."""
from __future__ import annotations

import json
import os
import sys

import click

from bps_assets.pipeline import datasets as ds_mod
from bps_assets.pipeline.backend import NAVMESH_MODES
from bps_assets.pipeline.preprocess import DEFAULTS
from bps_assets.transforms.frame import UP_AXES

from .options import convert_changes, convert_options, nav_options, nav_settings_given

_MAX_SHOWN = 200


def _dataset_choice(ctx, param, value):
    if value is not None:
        ds_mod.load_dataset(value)  # unknown name -> DatasetError with suggestions
    return value


# ------------------------------------------------------------------------------ datasets

@click.command("datasets")
@click.argument("name", required=False)
@click.option("--split", "split", default=None, help="List the scenes of this split.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def datasets_cmd(name, split, as_json):
    """List the known datasets, a dataset's splits, or a split's scenes."""
    if name is None and split is not None:
        raise click.UsageError(f"--split {split} lists a dataset's split: give its NAME too "
                               f"(e.g. bps-assets datasets gibson --split {split})")
    if name is None:
        rows = []
        for n in ds_mod.list_datasets():
            d = ds_mod.load_dataset(n)
            rows.append({"name": n, "layout": d.layout.scene, "default_split": d.default_split,
                         "splits": {s: d.subset_counts(s) for s in d.splits},
                         "description": d.description})
        if as_json:
            click.echo(json.dumps(rows, indent=1))
            return
        for r in rows:
            splits = ", ".join(f"{s} ({'/'.join(str(c[k]) for k in ('train', 'val', 'test'))})"
                               for s, c in r["splits"].items())
            click.echo(f"{r['name']:8s} {r['layout']:28s} splits: {splits}")
        click.echo("(counts are train/val/test; `bps-assets datasets NAME` for details)")
        return
    d = ds_mod.load_dataset(name)
    if split is None:
        if as_json:
            click.echo(json.dumps({"name": d.name, "description": d.description, "layout": vars(d.layout),
                                   "default_split": d.default_split, "splits": d.splits}, indent=1,
                                  default=list))
            return
        click.echo(f"{d.name}: {d.description}")
        click.echo(f"layout: {d.layout.scene} (navmesh {d.layout.navmesh}); {len(d.scenes)} scenes known")
        for s in d.splits:
            counts = "/".join(str(d.subset_counts(s)[k]) for k in ("train", "val", "test"))
            default = " (default)" if s == d.default_split else ""
            click.echo(f"  {s:10s} {counts:>12s}  {d.split_descriptions.get(s, '')}{default}")
        return
    sub = d.split(split)
    if d.discovered(split):  # scenes found in the source tree (HM3D): say where
        sub = {k: f"found in the tree: {r.describe()}" for k, r in d.split_rules(split).items()}
    if as_json:
        click.echo(json.dumps(sub, indent=1))
        return
    for k, names in sub.items() if not d.discovered(split) else ():
        click.echo(f"{k} ({len(names)}): {' '.join(names)}")
    for k, where in sub.items() if d.discovered(split) else ():
        click.echo(f"{k}: {where}")


# ------------------------------------------------------------------------------ preprocess

_SRC_TAKES = ("preprocess takes a dataset's source root (with --dataset NAME), a folder of scans, or a "
              "habitat *.scene_dataset_config.json")


def _source_and_dataset(src_root, dataset):
    """SRC may be a habitat *.scene_dataset_config.json: it names the dataset (its stages) and
    its folder is the source root. Without --dataset, a folder that has no known dataset's
    layout is a folder of scans (``datasets.load_scan_folder``)."""
    if src_root.endswith(ds_mod.SCENE_DATASET_CONFIG_SUFFIX) and os.path.isfile(src_root):
        if dataset is not None:
            raise click.UsageError("SRC is a scene dataset config, which names the dataset: drop --dataset")
        return os.path.dirname(os.path.abspath(src_root)), os.path.abspath(src_root)
    if not os.path.exists(src_root):
        raise click.UsageError(f"SRC {src_root}: no such file or folder; {_SRC_TAKES}")
    if os.path.isfile(src_root):
        raise click.UsageError(f"SRC {src_root} is a file; {_SRC_TAKES} (one scan: `bps-assets convert` "
                               "and `bps-assets navmesh`, or put it in a folder of its own)")
    if dataset is None:
        known = [n for n in ds_mod.list_datasets() if os.path.isdir(os.path.join(src_root, n))
                 or os.path.basename(os.path.abspath(src_root)) == n]
        if known:
            raise click.UsageError(f"--dataset is required (SRC has the {known[0]} layout: --dataset {known[0]})")
        # a folder of scans of no known dataset: every scan under it, one subset
        return src_root, ds_mod.scan_folder_name(src_root)
    return src_root, dataset


# preprocess's and launch's (which passes it on to each task's preprocess)
skip_missing_assets_option = click.option(
    "--skip-missing-assets", is_flag=True, default=DEFAULTS.skip_missing_assets,
    help="Composed scenes: drop instances whose render asset, URDF mesh or template is missing "
         "(listed in the manifest) instead of failing the scene.")


@click.command("preprocess")
@click.argument("src_root", type=click.Path())
@click.option("-o", "--out", "out_root", required=True, type=click.Path(file_okay=False),
              help="Output directory (manifest.json, scenes/, navmeshes/, episodes/).")
@click.option("--dataset", default=None, callback=_dataset_choice,
              help="Dataset: gibson, mp3d, hm3d, ... (not with a *.scene_dataset_config.json SRC). "
                   "Without it, SRC is a folder of scans: every .glb/.gltf/.ply/.obj under it, one "
                   "subset (train), Y-up unless --up z.")
@click.option("--split", default=None, help="Split (default: the dataset's default, e.g. gibson 4+).")
@click.option("--subset", "subsets", multiple=True, type=click.Choice(["train", "val", "test"]),
              help="Only these subsets of the split (repeatable; default: all).")
@click.option("--navmesh", type=click.Choice(NAVMESH_MODES), default=DEFAULTS.navmesh, show_default=True,
              help="import the shipped .navmesh, build from the scene, or auto (import when present).")
@click.option("--episodes", type=click.IntRange(min=0), default=DEFAULTS.episodes, show_default=True,
              help="PointNav episodes per scene (0: none).")
@click.option("--episode-seed", type=int, default=DEFAULTS.episode_seed, show_default=True,
              help="Seed of the PointNav episodes (with --episodes).")
@click.option("--up", type=click.Choice(UP_AXES), default=DEFAULTS.up,
              help="Up axis of the source files, instead of the dataset's (gibson/mp3d: z).")
@click.option("--strict", is_flag=True,
              help="Fail a scene whose .navmesh auto mode would replace by a built one (unreadable, "
                   "made for another agent or another scene).")
@skip_missing_assets_option
@nav_options
@convert_options
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Processes (default: all cores this process may use).")
@click.option("--shard", default=None, metavar="I/N",
              help="Process shard I of N (0-based), or `slurm`: this SLURM array task.")
@click.option("--require-all", is_flag=True, help="Fail before starting if any scene of the split is missing.")
@click.option("--overwrite", is_flag=True, help="Allow a non-empty OUT_ROOT / another run's manifest; "
              "then remove the outputs of the scenes that manifest lists and this split no longer holds.")
@click.option("--force", is_flag=True, help="Redo every scene, even the up-to-date ones; build on scans that look "
              "read with the wrong up axis (refused otherwise: --up).")
@click.option("--verify-kept", is_flag=True,
              help="Hash every kept output in full (default: check headers and section CRCs).")
@click.option("--in-process", is_flag=True, hidden=True, help="Debugging: run scenes in this process.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
@click.option("--progress/--no-progress", default=None, help="Progress bar (default: on a terminal).")
def preprocess_cmd(src_root, out_root, dataset, split, subsets, navmesh, episodes, episode_seed, up, strict,
                   skip_missing_assets, workers, shard, require_all, overwrite, force, verify_kept, in_process, as_json, progress,
                   **settings):
    """Convert every scene of a dataset split into packed scenes + navmeshes (+ episodes).

    Resumable (rerun after any interruption redoes only unfinished or changed scenes, and
    scenes made with other settings), parallel, shardable. The navmesh and converter settings
    (--agent-radius, --cell-size, --max-texture, ...) are recorded in the manifest. Missing
    scenes are reported, not fatal, unless --require-all. Exits 1 when any scene failed (after
    processing all the others).
    """
    from bps_assets.pipeline.plan import Shard
    from bps_assets.pipeline.preprocess import PreprocessOptions, preprocess, result_json, summary_table

    opts = PreprocessOptions(navmesh=navmesh, episodes=episodes, episode_seed=episode_seed, workers=workers,
                             require_all=require_all, overwrite=overwrite, subsets=tuple(subsets) or None,
                             force=force, verify_kept=verify_kept, in_process=in_process, up=up, strict=strict,
                             nav=nav_settings_given(settings), convert=convert_changes(settings),
                             skip_missing_assets=skip_missing_assets)
    log = (lambda s: click.echo(s, err=True)) if as_json else click.echo
    src_root, dataset = _source_and_dataset(src_root, dataset)
    res = preprocess(src_root, out_root, dataset, split, opts, Shard.parse(shard), progress=progress, log=log)
    if as_json:
        click.echo(json.dumps(result_json(res), indent=1))
    else:
        click.echo(summary_table(res, _MAX_SHOWN))
    if not res.ok:
        sys.exit(1)


# ------------------------------------------------------------------------------ verify

@click.command("verify")
@click.argument("manifest", required=False, type=click.Path())
@click.option("--deep", is_flag=True, help="Also decompress every section and check its checksum.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
@click.option("--jobs", type=click.IntRange(min=1), default=None, help="Hashing threads (default: 2 x cores).")
@click.option("-v", "--verbose", is_flag=True, help="List every scene, not only the ones with problems.")
@click.option("--strict", is_flag=True, help="Refuse files reached through symlinks leading out of the dataset.")
@click.option("--source", "source", type=click.Path(file_okay=False), default=None,
              help="Instead: check a source tree against data_manifests (with --dataset/--split).")
@click.option("--dataset", default=None, callback=_dataset_choice, help="With --source.")
@click.option("--split", default=None, help="With --source (default: the dataset's default split).")
def verify_cmd(manifest, deep, as_json, jobs, verbose, strict, source, dataset, split):
    """Check a preprocessed dataset: sizes, sha256, headers (and --deep: every section).

    Exit code 0 only when every file of every scene is intact. With --source SRC_ROOT
    --dataset NAME [--split S]: list the split's missing scenes and unexpected files
    (exit 1 when scenes are missing or an annotation pair is half there).
    """
    from bps_assets.pipeline import verify as v

    if source is not None:
        if manifest is not None:
            raise click.UsageError("give either MANIFEST or --source, not both")
        if dataset is None:
            raise click.UsageError("--source needs --dataset")
        rep = v.verify_source(source, dataset, split)
        click.echo(json.dumps(rep.to_json(), indent=1) if as_json else v.format_source_report(rep))
        if not rep.ok:
            sys.exit(1)
        return
    if manifest is None:
        raise click.UsageError("give a MANIFEST (or --source SRC_ROOT --dataset NAME)")
    if dataset is not None or split is not None:   # a manifest names its own dataset and split
        raise click.UsageError("--dataset / --split go with --source; a MANIFEST is checked as it is")
    rep = v.verify_manifest(manifest, deep=deep, jobs=jobs, strict=strict)
    click.echo(json.dumps(rep.to_json(), indent=1) if as_json else v.format_report(rep, verbose))
    if not rep.ok:
        sys.exit(1)


# ------------------------------------------------------------------------------ manifest

@click.group("manifest")
def manifest_group():
    """Inspect and merge preprocessed-dataset manifests."""


@manifest_group.command("merge")
@click.argument("shards", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("-o", "--out", "out", required=True, type=click.Path(dir_okay=False), help="Merged manifest.")
@click.option("--allow-partial", is_flag=True, help="Merge even if some shards of I/N are absent.")
@click.option("--overwrite", is_flag=True, help="Replace an existing output manifest.")
def manifest_merge_cmd(shards, out, allow_partial, overwrite):
    """Join shard manifests (from preprocess --shard I/N) into one; refuses inconsistent ones
    and an OUT that is one of the SHARDS."""
    from bps_assets.container import remove_stale_temps
    from bps_assets.pipeline.manifest import merge_manifests

    _refuse_an_input_as_output(shards, out)
    remove_stale_temps(out)  # ".manifest.json.*.tmp" of killed merges (a live writer's is locked, kept)
    m = merge_manifests(list(shards), out, overwrite=overwrite, allow_partial=allow_partial)
    n_failed = len(m.scenes(status="failed"))
    absent = m.doc.get("absent_shards")
    gap = (f"; shard(s) {', '.join(map(str, absent['index']))} of {absent['count']} absent: their scenes "
           "are neither listed nor counted missing" if absent else "")
    click.echo(f"merged {len(shards)} manifest(s): {len(m)} ok scenes, {n_failed} failed, "
               f"{len(m.missing)} missing{gap} -> {m.path}")


def _refuse_an_input_as_output(inputs, out) -> None:
    """ConfigError when ``out`` is one of ``inputs`` (the same file by any path or link, or
    the same path where neither exists yet): writing it would replace an input."""
    from bps_assets.errors import ConfigError

    for p in inputs:
        try:
            same = os.path.samefile(p, out)
        except OSError:   # one of them does not exist (yet): compare where they would be
            same = os.path.realpath(p) == os.path.realpath(out)
        if same:
            raise ConfigError(out, f"is one of the manifests to merge ({p}): writing it would replace that "
                                   "shard; choose another -o (e.g. manifest.json beside the shards)")


@manifest_group.command("show")
@click.argument("manifest", type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON on stdout.")
def manifest_show_cmd(manifest, as_json):
    """Summarize a manifest: dataset, split, scenes per subset, totals."""
    from bps_assets.pipeline.manifest import load_manifest

    m = load_manifest(manifest)
    subs = {s: len(m.scenes(s)) for s in m.subsets}
    total = m.output_bytes()   # each file once: shared assets are listed by every scene using them
    info = {"manifest": str(m.path), "dataset": m.dataset, "split": m.split, "tool_version": m.tool_version,
            "shard": m.shard, "scenes": subs, "failed": len(m.scenes(status="failed")),
            "missing": len(m.missing), "bytes": total}
    if as_json:
        click.echo(json.dumps(info, indent=1))
        return
    click.echo(f"{m.dataset} split {m.split!r} (bps {m.tool_version}): "
               + ", ".join(f"{k} {v}" for k, v in subs.items())
               + f" ok scenes; {info['failed']} failed, {info['missing']} missing; {total / 1e6:.1f} MB of "
               "outputs (each file once)")


# ------------------------------------------------------------------------------ launch

@click.command("launch")
@click.argument("src_root", type=click.Path(file_okay=False))
@click.option("-o", "--out", "out_root", required=True, type=click.Path(file_okay=False),
              help="Output directory (manifest.json, scenes/, navmeshes/, episodes/), as preprocess's.")
@click.option("--dataset", required=True, callback=_dataset_choice, help="Dataset: gibson, mp3d, hm3d, ...")
@click.option("--split", default=None, help="Split (default: the dataset's default, e.g. gibson 4+).")
@click.option("--shards", type=click.IntRange(min=1), required=True, help="Number of array tasks.")
@click.option("--navmesh", type=click.Choice(NAVMESH_MODES), default=DEFAULTS.navmesh, show_default=True,
              help="import the shipped .navmesh, build from the scene, or auto (import when present).")
@click.option("--episodes", type=click.IntRange(min=0), default=DEFAULTS.episodes, show_default=True,
              help="PointNav episodes per scene (0: none).")
@click.option("--up", type=click.Choice(UP_AXES), default=DEFAULTS.up,
              help="Up axis of the source files, instead of the dataset's (gibson/mp3d: z).")
@click.option("--strict", is_flag=True,
              help="Fail a scene whose .navmesh auto mode would replace by a built one.")
@skip_missing_assets_option
@nav_options
@convert_options
@click.option("--executor", type=click.Choice(["slurm", "local", "debug"]), default="slurm", show_default=True,
              help="submitit executor: slurm, or local / debug to try it on this machine (debug runs the "
                   "tasks in this process and, as submitit's debug executor does, opens pdb on a task's error).")
@click.option("--partition", default=None, help="SLURM partition (default: the cluster's).")
@click.option("--time", "time_min", type=click.IntRange(min=1), default=240, show_default=True,
              help="Minutes per task.")
@click.option("--cpus-per-task", type=click.IntRange(min=1), default=8, show_default=True,
              help="CPUs per task (its preprocess --workers).")
@click.option("--mem-gb", type=click.IntRange(min=1), default=32, show_default=True, help="Memory per task, GB.")
@click.option("--log-dir", default=None, help="submitit logs (default: OUT_ROOT/.bps-state/submitit).")
@click.option("--no-wait", is_flag=True, help="Submit and return (merge later with `manifest merge`).")
def launch_cmd(src_root, out_root, dataset, split, shards, navmesh, episodes, up, strict, skip_missing_assets,
               executor, partition, time_min, cpus_per_task, mem_gb, log_dir, no_wait, **settings):
    """Preprocess on a cluster: one submitit job array of --shards tasks, then merge."""
    from bps_assets.pipeline.launch import SlurmOptions, launch
    from bps_assets.pipeline.preprocess import PreprocessOptions

    opts = PreprocessOptions(navmesh=navmesh, episodes=episodes, workers=cpus_per_task, up=up, strict=strict,
                             skip_missing_assets=skip_missing_assets, nav=nav_settings_given(settings),
                             convert=convert_changes(settings))
    slurm = SlurmOptions(partition=partition, time_min=time_min, cpus_per_task=cpus_per_task, mem_gb=mem_gb)
    res = launch(src_root, out_root, dataset, split, shards, opts, slurm, executor=executor,
                 log_dir=log_dir, wait=not no_wait, log=click.echo)
    if res.manifest is not None:
        click.echo(f"merged manifest: {res.manifest}")
    if not res.ok:
        sys.exit(1)


commands = [datasets_cmd, preprocess_cmd, verify_cmd, manifest_group, launch_cmd]
