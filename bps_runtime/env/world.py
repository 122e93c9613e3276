"""The glue under the env: scene manager + renderer + navigation buffers + episode supply.

``World`` answers what the env's host side asks between fused steps: the scene index of each
queued episode (``next_scenes``, holding a reference until ``release_scenes``), scene ids, why
anything waited, and the batch render. Each scene's navigation is prepared where it is loaded
(``ScenePreparation`` on the loader thread); the renderer, the navigation buffers, the episode
supply and the category table follow arrivals and departures as residency listeners
(``scenes.residency``), registered here.
``build_world`` assembles one from a manifest; ``make_scene_manager`` the scene cache.
"""
from __future__ import annotations

import logging
import os

import numpy as np
import torch

from bps_assets.errors import ConfigError, InputError, did_you_mean

from .checks import check_agent
from ..nav.buffers import FieldWorker, NavBuffers, SceneNav
from ..episodes.files import EPISODE_MODES
from ..episodes.supply import EpisodeSupply
from ..scenes.residency import Listener, renderer_listener
from ..tasks import spec_for
from ..tasks.spec import ScenesRequest, SupplyRequest

log = logging.getLogger("bps_runtime.env")


class ScenePreparation:
    """The per-scene work a scene's load ends with, on the loader thread (off the step path): its
    navigation arrays in the device buffers, its geodesic graph and its first episodes' fields.
    -> (SceneNav, episode-supply state), published under a scene index when the scene arrives."""

    def __init__(self, nav: NavBuffers, supply: EpisodeSupply):
        self.nav, self.supply = nav, supply

    def __call__(self, scene_id: str, navmesh):
        scene = SceneNav(navmesh, self.nav)
        try:
            self.nav.size_for(scene, self.supply.field_rows())
            return scene, self.supply.prepare(scene_id, scene)
        except BaseException:
            scene.free()   # the load fails (quarantined): its arena space goes back
            raise


class World:
    """Scenes + renderer + navigation buffers + episode supply, for one env.

    Calls go one way: the env calls the world, the world the scene manager; the manager's loads
    end with ``ScenePreparation`` (given to it, it knows no world), and it tells the listeners
    registered here of each arrival and departure, on the simulator thread between steps.
    """

    def __init__(self, scenes, renderer, *, device, supply: EpisodeSupply, worker: FieldWorker,
                 sensors=("depth",)):
        self.scenes = scenes
        self.renderer = renderer
        self.device = torch.device(device)
        self.nav = NavBuffers(self.device, capacity=scenes.capacity)
        self.episodes = supply
        self.worker = worker
        self.sensors = tuple(sensors)
        self.threads = renderer.options.threads  # the step's CPU work uses the render threads' count
        self._reasons: list[str] = []
        self.category_table = None   # with the semantic sensor: id -> category by scene index
        if "semantic" in self.sensors:
            from bps_assets.readers.semantic_categories import mpcat40

            from ..render.semantic import CategoryTable

            self.category_table = CategoryTable(scenes.capacity, str(self.device), vocabulary=mpcat40())
        self._listen()
        try:   # make(): a start-up scene that fails refuses the run; later ones are quarantined
            scenes.start(ScenePreparation(self.nav, supply), refuse=True)
        except BaseException:
            self.close()
            raise

    def _listen(self):
        """Residency listeners: the renderer, the episode supply, the navigation (an arrival
        publishes its prepared ``SceneNav`` and fields; the supply gives its rows back before
        the navigation frees them), the category table."""
        nav, eps, table, add = self.nav, self.episodes, self.category_table, self.scenes.add_listener
        add(renderer_listener(self.renderer))
        add(Listener(lambda i, sc: eps.register(i, sc.prepared[1]), eps.scene_left))
        add(Listener(lambda i, sc: nav.publish(i, sc.prepared[0], sc.prepared[1].fields), nav.unpublish))
        if table is not None:
            add(Listener(lambda i, sc: table.set(i, sc.semantics), table.clear))

    def _report(self) -> bool:
        rep = self.scenes.take_report()
        self._reasons += rep.reasons
        return bool(rep.waited)

    # ---- what the env calls (simulator thread, between steps)
    def next_scenes(self, env_ids: np.ndarray) -> tuple[np.ndarray, bool]:
        """Scene indices of one more queued episode per env in ``env_ids`` (each holds a
        reference until ``release_scenes``) and whether that waited for a load."""
        scene_index = np.asarray(self.scenes.assign_next(np.asarray(env_ids, np.int64)), np.int64)
        waited = self._report()
        return scene_index, waited

    def release_scenes(self, scene_indices: np.ndarray):
        """Episodes in these scene indices have ended (one reference each)."""
        self.scenes.release_scenes(np.asarray(scene_indices, np.int64))

    def after_step(self, group: int) -> bool:
        """After group ``group``'s step: a round ends with group 0 (the scene manager's clock and
        scheduled swaps); True if a swap due now waited for its load."""
        if group != 0:
            return False
        self.scenes.after_round()
        waited = self._report()
        return waited

    def take_wait_reasons(self) -> list[str]:
        """Why anything waited for a load or an episode since the last call (one line each)."""
        out, self._reasons = self._reasons, []
        return out + self.episodes.take_wait_reasons()

    def scene_id(self, scene_index: int) -> str:
        """Scene id of a resident scene index."""
        return self.scenes.scene_id(int(scene_index))

    def render(self, scene_index: torch.Tensor, pos: torch.Tensor, rot: torch.Tensor, sensors):
        """The renderer's frames for scene indices / positions / [x, y, z, w] rotations."""
        out = self.renderer.render(scene_index, pos, rot, sensors)
        if self.device.type != "cpu":
            out = {k: v.to(self.device, non_blocking=True) for k, v in out.items()}
        return out

    def render_view(self, scene_index: torch.Tensor, pos: torch.Tensor, rot: torch.Tensor, resolution,
                    hfov_deg: float, sensors):
        """``render`` through another pinhole camera (``pos``: its centres; ``Renderer.render_view``)."""
        out = self.renderer.render_view(scene_index, pos, rot, resolution, hfov_deg, sensors)
        if self.device.type != "cpu":
            out = {k: v.to(self.device, non_blocking=True) for k, v in out.items()}
        return out

    def cancel(self):
        """Cancel loads waiting for room in the cache budget (any thread: the env's close)."""
        self.scenes.cancel()

    def close(self):
        """Stop the field worker, the scene manager and the renderer."""
        self.worker.close()
        self.scenes.close()
        self.renderer.close()


def build_world(manifest_path, config, *, device) -> World:
    """``World`` over a manifest's scenes for an ``EnvConfig``: cache, renderer, episode supply."""
    from bps_assets.pipeline.manifest import load_manifest

    from ..render import make_renderer

    c = config
    split, scene_shard, num_envs = c.split, c.episodes.scene_shard, c.num_envs
    manifest = load_manifest(manifest_path)
    check_agent(manifest, c.task)
    entries = manifest.scenes(split)
    if not entries:
        raise ConfigError(None, f"{manifest_path}: no usable scene in split {split!r} "
                                f"(subsets: {', '.join(manifest.subsets) or 'none'})")
    spec = spec_for(c.task)
    try:   # the scenes the task may serve, before sharding: every rank gets its share of those
        usable = spec.scenes(ScenesRequest(manifest, split, entries, c))
    except InputError as e:
        raise episodes_error(e, spec.name, c.episodes.source, split) from None
    entries = usable
    if scene_shard is not None:
        rank, size = scene_shard
        entries = entries[rank::size]
        if not entries:
            of = (f"{len(usable)} scenes" if len(usable) == len(manifest.scenes(split))
                  else f"{len(usable)} scenes task {spec.name!r} can serve, of {len(manifest.scenes(split))}")
            raise ConfigError(None, f"{manifest_path}: scene_shard {rank}/{size} gets no scene of split "
                                    f"{split!r} ({of})")
    worker = FieldWorker()
    try:
        supply, entries = spec.supply(SupplyRequest(manifest, split, entries, c, worker))
        check_semantic_sensor(entries, c.sensors.kinds, spec)   # the scenes served, whatever their supply
    except InputError as e:
        worker.close()
        raise episodes_error(e, spec.name, c.episodes.source, split) from None
    # the camera: the config's (the task's defaults filled in); raw depth frames where depth noise
    # runs (it clips after its model, as habitat-lab clips habitat-sim's noisy frame)
    ropts = c.sensors.render_options(c.threads, raw_depth=c.noise.depth_on)
    r = c.sensors.renderer
    renderer = make_renderer(r, ropts, device=str(device) if r == "warp" else "cpu")
    log_lod_rule(manifest, ropts)
    scenes = make_scene_manager(entries, c.cache_for_run(), num_envs=num_envs, renderer=renderer, device=device,
                                manifest=manifest)
    return World(scenes, renderer, device=device, supply=supply, worker=worker, sensors=c.sensors.kinds)


def check_semantic_sensor(entries, sensors, spec) -> None:
    """For a task whose goals are objects (``spec.categories``: ObjectNav, InstanceImageNav) the
    ``semantic`` sensor (in ``sensors``) needs semantic annotations in every scene served
    (``entries``, sampled or from a file): else an InputError naming the first unannotated
    scene's file. Other tasks' semantic frames are 0 where a scene has none. Header reads only."""
    if "semantic" not in sensors or not spec.categories:
        return
    from ..scenes.checks import unannotated

    plain = unannotated(entries)
    if plain:
        raise InputError(plain[0].scene, f"scene has no semantic annotations (objects), which the 'semantic' "
                                         f"sensor needs; {len(plain)} of the {len(entries)} scenes served have "
                                         f"none: {', '.join(e.name for e in plain)}")


def log_lod_rule(manifest, options) -> None:
    """Log (info, once per env) the converter LOD level the scenes of a manifest converted with
    ``--lod`` load, and why (``lod_levels.decide``); each load logs its own at debug."""
    from ..scenes.lod_levels import decide

    errors = ((manifest.settings or {}).get("convert") or {}).get("lod")
    if errors:
        level, why = decide(options, [float(e) for e in errors])
        log.info("converter LODs: scenes load %s (%s); per scene: env.world.scenes.resident_levels()",
                 "the full mesh" if level < 0 else f"level {level}", why)


def episodes_error(e: InputError, task: str, source, split: str | None = None) -> InputError:
    """``e`` (the episode supply's) with a hint: the task a file of another task's shape belongs
    to, or, for a source (a str or a path) that is no file, the modes ``episodes=`` takes (and
    the close match); a ``{split}`` template is shown filled with ``split`` (None: 'val')."""
    from pathlib import Path

    from bps_assets.nav.episode_tasks import wrong_task_hint

    hint = wrong_task_hint(e.path, task) or wrong_task_hint(source, task)
    text = os.fspath(source) if isinstance(source, (str, os.PathLike)) else None
    if not hint and isinstance(text, str) and text not in EPISODE_MODES and not Path(text).exists():
        close = did_you_mean(text, [m for m in EPISODE_MODES if m], n=1)
        hint = (f"episodes= is a file's path or one of {', '.join(repr(m) for m in EPISODE_MODES)}"
                + (f" ({close})" if close else ""))
        if "{split}" in text:   # habitat-lab's data_path is a template; episodes= is one file's path
            hint += (f"; {{split}} is habitat-lab's data_path template: give the path with it filled in, "
                     f"e.g. {text.replace('{split}', split or 'val')!r}")
    if not hint or type(e) is not InputError:
        return e
    return InputError(e.path, f"{e.detail}; {hint}")


def make_scene_manager(entries, options, *, num_envs, renderer, device="cpu", manifest=None):
    """The scene cache (``bps_runtime.scenes.cache.SceneCache``) over manifest entries; with the
    ``manifest``, each load checks its files against what it recorded (``scenes.checks``)."""
    from ..scenes.cache import SceneCache
    from ..scenes.checks import expected_for
    from ..scenes.loader import SceneSource

    bad = next((e.name for e in entries if not e.navmesh), None)
    if bad is not None:
        raise InputError(None, f"scene {bad!r} has no navmesh in the manifest")
    expected = expected_for(manifest, entries) if manifest is not None else [None] * len(entries)
    sources = [SceneSource(e.name, str(e.scene), str(e.navmesh), x) for e, x in zip(entries, expected)]
    return SceneCache(sources, renderer, num_envs, options, device=str(device))
