"""`bps-assets synth`: write scan-like demo scenes in the Gibson / MP3D dataset layouts."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from bps_assets import synth

from .cmd_episodes import SEMANTIC_TASKS   # semantic scenes' tasks, each with its own agent


def _line(info) -> str:
    storeys = len(info.storeys)
    extras = []
    if info.stairs is not None:
        extras.append("stairs")
    if info.closed_room is not None:
        extras.append("closed room")
    return (f"{info.relpath}  {info.split:<5}  {storeys} storey{'s' if storeys > 1 else ' '}  "
            f"{len(info.rooms):2d} rooms  {info.triangles:>8,} tris  {info.floor_area:7.1f} m2 floor  "
            f"{info.textures} textures  {info.bytes / 1e6:7.2f} MB  {info.seconds:6.2f} s"
            + (f"  ({', '.join(extras)})" if extras else ""))


@click.command("synth")
@click.argument("outdir", type=click.Path(file_okay=False))
@click.option("--layout", type=click.Choice(synth.LAYOUTS), default="gibson", show_default=True,
              help="Dataset layout: gibson -> OUTDIR/gibson/NAME.glb, mp3d -> OUTDIR/mp3d/ID/ID.glb.")
@click.option("--scenes", "-n", type=click.IntRange(min=1), default=2, show_default=True,
              help="Number of scenes (names from data_manifests/, train and val interleaved).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed; a scene is a function of (layout, name, seed, size).")
@click.option("--size", type=click.Choice(tuple(synth.SIZES)), default="small", show_default=True,
              help="small: ~30K triangles, 256/512 px textures; gibson: ~600K triangles, ~150 m2, 2048^2 textures.")
@click.option("--overwrite", is_flag=True, help="Replace existing scene files (default: keep them, add the missing).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document with every scene's ground truth.")
@click.option("--semantic", is_flag=True,
              help="Also write object annotations: gibson layout -> HM3D-Semantics NAME.semantic.glb/.txt, "
                   "mp3d -> ID_semantic.ply + ID.house (ground truth: objects per category); a kept scan without "
                   "them fails (exit 1): --overwrite writes both.")
@click.option("--roof", is_flag=True,
              help="Add a walkable flat roof over the top storey (an outdoor island: episodes avoid it).")
def synth_cmd(outdir, layout, scenes, seed, size, overwrite, as_json, semantic, roof):
    """Write scan-like demo scenes (rooms, doors, furniture, stairs; Z up like the real scans)."""
    progress = None if as_json else (lambda info: click.echo(_line(info)))
    infos = synth.generate(outdir, layout=layout, scenes=scenes, seed=seed, size=size,
                           overwrite=overwrite, progress=progress, keep_existing=True, roof=roof)
    written = {i.name for i in infos}
    kept = [n for n, _ in synth.scene_names(layout, scenes) if n not in written]
    if kept and not as_json:  # an existing folder: the missing scenes are added, the others kept
        click.echo(f"{len(kept)} scene(s) already in {outdir} kept (--overwrite to replace them)")
    # --semantic annotates the scenes it writes; a kept scan may come from another --seed / --size
    unannotated = [n for n in kept if semantic and not _annotated(outdir, layout, n)]
    truth = {}
    if semantic:
        from bps_assets.synth import semantic as ssem

        for i in infos:
            write = ssem.write_mp3d if layout == "mp3d" else ssem.write_hm3d
            truth[i.name] = write(i.path, layout, i.name, seed, size, overwrite=overwrite)
            if not as_json:
                click.echo(f"  {i.name}: {truth[i.name]['objects']} annotated objects "
                           f"({'MP3D' if layout == 'mp3d' else 'HM3D-Semantics'} format)")
    if as_json:
        click.echo(json.dumps({"out_root": str(outdir), "layout": layout, "seed": seed, "size": size,
                               "scenes": [{**i.to_dict(), **({"semantic": truth[i.name]} if semantic else {})}
                                          for i in infos], "kept": kept,
                               **({"not_annotated": unannotated} if unannotated else {})}, indent=1))
    else:
        tri = sum(i.triangles for i in infos)
        click.echo(f"{len(infos)} scenes, {tri:,} triangles, {sum(i.bytes for i in infos) / 1e6:.1f} MB "
                   f"in {sum(i.seconds for i in infos):.1f} s -> {outdir}")
        names = [n for n, _ in synth.scene_names(layout, scenes)]
        first, *others = SEMANTIC_TASKS if semantic else (None,)
        click.echo(f"preprocess them: {preprocess_command(outdir, layout, names, task=first)}")
        for task in others:   # each task refuses navmeshes built for another agent
            click.echo(f"  for {task} (its agent): {preprocess_command(outdir, layout, names, task=task)}")
        if semantic:
            click.echo(f"(navmeshes for each task's agent: {', '.join(SEMANTIC_TASKS)}; the steps to an "
                       "ObjectNav eval video: docs/OBJECTNAV.md)")
    if unannotated:
        click.echo(f"error: {len(unannotated)} kept scene(s) have no annotations: {', '.join(unannotated)}; "
                   "--semantic annotates only the scenes it writes (a kept scan may come from another --seed "
                   "or --size): rerun with --overwrite to write scans and annotations together", err=True)
        sys.exit(1)


def _annotated(outdir, layout: str, name: str) -> bool:
    """Whether the kept scan ``name`` has its annotation pair beside it (``--semantic``'s files)."""
    scan = Path(outdir) / synth.scene_relpath(layout, name)
    return all(p.is_file() for p in synth.semantic_paths(scan, layout))


def preprocess_command(outdir, layout: str, names, task: str | None = None) -> str:
    """The `bps-assets preprocess` command line that takes exactly the split these scenes
    belong to (synth names scenes after a dataset's, e.g. gibson's tiny split); ``task``: with
    that task's navmesh agent (its options' default, read without torch from ``tasks.options``)
    into its own output folder (OUTDIR-out for ObjectNav, OUTDIR-TASK-out)."""
    import shlex

    from bps_assets.pipeline.datasets import load_dataset

    ds = load_dataset(layout)
    fits = ds.splits_holding(names)
    split = f" --split {fits[0][0]}" if fits and fits[0][0] != ds.default_split else ""
    suffix = "" if task in (None, SEMANTIC_TASKS[0]) else f"-{task}"
    out = shlex.quote(str(outdir).rstrip("/") + suffix + "-out")
    agent = ""
    if task is not None:
        from bps_runtime.tasks.options import task_agent

        radius, height = task_agent(task)
        agent = f" --agent-radius {radius} --agent-height {height}"
    return f"bps-assets preprocess {shlex.quote(str(outdir))} -o {out} --dataset {ds.name}{split}{agent}"


commands = [synth_cmd]
