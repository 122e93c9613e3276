"""`bps-assets episodes`: PointNav episodes (habitat v1 layout) from navmeshes."""
from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

import click

from bps_assets.errors import BpsError, OutputExistsError
from bps_assets.nav import episodes as ep

D = ep.DEFAULTS


# stripped from the end of a NAVFILE's name, repeatedly: Allensville.navmesh.bps -> Allensville
_NAV_SUFFIXES = (".bps", ".navmesh", ".navm", ".bin")


def scene_name(path: Path) -> str:
    """The scene a navmesh file belongs to: its name without the navmesh suffixes
    (``A.navmesh.bps``, ``A.navmesh``, ``A.navm``, ``A.bin`` -> ``A``), else without its
    extension."""
    name = path.name
    while True:
        suf = next((s for s in _NAV_SUFFIXES if name.lower().endswith(s) and len(name) > len(s)), None)
        if suf is None:
            break
        name = name[: -len(suf)]
    return name if name != path.name else path.stem


def _scene_episodes(path: Path, name: str, dataset: str, per_scene: int, seed: int, opts) -> tuple[list, dict]:
    t0 = time.perf_counter()
    from bps_assets.nav.sources import open_navmesh

    nm = open_navmesh(path)  # the file's magic bytes say which reader
    stats: dict = {}
    eps = ep.generate_episodes(nm, ep.scene_id_for(dataset, name), per_scene, ep.scene_seed(seed, name),
                               opts, stats=stats)
    stats["seconds"] = round(time.perf_counter() - t0, 3)
    return eps, stats


@click.command("episodes")
@click.argument("navfiles", nargs=-1, required=True,
                type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(path_type=Path),
              help="dataset root: writes OUT/SPLIT/SPLIT.json.gz and OUT/SPLIT/content/")
@click.option("--split", required=True, help="split name (train, val, ...)")
@click.option("--per-scene", "per_scene", required=True, type=click.IntRange(min=1),
              help="episodes per scene")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--dataset", type=click.Choice(["gibson", "mp3d", "generic"]), default="generic",
              show_default=True,
              help="scene_id layout: gibson/NAME.glb, mp3d/NAME/NAME.glb or NAME.glb")
@click.option("--goal-radius", type=float, default=D.goal_radius, show_default=True,
              help="goals[].radius written (habitat-lab's generator writes 0.2)")
@click.option("--overwrite", is_flag=True, help="replace an existing split")
@click.option("--json", "as_json", is_flag=True, help="print per-scene statistics as JSON")
def episodes_cmd(navfiles, out_dir, split, per_scene, seed, dataset, goal_radius, overwrite,
                 as_json):
    """Generate PointNav episodes with habitat-lab's rules from NAVFILE... (packed navmeshes or
    habitat .navmesh files; the scene name is the file name without its navmesh suffixes:
    Allensville.navmesh.bps and Allensville.navmesh are scene Allensville).

    A scene that cannot give episodes is reported on one line and the others are still
    written; the exit status is non-zero if any scene failed.
    """
    names = [scene_name(p) for p in navfiles]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise click.UsageError(f"two NAVFILEs give the same scene name: {', '.join(sorted(dup))}")
    target = ep.split_file(out_dir, split)
    if target.exists() and not overwrite:  # fail before the (slow) generation
        raise OutputExistsError(target, "already exists (pass --overwrite to replace the split)")
    opts = ep.EpisodeOptions(goal_radius=goal_radius)
    by_scene, report, failed = {}, [], []
    for path, name in zip(navfiles, names):
        # one scene that cannot give episodes must not cost the others theirs
        try:
            by_scene[name], stats = _scene_episodes(path, name, dataset, per_scene, seed, opts)
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
                click.echo(f"{name}: {stats['episodes']} episodes from {stats['targets']} targets "
                           f"in {stats['seconds']:.1f} s")
            continue
        click.echo(f"error: {name}: {failed[-1]['error']}", err=True)
    written = ep.write_pointnav_dataset(out_dir, split, by_scene, overwrite=overwrite) if by_scene else []
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
