"""Warp batch renderer: one kernel casts and shades every pixel of every agent of a scene.

Runs on CUDA (the production path on GPU machines) and on Warp's CPU device, which is how the
tests here check it against the Embree backend pixel for pixel. Each resident scene is one
``wp.Mesh`` (its BVH is built in a loader thread) plus its shading arrays on the device; a
frame is one launch per resident scene that has agents, writing straight into the [N, H*W]
outputs through an agent index array, then ``wp.to_torch`` shares the memory with torch.

The kernel implements the shading described in ``shading_data`` operation for operation (same float32
order, same integer BC1 formulas), so the only differences to Embree come from the two ray /
triangle intersection routines (barycentrics differ in the last bits: a texel boundary or a
mip boundary can move by one on a handful of pixels).
"""
from __future__ import annotations

import threading
from typing import Any, Sequence

import numpy as np

from bps_assets.errors import ConfigError, MissingDependencyError

from .camera import camera_directions, camera_origins
from .inputs import check_render_inputs, check_sensors, group_by_scene
from .protocol import DEFAULTS, RenderOptions
from .shading_data import COS_FLOOR, FORMAT_BC1, ShadingData

WARP_BVH_BYTES_PER_TRI = 64  # 2T-1 nodes of two 16-byte bounds (Warp's BVH layout)

_wp = None
_kernel = None
_init_lock = threading.Lock()


def _warp():
    global _wp, _kernel
    if _wp is not None:
        return _wp, _kernel
    with _init_lock:
        if _wp is not None:
            return _wp, _kernel
        try:
            import warp as wp
        except ImportError as e:
            raise MissingDependencyError(None, "the Warp renderer", "warp-lang") from e
        import logging
        if getattr(wp.config, "log_level", None) is not None and wp.config.log_level < logging.WARNING:
            wp.config.log_level = logging.WARNING  # no init banner / module-load chatter per process
        wp.config.quiet = True  # the init banner would land in every user's stdout
        wp.init()
        _kernel = _build_kernel(wp)  # (render_kernel, shade_kernel)
        _wp = wp
    return _wp, _kernel


def _build_kernel(wp):
    @wp.func
    def expand565(c: int) -> wp.vec3i:
        r = (c >> 11) & 31
        g = (c >> 5) & 63
        b = c & 31
        return wp.vec3i((r << 3) | (r >> 2), (g << 2) | (g >> 4), (b << 3) | (b >> 2))

    @wp.func
    def bc1_texel(data: wp.array(dtype=wp.uint8), base: wp.int64, width: int, x: int, y: int) -> wp.vec3:
        bw = (width + 3) >> 2
        blk = base + wp.int64(((y >> 2) * bw + (x >> 2)) * 8)
        c0 = int(data[blk]) | (int(data[blk + wp.int64(1)]) << 8)
        c1 = int(data[blk + wp.int64(2)]) | (int(data[blk + wp.int64(3)]) << 8)
        shift = (((y & 3) << 2) | (x & 3)) << 1
        byte = data[blk + wp.int64(4 + (shift >> 3))]
        sel = (int(byte) >> (shift & 7)) & 3
        e0 = expand565(c0)
        e1 = expand565(c1)
        out = e0
        if sel == 1:
            out = e1
        elif sel == 2:
            if c0 > c1:
                out = wp.vec3i((2 * e0[0] + e1[0]) / 3, (2 * e0[1] + e1[1]) / 3, (2 * e0[2] + e1[2]) / 3)
            else:
                out = wp.vec3i((e0[0] + e1[0]) / 2, (e0[1] + e1[1]) / 2, (e0[2] + e1[2]) / 2)
        elif sel == 3:
            if c0 > c1:
                out = wp.vec3i((e0[0] + 2 * e1[0]) / 3, (e0[1] + 2 * e1[1]) / 3, (e0[2] + 2 * e1[2]) / 3)
            else:
                out = wp.vec3i(0, 0, 0)
        return wp.vec3(float(out[0]), float(out[1]), float(out[2]))

    @wp.func
    def shade(f: int, bu: float, bv: float, z: float, cos_abs: float,
              indices: wp.array(dtype=int), uvs: wp.array(dtype=wp.vec2),
              colors: wp.array2d(dtype=wp.uint8), has_colors: int,
              tri_material: wp.array(dtype=int), tri_lod: wp.array(dtype=float),
              mat_color: wp.array(dtype=wp.vec4), mat_tex: wp.array(dtype=int),
              tex_data: wp.array(dtype=wp.uint8), level_info: wp.array(dtype=wp.int64),
              lmax: int, tex_nlevels: wp.array(dtype=int), tex_format: wp.array(dtype=int),
              pixel_angle: float) -> wp.vec3:
        # bu, bv: weights of the triangle's 2nd and 3rd vertex (Embree's convention)
        i0 = indices[f * 3]
        i1 = indices[f * 3 + 1]
        i2 = indices[f * 3 + 2]
        w0 = 1.0 - bu - bv
        m = tri_material[f]
        mc = mat_color[m]
        col = wp.vec3(mc[0], mc[1], mc[2])
        if has_colors != 0:
            vr = (w0 * float(colors[i0, 0]) + bu * float(colors[i1, 0]) + bv * float(colors[i2, 0])) * (1.0 / 255.0)
            vg = (w0 * float(colors[i0, 1]) + bu * float(colors[i1, 1]) + bv * float(colors[i2, 1])) * (1.0 / 255.0)
            vb = (w0 * float(colors[i0, 2]) + bu * float(colors[i1, 2]) + bv * float(colors[i2, 2])) * (1.0 / 255.0)
            col = wp.cw_mul(col, wp.vec3(vr, vg, vb))
        t = mat_tex[m]
        if t >= 0:
            uv = w0 * uvs[i0] + bu * uvs[i1] + bv * uvs[i2]
            foot = z * pixel_angle / wp.max(cos_abs, COS_FLOOR_K)
            lod = wp.log2(wp.max(foot, 1.0e-30)) + tri_lod[f]
            lvl = int(wp.floor(lod + 0.5))
            lvl = wp.clamp(lvl, 0, tex_nlevels[t] - 1)
            k = (t * lmax + lvl) * 3
            base = level_info[k]
            wd = int(level_info[k + 1])
            ht = int(level_info[k + 2])
            fu = uv[0] - wp.floor(uv[0])
            fv = uv[1] - wp.floor(uv[1])
            x = wp.min(int(fu * float(wd)), wd - 1)
            y = wp.min(int(fv * float(ht)), ht - 1)
            texel = wp.vec3(0.0, 0.0, 0.0)
            if tex_format[t] == FORMAT_BC1_K:
                texel = bc1_texel(tex_data, base, wd, x, y)
            else:
                o = base + wp.int64((y * wd + x) * 4)
                texel = wp.vec3(float(tex_data[o]), float(tex_data[o + wp.int64(1)]), float(tex_data[o + wp.int64(2)]))
            col = wp.cw_mul(col, texel * (1.0 / 255.0))
        return wp.vec3(wp.floor(wp.clamp(col[0], 0.0, 1.0) * 255.0 + 0.5),
                       wp.floor(wp.clamp(col[1], 0.0, 1.0) * 255.0 + 0.5),
                       wp.floor(wp.clamp(col[2], 0.0, 1.0) * 255.0 + 0.5))

    @wp.func
    def abs_cos(n: wp.vec3, d: wp.vec3) -> float:
        return wp.abs(wp.dot(n, d)) / wp.max(wp.length(n) * wp.length(d), 1.0e-30)

    @wp.kernel
    def render_kernel(mesh: wp.uint64, agents: wp.array(dtype=int), cam: wp.array(dtype=wp.vec3),
                      rot: wp.array(dtype=wp.mat33), dirs: wp.array(dtype=wp.vec3), hw: int,
                      depth: wp.array2d(dtype=float), want_rgb: int, rgb: wp.array3d(dtype=wp.uint8),
                      indices: wp.array(dtype=int), uvs: wp.array(dtype=wp.vec2),
                      colors: wp.array2d(dtype=wp.uint8), has_colors: int,
                      tri_material: wp.array(dtype=int), tri_lod: wp.array(dtype=float),
                      mat_color: wp.array(dtype=wp.vec4), mat_tex: wp.array(dtype=int),
                      tex_data: wp.array(dtype=wp.uint8), level_info: wp.array(dtype=wp.int64),
                      lmax: int, tex_nlevels: wp.array(dtype=int), tex_format: wp.array(dtype=int),
                      pixel_angle: float):
        tid = wp.tid()
        a = agents[tid / hw]
        p = tid - (tid / hw) * hw
        d = rot[a] * dirs[p]
        q = wp.mesh_query_ray(mesh, cam[a], d, 1.0e30)
        z = float(0.0)
        if q.result:
            z = q.t
        depth[a, p] = z
        if want_rgb == 0:
            return
        c = wp.vec3(0.0, 0.0, 0.0)
        if q.result:
            # Warp: hit = u*p0 + v*p1 + (1-u-v)*p2 -> Embree's (weight of p1, weight of p2)
            c = shade(q.face, q.v, 1.0 - q.u - q.v, z, abs_cos(q.normal, d), indices, uvs, colors,
                      has_colors, tri_material, tri_lod, mat_color, mat_tex, tex_data, level_info, lmax,
                      tex_nlevels, tex_format, pixel_angle)
        rgb[a, p, 0] = wp.uint8(int(c[0]))
        rgb[a, p, 1] = wp.uint8(int(c[1]))
        rgb[a, p, 2] = wp.uint8(int(c[2]))

    @wp.kernel
    def shade_kernel(prim: wp.array(dtype=wp.int32), hu: wp.array(dtype=float), hv: wp.array(dtype=float),
                     z: wp.array(dtype=float), ng: wp.array(dtype=wp.vec3), dirs: wp.array(dtype=wp.vec3),
                     rgb: wp.array2d(dtype=wp.uint8),
                     indices: wp.array(dtype=int), uvs: wp.array(dtype=wp.vec2),
                     colors: wp.array2d(dtype=wp.uint8), has_colors: int,
                     tri_material: wp.array(dtype=int), tri_lod: wp.array(dtype=float),
                     mat_color: wp.array(dtype=wp.vec4), mat_tex: wp.array(dtype=int),
                     tex_data: wp.array(dtype=wp.uint8), level_info: wp.array(dtype=wp.int64),
                     lmax: int, tex_nlevels: wp.array(dtype=int), tex_format: wp.array(dtype=int),
                     pixel_angle: float):
        # Embree hits (primID, u, v, tfar, Ng) -> colours: the Embree backend's compiled shader
        i = wp.tid()
        f = int(prim[i])
        c = wp.vec3(0.0, 0.0, 0.0)
        if f >= 0 and z[i] > 0.0:
            c = shade(f, hu[i], hv[i], z[i], abs_cos(ng[i], dirs[i]), indices, uvs, colors, has_colors,
                      tri_material, tri_lod, mat_color, mat_tex, tex_data, level_info, lmax, tex_nlevels,
                      tex_format, pixel_angle)
        rgb[i, 0] = wp.uint8(int(c[0]))
        rgb[i, 1] = wp.uint8(int(c[1]))
        rgb[i, 2] = wp.uint8(int(c[2]))

    return render_kernel, shade_kernel


# module-level constants the kernel reads (Warp resolves globals at codegen time)
COS_FLOOR_K = COS_FLOOR
FORMAT_BC1_K = FORMAT_BC1


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
        self._keep = s  # the numpy arrays the CPU views point into

    def inputs(self, pixel_angle: float) -> list:
        return [self.indices, self.uvs, self.colors, self.has_colors, self.tri_material, self.tri_lod,
                self.mat_color, self.mat_tex, self.tex_data, self.level_info, self.lmax, self.tex_nlevels,
                self.tex_format, float(pixel_angle)]


class WarpScene:
    """Device-resident scene: the wp.Mesh (BVH) and the shading arrays."""

    def __init__(self, wp, device, shading: ShadingData, positions: np.ndarray, indices: np.ndarray):
        with wp.ScopedDevice(device):
            idx = np.ascontiguousarray(indices, np.int32).reshape(-1)
            self.num_triangles = idx.size // 3
            self.points = wp.array(np.ascontiguousarray(positions, np.float32), dtype=wp.vec3)
            self.tri_indices = wp.array(idx, dtype=int)
            self.mesh = wp.Mesh(points=self.points, indices=self.tri_indices) if idx.size else None
            self.shading = ShadingArrays(wp, device, shading)
            wp.synchronize_device(device)


class CpuShader:
    """Compiled shading of Embree hits with the Warp backend's own shading function, on Warp's
    CPU device (a ctypes call: it releases the GIL, so both render threads shade in parallel).
    ~20x faster than the numpy reference in ``numpy_shader.shade_hits``, which stays the fallback."""

    def __init__(self):
        self._wp, (_, self._kernel) = _warp()
        self._dev = self._wp.get_device("cpu")
        self._lock = threading.Lock()
        self._warm = False

    def arrays(self, shading: ShadingData) -> ShadingArrays:
        return ShadingArrays(self._wp, self._dev, shading)

    def shade(self, sa: ShadingArrays, prim, u, v, z, ng, dirs, pixel_angle: float) -> np.ndarray:
        wp = self._wp
        n = prim.shape[0]
        out = np.zeros((n, 3), np.uint8)
        if n == 0:
            return out

        def w(a, dtype):
            return wp.array(np.ascontiguousarray(a), dtype=dtype, device=self._dev, copy=False)

        args = [w(prim.astype(np.int32, copy=False), wp.int32), w(u, float), w(v, float), w(z, float),
                w(ng, wp.vec3), w(dirs, wp.vec3), w(out, wp.uint8)] + sa.inputs(pixel_angle)
        if not self._warm:  # first launch compiles/loads the module: once, not concurrently
            with self._lock:
                wp.launch(self._kernel, dim=n, inputs=args, device=self._dev)
                self._warm = True
            return out
        wp.launch(self._kernel, dim=n, inputs=args, device=self._dev)
        return out


class WarpRenderer:
    """Same interface and output as EmbreeRenderer; tensors live on ``device``."""

    name = "warp"

    def __init__(self, options: RenderOptions = DEFAULTS, device: str = "cpu"):
        wp, (self._kernel, _) = _warp()
        self._wp = wp
        try:
            self._wdev = wp.get_device(str(device))
        except Exception as e:  # Warp raises a bare RuntimeError for unknown devices
            raise ConfigError(None, f"Warp cannot use device {device!r}: {e}") from None
        self.device = str(device)
        self.options = options
        self._dirs = wp.array(camera_directions(options), dtype=wp.vec3, device=self._wdev)
        self._scenes: dict[int, WarpScene] = {}
        self._lock = threading.Lock()

    def prepare(self, shading: ShadingData, positions: np.ndarray, indices: np.ndarray) -> WarpScene:
        shading.check_geometry(len(positions), len(indices))
        return WarpScene(self._wp, self._wdev, shading, positions, indices)

    def accel_bytes(self, num_vertices: int, num_triangles: int) -> int:
        return 12 * num_vertices + 12 * num_triangles + WARP_BVH_BYTES_PER_TRI * num_triangles

    def attach(self, scene_id: int, shading: ShadingData, accel: WarpScene) -> None:
        with self._lock:
            self._scenes[int(scene_id)] = accel

    def detach(self, scene_id: int) -> None:
        with self._lock:
            self._scenes.pop(int(scene_id), None)

    def close(self):
        pass

    def render(self, scene_ids, positions, rotations, sensors: Sequence[str] = ("depth",)) -> dict:
        wp = self._wp
        sensors = check_sensors(sensors)
        sid, pos, rot = check_render_inputs(scene_ids, positions, rotations, self._scenes)
        n = sid.shape[0]
        h, w = self.options.resolution
        hw = h * w
        want_rgb = "rgb" in sensors
        dev = self._wdev
        cam = wp.array(camera_origins(pos, rot, self.options), dtype=wp.vec3, device=dev)
        rot_w = wp.array(rot, dtype=wp.mat33, device=dev)
        depth = wp.zeros((n, hw), dtype=float, device=dev)
        rgb = wp.zeros((n, hw, 3) if want_rgb else (1, 1, 3), dtype=wp.uint8, device=dev)
        for g_sid, agents in group_by_scene(sid):
            sc = self._scenes[g_sid]
            if sc.mesh is None:
                continue  # no triangles: every pixel a miss (zeros)
            ag = wp.array(agents.astype(np.int32), dtype=int, device=dev)
            wp.launch(self._kernel, dim=len(agents) * hw, device=dev, inputs=[
                sc.mesh.id, ag, cam, rot_w, self._dirs, hw, depth, int(want_rgb), rgb]
                + sc.shading.inputs(self.options.pixel_angle))
        out: dict[str, Any] = {}
        if "depth" in sensors:
            d = wp.to_torch(depth).reshape(n, h, w, 1)
            if self.options.normalize_depth:
                lo, hi = self.options.min_depth, self.options.max_depth
                d = (d.clamp(lo, hi) - lo) / (hi - lo)
            out["depth"] = d
        if want_rgb:
            out["rgb"] = wp.to_torch(rgb).reshape(n, h, w, 3)
        return out
