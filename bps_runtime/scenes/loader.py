"""Async scene loader: background threads turn packed files into render-ready resident scenes.

One load = check the files against the manifest (``scenes.checks``), read the packed scene
(``bps_assets.packed_scene.read_packed_scene``: caps, CRCs, cross references, zstd with the
thread's own decompressor; its header's identity checked), read the navmesh
(``bps_assets.nav.load_navmesh``; its values and its fit to the scene checked), prepare its
navigation (the ``prepare`` given to the loader), build the shading tables (``render.shading_data``;
the mips the sensor can select: ``render.mips``), reserve the scene's bytes in the budget
(``scenes.footprint``; may block until another scene leaves), then let the renderer build its
acceleration structure and upload to the device (from pinned host buffers on CUDA). All off the
step path; the step path only attaches finished scenes (a dict insert).

A load that fails for any reason becomes a ``LoadFailure``: the error is logged once, the
cache quarantines the scene and goes on with the others. This module is the one place that
catches broadly, because a training run must survive one bad file among thousands.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import time
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from bps_assets.errors import BpsError, ConfigError, InterpreterExiting

from ..render.mips import sensor_mips
from ..render.shading_data import ShadingData, build_shading_data
from .budget import LoadCancelled, NoRoom
from .checks import Expected, check_files, check_navmesh, check_scene_header
from .footprint import lod_kwargs, navmesh_nbytes, scene_footprint
from .lod_levels import header_choice, read_for_sensor
from ..threads import lower_priority

log = logging.getLogger("bps_runtime.scenes.loader")


@dataclass(frozen=True)
class SceneSource:
    """Where one scene's files are (from a dataset manifest's per-scene ``outputs``)."""

    scene_id: str
    scene_path: str
    navmesh_path: str | None = None
    expected: Expected | None = None   # what the manifest recorded (checked at load; None: nothing)


@dataclass
class LoadedScene:
    """A scene ready to attach: shading tables, renderer accel, navmesh, and its byte cost."""

    source: SceneSource
    shading: ShadingData
    accel: Any
    navmesh: Any | None
    header: dict
    num_vertices: int
    num_triangles: int
    nbytes: int          # what the cache charges: shading + accel (+ navmesh; composed: the stage, table and
    #                      instance structures; its shared assets are in ``asset_bytes``)
    seconds: float
    ticket: Any = None   # the budget reservation (released by the cache on eviction)
    prepared: Any = None  # what the loader's ``prepare(scene_id, navmesh)`` made of it (loader thread)
    semantics: Any = None  # the packed scene's object table (bps_assets.semantics.SemanticTable) or None
    footprint: dict | None = None  # ``nbytes`` by part (scenes.footprint: bvh, geometry, ...)
    # a composed scene rendered as instances: gives back its references to the shared assets
    # (``scenes.assets``); the scheduler calls it when the scene leaves
    release_assets: Callable[[], None] | None = None
    asset_bytes: dict | None = None   # {asset path: bytes} of the shared assets it uses (not in ``nbytes``)
    asset_footprints: dict | None = None   # {asset path: that asset's footprint} (``Asset.footprint``)
    lod: int = -1         # the converter LOD level resident (-1: the full mesh; composed: the stage's)
    lod_reason: str = ""  # why that level (``lod_levels.choice``; a caller's reader: "")

    @property
    def scene_id(self) -> str:
        """The scene's id from its manifest entry."""
        return self.source.scene_id


@dataclass
class LoadFailure:
    """A scene that failed to load (quarantined): its source, the exception, and the message logged."""
    source: SceneSource
    error: BaseException
    message: str = ""

    @property
    def scene_id(self) -> str:
        """The id of the scene that failed."""
        return self.source.scene_id


def _default_reader(path, options):
    """The packed scene at ``path`` at the converter LOD level the renderer's ``options`` select
    (``lod_levels.read_for_sensor``; a file without levels: the full mesh)."""
    return read_for_sensor(path, options)


def _say_flattened(renderer) -> None:
    """Log once per process that composed scenes load flattened for this renderer."""
    name = type(renderer).__name__
    if name not in _WARNED:
        _WARNED.add(name)
        log.warning("%s has no instance path (the Embree bridge with native shading and Warp do): "
                    "composed scenes load flattened, each instance's geometry held once per instance", name)


def _interpreter_exiting(e: BaseException) -> bool:
    """True when ``e`` is the interpreter exiting (a script ended without ``env.close()``): a
    pool the load submits to refused the work (``InterpreterExiting``, raised at that submit
    while the main thread is still alive), or it is finalizing; a load failing so is no damaged scene."""
    import sys

    return sys.is_finalizing() or not threading.main_thread().is_alive() or isinstance(e, InterpreterExiting)


def _is_composed(path) -> bool:
    from bps_assets.scene_dataset.packing import is_composed
    return is_composed(path)


def _default_navmesh_loader(path):
    from bps_assets.nav import load_navmesh
    return load_navmesh(path)


def _pin(sd: ShadingData) -> ShadingData:
    """Copy the shading arrays into page-locked host memory (fast, async H2D copies on CUDA)."""
    import torch

    out = {}
    for k, v in sd.__dict__.items():
        if isinstance(v, np.ndarray) and v.size:
            t = torch.empty(v.shape, dtype=torch.from_numpy(v[:0].copy()).dtype, pin_memory=True)
            t.numpy()[...] = v
            out[k] = t.numpy()
        else:
            out[k] = v
    return ShadingData(**out)


_WARNED: set = set()


def _warn_links_out(source: SceneSource) -> None:
    """Log a warning when a scene's file resolves, through a symlink, outside its dataset folder
    (manifest outputs sit one folder below it: ``scenes/``, ``navmeshes/``). Loading goes on;
    ``bps-assets verify --strict`` refuses such a dataset."""
    from bps_assets.safe_paths import link_escape

    for p in (source.scene_path, source.navmesh_path):
        if not p:
            continue
        root = os.path.dirname(os.path.dirname(os.path.abspath(p)))
        out = link_escape(root, p)
        if out is not None and p not in _WARNED:
            _WARNED.add(p)  # once per file, not on every reload by the cache
            log.warning("scene %r: %s resolves through a symlink to %s, outside the dataset folder %s",
                        source.scene_id, p, out, root)


class SceneLoader:
    """``submit(source, reserve=None) -> Future[LoadedScene | LoadFailure]`` on ``threads``
    background threads. ``reserve(nbytes, source)`` (from the cache) returns a ticket or raises;
    it may block until budget frees up; ``release(ticket)`` gives it back when the load fails
    after it. ``prepare(scene_id, navmesh)``, when given, ends every load (its result is
    ``LoadedScene.prepared``). ``reader(path)`` returns a ``PackedScene`` (or an object with its
    fields); ``navmesh_loader(path)`` a ``NavMesh``. ``stage[scene_id]`` says what each
    unfinished load is doing (the cache names it when a step waits for that load).
    ``waiting(source, on)``: the ledger's, for a load that waits for another's shared asset."""

    def __init__(self, renderer, threads: int = 2, device: str = "cpu",
                 reader: Callable[[str], Any] | None = None,
                 navmesh_loader: Callable[[str], Any] | None = None,
                 release: Callable[[Any], None] | None = None,
                 prepare: Callable[[str, Any], Any] | None = None, waiting: Callable | None = None):
        self.renderer = renderer
        self.device = str(device)
        # one calling convention, reader(path): the default reader is bound to the renderer's
        # options (it reads LOD levels and composed scenes; looked up at call time, so a patched
        # _default_reader is seen); a caller's reader returns the scene it means, loaded as it is
        self.reader = reader or (lambda path: _default_reader(path, self.renderer.options))
        self._default_read = reader is None
        self.navmesh_loader = navmesh_loader or _default_navmesh_loader
        self._release = release
        self.prepare = prepare
        self.stage: dict[str, str] = {}   # scene id -> what its load is doing (one dict write per stage)
        self._pool = ThreadPoolExecutor(max(1, threads), thread_name_prefix="bps-loader",
                                        initializer=lower_priority)
        from .assets import AssetStore
        self.assets = AssetStore(renderer, release, waiting)

    def submit(self, source: SceneSource, reserve: Callable[[int, SceneSource], Any] | None = None,
               quiet: bool = False) -> Future:
        """Queue a load on the loader threads; the future's result is a LoadedScene or, for any
        error (a failing ``reserve`` included), a LoadFailure; it never raises. ``quiet``: a
        failure is not logged (the caller raises it instead of quarantining the scene)."""
        self.stage[source.scene_id] = "queued behind other loads"
        return self._pool.submit(self._load, source, reserve, quiet)

    def _enter_stage(self, scene_id: str, stage: str) -> None:
        """The load of ``scene_id`` begins ``stage`` (loader thread)."""
        self.stage[scene_id] = stage

    def _load(self, source: SceneSource, reserve, quiet: bool = False):
        t0 = time.perf_counter()
        ticket = None
        stage = self.stage
        scene_id = source.scene_id
        _warn_links_out(source)
        try:
            self._enter_stage(scene_id, "checking its files against the manifest")
            check_files(source)
            if self._default_read and self.renderer.instancing \
                    and _is_composed(source.scene_path):
                return self._load_composed(source, reserve, t0)
            self._enter_stage(scene_id, "reading the packed scene")
            ps = self.reader(source.scene_path)
            header = dict(ps.header or {})
            if "expanded" in header and not self.renderer.instancing:
                _say_flattened(self.renderer)
            semantics = ps.semantics
            if "expanded" in header and semantics is not None and ps.tri_object is not None:
                # a composed scene's sensor reports habitat's ids (composed_section.habitat_view)
                from bps_assets.composed_section import habitat_view
                lut, semantics = habitat_view(semantics)
                # on a copy: a reader may cache and return one scene object (remapped twice otherwise)
                ps = dataclasses.replace(ps, tri_object=lut[ps.tri_object])   # ids of tri_object: rows of lut
            check_scene_header(source, header)
            path = ps.path or source.scene_path
            self._enter_stage(scene_id, "building the shading tables")
            sd = build_shading_data(ps, path)
            sd = sensor_mips(sd, self.renderer.options)
            if self.device.startswith("cuda"):
                sd = _pin(sd)
            self._enter_stage(scene_id, "reading the navmesh and preparing its navigation")
            nav = self.navmesh_loader(source.navmesh_path) if source.navmesh_path else None
            if nav is not None:
                check_navmesh(source, nav, header)
            nv, nt = int(ps.positions.shape[0]), int(ps.indices.shape[0])
            # a caller's reader: the full mesh, loaded as it is (no level chosen)
            level, why = (ps.lod, ps.lod_reason) if self._default_read else (-1, "")
            footprint = scene_footprint(sd, self.renderer, nv, nt, navmesh_nbytes(nav), level)
            nbytes = sum(footprint.values())
            ticket = self._reserve(source, nbytes, reserve)
            self._enter_stage(scene_id, "building the renderer's acceleration structure")
            accel = self.renderer.prepare(sd, ps.positions, ps.indices, **lod_kwargs(level))
            # last: a load that fails before this prepares nothing (no navigation to free, no
            # episode-supply visit counted, so the episodes of the scene's next visit do not depend on it)
            prepared = self.prepare(scene_id, nav) if self.prepare is not None and nav is not None else None
            return LoadedScene(source, sd, accel, nav, header, nv, nt,
                               nbytes, time.perf_counter() - t0, ticket, prepared, semantics, footprint,
                               lod=level, lod_reason=self._say_level(scene_id, level, why))
        except Exception as e:  # quarantine boundary: see the module docstring
            if ticket is not None and self._release is not None:
                self._release(ticket)
            msg = str(e) if isinstance(e, BpsError) else f"{source.scene_path}: {type(e).__name__}: {e}"
            if not quiet and not _interpreter_exiting(e) and not isinstance(e, LoadCancelled):
                log.error("scene %r quarantined: %s", source.scene_id, msg)
            return LoadFailure(source, e, msg)
        finally:
            stage.pop(scene_id, None)

    @staticmethod
    def _say_level(scene_id: str, level: int, why: str) -> str:
        """``why`` the default reader read ``level`` (``lod_levels.choice``, made once per load),
        logged at debug; "" (a caller's reader: it reads what it means) is not logged."""
        if why:
            log.debug("scene %r loads %s (%s)", scene_id, "its full mesh" if level < 0 else f"converter LOD level {level}", why)
        return why

    def _reserve(self, source: SceneSource, nbytes: int, reserve):
        """The budget reservation of ``nbytes`` for ``source`` (None without a ``reserve``)."""
        if reserve is None:
            return None
        self._enter_stage(source.scene_id, "waiting for room in the cache budget")
        return reserve(nbytes, source)

    def _load_composed(self, source: SceneSource, reserve, t0: float) -> LoadedScene:
        """A composed scene as the stage plus instances of shared assets (``scenes.assets``): each
        asset file read, and its bytes charged, only when no resident scene holds it yet; then
        the stage, instance table and the renderer's estimate of the instance structures (bvh),
        settled to their ``nbytes`` once built. Tickets are byte counts (the ledger's); a start-up ``NoRoom`` names the
        scene's whole need (``_no_room``)."""
        from bps_assets import composed_section as cs
        from bps_assets.packed_scene import read_lod_level as read_level
        from bps_assets.scene_dataset.packing import read_composed

        scene_id, ticket, held = source.scene_id, None, []
        try:
            self._enter_stage(scene_id, "reading the composed scene's stage and instance table")
            level, why = header_choice(source.scene_path, self.renderer.options)
            # at an LOD level, the table and asset paths alone, then the level's stage geometry
            # only (the assets: their full meshes)
            stage, table, paths = read_composed(source.scene_path, [] if level >= 0 else None)
            if level >= 0:
                stage = read_level(source.scene_path, level, expand=False)
            header = dict(stage.header or {})
            check_scene_header(source, header)
            # the stage as any scene: the mips its sensor can select, pinned for the upload (the
            # assets keep every level: an instance may be scaled)
            sd = sensor_mips(build_shading_data(stage, source.scene_path), self.renderer.options)
            if self.device.startswith("cuda"):
                sd = _pin(sd)
            self._enter_stage(scene_id, "reading the navmesh and preparing its navigation")
            nav = self.navmesh_loader(source.navmesh_path) if source.navmesh_path else None
            nv, nt = int(stage.positions.shape[0]), int(stage.indices.shape[0])
            table_bytes = sum(a.nbytes for a in (table.asset, table.transform, table.semantic, table.category,
                                                 table.motion, table.group))
            footprint = scene_footprint(sd, self.renderer, nv, nt, navmesh_nbytes(nav), level)
            footprint["geometry"] += table_bytes   # the instance table (the shared assets: ``asset_bytes``)
            used = sorted(set(table.asset.tolist()))
            # the top-level instance structures (transforms, per-instance tables, the top BVH): the
            # renderer's estimate, charged with the stage (a start-up NoRoom's need has it), settled
            # to its count once built
            est = int(self.renderer.instances_bytes(table.count + 1, len(used) + 1))
            footprint["bvh"] += est
            self._enter_stage(scene_id, "loading the assets no resident scene holds")
            assets = {}
            for a in used:
                try:
                    assets[a] = self.assets.acquire(paths[a], reserve, source)
                except NoRoom as e:
                    what = f"asset {os.path.realpath(paths[a])}"
                    raise self._no_room(source, e, what, footprint, paths, used, assets) from None
                except ConfigError as e:   # e.g. the budget's "more than the whole budget" (raised in
                    # another scene's load too, when this one waited for it): this scene, the asset
                    what = os.path.realpath(paths[a])
                    detail = e.detail if e.path in (None, what) else str(e)
                    raise ConfigError(source.scene_path, f"asset {what}: {detail}") from None
                held.append(assets[a])
            # the object table (one object per group, boxes from the placed assets' vertices)
            sem_fields = ["object_ids", "object_category", "object_region", "object_source_ids", "object_aabb",
                          "object_points"]
            by_path = {os.path.realpath(paths[a]): x.scene for a, x in assets.items()}
            flat = cs.expand(stage, table, sem_fields, lambda p, s: by_path[os.path.realpath(p)])
            if flat.object_aabb is not None and len(flat.object_aabb) and "bounds" in header:
                # the flattened scene's bounds: the stage's and every instance's box
                box = flat.object_aabb.astype(np.float64)
                header["bounds"] = {"min": np.minimum(header["bounds"]["min"], box[:, :3].min(0)).tolist(),
                                    "max": np.maximum(header["bounds"]["max"], box[:, 3:].max(0)).tolist()}
            if nav is not None:
                check_navmesh(source, nav, header)
            try:
                ticket = self._reserve(source, sum(footprint.values()), reserve)
            except NoRoom as e:
                raise self._no_room(source, e, "its stage and instance table", footprint, paths, used, assets) \
                    from None
            self._enter_stage(scene_id, "building the renderer's instance scene")
            stage_accel = self.renderer.prepare(sd, stage.positions, stage.indices, **lod_kwargs(level))
            # the id each instance renders: habitat's semantic id (composed_section.habitat_view)
            lut, semantics = cs.habitat_view(flat.semantics) if flat.semantics is not None else (np.zeros(1, np.int32), None)
            parts = [(stage_accel, np.eye(4), 0)] + [
                (assets[int(table.asset[i])].accel, table.transform[i],
                 int(lut[g]) if (g := int(table.group[i]) + 1) < len(lut) else 0) for i in range(table.count)]
            accel = self.renderer.prepare_instances(parts)
            extra = int(accel.nbytes) - est   # the structures as the renderer counts them, less the estimate
            # render.protocol: instances_bytes is at least nbytes, so the estimate charged covers it;
            # a renderer breaking that would leave bytes uncharged (raised, not asserted: -O keeps it)
            if extra > 0:
                raise RuntimeError(f"{type(self.renderer).__name__}.instances_bytes under its nbytes by {extra}")
            footprint["bvh"] += extra
            if extra < 0 and ticket is not None and self._release is not None:
                self._release(-extra)
                ticket -= -extra
            nbytes = sum(footprint.values())
            prepared = self.prepare(scene_id, nav) if self.prepare is not None and nav is not None else None
            store = self.assets

            def release_assets(held=tuple(held)):
                for x in held:
                    store.release(x)
            nv_all = nv + sum(len(assets[int(a)].scene.positions) for a in table.asset)
            nt_all = nt + sum(len(assets[int(a)].shading.indices) for a in table.asset)
            return LoadedScene(source, sd, accel, nav, header, nv_all, nt_all, nbytes,
                               time.perf_counter() - t0, ticket, prepared, semantics, footprint,
                               release_assets=release_assets, asset_bytes={x.path: x.nbytes for x in held},
                               asset_footprints={x.path: x.footprint for x in held}, lod=level,
                               lod_reason=self._say_level(scene_id, level, why))
        except BaseException:
            for x in held:
                self.assets.release(x)
            if ticket is not None and self._release is not None:
                self._release(ticket)
                ticket = None
            raise

    def _no_room(self, source: SceneSource, err, what: str, footprint: dict, paths, used, assets):
        """The start-up ``NoRoom`` of a composed scene: naming the scene, the part that found no
        room and the scene's whole need (its own bytes and every asset it uses, each once;
        assets not acquired are measured from their files)."""
        need = {}
        for a in used:
            x = assets.get(a)
            need[os.path.realpath(paths[a])] = x.nbytes if x is not None else \
                sum(self.assets.measure(paths[a]).values())
        own = sum(footprint.values())
        total = own + sum(need.values())
        return NoRoom(source.scene_path, f"scene {source.scene_id!r}: no room at start-up for {what} "
                                         f"({err.nbytes} bytes); the scene needs {total} bytes in all: {own} "
                                         f"for its stage, instance table and instance structures, {total - own} for the "
                                         f"{len(need)} shared assets it uses", total, need)

    def close(self):
        """Cancel the queued loads and wait for the running ones to finish."""
        self._pool.shutdown(wait=True, cancel_futures=True)
