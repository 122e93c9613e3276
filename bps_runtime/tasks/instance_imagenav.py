"""habitat-lab's InstanceImageNav (``instance_imagenav_hm3d_v2``) as one task module: ObjectNav's step
(``tasks/goalnav.py``) towards one goal instance, whose goal observation is the RGB image of the
episode's own camera, ``goals[0].image_goals[goal_image_id]`` (position, rotation, HFOV, image
size: habitat's ``InstanceImageGoalSensor``), rendered by the host hook when the episode is
queued (``render_view``, kept in the goal-image cache), area-resized to the sensors' resolution
when its size differs, copied to ``instance_imagegoal`` at the episode's start, its camera's HFOV
(degrees) to ``instance_imagegoal_hfov``. Episodes: InstanceImageNav-v1 files (``episodes=PATH``,
checked on each navmesh) or generated per scene visit (``bps_assets.nav.instance_imagenav_episodes``).

Defaults (habitat's task and benchmark configs; all settable): STOP, MOVE_FORWARD 0.25 m, TURN
30 deg, LOOK_UP / LOOK_DOWN 30 deg (pitch clamped at +-30 as ObjectNav's); sliding off; 1000
steps; agent 1.41 m, radius 0.17; sensors at 1.31 m, HFOV 42 (habitat's RGB; its depth: 58),
depth 0.5-5 m; distance = geodesic to the nearest view point of the goal instance; success =
STOP within 0.1 m; ObjectNav's reward. Observations (habitat's uuids): ``instance_imagegoal`` [H,
W, 3] uint8, ``instance_imagegoal_hfov`` [1] float32, ``compass``, ``gps``.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from bps_assets.nav.geodesic import NEAR_EXACT
from bps_assets.nav.instance_imagenav_files import InstanceImageNavDataset, check_on_navmesh, goal_key
from bps_assets.pipeline.habitat_episodes import map_habitat_instance_imagenav

from . import goalnav
from ..episodes.dataset import DatasetEpisodes, EpisodeGoal
from ..episodes.files import GoalFileEpisodes, mapped_file
from ..episodes.supply import DEFAULTS as SUPPLY_DEFAULTS, SupplyOptions, _SceneState
from .goal_encoders import ImageGoalEncoder
from .goal_images import DEFAULT_BUDGET_BYTES, GoalImages, check_budget
from .goalnav import (OUTCOME, SCHEMA, STAGING, Out, Params, State, apply_refills, begin_kernel, episode_info,
                      info, max_move, step_kernel)
from .objectnav_episodes import annotated_scenes, goal_set, note_served
from .options import options_class
from .spec import HostContext, TaskSpec

NAME = "instance_imagenav"
ACTION_NAMES = goalnav.ALL_ACTIONS
LOOK = True


TaskOptions = options_class(
    NAME, __name__, fields=goalnav.OPTION_FIELDS, doc="habitat-lab's instance_imagenav_hm3d_v2 defaults.",
    forward_step=0.25, turn_degrees=30.0, tilt_degrees=30.0, max_pitch_degrees=30.0, sliding=False,
    success_distance=0.1, max_episode_steps=1000, slack_reward=-0.01, success_reward=2.5,
    # goal images kept for reuse (tasks/goal_images.py; 0: none): a memory budget, not a task rule
    resources={"goal_cache_bytes": (int, DEFAULT_BUDGET_BYTES, check_budget)})


# the sensor geometry of habitat's task config (SensorConfig's defaults for this task; its RGB HFOV)
CAMERA = {"sensor_height": 1.31, "hfov_deg": 42.0, "min_depth": 0.5, "max_depth": 5.0}
DEFAULTS = TaskOptions()


def params(options: TaskOptions, win: int, **sizes) -> Params:
    """The kernels' ``Params``."""
    return goalnav.make_params(options, win, LOOK, True, **sizes)


# habitat's InstanceImageGoalSensor uuid for goalnav's goal image field (ImageNav's ``imagegoal``)
GOAL_IMAGE = replace(goalnav.OBSERVATIONS["imagegoal"], name="instance_imagegoal", source="imagegoal")
OBSERVATIONS = (GOAL_IMAGE, *(goalnav.OBSERVATIONS[k] for k in ("instance_imagegoal_hfov", "compass", "gps")))


# ------------------------------------------------------------------------------ goal images
def goal_camera(record: dict | None) -> dict:
    """The episode's goal camera: ``goals[0].image_goals[goal_image_id]`` (DatasetError without one)."""
    try:
        return record["goals"][0]["image_goals"][int(record["goal_image_id"])]
    except (TypeError, KeyError, IndexError, ValueError):
        from bps_assets.errors import DatasetError

        eid = record.get("episode_id") if isinstance(record, dict) else None
        raise DatasetError(None, f"{NAME}: episode {eid!r} has no goal camera (goals[0].image_goals"
                                 "[goal_image_id]): not an InstanceImageNav episode") from None


class GoalCameraImages(GoalImages):
    """The goal image of each queued episode: its goal camera's render (``render_view`` at the
    camera's centre, rotation, HFOV and image size; area-resized to ``resolution`` when the
    sizes differ), keyed by (scene id, camera) in the goal-image cache; the camera's HFOV into
    the ring field ``r_goal_hfov``."""

    def __init__(self, ctx: HostContext):
        super().__init__(ctx.ring["r_goal_image"], ctx.staging, ctx.render, ctx.scene_id, ctx.options.goal_cache_bytes)
        self.render_view, self.record, self.resolution = ctx.render_view, ctx.episode_record, tuple(ctx.resolution)
        self.hfov = ctx.ring["r_goal_hfov"]
        self._cams: list = []

    def write(self, stage_i, stage_f, episode_ids, headings) -> None:
        """The staged rows' goal images (``GoalImages.write``) and their cameras' HFOV (degrees)."""
        slots = super().write(stage_i, stage_f, episode_ids, headings)
        if slots is not None:   # ``keys`` has read the rows' cameras
            k, e = slots
            self.hfov[k, e] = torch.tensor([float(c["hfov"]) for c in self._cams], dtype=torch.float32,
                                           device=self.hfov.device)

    def keys(self, stage_i, stage_f, episode_ids, headings) -> list:
        """(scene id, camera centre, rotation, HFOV, image size) per staged row (its record's camera)."""
        scene = stage_i[:, self.staging.col("scene_index")].tolist()
        self._cams = [goal_camera(self.record(s, i)) for s, i in zip(scene, episode_ids)]
        return [(self._scene_id(s), *c["position"], *c["rotation"], float(c["hfov"]), *c["image_dimensions"])
                for s, c in zip(scene, self._cams)]

    def render_rows(self, todo, stage_i, stage_f, episode_ids, headings) -> torch.Tensor:
        """The goal images [len(todo), H * W * 3] of rows ``todo``: one ``render_view`` per camera
        model (HFOV, image size) among them."""
        scene = stage_i[todo, self.staging.col("scene_index")].astype(np.int64)
        cams = [self._cams[i] for i in todo]
        h, w = self.resolution
        dev = self.target.device
        out = torch.empty((len(todo), h * w * 3), dtype=torch.uint8, device=dev)
        groups: dict = {}   # one render per camera model (HFOV, image size)
        for j, c in enumerate(cams):
            groups.setdefault((float(c["hfov"]), tuple(c["image_dimensions"])), []).append(j)
        for (hfov, dims), js in groups.items():
            pos = torch.tensor([cams[j]["position"] for j in js], dtype=torch.float32, device=dev)
            rot = torch.tensor([cams[j]["rotation"] for j in js], dtype=torch.float64, device=dev)
            rgb = self.render_view(torch.from_numpy(scene[js]).to(dev), pos, rot, dims, hfov, ("rgb",))["rgb"]
            if dims != (h, w):   # shown at the sensors' size, as a policy resizes its goal input
                rgb = torch.nn.functional.interpolate(rgb.permute(0, 3, 1, 2).float(), size=(h, w), mode="area")
                rgb = rgb.round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1)
            out[torch.tensor(js, device=dev)] = rgb.reshape(len(js), -1).to(torch.uint8)
        self.rendered += len(todo)
        return out


def host_hook(ctx: HostContext) -> GoalCameraImages:
    """The goal images of queued episodes into the ring field ``r_goal_image``."""
    return GoalCameraImages(ctx)


def goal_record(record: dict | None, _episode_id: str, _heading: float) -> dict:
    """The entries of ``episode_goals()``: the goal instance and its camera."""
    if record is None or "goal_object_id" not in record:
        return {}
    return {"goal_object_id": record["goal_object_id"], "goal_image_id": int(record["goal_image_id"]),
            "object_category": record.get("object_category"), "image_goal": goal_camera(record)}


# ------------------------------------------------------------------------------ episodes
def episode_dicts(ds: InstanceImageNavDataset, episodes: list[dict] | None = None) -> tuple[list[dict], dict]:
    """``episodes`` of ``ds`` (default: all) as the dataset supply's dicts (``goals`` = [the goal
    instance], with its view points and cameras) and their goals ({episode id: ``EpisodeGoal``(the
    instance's view points, its goal key)}). Episodes whose goal has no view point are left out."""
    out, goals = [], {}
    for e in ds.episodes if episodes is None else episodes:
        pts = ds.view_points_of(e)
        if len(pts) == 0:
            continue
        eid = str(e["episode_id"])
        out.append({"episode_id": eid, "scene_id": e["scene_id"], "start_position": e["start_position"],
                    "start_rotation": e["start_rotation"], "goals": [ds.goal_of(e)],
                    "goal_object_id": e["goal_object_id"], "goal_image_id": e["goal_image_id"],
                    "object_category": e.get("object_category")})
        goals[eid] = EpisodeGoal(pts, goal_key(e["scene_id"], e["goal_object_id"]))
    return out, goals


class FileEpisodes(GoalFileEpisodes):
    """An InstanceImageNav-v1 file's episodes (``ds``; ``raw_by_scene``: scene name -> its raw
    episodes), checked on each scene's navmesh when it arrives (``GoalFileEpisodes``)."""

    WHAT = "InstanceImageNav"
    check_on_navmesh = staticmethod(check_on_navmesh)
    episode_dicts = staticmethod(episode_dicts)

    def scene_dataset(self, raw: list[dict]) -> InstanceImageNavDataset:
        """The dataset of episodes ``raw`` and only their goals."""
        keys = {goal_key(e["scene_id"], e["goal_object_id"]) for e in raw}
        return InstanceImageNavDataset(raw, {k: v for k, v in self.ds.goals.items() if k in keys})


class SampledEpisodes(DatasetEpisodes):
    """Episodes generated per scene visit from its objects (``instance_imagenav_scene``: goal
    instances of ``categories``, cameras of ``image_dimensions``), seeded by (seed, scene, visit)."""

    def __init__(self, scene_paths: dict, seed: int, worker, options: SupplyOptions = SUPPLY_DEFAULTS,
                 image_dimensions=(64, 64), categories=None, episodes_per_visit: int = 200,
                 near_gate: float = NEAR_EXACT):
        super().__init__({}, seed, worker, options, near_gate=near_gate)
        from bps_assets.nav.instance_imagenav_episodes import InstanceImageNavOptions

        if categories is None:
            from bps_assets.readers.semantic_categories import objectnav_hm3d
            categories = list(objectnav_hm3d())
        self.scene_paths, self.categories = dict(scene_paths), list(categories)
        self.generator = InstanceImageNavOptions(image_dimensions=tuple(image_dimensions))
        self.episodes_per_visit = int(episodes_per_visit)

    def _start(self, st: _SceneState, inline: bool) -> None:
        from bps_assets.nav.instance_imagenav_episodes import instance_imagenav_scene
        from bps_assets.nav.objectnav_episodes import semantic_scene

        verts, tris, tri_object, table = semantic_scene(self.scene_paths[st.name])
        ds = instance_imagenav_scene(st.mesh.navmesh, verts, tris, tri_object, table, st.name,
                                     self.episodes_per_visit, int(st.rng.integers(2**63 - 1)), self.categories,
                                     self.generator)
        self.episodes_by_scene[st.name], self.goals[st.name] = episode_dicts(ds)
        super()._start(st, inline)


def supply(request):
    """The episode supply and the scenes it serves: an InstanceImageNav-v1 file (``episodes=PATH``)
    mapped onto the manifest's scenes, or episodes generated per scene visit (None / "sample")."""
    from bps_assets.errors import ConfigError

    c, entries, manifest = request.config, request.entries, request.manifest
    src = c.episodes.source
    if src in (None, "sample"):   # entries: annotated_scenes' (the world drops the others before sharding)
        return SampledEpisodes({e.name: str(e.scene) for e in entries}, c.seed, request.worker, c.episodes.supply,
                               image_dimensions=c.sensors.resolution, near_gate=request.near_gate,
                               categories=list(goal_set(c.episodes.categories))), entries
    if src == "dataset":
        raise ConfigError(None, f"task={NAME!r}: pass episodes=PATH (an InstanceImageNav-v1 split file) or 'sample'")
    if c.episodes.categories is not None:   # a file's goals are its own instances
        raise ConfigError(src, f"categories={c.episodes.categories!r} picks the goals of sampled episodes; "
                               "an InstanceImageNav file's goals are its own")
    mapped = mapped_file(src, manifest, map_habitat_instance_imagenav)   # read once within episodes_read_once
    supply_, served = FileEpisodes.supply(request, mapped, mapped.goal_instances)
    note_served(served, c.sensors.kinds)
    return supply_, served


SPEC = TaskSpec(
    name=NAME, options=TaskOptions, actions=ACTION_NAMES, schema=SCHEMA, State=State, Out=Out, params=params,
    max_move=max_move, apply_refills=apply_refills, begin_kernel=begin_kernel, step_kernel=step_kernel,
    staging=STAGING, observations=OBSERVATIONS, info=info, episode_info=episode_info, outcome=OUTCOME,
    supply=supply, scenes=annotated_scenes, host_hook=host_hook, goal_record=goal_record,
    camera=CAMERA, sizes=goalnav.sizes(image=True), goal_input=lambda obs: obs[GOAL_IMAGE.name],
    goal_input_spec=lambda resolution: ((*resolution, 3), torch.uint8), goal_encoder=ImageGoalEncoder,
    eval_episodes="sample", categories=True, episode_file=map_habitat_instance_imagenav)
