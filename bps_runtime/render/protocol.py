"""What every batch renderer shares: the sensor settings (``RenderOptions``) and the
``Renderer`` protocol the scene cache and the env talk to."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

from bps_assets.errors import ConfigError, is_int, is_real

from ..threads import check_threads
from .shading_data import ShadingData

# "semantic": the hit triangle's instance id (ShadingData.tri_object; render/semantic.py)
SENSORS = ("depth", "rgb", "semantic")
MAX_RESOLUTION = 4096   # the largest sensor height / width (every config and the CLI say this one)


def check_resolution(resolution) -> tuple[int, int]:
    """``resolution`` (one int or (height, width)) as (height, width); ConfigError unless both
    are ints (not 64.5, not "64": nothing truncated or parsed) in 1..MAX_RESOLUTION."""
    try:
        h, w = (resolution, resolution) if np.isscalar(resolution) else resolution
    except (TypeError, ValueError):
        raise ConfigError(None, f"resolution={resolution!r}: expected (height, width)") from None
    if not (is_int(h) and is_int(w)):
        raise ConfigError(None, f"resolution={resolution!r}: height and width must be ints")
    h, w = int(h), int(w)
    if not (1 <= h <= MAX_RESOLUTION and 1 <= w <= MAX_RESOLUTION):
        raise ConfigError(None, f"resolution={resolution!r}: height and width must be in 1..{MAX_RESOLUTION}")
    return h, w


def check_real(name: str, value) -> float:
    """``value`` of camera setting ``name`` as a float; ConfigError naming both unless it is a
    finite number (a bool, a string such as "90", NaN or inf is refused, not compared or cast)."""
    if not is_real(value):
        raise ConfigError(None, f"{name}={value!r}: expected a number")
    if not math.isfinite(value):
        raise ConfigError(None, f"{name}={value!r}: must be finite")
    return float(value)


LOD_CHOICES = ("auto", "full")   # or a level index, 0 .. bps_assets.lod_section.MAX_LEVELS - 1


def check_lod(lod):
    """``lod`` if it is one of LOD_CHOICES or a converter LOD level index (an int in 0..7, or its
    digits as text, as a command line gives it: that level, a file with fewer levels its
    coarsest), else a ConfigError naming the value (RenderOptions and SensorConfig)."""
    from bps_assets.lod_section import MAX_LEVELS

    if isinstance(lod, str) and lod in LOD_CHOICES:
        return lod
    level = int(lod) if isinstance(lod, str) and lod.isdigit() and len(lod) == 1 else lod
    if is_int(level) and 0 <= int(level) < MAX_LEVELS:
        return int(level)
    raise ConfigError(None, f"lod={lod!r}: choose 'auto' (the level the sensor's pixel allows), 'full' "
                            f"(the full mesh) or a level index 0..{MAX_LEVELS - 1}")


def check_view_cameras(cameras) -> tuple:
    """``cameras`` (an iterable of ((height, width), hfov_deg)) as a tuple of ((h, w), float);
    ConfigError on a bad resolution or an HFOV outside (0, 180)."""
    out = []
    try:
        for res, hfov in cameras:
            hfov = check_real("view_cameras hfov_deg", hfov)
            if not 0.0 < hfov < 180.0:
                raise ConfigError(None, f"view_cameras: hfov_deg must be in (0, 180), got {hfov}")
            out.append((check_resolution(tuple(res)), hfov))
    except (TypeError, ValueError):
        raise ConfigError(None, f"view_cameras={cameras!r}: expected ((height, width), hfov_deg) pairs") from None
    return tuple(out)


@dataclass(frozen=True)
class RenderOptions:
    """Sensor settings shared by every backend (habitat-lab PointNav defaults)."""

    resolution: tuple[int, int] = (64, 64)  # (height, width)
    hfov_deg: float = 90.0
    sensor_height: float = 1.25
    # the camera's tilt about its right axis (deg; negative looks down: habitat's sensor
    # ORIENTATION x, e.g. the 2021 challenge's -20); the body stays upright
    pitch_deg: float = 0.0
    min_depth: float = 0.0
    max_depth: float = 10.0
    # depth is clipped to [min_depth, max_depth] as habitat-lab's sensor clips it (a miss, 0,
    # reads min_depth); normalize_depth: then scaled to [0, 1]
    normalize_depth: bool = False
    # the rays' z-depth as it is (metres, 0 = miss, no clip): the frame Redwood noise reads, which
    # then clips and scales (habitat-sim's noise on its raw frame, habitat-lab's clip after)
    raw_depth: bool = False
    # CPU threads (Embree: one ray-casting call per thread, which releases the GIL); None: every
    # core this process may use. ``make(threads=...)`` sets it; the step shares the same count.
    threads: int | None = None
    # cameras come no closer than this to a surface (m; the default agent radius): texture mips
    # finer than any pixel selects from there are not kept resident (render/mips.py); 0: keep all
    texture_near: float = 0.1
    # the ``render_view`` cameras a task declares, ((height, width), hfov_deg) each (goal images):
    # the mips kept are those the finest of them and the sensor selects; an undeclared finer
    # camera samples the finest kept level (render/mips.py)
    view_cameras: tuple = ()
    # converter LODs (docs/FORMAT.md 5.8): "auto" renders the coarsest level whose error fits one
    # pixel at 1 m (a file without LODs: the full mesh); "full" always the full mesh; an int i:
    # level i (a file with fewer levels: its coarsest)
    lod: str | int = "auto"

    def __post_init__(self):
        object.__setattr__(self, "resolution", check_resolution(self.resolution))
        for name in ("hfov_deg", "sensor_height", "pitch_deg", "min_depth", "max_depth", "texture_near"):
            object.__setattr__(self, name, check_real(name, getattr(self, name)))
        if not 0.0 < self.hfov_deg < 180.0:
            raise ConfigError(None, f"hfov_deg must be in (0, 180), got {self.hfov_deg}")
        if not -90.0 < self.pitch_deg < 90.0:
            raise ConfigError(None, f"pitch_deg must be in (-90, 90), got {self.pitch_deg}")
        if not 0.0 <= self.min_depth < self.max_depth:
            raise ConfigError(None, f"need 0 <= min_depth < max_depth, got {self.min_depth}, {self.max_depth}")
        if not self.texture_near >= 0.0:
            raise ConfigError(None, f"texture_near must be >= 0 (metres), got {self.texture_near}")
        object.__setattr__(self, "threads", check_threads(self.threads))
        object.__setattr__(self, "view_cameras", check_view_cameras(self.view_cameras))
        object.__setattr__(self, "lod", check_lod(self.lod))

    @property
    def pixel_angle(self) -> float:
        """Width of one pixel on the plane z = 1 (the footprint scale for mip selection)."""
        return 2.0 * math.tan(math.radians(self.hfov_deg) / 2.0) / self.resolution[1]


DEFAULTS = RenderOptions()


def depth_clip_range(camera: Mapping) -> tuple[float, float]:
    """The depth sensor's clip (min_depth, max_depth) in metres of ``camera`` (camera settings by
    name: a task's ``TaskSpec.camera``, ``SensorConfig.camera()``), DEFAULTS' where unset; each
    checked as ``RenderOptions`` checks it (``check_real``). The one place the range is found."""
    return tuple(check_real(k, camera.get(k, getattr(DEFAULTS, k))) for k in ("min_depth", "max_depth"))


VIEW_DIRS_KEPT = 64   # camera ray tables a renderer keeps for ``render_view`` (one per resolution x HFOV)


def view_options(options: RenderOptions, resolution, hfov_deg: float) -> RenderOptions:
    """``options`` seen through another pinhole camera: ``resolution`` (height, width) and
    ``hfov_deg`` replaced, ``sensor_height`` 0 and no tilt (``render_view`` positions are camera
    centres, its rotations the cameras' whole orientation)."""
    return replace(options, resolution=(int(resolution[0]), int(resolution[1])), hfov_deg=float(hfov_deg),
                   sensor_height=0.0, pitch_deg=0.0, raw_depth=False)


@runtime_checkable
class Renderer(Protocol):
    """A batch renderer over resident scenes addressed by small integer ids.

    ``prepare`` runs in loader threads (builds the BVH; no GIL-holding work on the step path);
    ``attach`` / ``detach`` are called by the scene cache when a scene becomes resident / leaves.
    Optional (composed scenes): ``instancing`` true and ``prepare_instances(parts)`` -> an accel
    over ``(accel from prepare, 4x4 asset -> world, semantic id)`` parts, the stage first (its
    ``nbytes``: the top-level instance structures, charged by the scene cache as bvh) and
    ``instances_bytes(num_instances, num_meshes)``, that ``nbytes``'s estimate before the build
    (at least it; the loader charges it up front); a renderer without them gets composed scenes flattened (``scenes.loader``).
    """

    options: RenderOptions
    # the device of ``launch_frame`` (a frame drawn as one Warp launch the env queues inside its
    # step, with ``frame_buffers`` and ``table_version``); None: no such frame (``render`` only)
    frame_device: str | None

    def close(self) -> None:
        """Stop the renderer's threads and free what it holds (idempotent)."""

    def prepare(self, shading: ShadingData, positions: np.ndarray, indices: np.ndarray) -> Any:
        """Build a scene's acceleration structure (and device copies) from its shading tables and
        mesh; called on loader threads, so nothing here may hold the GIL for long. A mesh that is
        a converter LOD level is passed with keyword ``level`` (>= 0; ``accel_breakdown`` gets
        it too): a renderer may build such small meshes differently."""

    instancing: bool   # True: composed scenes render as instances (``prepare_instances``); False: flattened

    def accel_breakdown(self, num_vertices: int, num_triangles: int) -> dict[str, int]:
        """Estimated bytes ``prepare`` allocates for a mesh of this size, by part: {"bvh": ...,
        "geometry": ...}; required (``scenes.footprint`` charges every scene by it; its sum:
        ``scenes.footprint.accel_bytes``)."""

    def attach(self, scene_index: int, shading: ShadingData, accel: Any) -> None:
        """Make ``scene_index`` renderable with what ``prepare`` returned; called between steps."""

    def detach(self, scene_index: int) -> None:
        """Forget ``scene_index``; unknown ids are ignored."""

    def render(self, scene_index, positions, rotations, sensors: Sequence[str] = ("depth",)) -> Mapping[str, Any]:
        """One frame per agent: scene ids [N], positions [N,3] (agent base, Habitat frame), rotations
        [N] yaw or [N,4] xyzw -> {"depth": float32 [N,H,W,1], "rgb": uint8 [N,H,W,3],
        "semantic": int32 [N,H,W,1] (instance id, 0 = no hit or no object)} for the sensors asked
        for; the semantic ids are ``shading.tri_object`` at the depth ray's hit triangle."""

    def render_view(self, scene_index, positions, rotations, resolution, hfov_deg: float,
                    sensors: Sequence[str] = ("rgb",)) -> Mapping[str, Any]:
        """``render`` through another pinhole camera (``view_options``): ``positions`` are the
        camera centres, frames are ``resolution`` (height, width) at ``hfov_deg``; the same
        scenes, depth range and shading (e.g. a goal image from a dataset's camera)."""
