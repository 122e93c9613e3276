"""CPU batch renderer on Embree: the fast path on machines without a GPU.

Embree is reached through our C bridge (``embree_bridge``: BVH builds and tracing with the GIL
released, camera rays generated in C and traced in 16-wide packets) or, when the bridge was not
compiled, through embreex. All agents that look at the same resident scene are traced in one
call per worker thread; agents are split across ``options.threads`` threads by count, and each
thread shades its own hits. Shading (``shading="auto"`` picks native with the bridge, else
warp): "native" (C, fused into the bridge's packet loop) or "warp" (the Warp backend's shading
function on Warp's CPU device: how embreex gets RGB); both implement ``shading_data``'s model,
and the tests hold both to the numpy reference in tests/shading_reference.py. Depth-only
frames use the DISTANCE query; RGB needs the primitive id and barycentrics (the same rays).
The semantic sensor reads ``tri_object`` at the hit's primitive id.

Measurements and dropped designs: docs/DECISIONS.md (bps_runtime/render/embree.py).
"""
from __future__ import annotations

import copy
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

import numpy as np

from bps_assets.errors import ConfigError
from bps_assets.raycast import RayCaster

from .camera import camera_directions, camera_origins, finish_depth
from ..grouping import groups
from .inputs import check_render_inputs, check_sensors
from .protocol import DEFAULTS, RenderOptions, view_options
from .semantic import object_ids
from .shading_data import ShadingData

MISS_T = 1e30
# "bridge": our C bridge over libembree4 (GIL-free BVH builds, 16-wide packets); "embreex": the
# fallback when the bridge was not compiled; "auto": the bridge when it loads
ENGINES = ("auto", "bridge", "embreex")
# "native": C shading fused into the bridge's packet loop; "warp": the Warp backend's shading
# function compiled for Warp's CPU device; "auto": native with the bridge, else warp
SHADERS = ("auto", "native", "warp")
log = logging.getLogger("bps_runtime.render.embree")
# work shares per render thread and frame: a thread descheduled for a moment then holds up an
# eighth of its work, not half the frame (figures: docs/DECISIONS.md, render/embree.py)
SHARES_PER_THREAD = 8
# embreex: Embree's BVH + its own vertex/index copies per triangle / vertex, which the cache
# charges per scene (how they were measured: docs/DECISIONS.md, render/embree.py)
EMBREE_BYTES_PER_TRI = 72
EMBREE_BYTES_PER_VERT = 16
# the bridge: Embree's BVH alone (RSS growth per build of 554K-597K-triangle scans: 66-69
# B/triangle with Embree's default BVH, 40-44 with ``compact_bvh``; docs/PERFORMANCE.md
# "Resident bytes per scene"); the geometry is ours: one padded float32 vertex copy and the
# shading tables' indices, which Embree reads in place
BRIDGE_BVH_BYTES_PER_TRI = 72
BRIDGE_COMPACT_BVH_BYTES_PER_TRI = 46
# a converter LOD level's BVH, built at Embree's HIGH quality with up to 8 references per
# triangle (``embree_bridge.DEVICE_CONFIG``): RSS growth per build of 966-12,094-triangle
# levels 75-97 B/triangle, up to 232 on the sliver-rich apartment (65-73 at the default
# quality); the charge is the largest measured, rounded up (docs/PERFORMANCE.md "Converter LODs
# end to end")
BRIDGE_LOD_BVH_BYTES_PER_TRI = 240
# levels smaller than this keep the default build: a few BVH nodes, nothing for splits to win
# (levels of 148-2,212 triangles: 0.9-1.4x either way, noise) and 72 B/triangle, not 240
LOD_HIGH_MIN_TRIANGLES = 4096


class EmbreeAccel(RayCaster):
    """One committed embreex scene (``bps_assets.raycast.RayCaster``: ``distance``,
    ``intersect``): the fallback when the C bridge (``embree_bridge``) was not compiled.
    Building it holds the GIL (see ``embree_bridge``'s note)."""

    composed = False   # one mesh (``embree_instances.InstancedAccel`` is a composed scene's)

    def __init__(self, positions: np.ndarray, indices: np.ndarray):
        super().__init__(positions, indices, "the Embree renderer")
        self.shade_arrays = None     # set by ``EmbreeRenderer.prepare`` (shading "warp")
        self.native_shading = None   # never set here: native shading needs the bridge

    def trace_cameras(self, origins: np.ndarray, rotations: np.ndarray, cam_dirs: np.ndarray,
                      t_out: np.ndarray, hits: bool = False, miss: float = 0.0,
                      obj_out: np.ndarray | None = None, tri_object: np.ndarray | None = None) -> dict | None:
        """Same contract as ``embree_bridge.BridgeAccel.trace_cameras`` (without native shading),
        with the rays built in numpy."""
        hw = cam_dirs.shape[0]
        dirs = np.matmul(cam_dirs[None], rotations.transpose(0, 2, 1))  # [n, HW, 3]; matmul, not einsum (DECISIONS.md)
        org = np.broadcast_to(origins[:, None, :], (origins.shape[0], hw, 3))
        org, dirs = np.ascontiguousarray(org.reshape(-1, 3)), np.ascontiguousarray(dirs.reshape(-1, 3))
        if not hits and (obj_out is None or tri_object is None):
            z = self.distance(org, dirs)
            z[z >= MISS_T] = miss  # in place: embreex hands us a fresh array
            t_out[...] = z
            if obj_out is not None:
                obj_out.fill(0)
            return None
        hit = self.intersect(org, dirs)
        ok = (hit["primID"] >= 0) & (hit["tfar"] < MISS_T)
        t_out[...] = np.where(ok, hit["tfar"], np.float32(miss))
        hit["tfar"] = t_out
        hit["primID"] = np.where(ok, hit["primID"], -1).astype(np.int32, copy=False)
        hit["dirs"] = dirs
        if obj_out is not None:
            obj_out[...] = object_ids(tri_object, hit["primID"])
        return hit if hits else None


class EmbreeRenderer:
    """``render(scene_index [N], positions [N,3], rotations [N] yaw | [N,4] xyzw, sensors)``
    -> {"depth": float32 [N,H,W,1], "rgb": uint8 [N,H,W,3], "semantic": int32 [N,H,W,1]} CPU
    torch tensors (the sensors asked for)."""

    name = "embree"

    def __init__(self, options: RenderOptions = DEFAULTS, device: str = "cpu", shading: str = "auto",
                 engine: str = "auto", compact_bvh: bool = False):
        if shading not in SHADERS:
            raise ConfigError(None, f"shading must be one of {', '.join(SHADERS)}; got {shading!r}")
        if engine not in ENGINES:
            raise ConfigError(None, f"engine must be one of {', '.join(ENGINES)}; got {engine!r}")
        if str(device) != "cpu":
            raise ConfigError(None, f"the Embree renderer runs on the CPU; got device {device!r} "
                                    "(use the warp backend on CUDA)")
        self.options = options
        self.device = "cpu"
        self.frame_device = None   # no one-launch frame: the env renders after the step
        self._dirs = camera_directions(options)
        self._scenes: dict[int, tuple[ShadingData, EmbreeAccel]] = {}
        self._lock = threading.Lock()
        if engine == "auto":
            from . import embree_bridge
            engine = "bridge" if embree_bridge.available() else "embreex"
            if engine == "embreex":
                log.warning("the GIL-free Embree bridge is not compiled: using embreex, whose BVH builds "
                            "stall the step loop while scenes load (reinstall bps with gcc present)")
        self.engine = engine
        # Embree's smaller triangle BVH (leaves index our vertex buffer): ~0.6x the BVH bytes for
        # 0.90-0.95x the depth fps (docs/PERFORMANCE.md "Resident bytes per scene"); bridge only
        if compact_bvh and engine != "bridge":
            raise ConfigError(None, "compact_bvh=True needs the Embree bridge (engine='bridge')")
        self.compact_bvh = bool(compact_bvh)
        if shading == "native" and engine != "bridge":
            raise ConfigError(None, "shading='native' runs inside the Embree bridge: use engine='bridge'")
        if shading == "auto":
            shading = "native" if engine == "bridge" else "warp"
        self._shader = None
        if shading == "warp":
            from .warp_backend import CpuShader
            self._shader = CpuShader()
        self.shading = shading
        self._pool = ThreadPoolExecutor(options.threads, thread_name_prefix="bps-embree") if options.threads > 1 else None

    # -- residency (called by the scene cache / loader)
    def prepare(self, shading: ShadingData, positions: np.ndarray, indices: np.ndarray, level: int = -1):
        """Build a scene's BVH (the bridge's or embreex's) plus the shading state the chosen shading
        needs; runs on loader threads. CorruptFileError when the shading tables are for another mesh.
        ``level`` >= 0: the mesh is that converter LOD level (``_high_quality``); -1: the full mesh."""
        shading.check_geometry(len(positions), len(indices))
        if self.engine == "bridge":
            from .embree_bridge import BUILD_QUALITY_HIGH, BUILD_QUALITY_MEDIUM, COMPACT_TRI_ACCEL, BridgeAccel
            # the shading tables' index array (int32, checked in range and >= 0) is Embree's
            # index buffer too: one copy of the indices per scene
            quality = BUILD_QUALITY_HIGH if self._high_quality(level, len(indices)) else BUILD_QUALITY_MEDIUM
            accel = BridgeAccel(positions, shading.indices, quality=quality,
                                tri_accel=COMPACT_TRI_ACCEL if self.compact_bvh else None)
        else:
            accel = EmbreeAccel(positions, indices)
        if self.shading == "warp":
            accel.shade_arrays = self._shader.arrays(shading)
        elif self.shading == "native":
            from .embree_bridge import NativeShading
            accel.native_shading = NativeShading(shading, self.options.pixel_angle)
        return accel

    def _high_quality(self, level: int, num_triangles: int) -> bool:
        """Whether a mesh at ``level`` gets Embree's HIGH build: converter LOD levels (small next to
        the full mesh, so the slower build is cheap) of at least ``LOD_HIGH_MIN_TRIANGLES`` on the
        bridge's default BVH; the full mesh and the compact BVH keep the default build
        (measurements: ``BRIDGE_LOD_BVH_BYTES_PER_TRI``)."""
        return self.engine == "bridge" and not self.compact_bvh and level >= 0 \
            and num_triangles >= LOD_HIGH_MIN_TRIANGLES

    def accel_breakdown(self, num_vertices: int, num_triangles: int, level: int = -1) -> dict[str, int]:
        """Estimated bytes ``prepare`` adds for a mesh of this size (at converter LOD ``level``;
        -1: the full mesh): "bvh" (Embree's) and "geometry" (vertex / index copies beyond the
        shading tables' indices)."""
        if self.engine == "bridge":
            per_tri = BRIDGE_COMPACT_BVH_BYTES_PER_TRI if self.compact_bvh else BRIDGE_BVH_BYTES_PER_TRI
            if self._high_quality(level, num_triangles):
                per_tri = BRIDGE_LOD_BVH_BYTES_PER_TRI
            return {"bvh": per_tri * num_triangles, "geometry": 12 * num_vertices + 4}
        return {"bvh": EMBREE_BYTES_PER_TRI * num_triangles, "geometry": EMBREE_BYTES_PER_VERT * num_vertices}

    @property
    def instancing(self) -> bool:
        """Composed scenes render as Embree instances (the bridge with native shading); otherwise
        the loader flattens them (each instance's geometry expanded into the scene's mesh)."""
        return self.engine == "bridge" and self.shading == "native"

    def prepare_instances(self, parts):
        """A composed scene's top-level instance scene (``embree_instances.InstancedAccel``) over
        ``parts``: ``(accel from prepare, transform 4x4, semantic id)``, the stage first; loader threads."""
        from .embree_instances import InstancedAccel
        return InstancedAccel([(a, a.native_shading, m, o) for a, m, o in parts])

    def instances_bytes(self, num_instances: int, num_meshes: int) -> int:
        """``prepare_instances``'s ``nbytes`` estimated before the build (``embree_instances``)."""
        from .embree_instances import instances_bytes
        return instances_bytes(num_instances)

    def attach(self, scene_index: int, shading: ShadingData, accel: EmbreeAccel) -> None:
        """Make ``scene_index`` renderable with a prepared accel (replacing any scene under that id)."""
        with self._lock:
            self._scenes[int(scene_index)] = (shading, accel)

    def detach(self, scene_index: int) -> None:
        """Forget ``scene_index``; unknown ids are ignored."""
        with self._lock:
            self._scenes.pop(int(scene_index), None)

    def close(self):
        """Stop the render threads (waiting for a frame in progress); idempotent."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    # -- rendering
    def _task(self, parts, cam, rot, want_rgb, depth_out, rgb_out, sem_out):
        hw = self._dirs.shape[0]
        for scene_index, agents in parts:
            shading, accel = self._scenes[scene_index]
            args = (cam[agents], rot[agents], self._dirs)
            z = np.empty(len(agents) * hw, np.float32)
            if accel.composed:   # a composed scene's instances (embree_instances)
                self._task_instanced(accel, args, agents, z, want_rgb, depth_out, rgb_out, sem_out)
                continue
            sem = {} if sem_out is None else {"obj_out": np.empty(len(agents) * hw, np.int32),
                                              "tri_object": shading.tri_object}
            if not want_rgb:
                accel.trace_cameras(*args, z, **sem)
            elif self.shading == "native":
                rgb = np.empty((len(agents) * hw, 3), np.uint8)
                accel.trace_cameras(*args, z, rgb_out=rgb, **sem,
                                    shading=accel.native_shading.at_pixel_angle(self.options.pixel_angle))
                rgb_out[agents] = rgb.reshape(len(agents), hw, 3)
            else:
                hit = accel.trace_cameras(*args, z, hits=True, **sem)
                rgb = self._shader.shade(accel.shade_arrays, hit["primID"], hit["u"], hit["v"], z, hit["Ng"],
                                         hit["dirs"], self.options.pixel_angle)
                rgb_out[agents] = rgb.reshape(len(agents), hw, 3)
            if sem:
                sem_out[agents] = sem["obj_out"].reshape(len(agents), hw)
            # the sensor's depth per share, on the render threads: one pass over the whole
            # frame after them would be serial
            depth_out[agents] = finish_depth(z, self.options).reshape(len(agents), hw)

    def _task_instanced(self, accel, args, agents, z, want_rgb, depth_out, rgb_out, sem_out):
        hw = self._dirs.shape[0]
        rgb = np.empty((len(agents) * hw, 3), np.uint8) if want_rgb else None
        obj = np.empty(len(agents) * hw, np.int32) if sem_out is not None else None
        # the camera's own pixel footprint (``render_view``'s differs from the sensor's)
        accel.trace_cameras(*args, z, rgb_out=rgb, obj_out=obj, pixel_angle=self.options.pixel_angle)
        if want_rgb:
            rgb_out[agents] = rgb.reshape(len(agents), hw, 3)
        if obj is not None:
            sem_out[agents] = obj.reshape(len(agents), hw)
        depth_out[agents] = finish_depth(z, self.options).reshape(len(agents), hw)

    def render(self, scene_index, positions, rotations, sensors: Sequence[str] = ("depth",)) -> dict:
        """Draw one frame per agent: see the class docstring for shapes. Every scene id must be
        attached (ConfigError otherwise); returns when the frame is done (``options.threads``
        threads trace and shade it)."""
        import torch

        sensors = check_sensors(sensors)
        scene_index, pos, rot = check_render_inputs(scene_index, positions, rotations, self._scenes)
        n = scene_index.shape[0]
        h, w = self.options.resolution
        cam = camera_origins(pos, self.options)
        want_rgb = "rgb" in sensors
        depth_out = np.empty((n, h * w), np.float32)
        rgb_out = np.empty((n, h * w, 3), np.uint8) if want_rgb else None
        sem_out = np.empty((n, h * w), np.int32) if "semantic" in sensors else None

        by_scene = groups(scene_index)
        nthreads = self.options.threads if self._pool is not None else 1
        # cut the agents (in scene order) into equal contiguous shares, several per thread, which
        # the threads take as they finish: a thread the OS delays then costs the frame one share,
        # not half the frame
        nshares = nthreads * SHARES_PER_THREAD if nthreads > 1 else 1
        shares: list[list[tuple[int, np.ndarray]]] = [[] for _ in range(nshares)]
        bounds = np.linspace(0, n, nshares + 1).round().astype(int)
        start = 0
        for g_scene, agents in by_scene:
            end = start + len(agents)
            for k in range(nshares):
                a, b = max(start, bounds[k]), min(end, bounds[k + 1])
                if a < b:
                    shares[k].append((g_scene, agents[a - start:b - start]))
            start = end
        if nthreads == 1:
            self._task(shares[0], cam, rot, want_rgb, depth_out, rgb_out, sem_out)
        else:
            futs = [self._pool.submit(self._task, s, cam, rot, want_rgb, depth_out, rgb_out, sem_out)
                    for s in shares if s]
            for f in futs:
                f.result()

        out: dict[str, Any] = {}
        if "depth" in sensors:
            out["depth"] = torch.from_numpy(depth_out.reshape(n, h, w, 1))
        if want_rgb:
            out["rgb"] = torch.from_numpy(rgb_out.reshape(n, h, w, 3))
        if sem_out is not None:
            out["semantic"] = torch.from_numpy(sem_out.reshape(n, h, w, 1))
        return out

    def render_view(self, scene_index, positions, rotations, resolution, hfov_deg: float,
                    sensors: Sequence[str] = ("rgb",)) -> dict:
        """``render`` through another pinhole camera (``protocol.Renderer.render_view``): this
        renderer's scenes and threads, that camera's rays and texture footprint, for this call."""
        v = copy.copy(self)
        v.options = view_options(self.options, resolution, hfov_deg)
        v._dirs = camera_directions(v.options)
        return v.render(scene_index, positions, rotations, sensors)

    def raw_depth(self, scene_index: int, origins: np.ndarray, directions: np.ndarray) -> np.ndarray:
        """One plain Embree call on given rays (the benchmark's baseline)."""
        return self._scenes[int(scene_index)][1].distance(origins, directions)
