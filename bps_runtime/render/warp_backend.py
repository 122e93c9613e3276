"""Warp batch renderer: one kernel launch casts and shades every pixel of every agent.

Runs on CUDA (the production path on GPU machines) and on Warp's CPU device, which is how the
tests here check it against the Embree backend pixel for pixel. Each resident scene is one
``wp.Mesh`` (its BVH is built in a loader thread) plus its shading arrays on the device, and one
row of a scene table indexed by scene id; a frame is one launch over all agents of all scenes
(kernels: ``warp_kernels``), writing straight into torch-owned [N, H, W, C] outputs.

The kernel implements the shading described in ``shading_data`` operation for operation (same
float32 order, same integer BC1 formulas), so the only differences to Embree come from the two
ray / triangle intersection routines (barycentrics differ in the last bits: a texel boundary or
a mip boundary can move by one on a handful of pixels).
Dropped designs: docs/DECISIONS.md (bps_runtime/render/warp_backend.py).
"""
from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from typing import Sequence

import numpy as np

from bps_assets.errors import ConfigError, MissingDependencyError

from ..warp_init import CUDA_BUILD_LOCK, CudaReleased, device_build, free_orphans, init_warp
from .camera import camera_directions, depth_mode, yaw_to_quaternion
from .inputs import check_render_inputs, check_resident, check_sensors
from .protocol import DEFAULTS, VIEW_DIRS_KEPT, RenderOptions, view_options
from .shading_data import ShadingData

WARP_BVH_BYTES_PER_TRI = 64  # 2T-1 nodes of two 16-byte bounds (Warp's BVH layout)
TABLE_START = 64  # scene table rows allocated up front (rows are scene indices: few)

_wp = None
_kernels = None
_init_lock = threading.Lock()


def _warp():
    """(warp module, warp_kernels module), initialised once per process."""
    global _wp, _kernels
    if _wp is not None:
        return _wp, _kernels
    with _init_lock:
        if _wp is not None:
            return _wp, _kernels
        try:
            wp = init_warp()
        except MissingDependencyError as e:
            raise MissingDependencyError(None, "the Warp renderer", "warp-lang") from e
        from . import warp_kernels
        _kernels = warp_kernels
        _wp = wp
    return _wp, _kernels


def warp_accel_breakdown(num_vertices: int, num_triangles: int, level: int = -1) -> dict[str, int]:
    """Estimated device bytes a scene's ``wp.Mesh`` adds beyond its shading tables: the BVH and
    the points (the mesh's indices are the shading tables' own array). ``level`` is ignored:
    every converter LOD level gets the same build."""
    return {"bvh": WARP_BVH_BYTES_PER_TRI * num_triangles, "geometry": 12 * num_vertices}


class ShadingArrays:
    """The shading tables as Warp arrays on ``device`` (zero-copy views on the CPU)."""

    def __init__(self, wp, device, s: ShadingData):
        cpu = str(device) == "cpu"

        def arr(a, dtype):
            a = np.ascontiguousarray(a)
            return wp.array(a, dtype=dtype, device=device, copy=not cpu)

        self.indices = arr(s.indices.reshape(-1), int)
        self.uvs = arr(s.uvs, wp.vec2)
        self.has_colors = int(s.colors is not None)
        self.colors = arr(s.colors if s.colors is not None else np.zeros((1, 4), np.uint8), wp.uint8)
        self.tri_material = arr(s.tri_material, int)
        self.tri_lod = arr(s.tri_lod_bias, float)
        self.mat_color = arr(s.material_color, wp.vec4)
        self.mat_tex = arr(s.material_texture, int)
        self.tex_data = arr(s.tex_data if s.tex_data.size else np.zeros(8, np.uint8), wp.uint8)
        self.lmax = int(s.level_info.shape[1])
        self.level_info = arr(s.level_info.reshape(-1), wp.int64)
        self.tex_nlevels = arr(s.tex_nlevels, int)
        self.tex_format = arr(s.tex_format, int)
        self.has_objects = int(s.tri_object is not None)
        self.tri_object = arr(s.tri_object if s.tri_object is not None else np.zeros(1, np.int32), wp.int32)
        self._keep = s  # the numpy arrays the CPU views point into

    def table(self, kernels, mesh_id: int):
        """This scene's row of the render kernel's scene table."""
        t = kernels.SceneTable()
        t.mesh = mesh_id
        for name in ("indices", "uvs", "colors", "has_colors", "tri_material", "tri_lod", "mat_color",
                     "mat_tex", "tex_data", "level_info", "lmax", "tex_nlevels", "tex_format", "tri_object",
                     "has_objects"):
            setattr(t, name, getattr(self, name))
        return t


class WarpScene(CudaReleased):
    """Device-resident scene: the wp.Mesh (BVH) and the shading arrays."""

    composed = False   # one mesh (``warp_instances.WarpInstances`` is a composed scene's)

    def __init__(self, wp, device, shading: ShadingData, positions: np.ndarray, indices: np.ndarray):
        self._cuda = device.is_cuda
        # device= on every array, no ScopedDevice: Warp's default device is process-wide, and
        # another loader thread's scope can restore it under this one
        with device_build(device):
            self.shading = ShadingArrays(wp, device, shading)
            self.num_triangles = int(shading.indices.shape[0])
            # the mesh's index buffer is the shading tables' (one copy of the indices per scene);
            # on the CPU the points are the scene's own array (zero-copy)
            self._positions = pos = np.ascontiguousarray(positions, np.float32)
            self.points = wp.array(pos, dtype=wp.vec3, device=device, copy=str(device) != "cpu")
            self.tri_indices = self.shading.indices
            self.mesh = wp.Mesh(points=self.points, indices=self.tri_indices) if self.num_triangles else None
            wp.synchronize_device(device)


class CpuShader:
    """Compiled shading of Embree hits with the Warp backend's own shading function, on Warp's
    CPU device (a ctypes call: it releases the GIL, so both render threads shade in parallel):
    the Embree renderer's shading when its engine is embreex."""

    def __init__(self):
        self._wp, self._k = _warp()
        self._kernel = self._k.shade_kernel
        self._dev = self._wp.get_device("cpu")
        self._lock = threading.Lock()
        self._warm = False

    def arrays(self, shading: ShadingData) -> ShadingArrays:
        """Warp CPU views of one scene's shading tables (no copy; they keep the numpy arrays alive)."""
        return ShadingArrays(self._wp, self._dev, shading)

    def shade(self, sa: ShadingArrays, prim, u, v, z, ng, dirs, pixel_angle: float) -> np.ndarray:
        """Colours (uint8 [n,3]) of Embree hits: ``prim`` (-1: miss), ``u``/``v`` (weights of the 2nd
        and 3rd vertex), hit distances ``z``, normals ``ng`` and ray ``dirs``; misses and z <= 0 stay
        black. Safe to call from several threads (the first launch, which compiles, is serialized)."""
        wp = self._wp
        n = prim.shape[0]
        out = np.zeros((n, 3), np.uint8)
        if n == 0:
            return out

        def w(a, dtype):
            return wp.array(np.ascontiguousarray(a), dtype=dtype, device=self._dev, copy=False)

        args = [w(prim.astype(np.int32, copy=False), wp.int32), w(u, float), w(v, float), w(z, float),
                w(ng, wp.vec3), w(dirs, wp.vec3), w(out, wp.uint8), sa.table(self._k, 0), float(pixel_angle)]
        if not self._warm:  # first launch compiles/loads the module: once, not concurrently
            with self._lock:
                wp.launch(self._kernel, dim=n, inputs=args, device=self._dev)
                self._warm = True
            return out
        wp.launch(self._kernel, dim=n, inputs=args, device=self._dev)
        return out


class WarpRenderer:
    """Same interface and output as EmbreeRenderer; tensors live on ``device``.

    A frame is one kernel launch over every agent of every resident scene: the scene table
    (one ``SceneTable`` row per scene id, written on attach / detach, off the step path) lets
    each agent find its scene on the device. The table keeps its address while scenes come and
    go (rows are rewritten in place), so a captured CUDA graph of the step stays valid. When the inputs are torch tensors on the
    renderer's own device, nothing is copied to the host and nothing waits: scene ids are not
    checked against the resident set there (an id with no scene renders as all misses), which
    is what keeps a CUDA step free of synchronisation. Host inputs (numpy, lists, CPU tensors
    for a CUDA renderer) are checked precisely first, as the Embree backend does.
    """

    name = "warp"

    def __init__(self, options: RenderOptions = DEFAULTS, device: str = "cpu"):
        wp, self._k = _warp()
        self._wp = wp
        try:
            self._wdev = wp.get_device(str(device))
        except Exception as e:  # Warp raises a bare RuntimeError for unknown devices
            raise ConfigError(None, f"Warp cannot use device {device!r}: {e}") from None
        self.device = str(device)
        self.frame_device = self.device   # launch_frame draws on it, inside the env's step
        self.options = options
        self._dirs = wp.array(camera_directions(options), dtype=wp.vec3, device=self._wdev)
        self._no_rgb = wp.zeros((1, 1, 3), dtype=wp.uint8, device=self._wdev)  # rgb arg of depth-only frames
        self._no_sem = wp.zeros((1, 1), dtype=wp.int32, device=self._wdev)  # semantic arg of frames without it
        self._scenes: dict[int, WarpScene] = {}
        self._retired: list = []   # CUDA: (event, scene) detached, freed once frames before it ran
        self._lock = threading.Lock()
        self._table = None
        self.table_version = 0  # bumped when the table moves (a captured CUDA graph must be re-captured)
        self._grow_table(TABLE_START)
        self._view_dirs: OrderedDict = OrderedDict()   # (resolution, hfov) -> device ray table

    def prepare(self, shading: ShadingData, positions: np.ndarray, indices: np.ndarray, level: int = -1) -> WarpScene:
        """Upload a scene's mesh (and build its BVH) and shading tables to the renderer's device;
        CorruptFileError when the tables are for another mesh. ``level`` (a converter LOD's): the
        same build for every level."""
        shading.check_geometry(len(positions), len(indices))
        self._reap(wait=True)   # a loader thread: the detached scenes' memory goes before a new one's comes
        return WarpScene(self._wp, self._wdev, shading, positions, indices)

    def accel_breakdown(self, num_vertices: int, num_triangles: int, level: int = -1) -> dict[str, int]:
        """``warp_accel_breakdown``: what ``prepare`` adds beyond the shading tables (any ``level``)."""
        return warp_accel_breakdown(num_vertices, num_triangles)

    instancing = True   # composed scenes: warp_instances (a top-level wp.Bvh over shared asset meshes)

    def prepare_instances(self, parts):
        """A composed scene's instance tables (``warp_instances.WarpInstances``) over ``parts``:
        ``(WarpScene from prepare, transform 4x4, semantic id)``, the stage first; loader threads."""
        from .warp_instances import WarpInstances
        self._reap(wait=True)
        return WarpInstances(self._wp, self._wdev, parts)

    def instances_bytes(self, num_instances: int, num_meshes: int) -> int:
        """``prepare_instances``'s ``nbytes`` estimated before the build (``warp_instances``)."""
        from .warp_instances import instances_bytes
        return instances_bytes(num_instances, num_meshes)

    def attach(self, scene_index: int, shading: ShadingData, accel: WarpScene) -> None:
        """Make ``scene_index`` renderable. Call between steps (the scene cache does): the row is
        written in place, in stream order after the frames already queued."""
        scene_index = int(scene_index)
        self._reap()
        with self._lock:
            if scene_index >= self._table.shape[0]:
                self._grow_table(max(2 * self._table.shape[0], scene_index + 1))
            self._scenes[scene_index] = accel
            self._write_row(scene_index)
            if accel.composed:   # a composed scene adds a launch: a captured step must re-capture
                self.table_version += 1

    def detach(self, scene_index: int) -> None:
        """Forget ``scene_index`` (its row then renders as all misses); unknown ids are ignored.
        On CUDA the scene's device memory is kept until the frames queued before its row was
        cleared have run (an event on torch's stream; nothing waits for it)."""
        scene_index = int(scene_index)
        self._reap()
        with self._lock:
            gone = self._scenes.pop(scene_index, None)
            if gone is not None:
                self._write_row(scene_index)
                if gone.composed:
                    self.table_version += 1
                if self._wdev.is_cuda:
                    self._retired.append((self._frames_done(), gone))

    def _frames_done(self):
        """A torch CUDA event after the frames queued so far on torch's current stream."""
        import torch

        done = torch.cuda.Event()
        done.record(torch.cuda.current_stream(torch.device(self.device)))
        return done

    def _reap(self, wait: bool = False):
        """Let go of the detached scenes whose last frames have run (CUDA). ``wait`` (a loader
        thread, before a build): wait for those frames first. The scenes are ``CudaReleased``:
        dropped here, each is freed under ``CUDA_BUILD_LOCK`` at once, or, while a loader builds
        (it holds the lock), by that loader as its build ends (``device_build``), so nothing here
        waits for a build, and a loader's next build frees them before its own memory comes."""
        if not self._retired:
            return
        with self._lock:
            ready, kept = [], []
            for r in self._retired:
                (ready if wait or r[0].query() else kept).append(r)
            self._retired = kept
        for done, _ in ready:
            if wait:
                done.synchronize()
        ready.clear()   # their last references (outside the renderer's lock)

    def close(self):
        """Release every scene's device memory now: on CUDA after the frames queued on the
        device have run, under ``CUDA_BUILD_LOCK``."""
        if self._wdev.is_cuda:
            import torch

            torch.cuda.synchronize(torch.device(self.device))
        with self._lock:
            held, self._retired = self._retired, []
            scenes, self._scenes = self._scenes, {}
            for scene_index in scenes:   # their rows render as misses, not freed memory
                self._write_row(scene_index)
        with CUDA_BUILD_LOCK:
            held.clear()
            scenes.clear()
            free_orphans()

    def _row(self, scene_index: int):
        sc = self._scenes.get(scene_index)
        if sc is None or sc.mesh is None:  # no scene, or one without triangles: every pixel misses
            return self._k.SceneTable()
        return sc.shading.table(self._k, sc.mesh.id)

    def _write_row(self, scene_index: int):
        # the row is built in host memory and copied in stream order (a device-side temporary
        # would be filled on Warp's own stream, unordered with the copy)
        row = self._row(scene_index)
        rows = self._wp.array([row], dtype=self._k.SceneTable, device="cpu")
        mesh = self._wp.array(np.array([row.mesh], np.uint64), dtype=self._wp.uint64, device="cpu")
        self._wp.copy(self._table, rows, dest_offset=scene_index, src_offset=0, count=1, stream=self._stream())
        self._wp.copy(self._meshes, mesh, dest_offset=scene_index, src_offset=0, count=1, stream=self._stream())

    def _stream(self):
        """On CUDA, torch's current stream: the frame is ordered after the torch ops that made
        its inputs, and a table write after the frames queued before it (and both are captured
        when torch captures a CUDA graph). None on the CPU."""
        if not self._wdev.is_cuda:
            return None
        import torch

        return self._wp.stream_from_torch(torch.cuda.current_stream(torch.device(self.device)))

    def _grow_table(self, capacity: int):
        """A fixed-capacity table (one row per scene id), reallocated only when an id does not
        fit: its address stays put while scenes come and go, so a captured step stays valid."""
        rows = [self._row(scene_index) for scene_index in range(capacity)]
        self._table = self._wp.array(rows, dtype=self._k.SceneTable, device=self._wdev)
        # the table's mesh column again, alone: what every frame kernel reads first (warp_kernels)
        self._meshes = self._wp.array(np.array([r.mesh for r in rows], np.uint64), dtype=self._wp.uint64,
                                      device=self._wdev)
        self.table_version += 1

    def _device_inputs(self, scene_index, positions, rotations):
        """(scene indices int64 [N], positions f32 [N,3], quaternions f64 [N,4]) as torch tensors on the
        renderer's device. Tensors already there are converted with device ops only; anything
        else is checked precisely on the host first, as the Embree backend does."""
        import torch

        dev = torch.device(self.device)
        if not all(isinstance(x, torch.Tensor) and x.device == dev for x in (scene_index, positions, rotations)):
            scene_index, pos, _ = check_render_inputs(scene_index, positions, rotations, self._scenes)
            rot = np.asarray(rotations.detach().cpu() if isinstance(rotations, torch.Tensor) else rotations, np.float64)
            if rot.ndim == 1 or (rot.ndim == 2 and rot.shape[1] == 1):
                rot = yaw_to_quaternion(rot)
            return (torch.as_tensor(scene_index, device=dev), torch.as_tensor(pos, device=dev),
                    torch.as_tensor(np.ascontiguousarray(rot), device=dev))
        scene_index = scene_index.reshape(-1)
        n = scene_index.shape[0]
        if positions.shape != (n, 3) or rotations.shape[0] != n or rotations.ndim > 2:
            raise ConfigError(None, f"scene_index [{n}], positions {tuple(positions.shape)} and rotations "
                                    f"{tuple(rotations.shape)} disagree (want [N], [N,3], [N] yaw or [N,4] xyzw)")
        if dev.type == "cpu":  # reading the ids costs nothing here: keep the precise error
            check_resident(scene_index.numpy(), self._scenes)
        # float32 quaternions go in as they are (the kernel widens them exactly)
        quat = rotations if rotations.dtype in (torch.float32, torch.float64) else rotations.to(torch.float64)
        if quat.ndim == 1 or quat.shape[1] == 1:  # yaw about +Y
            half = quat.reshape(-1).to(torch.float64) * 0.5
            zero = torch.zeros_like(half)
            quat = torch.stack([zero, torch.sin(half), zero, torch.cos(half)], 1)
        elif quat.shape[1] != 4:
            raise ConfigError(None, f"rotations must be [N] yaw or [N,4] quaternions xyzw, got {tuple(rotations.shape)}")
        return scene_index.to(torch.int64).contiguous(), positions.to(torch.float32).contiguous(), quat.contiguous()

    def render(self, scene_index, positions, rotations, sensors: Sequence[str] = ("depth",)) -> dict:
        """Draw one frame per agent in a single kernel launch (see the class docstring for what is
        checked); returns {"depth": [N,H,W,1] float32, "rgb": [N,H,W,3] uint8, "semantic":
        [N,H,W,1] int32} (those asked for) tensors on the renderer's device; on CUDA the launch is queued on torch's current stream and not waited for."""
        sensors = check_sensors(sensors)
        scene_index, pos, quat = self._device_inputs(scene_index, positions, rotations)
        out = self.frame_buffers(scene_index.shape[0], sensors)
        self.launch_frame(scene_index, pos, quat, out["depth"], out.get("rgb"), stream=self._stream(),
                          semantic=out.get("semantic"))
        if "depth" not in sensors:
            del out["depth"]
        return out

    def render_view(self, scene_index, positions, rotations, resolution, hfov_deg: float,
                    sensors: Sequence[str] = ("rgb",)) -> dict:
        """``render`` through another pinhole camera (``protocol.Renderer.render_view``): a
        renderer over the same scene table, for this call, whose ray table is that camera's
        (kept for the next ``VIEW_DIRS_KEPT`` cameras: no upload when one repeats)."""
        v = copy.copy(self)
        v.options = view_options(self.options, resolution, hfov_deg)
        key = (v.options.resolution, v.options.hfov_deg)
        dirs = self._view_dirs.pop(key, None)
        if dirs is None:
            dirs = self._wp.array(camera_directions(v.options), dtype=self._wp.vec3, device=self._wdev)
        self._view_dirs[key] = dirs
        while len(self._view_dirs) > VIEW_DIRS_KEPT:
            self._view_dirs.popitem(last=False)
        v._dirs = dirs
        return v.render(scene_index, positions, rotations, sensors)

    def frame_buffers(self, n: int, sensors: Sequence[str]) -> dict:
        """Output tensors for ``launch_frame`` of ``n`` agents: {"depth": [n,H,W,1] float32,
        "rgb": [n,H,W,3] uint8, "semantic": [n,H,W,1] int32 (those two when asked for)} on the
        renderer's device."""
        import torch

        h, w = self.options.resolution
        dev = torch.device(self.device)
        out = {"depth": torch.empty((n, h, w, 1), dtype=torch.float32, device=dev)}
        sensors = check_sensors(sensors)
        if "rgb" in sensors:
            out["rgb"] = torch.empty((n, h, w, 3), dtype=torch.uint8, device=dev)
        if "semantic" in sensors:
            out["semantic"] = torch.empty((n, h, w, 1), dtype=torch.int32, device=dev)
        return out

    def _frame_inputs(self, scene_index, positions, quats, depth, rgb=None, semantic=None) -> tuple[list, list]:
        """The frame kernels' arguments after the scene structures, in their order (``launch_frame``'s
        tensors): ``frame``, what every frame kernel takes (the agents, the camera, the depth output),
        and ``shaded``, what the kernels that shade take after it (the RGB and semantic outputs)."""
        wp, o = self._wp, self.options
        n, hw = int(scene_index.shape[0]), int(depth.shape[1]) * int(depth.shape[2])
        qtype = wp.vec4d if quats.dtype.itemsize == 8 else wp.vec4f
        rgb_arr = self._no_rgb if rgb is None else wp.from_torch(rgb.view(n, hw, 3), dtype=wp.uint8)
        sem_arr = self._no_sem if semantic is None else wp.from_torch(semantic.view(n, hw), dtype=wp.int32)
        frame = [wp.from_torch(scene_index, dtype=wp.int64), wp.from_torch(positions, dtype=wp.vec3),
                 wp.from_torch(quats, dtype=qtype), self._dirs, hw, float(o.sensor_height),
                 depth_mode(o), float(o.min_depth), float(o.max_depth),
                 wp.from_torch(depth.view(n, hw), dtype=wp.float32)]
        shaded = [int(rgb is not None), rgb_arr, float(o.pixel_angle), int(semantic is not None), sem_arr]
        return frame, shaded

    def launch_frame(self, scene_index, positions, quats, depth, rgb=None, stream=None, semantic=None) -> None:
        """Queue one frame into existing outputs: a single Warp launch and nothing else (no torch
        op, no check, no allocation), so the fused step can record it into its CUDA graph.
        ``scene_index`` int64 [n], ``positions`` float32 [n,3], ``quats`` float32 or float64 [n,4] xyzw,
        ``depth`` float32 [n,H,W,1], ``rgb`` uint8 [n,H,W,3] or None: contiguous torch tensors
        on the renderer's device (what ``render`` hands in after its checks), ``semantic`` int32
        [n,H,W,1] or None (written by the same launch). ``stream``: the Warp stream to launch
        on (None: Warp's current one; ignored on the CPU)."""
        wp = self._wp
        n = int(scene_index.shape[0])
        if n == 0:
            return
        hw = int(depth.shape[1]) * int(depth.shape[2])
        with self._lock:
            table, meshes = self._table, self._meshes
        frame, shaded = self._frame_inputs(scene_index, positions, quats, depth, rgb, semantic)
        if rgb is None and semantic is None:   # the lean kernel: no shading code, more pixels in flight
            wp.launch(self._k.depth_kernel, dim=n * hw, device=self._wdev, stream=stream, inputs=[meshes, *frame])
        else:
            wp.launch(self._k.render_kernel, dim=n * hw, device=self._wdev, stream=stream,
                      inputs=[meshes, table, *frame, *shaded])
        with self._lock:
            composed = [(i, sc) for i, sc in self._scenes.items() if sc.composed and sc.bvh is not None]
        if composed:   # composed scenes: one more launch each, over their agents' pixels
            from .warp_instances import render_instanced_kernel
            for composed_index, sc in composed:
                wp.launch(render_instanced_kernel, dim=n * hw, device=self._wdev, stream=stream, inputs=[
                    wp.int64(composed_index), wp.uint64(sc.bvh.id), sc.assets, sc.asset_of, sc.inv, sc.nxf, sc.lod, sc.obj,
                    *frame, *shaded])
