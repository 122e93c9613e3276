"""Composed scenes on Embree without flattening: one top-level Embree scene of instances.

``InstancedAccel(parts)`` takes the stage's and the assets' prepared accels (``BridgeAccel``,
each built once per asset and shared by every instance and every resident scene that uses it)
with one 4x4 transform (asset -> world) and one semantic id per part, and commits a top-level
scene whose geometry i is an ``RTC_GEOMETRY_TYPE_INSTANCE`` of part i (the C bridge's
``bps_instances_build``). Tracing (``bps_trace_cameras_instanced``) gives depth, the hit
instance's semantic id, and RGB shaded with the hit instance's asset tables; the instance's
normal is taken to world space and its footprint scaled by the instance's linear scale, so the
colour equals the flattened scene's (the mip bias is per asset-space area: exact for uniform
scale, |det|^(1/3) used for a non-uniform one). The parts' accels are kept alive here.
"""
from __future__ import annotations

import ctypes
import threading
from collections import OrderedDict

import numpy as np

from bps_assets.errors import ConfigError, CorruptFileError

from .embree_bridge import BUILD_QUALITY_MEDIUM, EmbreeError, _ptr, bridge
from .protocol import VIEW_DIRS_KEPT

# Embree's own bytes per instance: the RTC_GEOMETRY_TYPE_INSTANCE geometry and its share of the
# top-level BVH (RSS growth of 607-608 B per instance building 10,000, less the 100 B of arrays
# counted below; benchmarks/bench_instance_bytes.py, docs/PERFORMANCE.md "Instance structure bytes")
EMBREE_BYTES_PER_INSTANCE = 512
_vp = ctypes.c_void_p
_sz = ctypes.c_size_t
_ready = False


def instances_bytes(num_instances: int) -> int:
    """``InstancedAccel.nbytes`` for ``num_instances`` parts (at least it: empty parts are left
    out of the build): the arrays below, the shading pointers and Embree's share."""
    per = (12 + 9 + 1) * 4 + 4 + ctypes.sizeof(_vp) + EMBREE_BYTES_PER_INSTANCE   # xfm, normal_xf, lod, object
    return per * num_instances + (0 if num_instances else ctypes.sizeof(_vp))


class _Instances(ctypes.Structure):
    _fields_ = [("n", ctypes.c_int64), ("shading", _vp), ("normal_xf", _vp), ("lod_scale", _vp), ("object", _vp)]


def _lib():
    global _ready
    b = bridge()
    lib = b.lib
    if not _ready:
        if lib.bps_load_instancing() != 0:
            raise EmbreeError(None, "the Embree library lacks rtcSetGeometryInstancedScene / rtcSetGeometryTransform")
        lib.bps_instances_build.restype = _vp
        lib.bps_instances_build.argtypes = [_vp, _vp, _sz, _vp, ctypes.c_int]
        lib.bps_trace_cameras_instanced.restype = ctypes.c_int64
        lib.bps_trace_cameras_instanced.argtypes = [_vp, _vp, _sz, _vp, _sz, _vp, _sz, _sz, _vp, _sz, _vp, _vp, _vp,
                                                    ctypes.c_float]
        _ready = True
    return b


class InstancedAccel:
    """A top-level instance scene over shared per-asset accels (see the module docstring).

    ``parts``: ``(accel, native_shading | None, transform 4x4, semantic_id)`` per instance (the
    stage first, identity, id 0); parts whose accel has no triangles are left out."""

    composed = True

    def __init__(self, parts, quality: int = BUILD_QUALITY_MEDIUM):
        self._scene = None   # first: __del__ runs after a failed construction too
        b = _lib()
        self._lib = b.lib
        parts = [p for p in parts if p[0]._scene]
        self.parts = parts                        # keeps every asset's accel (and its tables) alive
        n = len(parts)
        m = np.array([p[2] for p in parts], np.float64).reshape(n, 4, 4)
        self._xfm = np.ascontiguousarray(m[:, :3, :4], np.float32).reshape(-1)
        lin = m[:, :3, :3]
        det = np.linalg.det(lin) if n else np.zeros(0)
        if n and (np.abs(det) < 1e-12).any():
            raise ConfigError(None, "an instance transform is singular")
        self._normal_xf = np.ascontiguousarray(np.linalg.inv(lin).transpose(0, 2, 1) if n else np.zeros((0, 3, 3)),
                                               np.float32)
        # footprint on the asset's surface = world footprint / linear scale (the bias is per asset area)
        self._lod_scale = np.ascontiguousarray(1.0 / np.cbrt(np.abs(det)) if n else np.zeros(0), np.float32)
        self._lod_scale[np.isclose(self._lod_scale, 1.0, rtol=0, atol=1e-6)] = 1.0
        self.object = np.ascontiguousarray([p[3] for p in parts], np.int32)
        shadings = [p[1] for p in parts]
        self.has_shading = bool(n) and all(s is not None for s in shadings)
        self._shadings = shadings
        self._views = OrderedDict()   # pixel angle -> (table, pointers, shadings): render_view's cameras
        self._views_lock = threading.Lock()
        angles = {s.struct.pixel_angle for s in shadings if s is not None}
        self._pixel_angle = angles.pop() if len(angles) == 1 else None   # the sensor's, shared by all
        self._own = self._table_for(shadings)
        if n:
            scenes = (_vp * n)(*[p[0]._scene for p in parts])
            top = self._lib.bps_instances_build(b.device, ctypes.addressof(scenes), n, _ptr(self._xfm), int(quality))
            if not top:
                code, msg = b.error()
                raise EmbreeError(None, f"Embree could not build the instance scene ({n} instances): "
                                        f"error {code} {msg}")
            self._scene = top
        # the instance arrays, the shading pointers and Embree's instances and top-level BVH (the
        # per-asset accels are charged with their assets; render_view's per-angle tables are
        # n pointers and one shading struct per asset each, kept for VIEW_DIRS_KEPT angles)
        self.nbytes = instances_bytes(n)

    def _table_for(self, shadings):
        """(``_Instances``, its shading pointer array, ``shadings``): the C table over these
        per-instance shadings (the tuple keeps what the table points into alive)."""
        n = len(shadings)
        ptrs = (_vp * max(n, 1))(*[ctypes.addressof(s.struct) if s is not None else None for s in shadings])
        table = _Instances(n, ctypes.addressof(ptrs) if self.has_shading else None,
                           _ptr(self._normal_xf), _ptr(self._lod_scale), _ptr(self.object))
        return table, ptrs, shadings

    def _table_at(self, pixel_angle: float | None):
        """``_table_for``'s tuple for a camera whose pixels have ``pixel_angle`` (None: the
        prepare-time one, the sensor's): one copy of each asset's struct per angle, kept for the
        last ``VIEW_DIRS_KEPT`` angles (``render_view``'s cameras repeat). The caller holds the
        tuple while C reads it (another thread may evict it from the cache meanwhile)."""
        key = None if pixel_angle is None else float(np.float32(pixel_angle))
        if key is None or key == self._pixel_angle or not self.has_shading:
            return self._own
        with self._views_lock:
            view = self._views.get(key)
            if view is None:
                moved: dict[int, object] = {}   # once per asset, however many instances share it
                for s in self._shadings:
                    if id(s) not in moved:
                        moved[id(s)] = s.at_pixel_angle(key)
                view = self._table_for([moved[id(s)] for s in self._shadings])
                self._views[key] = view
                while len(self._views) > VIEW_DIRS_KEPT:
                    self._views.popitem(last=False)
            self._views.move_to_end(key)
            return view

    def __del__(self):
        scene, self._scene = self._scene, None
        if scene:
            self._lib.bps_scene_release(scene)

    def trace_cameras(self, origins: np.ndarray, rotations: np.ndarray, cam_dirs: np.ndarray, t_out: np.ndarray,
                      miss: float = 0.0, rgb_out: np.ndarray | None = None,
                      obj_out: np.ndarray | None = None, pixel_angle: float | None = None) -> None:
        """Depth into ``t_out`` (float32 n*HW), RGB into ``rgb_out`` (uint8 n*HW*3) and the hit
        instance's semantic id into ``obj_out`` (int32 n*HW), as ``BridgeAccel.trace_cameras``;
        ``pixel_angle``: the camera's pixel footprint for mip selection (None: the sensor's)."""
        o = np.ascontiguousarray(origins, np.float32)
        r = np.ascontiguousarray(rotations, np.float32)
        d = np.ascontiguousarray(cam_dirs, np.float32)
        n, hw = o.shape[0], d.shape[0]
        if r.shape != (n, 3, 3) or o.shape != (n, 3) or d.shape != (hw, 3):
            raise ConfigError(None, f"origins [n,3], rotations [n,3,3], cam_dirs [HW,3]; "
                                    f"got {o.shape}, {r.shape}, {d.shape}")
        for a, dt, k in ((t_out, np.float32, 1), (rgb_out, np.uint8, 3), (obj_out, np.int32, 1)):
            if a is not None and (a.dtype != dt or not a.flags.c_contiguous or a.size != n * hw * k):
                raise ConfigError(None, f"output arrays must be C-contiguous {np.dtype(dt)} of n * HW * {k} elements")
        if rgb_out is not None and not self.has_shading and self._scene is not None:
            raise ConfigError(None, "this instance scene was built without native shading tables")
        if self._scene is None:
            t_out.fill(miss)
            for a in (rgb_out, obj_out):
                if a is not None:
                    a.fill(0)
            return
        view = self._table_at(pixel_angle) if rgb_out is not None else self._own
        rc = self._lib.bps_trace_cameras_instanced(self._scene, ctypes.addressof(view[0]), n, _ptr(o), n,
                                                   _ptr(r), n, hw, _ptr(d), d.size, _ptr(t_out), _ptr(rgb_out),
                                                   _ptr(obj_out), miss)
        if rc < 0:
            raise ConfigError(None, f"bps_trace_cameras_instanced refused its inputs (code {rc})")
        if rc > 0:
            raise CorruptFileError(None, f"{rc} hits referred outside an instance's shading tables")
