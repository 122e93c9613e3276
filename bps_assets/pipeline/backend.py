"""The per-scene work the pipeline orchestrates, behind one small adapter.

``Backend`` is the only place the pipeline calls the converters (``packed_scene``,
``nav``, ``nav.episodes``); preprocess, resume, shards and the manifest only see its four
methods. Tests pass a small fake backend to exercise the orchestration (failures, crashes,
kills) quickly, and the real one on synthetic scenes.

A backend instance is pickled to worker processes, so it holds only options, never open
files or loaded modules; the converters are imported lazily inside the methods.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from ..container import Container
from ..errors import BpsError, ConfigError, InputError, NavError, is_int

NAVMESH_MODES = ("auto", "import", "build")


def _asdict(obj) -> Any:
    if obj is None:
        return None
    if dataclasses.is_dataclass(obj):
        return {f.name: _asdict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [_asdict(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): _asdict(v) for k, v in obj.items()}
    if isinstance(obj, (str, int, float, bool)):
        return obj
    if hasattr(obj, "item"):  # numpy scalar
        return obj.item()
    return str(obj)


def container_info(path: Path) -> dict:
    """What the manifest records about a packed file's format: ``format`` (container kind,
    SCEN / NAVM), ``format_version`` (container version) and, when the header names them, the
    content format's own version (``content_version``: scene_format_version / navmesh version)."""
    from ..container import CONTAINER_VERSION

    with Container(path) as c:
        info = {"format": c.kind, "format_version": CONTAINER_VERSION}
        h = c.header
        cv = h.get("scene_format_version", h.get("version"))
        if is_int(cv):
            info["content_version"] = cv
    return info


def _composed_navmesh_note(packed: Path) -> tuple[str, str | None, bool] | None:
    """(scene instance file, why its navmesh_instance gives no navmesh or None, whether the file
    predates the ``navmesh_unknown`` header key and so cannot say) of a composed packed scene;
    None for a scan."""
    from ..composed_section import HEADER_KEY
    from ..scene_dataset.habitat import missing_navmesh_note, unknown_navmesh_note

    with Container(packed) as c:
        comp, scene = c.header.get(HEADER_KEY), c.header.get("scene_id")
    if not isinstance(comp, dict):
        return None
    handle, missing = comp.get("navmesh_unknown"), comp.get("navmesh_missing")
    note = unknown_navmesh_note(str(scene), handle) if isinstance(handle, str) and handle else None
    if note is None and isinstance(missing, str) and missing:   # the handle's file is not there
        note = missing_navmesh_note(str(scene), missing)
    return str(comp.get("source") or packed), note, "navmesh_unknown" not in comp


class Backend:
    """The real converters. ``convert_options`` / ``nav_settings``: None means the defaults
    (``packed_scene.DEFAULTS`` / ``nav.DEFAULT_SETTINGS``). ``up``: the sources' up axis
    (``y`` / ``z``) instead of the dataset's (``preprocess --up``). ``convert_changes``:
    ``ConvertOptions`` fields set on top of the dataset's preset (``preprocess --max-texture``).
    ``assets_since``: composed scenes' shared assets written before it are re-converted
    (``preprocess --force`` passes its run's start)."""

    name = "bps"

    def __init__(self, convert_options=None, nav_settings=None, up: str | None = None,
                 convert_changes: dict | None = None, force_up: bool = False,
                 skip_missing_assets: bool = False, assets_since: float | None = None):
        # composed scenes: shared assets written before this time are re-converted (--force); an
        # mtime on the output file system's clock (preprocess._run_start), as the assets' are
        self.assets_since = assets_since
        self.skip_missing_assets = skip_missing_assets  # composed scenes: drop instances whose files are missing
        self.convert_options = convert_options
        self.nav_settings = nav_settings
        self.up = up
        self.force_up = force_up   # build on a scan that looks read with the wrong up axis (--force)
        self.convert_changes = dict(convert_changes or {})  # on top of the dataset's preset

    # -- options
    def _convert_options(self, dataset_name: str | None = None):
        opts = dataclasses.replace(self._preset_options(dataset_name), **self.convert_changes)
        return opts if self.up is None else dataclasses.replace(opts, up=self.up)

    def _preset_options(self, dataset_name: str | None):
        if self.convert_options is not None:
            return self.convert_options
        from .. import packed_scene

        opts = packed_scene.DEFAULTS
        if not dataset_name:
            return opts
        # the converter's dataset preset (gibson / mp3d: Z-up scans, habitat scene ids); any
        # other dataset converts as generic with the up axis its data_manifests file names
        if dataset_name in ("gibson", "mp3d"):
            return dataclasses.replace(opts, dataset=dataset_name)
        from .datasets import load_dataset

        return dataclasses.replace(opts, dataset="generic", up=load_dataset(dataset_name).up_axis)

    def _nav_settings(self):
        if self.nav_settings is not None:
            return self.nav_settings
        from ..nav import DEFAULT_SETTINGS

        return DEFAULT_SETTINGS

    def settings(self, dataset_name: str) -> dict:
        """JSON-able settings that determine the outputs (part of each scene's fingerprint)."""
        from ..nav.episodes import DEFAULTS as EPISODE_DEFAULTS

        from ..packed_scene import settings_json

        # as the packed files' headers record them (an empty --lod left out: old fingerprints hold)
        convert = _asdict(settings_json(self._convert_options(dataset_name)))
        return {"backend": self.name,
                "convert": convert,
                "nav": _asdict(self._nav_settings()),
                "nav_import": "file" if self.nav_settings is None else "settings",
                "episode_options": _asdict(EPISODE_DEFAULTS),
                **({"skip_missing_assets": True} if self.skip_missing_assets else {})}

    # -- work
    def convert(self, src: Path, dst: Path, scene_id: str, dataset_name: str, stale_assets=()) -> dict:
        """Convert the scan ``src`` (or a composed scene's instance file) to ``dst``; returns its
        stats. ``stale_assets``: file names in the shared asset library to re-convert even when
        they look current (the resume check found them damaged)."""
        if str(src).endswith(".scene_instance.json"):  # a composed scene (scene_dataset)
            return self._convert_composed(src, dst, scene_id, dataset_name, stale_assets)
        from .. import packed_scene

        from ..readers.semantic_files import read_annotation
        from .scene_dataset_config import semantic_for

        ann, sem_error = None, None
        try:  # a broken pair: the scene converts without it, the error is reported
            sem = semantic_for(src, dataset_name)
            if sem is not None:
                ann = read_annotation(sem)
                ann.format = sem.format
        except BpsError as e:
            sem_error = f"{type(e).__name__}: {e}"
        res = packed_scene.convert_file(src, dst, self._convert_options(dataset_name), overwrite=True,
                                        semantic=ann)
        st = dict(getattr(res, "stats", None) or {})
        out = {"triangles": int(st.get("triangles_out", st.get("triangles", 0)) or 0),
               "texture_bytes": int(st.get("texture_bytes", 0) or 0),
               "bytes_in": int(st.get("bytes_in", 0) or 0)}
        if sem_error is not None:
            out["semantic_error"] = sem_error
        if st.get("semantic_mismatch"):
            out["semantic_mismatch"] = st["semantic_mismatch"]
        if "semantic_objects" in st:  # the scan had an annotation pair beside it
            out["objects"] = int(st["semantic_objects"])
            out["semantic"] = {"format": st.get("semantic_format", ""),
                               "categories": st.get("semantic_categories", {}),
                               "unmatched_objects": int(st.get("semantic_unmatched_objects", 0)),
                               "unmatched_labels": st.get("semantic_unmatched_labels", {}),
                               "warnings": {k[len("semantic_annotation_"):]: v for k, v in st.items()
                                            if k.startswith("semantic_annotation_")}}
        return out

    def _convert_composed(self, src: Path, dst: Path, scene_id: str, dataset_name: str, stale=()) -> dict:
        from ..scene_dataset.habitat import read_dataset_config, read_scene_instance
        from ..scene_dataset.packing import pack_scene

        sc = read_scene_instance(read_dataset_config(dataset_name), scene_id, self.skip_missing_assets)
        st = pack_scene(sc, dst, dst.parent.parent / "assets", self._convert_options(dataset_name), overwrite=True,
                        fresh_since=self.assets_since, stale=stale)
        out = {"triangles": int(st.get("triangles_out", 0)), "texture_bytes": int(st.get("texture_bytes", 0)),
               "bytes_in": int(st.get("bytes_in", 0)), "instances": st["instances"], "assets": st["assets"],
               "assets_converted": st["assets_converted"], "asset_files": st["asset_files"],
               "instance_triangles": int(st.get("instance_triangles", 0))}
        if sc.skipped:
            out["skipped_instances"] = sc.skipped
        if sc.notes:
            out["notes"] = sc.notes
        return out

    def navmesh(self, mode: str, packed: Path, detour_src: Path | None, dst: Path) -> dict:
        """Import ``detour_src`` (habitat .navmesh) or build from the packed scene; save ``dst``.

        ``auto`` imports when a .navmesh is present and builds instead (saying why in ``note``)
        when the import fails, the file was built for another agent (radius, height) than the
        settings', or its surface does not fit the scene (``nav.validate.navmesh_misfit``);
        ``import`` fails the scene in those cases, and without a .navmesh. An imported one's
        ``fit_points`` (``nav.validate.fit_points``, checked here) come back with it, so
        preprocess's fit check of the written file (``scene_checks.navmesh_fit``) does not
        decode it again.
        """
        from .. import nav

        settings = self._nav_settings()
        note = None
        mesh = fit = None
        if mode not in NAVMESH_MODES:
            raise ConfigError(None, f"navmesh mode {mode!r} not one of {NAVMESH_MODES}")
        if mode in ("import", "auto") and detour_src is not None:
            try:
                mesh, fit = self._import(detour_src, packed, settings)
                source = "imported"
            except BpsError as e:  # unreadable, another agent's or another scene's: auto builds
                if mode == "import":
                    raise
                why = e.detail if isinstance(e, NavError) and e.detail else f"{type(e).__name__}: {e}"
                note = f"{detour_src.name} not imported ({why}); built one instead"
        elif detour_src is None and mode in ("import", "auto"):
            # a composed scene whose navmesh_instance names no file: its own reason, not "beside it"
            composed = _composed_navmesh_note(packed)
            if mode == "import" and composed is None:
                raise InputError(packed, "--navmesh import: the scene has no .navmesh beside it")
            if mode == "import":
                raise InputError(composed[0], "--navmesh import: " + (composed[1] or (
                    f"{packed} was packed before bps recorded a navmesh_instance handle its dataset lacks "
                    "(header key navmesh_unknown), so it cannot say why the scene has no navmesh: convert "
                    "it again (preprocess --overwrite) to find out" if composed[2]
                    else "its scene instance names no navmesh_instance")))
            if composed is not None and composed[1]:
                note = f"{composed[1]}; built one instead"
        from ..nav import scan_checks
        from ..nav.build import scene_triangles

        v, t, _ = scene_triangles(packed)   # the packed scene: in the habitat frame, and cleaned
        if mesh is None:   # what `bps-assets navmesh` builds from (composed: stage + STATIC instances)
            from ..nav.sources import navmesh_input

            mesh = nav.build_navmesh(navmesh_input(packed, settings.max_slope, self.force_up, triangles=(v, t)),
                                     settings, source=packed.name)
            source = "built"
        elif getattr(mesh, "island_indoor", None) is None and hasattr(mesh, "span_island"):
            from ..nav.indoor import island_indoor

            mesh.island_indoor = island_indoor(mesh, v, t)   # which islands episodes use
        mesh.save(dst, overwrite=True)
        area = float(_value(mesh, "navigable_area"))
        isl = getattr(mesh, "island_area", None)
        biggest = float(isl[0]) if isl is not None and len(isl) else area
        foot = scan_checks.footprint_area(v, t)
        out = {"source": source, "navigable_area": area,
               "islands": int(_islands(mesh)), "largest_island": round(biggest, 4),
               "footprint_area": round(foot, 4),
               "agent": {"radius": float(mesh.settings.agent_radius),
                         "height": float(mesh.settings.agent_height)}}
        warning = scan_checks.floor_problem(area, biggest, foot)
        if warning:
            out["warning"] = warning
        if note:
            out["note"] = note
        if fit is not None:
            out["fit_points"] = fit
        return out

    def _import(self, detour_src: Path, packed: Path, settings):
        """(the habitat .navmesh imported, its ``fit_points``), or NavError when it was built for
        another agent than ``settings``' (naming each of radius and height that differs) or does
        not fit the packed scene."""
        from ..nav.detour import import_detour, read_detour_navmesh
        from ..nav.settings import refuse_other_agent
        from ..nav.validate import fit_points, points_misfit
        from .scene_checks import scene_bounds

        dm = read_detour_navmesh(detour_src)
        refuse_other_agent(detour_src, dm.nav_settings(), settings)
        # settings None: the .navmesh's own settings (habitat stores them in the file)
        mesh = import_detour(dm, self.nav_settings)   # the file read once
        fit = fit_points(mesh)   # = navmesh_misfit's; kept for preprocess's check of the written file
        misfit = points_misfit(fit, scene_bounds(packed))
        if misfit is not None:
            raise NavError(detour_src, misfit)
        return mesh, fit

    def episodes(self, navmesh_path: Path, scene: str, dataset_name: str, n: int, seed: int,
                 dst: Path, scene_id: str | None = None) -> dict:
        """Write the scene's habitat v1 content file ``{"episodes": [...]}`` (gzip) at ``dst``.

        One file per scene (not ``write_pointnav_dataset``, which writes a whole split), so
        scenes finish independently in parallel workers; the split index file is written by
        preprocess once all scenes are done. ``scene_id``: the scan's path relative to the
        source root (habitat's scene_id, e.g. ``hm3d/val/00800-ID/ID.basis.glb``). The seed is per scene (``scene_seed``), so a
        scene's episodes do not depend on which other scenes or shards exist.
        """
        import gzip

        from ..container import atomic_write
        from ..nav import episodes as ep
        from ..nav import load_navmesh

        mesh = load_navmesh(navmesh_path)
        if scene_id is None:
            try:
                scene_id = ep.habitat_scene_id(dataset_name, scene)
            except ConfigError:  # a user dataset without a habitat scene_id rule
                scene_id = f"{scene}.glb"
        st: dict = {}
        eps = ep.generate_episodes(mesh, scene_id, n, ep.scene_seed(seed, scene), stats=st)
        for i, e in enumerate(eps):
            ep.validate_episode(e, i, dst)
        data = gzip.compress(json.dumps({"episodes": eps}).encode(), compresslevel=6, mtime=0)
        atomic_write(dst, lambda f: f.write(data), overwrite=True)
        return {"count": len(eps), "where": st.get("where")}


def _value(obj, name):
    v = getattr(obj, name)
    return v() if callable(v) else v


def _islands(mesh) -> int:
    for name in ("num_islands", "island_count", "islands"):
        if hasattr(mesh, name):
            v = _value(mesh, name)
            return v if isinstance(v, int) else len(v)
    return 0

