"""`bps-assets navmesh` (build / import), `bps-assets nav info|distance|sample|step`, `preview`."""
from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import click

from bps_assets.errors import BpsError, ConfigError, InputError, OutputExistsError
from bps_assets.json_input import parse_json
from bps_assets.nav.settings import DEFAULT_SETTINGS as S
from bps_assets.transforms.frame import DATASETS, DEFAULTS as FRAME, UP_AXES

from .options import NAV_KEYS, Finite, nav_options, options_given

NAV_SUFFIX = ".navmesh.bps"


def _out_name(path: Path) -> str:
    """NAME.navmesh.bps, NAME the scene's name as ``preprocess`` gives it (habitat's: the file name
    up to its first dot, ``X.basis.glb`` / ``X.basis.navmesh`` -> ``X``)."""
    from bps_assets.habitat_names import habitat_scene_name

    return habitat_scene_name(path) + NAV_SUFFIX


@click.command("navmesh")
@click.argument("inputs", nargs=-1, required=True,
                type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="output directory: one NAME.navmesh.bps per input (NAME: its file name up to the first "
                   "dot, leading dots dropped; --overwrite replaces only one made from the same resolved path or "
                   "from the same bytes (sha256): another path with other bytes is refused)")
@click.option("--dataset", type=click.Choice(DATASETS), default=FRAME.dataset, show_default=True,
              help="source frame preset of the scans: gibson/mp3d are Z-up (rotated into the habitat "
                   "frame), generic is Y-up")
@nav_options
@click.option("--recast-compat/--exact", "recast_compat", default=S.recast_compat, show_default=True,
              help="round like Recast (radius up to whole cells, obstacles block whole cells: "
                   "habitat-identical navmeshes) instead of eroding by the exact radius")
@click.option("--up", type=click.Choice(UP_AXES), default=FRAME.up,
              help="up axis of the scans, overriding --dataset's preset (gibson/mp3d: z, generic: y); "
                   "a packed scene keeps its own frame")
@click.option("--force", is_flag=True,
              help="build on a scan that looks read with the wrong up axis (refused by default)")
@click.option("--overwrite", is_flag=True, help="replace existing outputs")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object per input")
def navmesh_cmd(inputs, out_dir, dataset, agent_height, agent_radius, max_climb, max_slope, cell_size,
                cell_height, recast_compat, up, force, overwrite, as_json):
    """Build navmeshes from scans (.glb/.gltf/.ply/.obj or packed scenes), or import Detour
    navmeshes (habitat .navmesh, Detour .bin sets or tiles), into OUT/NAME.navmesh.bps. The
    file's type comes from its content; a packed navmesh (.navmesh.bps) is refused (use `nav
    info`). A Detour navmesh keeps the agent it was eroded for: --agent-radius/--agent-height
    other than its own are refused, as preprocess refuses them. Prints area, islands and seconds; an input whose navmesh has no navigable area
    fails (exit 2, nothing written) with the likely cause."""
    from bps_assets.nav import NavSettings
    from bps_assets.nav.sources import navmesh_from_file

    settings = NavSettings(cell_size=cell_size, cell_height=cell_height, agent_height=agent_height,
                           agent_radius=agent_radius, max_climb=max_climb, max_slope=max_slope,
                           recast_compat=recast_compat)
    targets = [(p, out_dir / _out_name(p)) for p in inputs]
    names = [t.name for _, t in targets]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise click.UsageError(f"two inputs give the same output name: {', '.join(dup)}")
    from bps_assets.container import check_name_length, refuse_other_source, remove_stale_temps

    for _, dst in targets:  # names the file system cannot hold, before any (slow) build
        check_name_length(dst)
    packed = {src for src, _ in targets if _is_packed_navmesh(src)}   # each refused as itself below
    for src, dst in targets:  # refuse before any (slow) build
        if src in packed:
            continue
        if not overwrite and dst.exists():
            raise OutputExistsError(dst, "already exists (pass --overwrite to replace it)")
        if overwrite:  # --overwrite replaces this scan's own navmesh, not another scan's of that name
            refuse_other_source(dst, src)
    # an imported .navmesh keeps the agent it was built for; other agent options are refused
    given = bool(options_given(NAV_KEYS + ("recast_compat",)))
    agent_given = bool(options_given(("agent_radius", "agent_height")))   # else a .navmesh's own agent
    failed = []
    for src, dst in targets:  # like convert: a bad input is one line, the others still go on
        t0 = time.perf_counter()
        try:
            if src in packed:
                raise _packed_navmesh_error(src)
            remove_stale_temps(dst)  # ".NAME.navmesh.bps.*.tmp" of killed runs (a live writer's is locked, kept)
            nav = navmesh_from_file(src, settings if given else None, dataset=dataset, force_up=force, up=up,
                                    keep_agent=not agent_given)
            if not nav.navigable_area > 0:   # nothing to navigate: a failure, as in preprocess
                raise _no_area(src, nav, settings, dataset, up)
            nav.save(dst, overwrite=overwrite)
        except BpsError as e:
            failed.append(e.exit_code)
            if as_json:
                click.echo(json.dumps({"input": str(src), "ok": False, "error": str(e)}))
            else:
                click.echo(f"error: {e}", err=True)
            continue
        secs = time.perf_counter() - t0
        rec = {"input": str(src), "output": str(dst), "method": nav.method,
               "navigable_area": round(nav.navigable_area, 4), "islands": nav.num_islands,
               "island_areas": [round(float(a), 4) for a in nav.island_area[:20]],
               "spans": nav.num_spans, "seconds": round(secs, 3)}
        warning = _floor_warning(nav)
        if warning:
            rec["warning"] = warning
        if as_json:
            click.echo(json.dumps(rec))
        else:
            n = rec["islands"]
            click.echo(f"{src.name} -> {dst}: {rec['navigable_area']:.2f} m^2, {n} island{'s' * (n != 1)}, "
                       f"{secs:.2f} s")
            if warning:
                click.echo(f"warning: {src.name}: {warning}", err=True)
    if len(targets) > 1 and not as_json:
        click.echo(f"{len(targets) - len(failed)} navmeshes written, {len(failed)} failed", err=bool(failed))
    if failed:
        sys.exit(max(failed))


def _no_area(src: Path, nav, settings, dataset, up):
    """The EmptySceneError for ``src`` whose navmesh ``nav`` has no navigable area, with the
    likely cause (``pipeline.scene_checks``) read from the triangles it was built from."""
    from bps_assets.errors import EmptySceneError
    from bps_assets.nav.build import frame_options
    from bps_assets.nav.sources import navmesh_input
    from bps_assets.pipeline.scene_checks import likely_cause, mesh_cause
    from bps_assets.readers.detect import resolve_kind
    from bps_assets.transforms.frame import up_axis

    kind = resolve_kind(src)
    if kind == "bps-scene":
        cause = likely_cause(src, settings)
    elif kind in ("glb", "gltf", "ply", "obj"):
        v, t = navmesh_input(src, settings.max_slope, True, dataset, up=up)  # read again: a failure only
        cause = mesh_cause(v, t, up_axis(frame_options(dataset, up)), settings)
    else:  # an imported or loaded navmesh
        cause = f"the {nav.method or 'imported'} navmesh in the file has no walkable cell"
    return EmptySceneError(src, f"the navmesh has no navigable area ({cause}); nothing written")


def _is_packed_navmesh(src: Path) -> bool:
    """Whether ``src`` is a bps navmesh (by content)."""
    from bps_assets.readers.detect import resolve_kind

    return resolve_kind(src) == "bps-navmesh"


def _packed_navmesh_error(src: Path) -> InputError:
    """A bps navmesh has nothing left to build or import: ``navmesh`` refuses it rather than
    copy it (under its own name since scenes are named up to the first dot, or a doubled one)."""
    return InputError(src, "already a packed navmesh (nothing to build): query it with `bps-assets nav "
                           "info|distance|sample|step` or `preview`, or give the scan or Detour file it was made from")


def _floor_warning(nav) -> str | None:
    """``scan_checks.floor_problem`` of a navmesh built from a scan (None for imports)."""
    foot = nav.source_info.get("footprint_area")
    if foot is None:
        return None
    from bps_assets.nav.scan_checks import floor_problem

    biggest = float(nav.island_area[0]) if nav.num_islands else 0.0
    return floor_problem(nav.navigable_area, biggest, foot)


def _load(path: Path):
    """The navmesh of ``path``; parts of the file read but not understood are printed as one
    ``warning:`` line each on stderr (``nav info`` lists them again in its report)."""
    import warnings

    from bps_assets.nav.detour import NavFormatWarning
    from bps_assets.nav.sources import open_navmesh

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", NavFormatWarning)
        nav = open_navmesh(path)
    for w in caught:
        if issubclass(w.category, NavFormatWarning):
            click.echo(f"warning: {w.message}", err=True)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return nav


def _vec3(ctx, param, value):
    if value is None:
        return None
    try:
        v = [float(x) for x in value.split(",")]
    except ValueError:
        raise click.BadParameter(f"expected x,y,z numbers, got {value!r}") from None
    if len(v) != 3 or not all(math.isfinite(x) for x in v):
        raise click.BadParameter(f"expected three finite numbers x,y,z, got {value!r}")
    return v


def _read_pairs(pairs_file: Path):
    import numpy as np

    try:
        pairs = parse_json(Path(pairs_file).read_bytes(), pairs_file)
        a = np.array([p["a"] for p in pairs], dtype=np.float64).reshape(-1, 3)
        b = np.array([p["b"] for p in pairs], dtype=np.float64).reshape(-1, 3)
        if len(a) != len(pairs) or len(b) != len(pairs):
            raise ValueError("each a/b must be 3 numbers")
        if not (np.isfinite(a).all() and np.isfinite(b).all()):
            raise ValueError("coordinates must be finite numbers (NaN or inf given)")
    except (OSError, ValueError, TypeError, KeyError) as e:
        raise InputError(pairs_file, f'expected a JSON list of {{"a": [x,y,z], "b": [x,y,z]}}: {e}') from None
    return a, b


def _num(x):
    return None if not math.isfinite(x) else round(float(x), 6)


@click.group("nav")
def nav_group():
    """Query a navmesh (a packed .navmesh.bps or a habitat .navmesh)."""


@nav_group.command("info")
@click.argument("navfile", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="print the result as JSON on stdout")
def nav_info(navfile, as_json):
    """Settings, bounds, navigable area, islands with areas."""
    info = _load(navfile).info()
    if as_json:
        click.echo(json.dumps(info, indent=1))
        return
    b = info["bounds"]
    click.echo(f"{navfile}: {info['method']} navmesh, grid {info['shape']} (layers, rows, cols), "
               f"cell {info['cell_size']} m, {info['num_spans']} spans")
    click.echo(f"bounds: min {[round(x, 3) for x in b['min']]} max {[round(x, 3) for x in b['max']]}")
    n = info["num_islands"]
    click.echo(f"navigable area: {info['navigable_area']:.3f} m^2 in {n} island{'s' * (n != 1)}")
    for isl in info["islands"][:50]:
        click.echo(f"  island {isl['id']}: {isl['area']:.3f} m^2, radius {isl['radius']:.2f} m")
    if len(info["islands"]) > 50:
        click.echo(f"  ... {len(info['islands']) - 50} more")
    st = info["settings"]
    det = info.get("detour")
    if det and not det["settings"]:
        # no settings block: only the agent (tile headers) is the file's; the rest are defaults
        agent = ("agent_height", "agent_radius", "max_climb")
        click.echo("agent (tile headers): " + ", ".join(f"{k}={st[k]}" for k in agent if k in st))
        click.echo("other settings (not in the file; bps defaults used to read it): "
                   + ", ".join(f"{k}={v}" for k, v in st.items() if k not in agent))
    else:
        click.echo("settings: " + ", ".join(f"{k}={v}" for k, v in st.items()))
    if det:
        layout = det["settings_layout"] or ("none" if not det["settings_bytes"] else "unknown")
        click.echo(f"detour set: version {det['set_version']}, {det['tiles']} tiles, "
                   f"{det['polygons']} polygons, {det['tile_ref_bits']}-bit tile refs, "
                   f"{det['link_ref_bits']}-bit links; settings block: {det['settings_bytes']} "
                   f"bytes, layout {layout}")
        if det["settings"]:
            click.echo("file settings: " + ", ".join(f"{k}={v}" for k, v in det["settings"].items()))


@nav_group.command("distance")
@click.argument("navfile", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--pairs", "pairs_file", default=None, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help='JSON list of {"a": [x,y,z], "b": [x,y,z]} (habitat frame)')
@click.option("--from", "start", default=None, callback=_vec3, help="x,y,z: one pair instead of --pairs")
@click.option("--to", "end", default=None, callback=_vec3, help="x,y,z (with --from)")
@click.option("--json", "as_json", is_flag=True, help="print the result as JSON on stdout")
def nav_distance(navfile, pairs_file, start, end, as_json):
    """Geodesic distance per pair (null: unreachable or unsnappable): --from X,Y,Z --to X,Y,Z,
    or --pairs FILE."""
    import numpy as np

    if (start is None) != (end is None):
        raise click.UsageError("--from and --to go together")
    if (pairs_file is None) == (start is None):
        raise click.UsageError("give either --from X,Y,Z --to X,Y,Z or --pairs FILE")
    if start is not None:
        a, b = np.array([start], np.float64), np.array([end], np.float64)
    else:
        a, b = _read_pairs(pairs_file)
    nav = _load(navfile)
    d = nav.geodesic_distance(a, b) if len(a) else np.zeros(0)
    vals = [_num(x) for x in np.atleast_1d(d)]
    if as_json:
        click.echo(json.dumps(vals))
    else:
        for v in vals:
            click.echo("null" if v is None else f"{v:.4f}")


@nav_group.command("sample")
@click.argument("navfile", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("-n", "n", default=1, show_default=True, type=click.IntRange(min=0), help="number of points")
@click.option("--seed", default=0, show_default=True, type=int, help="seed of the sample")
@click.option("--island", default=None, type=int, help="sample on this island only")
@click.option("--json", "as_json", is_flag=True, help="print the result as JSON on stdout")
def nav_sample(navfile, n, seed, island, as_json):
    """N navigable points, uniform over the area (seeded)."""
    pts = _load(navfile).sample_navigable_point(n, seed=seed, island=island)
    rows = [[round(float(x), 6) for x in p] for p in pts]
    if as_json:
        click.echo(json.dumps(rows))
    else:
        for r in rows:
            click.echo(",".join(f"{x:.4f}" for x in r))


@nav_group.command("step")
@click.argument("navfile", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--from", "start", required=True, callback=_vec3, help="x,y,z")
@click.option("--to", "end", required=True, callback=_vec3, help="x,y,z")
@click.option("--no-sliding", is_flag=True, help="stop at the wall instead of sliding along it")
@click.option("--json", "as_json", is_flag=True, help="print the result as JSON on stdout")
def nav_step(navfile, start, end, no_sliding, as_json):
    """habitat's try_step from --from towards --to; prints where the agent ends up."""
    import numpy as np

    nav = _load(navfile)
    p = nav.try_step(np.array(start), np.array(end), sliding=not no_sliding)
    res = [round(float(x), 6) for x in p]
    # habitat-sim's rule (ObjectControls.action): collided when the filter shortened the move,
    # squared lengths with an epsilon of 1e-5; a step up stairs moves the end, not a collision
    a, b, q = np.array(start, np.float64), np.array(end, np.float64), np.asarray(p, np.float64)
    collided = bool(float((q - a) @ (q - a)) + 1e-5 < float((b - a) @ (b - a)))
    if as_json:
        click.echo(json.dumps({"position": res, "collided": collided}))
    else:
        click.echo(",".join(f"{x:.4f}" for x in res) + ("  (collided)" if collided else ""))


# preview's options that draw on the floor map, not on --semantic's object map
_NOT_SEMANTIC = {"episodes_file": "--episodes", "max_episodes": "--max-episodes",
                 "agent_paths": "--agent-path", "mpp": "--mpp"}


def _png_name(ctx, param, value):
    """The map is a PNG: another name (map.jpg, map) would hold PNG bytes under a false name."""
    if value is not None and value.suffix.lower() != ".png":
        raise click.BadParameter(f"{value}: the map is written as PNG: give a name ending in .png")
    return value


@click.command("preview")
@click.argument("navfile", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("-o", "--out", "out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              callback=_png_name, help="PNG file (.png)")
@click.option("--overwrite", is_flag=True, help="replace an existing PNG file")
@click.option("--max-size", default=1600, show_default=True, type=click.IntRange(min=64),
              help="largest side of the map in pixels (when --mpp is not given)")
@click.option("--mpp", type=Finite(min=0, min_open=True), default=None,
              help="metres per pixel (default: the smallest 1/2/5 x 10^k that fits --max-size)")
@click.option("--episodes", "episodes_file", type=click.Path(exists=True, path_type=Path), default=None,
              help="a PointNav, ObjectNav or InstanceImageNav dataset (split file, its folder, its content "
                   "folder or a content file): draw its episodes' starts, goals (view points) and geodesic "
                   "shortest paths")
@click.option("--scene", default=None, help="with --episodes: the scene whose episodes to draw; with "
                                            "--agent-path / --semantic: a recorded path / packed scene of "
                                            "this scene is drawn too, for a navmesh that records another "
                                            "(default: the navmesh file's name)")
@click.option("--max-episodes", default=20, show_default=True, type=click.IntRange(min=0),
              help="with --episodes: draw at most this many (the file's first)")
@click.option("--agent-path", "agent_paths", multiple=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="positions to draw as an agent's path: JSON list of [x,y,z] (or bps-train --video's "
                   "EPISODE.json) or 'x y z' lines; repeatable")
@click.option("--semantic", "semantic", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="a packed scene (.bps) with a semantic section: draw its objects on the map")
def preview_cmd(navfile, out, overwrite, max_size, mpp, episodes_file, scene, max_episodes, agent_paths, semantic):
    """Top-down map of a navmesh: one panel per floor, islands coloured, scale bar and legend;
    optionally a dataset's episodes, agents' paths, or a scene's objects (--semantic) on it."""
    from bps_assets.nav.topdown import MapOptions, write_map

    if semantic is not None:   # another map (objects on the floors): the episode / path options do not apply
        given = [_NOT_SEMANTIC[name] for name in options_given(_NOT_SEMANTIC)]
        if given:
            raise click.UsageError(f"--semantic draws a scene's objects only: {', '.join(given)} cannot "
                                   "go with it (make a second map without --semantic for those)")
        nav = _load(navfile)
        _semantic_preview(nav, navfile, semantic, out, overwrite, max_size, scene)
        return
    if episodes_file is None and options_given(["max_episodes"]) or scene and not (episodes_file or agent_paths):
        raise click.UsageError("--scene goes with --episodes, --agent-path or --semantic, --max-episodes with "
                               "--episodes: alone they would draw nothing")
    nav = _load(navfile)
    from bps_assets.habitat_names import habitat_scene_name

    episodes = _scene_episodes(episodes_file, scene or habitat_scene_name(navfile), max_episodes) if episodes_file else []
    paths = [_agent_path(p, navfile, nav, scene) for p in agent_paths]
    try:
        info = write_map(nav, out, episodes=episodes, agent_paths=paths, overwrite=overwrite,
                         options=MapOptions(metres_per_pixel=mpp, max_size=max_size, islands=True))
    except ConfigError as e:   # the map's frame (its size at --mpp): named after the file given, not its scan
        raise ConfigError(navfile, e.detail) from None
    extra = f", {info['episodes']} episode(s)" if episodes_file else ""
    extra += f" ({info['unreachable']} with no path on this navmesh)" if info["unreachable"] else ""
    extra += f", {info['agent_paths']} agent path(s)" if agent_paths else ""
    click.echo(f"{out}: {info['width']}x{info['height']} px at {info['metres_per_pixel']:g} m/px, "
               f"{info['floors']} floor(s), {info['islands']} island{'s' * (info['islands'] != 1)}{extra}")


def _map_scenes(navfile: Path, nav) -> tuple[set, bool]:
    """(the scene names a navmesh is the map of: its file's and its recorded source's, whether it
    records the scene it was built from). An imported habitat / Detour ``.navmesh`` (method
    "detour") records only its own file's name: like a file name, a rename changes it, so another
    scene's file cannot be told from its own and is drawn with a note, not refused."""
    from bps_assets.habitat_names import habitat_scene_name

    names = {habitat_scene_name(navfile)} | ({habitat_scene_name(nav.source)} if nav.source else set())
    return names, bool(nav.source) and nav.method != "detour"


def _unchecked(navfile: Path, what: str) -> None:
    click.echo(f"note: {navfile} records no scene it was built from (an imported .navmesh): {what} "
               "drawn unchecked", err=True)


def _check_map_scene(navfile: Path, nav, path: Path, recorded, scene, what: str, drawn: str) -> None:
    """``topdown.check_map_scene`` of ``path`` (``what`` it is, the scene it ``recorded``) against
    the navmesh's scenes and ``--scene``: refused (naming ``--scene``) on a navmesh that records
    its scene, ``drawn`` unchecked with a note on one that does not."""
    from bps_assets.nav.topdown import check_map_scene

    scenes, checked = _map_scenes(navfile, nav)
    try:
        check_map_scene(path, recorded, scenes | ({scene} if scene else set()), what)
    except InputError as e:
        if checked:
            raise InputError(path, f"{e.detail} (or --scene with that name if this navmesh is of it)") from None
        _unchecked(navfile, drawn)


def _agent_path(path: Path, navfile: Path, nav, scene):
    """``--agent-path``'s positions; one whose recorder JSON names another scene is refused on a
    navmesh that records its scene (``--scene`` names the map's scene instead), drawn with a note
    on one that does not."""
    from bps_assets.nav.topdown import read_agent_path_scene

    pts, recorded = read_agent_path_scene(path)   # read once; a bad file: its own error
    _check_map_scene(navfile, nav, path, recorded, scene, "an episode", f"{path.name}'s scene")
    return pts


def _semantic_preview(nav, navfile: Path, semantic: Path, out, overwrite, max_size, scene=None):
    """``--semantic``'s map; a packed scene of another scene than the navmesh records is refused
    (``--scene`` names the map's scene instead, as for ``--agent-path``), drawn with a note on
    a navmesh that records none."""
    from bps_assets.nav.semantic_preview import write_semantic_preview
    from bps_assets.packed_scene import read_packed_scene

    packed = read_packed_scene(semantic, sections=["object_ids", "object_category", "object_region",
                                                   "object_aabb", "object_source_ids"])
    recorded = packed.scene_id if isinstance(packed.scene_id, str) and packed.scene_id else None
    # another scene's objects: a wrong map, not a map
    _check_map_scene(navfile, nav, semantic, recorded, scene, "the packed scene",
                 f"{semantic.name}'s objects (scene {recorded!r})")
    table = packed.semantics
    if table is None:   # bad input like any other: "error: ...", exit 2
        raise InputError(semantic, "the packed scene has no semantic section")
    info = write_semantic_preview(nav, table, out, overwrite=overwrite, max_size=max_size)
    click.echo(f"{out}: {info['width']}x{info['height']} px, {info['floors']} floor(s), "
               f"{info['objects']} objects" + (f" ({info['outside']} off the map, not drawn)" if info["outside"] else ""))


def _file_task(path: Path) -> str:
    """The task whose episode file ``path`` is (a split file, its folder or content folder, or a
    content file), by the keys of the first of its files that shows them
    (``episode_tasks.episode_file_task``: a split file whose episodes are in ``content/`` may
    show none); "pointnav" when none does."""
    from bps_assets.nav.episode_tasks import episode_file_task
    from bps_assets.nav.episodes import CONTENT_DIR, SUFFIX, split_file_of

    split = split_file_of(path)   # the file the readers read (a folder: its split file)
    folder = split.parent
    for f in ([split] if split.is_file() else []) + sorted((folder / CONTENT_DIR).glob(f"*{SUFFIX}")):
        found = episode_file_task(f)
        if found is not None:
            return found[0]
    return "pointnav"


def _scene_episodes(path: Path, scene: str, limit: int) -> list:
    """The first ``limit`` episodes of ``scene`` in a PointNav, ObjectNav or InstanceImageNav
    dataset, read by the reader of the task its keys show (``_file_task``), whose errors name what
    is wrong (an ObjectNav or InstanceImageNav episode gets its goal objects, with their view
    points); InputError when it has none. A ``content/`` folder is read as its split folder
    (``episodes.split_file_of``, as every reader reads a folder)."""
    task = _file_task(path)
    if task == "instance_imagenav":
        from bps_assets.nav.instance_imagenav_files import read_instance_imagenav_dataset

        ds = read_instance_imagenav_dataset(path)
        eps = [{**e, "goals": [ds.goal_of(e)]} for e in ds.episodes]
    elif task == "objectnav":
        from bps_assets.nav.objectnav_files import read_objectnav_dataset

        ds = read_objectnav_dataset(path)
        eps = [{**e, "goals": ds.goals_of(e)} for e in ds.episodes]
    else:
        from bps_assets.nav.episodes import read_pointnav_dataset

        eps = read_pointnav_dataset(path)
    from bps_assets.habitat_names import habitat_scene_name

    name = lambda e: habitat_scene_name(e["scene_id"])  # noqa: E731
    mine = [e for e in eps if name(e) == scene]
    if not mine:
        scenes = sorted({name(e) for e in eps})
        raise InputError(path, f"no episode of scene {scene!r} (it has {', '.join(scenes[:8]) or 'none'}"
                               f"{' ...' if len(scenes) > 8 else ''}): choose one with --scene")
    return mine[:limit]


commands = [navmesh_cmd, nav_group, preview_cmd]
