"""Embree through our own C bridge (``_embree_bridge.c``, loaded with ctypes): the BVH build and
all ray tracing run with the GIL released, on geometry shared with numpy.

Why not embreex alone: building a 600K-triangle scene with embreex holds the GIL for ~0.5 s
(0.25 s copying vertices and indices in a Python-level loop, 0.23 s committing the BVH), so
every scene the cache loads in the background froze the step loop for that long (p99 step
2.16x the median with a swap every 50 steps). Through ctypes every call releases the GIL.
embreex stays a dependency: its wheel ships the libembree4 we load, and it is the fallback when
the bridge was not compiled (no C compiler at install time).

The bridge's device builds BVHs on one thread (``threads=1``): the build then runs only in the
(low-priority) loader thread that asked for it, instead of on Embree's worker threads at normal
priority competing with the render threads.
"""
from __future__ import annotations

import copy
import ctypes
import glob
import importlib.util
import os
import threading

import numpy as np

from bps_assets.errors import BpsError, ConfigError, CorruptFileError, MissingDependencyError

# rtcSetSceneBuildQuality: RTC_BUILD_QUALITY_MEDIUM is Embree's default (what embreex uses)
BUILD_QUALITY_MEDIUM = 1
# RTC_BUILD_QUALITY_HIGH: SAH with spatial splits, for converter LOD levels (``EmbreeRenderer.
# prepare``): their long simplified triangles overlap many boxes unsplit
BUILD_QUALITY_HIGH = 2
# rtcSetSceneFlags: COMPACT makes Embree keep vertex indices in its leaves (reading our shared
# vertex buffer) instead of copies of the triangles' vertices
SCENE_FLAG_NONE = 0
SCENE_FLAG_COMPACT = 2
# max_spatial_split_replications: how many triangle references HIGH builds may make per triangle
# (Embree's default 2): 8 lets spatial splits cut every long sliver of a simplified level
# (apartment 1 cm level: 1.8-2.2x the full mesh's depth fps vs 1.4-1.7x at the default, for
# 2.8x its BVH bytes; docs/PERFORMANCE.md "Converter LODs end to end"). Default (MEDIUM) builds,
# i.e. every full mesh, make no spatial splits, so their BVH is unchanged.
DEVICE_CONFIG = "threads=1,max_spatial_split_replications=8"
# A smaller triangle BVH: 8-wide nodes over leaves of 4 indexed triangles (Triangle4i), which
# read our shared vertex buffer, instead of Embree's default for static scenes (bvh8.triangle4:
# leaves holding copies of each triangle's vertices): 40-44 vs 66-69 B/triangle, the same hits,
# 0.90-0.95x the depth fps (docs/PERFORMANCE.md "Resident bytes per scene").
COMPACT_TRI_ACCEL = "bvh8.triangle4i"
ENV_LIBRARY = "BPS_EMBREE_LIBRARY"   # an explicit libembree4 path overrides the embreex wheel's

_vp = ctypes.c_void_p
_sz = ctypes.c_size_t


class EmbreeError(BpsError):
    """Embree refused a scene (its device error code and message are in the text)."""


def _ptr(a: np.ndarray | None):
    return None if a is None else a.ctypes.data


def embree_library_path() -> str:
    """The libembree4 to load: $BPS_EMBREE_LIBRARY, else the one the embreex wheel ships."""
    env = os.environ.get(ENV_LIBRARY)
    if env:
        return env
    spec = importlib.util.find_spec("embreex")
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError(None, "the Embree renderer", "embreex")
    pkg = list(spec.submodule_search_locations)[0]
    found = sorted(glob.glob(os.path.join(os.path.dirname(pkg), "embreex.libs", "libembree4*.so*")))
    if not found:
        raise MissingDependencyError(None, f"libembree4 (not found beside {pkg}; set ${ENV_LIBRARY})",
                                     "embreex")
    return found[0]


class _Bridge:
    """The loaded C bridge and one Embree device for the process."""

    def __init__(self):
        from bps_assets import native

        lib = native.load("bps_runtime.render._embree_bridge")
        if lib is None:
            raise MissingDependencyError(
                None, "the GIL-free Embree bridge, which pip compiles when it installs bps (it needs gcc "
                      "and the Python headers: apt-get install gcc python3-dev, then reinstall)",
                "--force-reinstall --no-deps -e <your bps checkout>")
        lib.bps_load.argtypes = [ctypes.c_char_p]
        lib.bps_load_error.restype = ctypes.c_char_p
        lib.bps_device_new.restype = _vp
        lib.bps_device_new.argtypes = [ctypes.c_char_p]
        lib.bps_device_error.argtypes = [_vp, ctypes.POINTER(ctypes.c_char_p)]
        lib.bps_scene_build.restype = _vp
        lib.bps_scene_build.argtypes = [_vp, _vp, _sz, _vp, _sz, ctypes.c_int, ctypes.c_int]
        lib.bps_scene_release.argtypes = [_vp]
        lib.bps_trace_rays.argtypes = [_vp, _sz, _vp, _vp, _vp, _vp, _vp, _vp, _vp, ctypes.c_float]
        lib.bps_trace_cameras.restype = ctypes.c_int64
        lib.bps_trace_cameras.argtypes = [_vp, _sz, _vp, _sz, _vp, _sz, _sz, _vp, _sz, _vp, _vp, _vp, _vp, _vp,
                                          _vp, _vp, _vp, _vp, _vp, _sz, ctypes.c_float]
        path = embree_library_path()
        rc = lib.bps_load(path.encode())
        if rc == 1:
            raise MissingDependencyError(None, f"libembree4 at {path} ({(lib.bps_load_error() or b'').decode()})",
                                         "embreex")
        if rc == 2:
            raise MissingDependencyError(None, f"Embree 4 (the library at {path} lacks Embree 4 functions)",
                                         "embreex>=4.3")
        self.lib = lib
        self._path = path
        self._devices: dict[str | None, int] = {}
        self._lock = threading.Lock()
        self.device = self.device_for(None)

    def device_for(self, tri_accel: str | None):
        """The process's Embree device whose triangle BVH is ``tri_accel`` (None: Embree's default)."""
        with self._lock:
            dev = self._devices.get(tri_accel)
            if dev is None:
                config = DEVICE_CONFIG + (f",tri_accel={tri_accel}" if tri_accel else "")
                dev = self.lib.bps_device_new(config.encode())
                if not dev:
                    raise EmbreeError(self._path, f"rtcNewDevice({config!r}) failed")
                self._devices[tri_accel] = dev
            return dev

    def error(self, device=None) -> tuple[int, str]:
        msg = ctypes.c_char_p()
        code = self.lib.bps_device_error(device or self.device, ctypes.byref(msg))
        return code, (msg.value or b"").decode(errors="replace")


_bridge: _Bridge | None = None
_bridge_lock = threading.Lock()


def bridge() -> _Bridge:
    """The process's bridge (loaded on first use; raises MissingDependencyError if unavailable)."""
    global _bridge
    with _bridge_lock:
        if _bridge is None:
            _bridge = _Bridge()
        return _bridge


def available() -> bool:
    """Whether the C bridge can be used here (compiled, libembree4 found, an Embree device made)."""
    try:
        bridge()
        return True
    except BpsError:  # not compiled, no libembree4, or no Embree device: the caller falls back
        return False


class _Shading(ctypes.Structure):
    """Mirror of the C ``Shading`` struct: pointers into one scene's ShadingData arrays."""

    _fields_ = [("indices", _vp), ("uvs", _vp), ("colors", _vp), ("tri_material", _vp), ("tri_lod", _vp),
                ("mat_color", _vp), ("mat_tex", _vp), ("tex_data", _vp), ("level_info", _vp),
                ("lmax", ctypes.c_int64), ("tex_nlevels", _vp), ("tex_format", _vp),
                ("pixel_angle", ctypes.c_float), ("cos_floor", ctypes.c_float), ("format_bc1", ctypes.c_int32),
                ("num_tris", ctypes.c_int64), ("num_verts", ctypes.c_int64), ("num_mats", ctypes.c_int64),
                ("num_tex", ctypes.c_int64), ("tex_bytes", ctypes.c_int64)]


class NativeShading:
    """A scene's shading tables laid out for the bridge's C shader (contiguous, C dtypes), with
    the size of every table, which the C code checks each index it reads against. Keeps the
    arrays alive as long as the struct that points into them."""

    def __init__(self, sd, pixel_angle: float):
        from .shading_data import COS_FLOOR, FORMAT_BC1

        def c(a, dtype):
            return np.ascontiguousarray(a, dtype)

        self._arrays = arrs = {
            "indices": c(sd.indices, np.int32).reshape(-1), "uvs": c(sd.uvs, np.float32),
            "colors": None if sd.colors is None else c(sd.colors, np.uint8),
            "tri_material": c(sd.tri_material, np.int32), "tri_lod": c(sd.tri_lod_bias, np.float32),
            "mat_color": c(sd.material_color, np.float32), "mat_tex": c(sd.material_texture, np.int32),
            "tex_data": c(sd.tex_data if sd.tex_data.size else np.zeros(8, np.uint8), np.uint8),
            "level_info": c(sd.level_info, np.int64), "tex_nlevels": c(sd.tex_nlevels, np.int32),
            "tex_format": c(sd.tex_format, np.int32)}
        self.source = sd.source
        nv = arrs["uvs"].size // 2
        colors = arrs["colors"]
        if colors is not None and colors.shape != (nv, 4):
            raise CorruptFileError(self.source, f"vertex colours must be RGBA8 [{nv}, 4]; got {colors.shape}")
        if arrs["level_info"].ndim != 3 or arrs["level_info"].shape[2] != 3:
            raise CorruptFileError(self.source, f"level_info must be [X, L, 3]; got {arrs['level_info'].shape}")
        # each count is the rows every table indexed by that id holds (the smallest, if they differ)
        sizes = {"num_tris": min(arrs["indices"].size // 3, arrs["tri_material"].size, arrs["tri_lod"].size),
                 "num_verts": nv,
                 "num_mats": min(arrs["mat_color"].size // 4, arrs["mat_tex"].size),
                 "num_tex": min(arrs["level_info"].shape[0], arrs["tex_nlevels"].size, arrs["tex_format"].size),
                 "tex_bytes": arrs["tex_data"].size}
        self.struct = _Shading(
            *(_ptr(arrs[k]) for k in ("indices", "uvs", "colors", "tri_material", "tri_lod", "mat_color", "mat_tex",
                                      "tex_data", "level_info")),
            int(arrs["level_info"].shape[1]), _ptr(arrs["tex_nlevels"]), _ptr(arrs["tex_format"]),
            float(pixel_angle), float(COS_FLOOR), int(FORMAT_BC1), *sizes.values())

    def at_pixel_angle(self, pixel_angle: float) -> "NativeShading":
        """This shading for a camera whose pixels have another footprint (``render_view``): a copy
        of the struct with that ``pixel_angle``, over the same tables; itself when it matches."""
        a = float(np.float32(pixel_angle))
        if self.struct.pixel_angle == a:
            return self
        out = copy.copy(self)
        out.struct = _Shading.from_buffer_copy(self.struct)
        out.struct.pixel_angle = a
        return out


class BridgeAccel:
    """One committed Embree scene over a padded copy of ``positions`` and ``indices`` itself
    (shared, when int32 or uint32 and contiguous). ``tri_accel``: Embree's triangle BVH type
    (None: its default; ``COMPACT_TRI_ACCEL``: the smaller one).

    Construction builds the BVH with the GIL released (call it from a loader thread)."""

    composed = False   # one mesh (``embree_instances.InstancedAccel`` is a composed scene's)

    def __init__(self, positions: np.ndarray, indices: np.ndarray, quality: int = BUILD_QUALITY_MEDIUM,
                 flags: int = SCENE_FLAG_NONE, tri_accel: str | None = None):
        self._scene = None           # first: __del__ runs after a failed construction too
        self.shade_arrays = None     # set by ``EmbreeRenderer.prepare`` (shading "warp")
        self.native_shading = None   # set by ``EmbreeRenderer.prepare`` (shading "native")
        b = bridge()
        self._lib = b.lib
        self.num_triangles = int(indices.shape[0])
        nv = int(positions.shape[0])
        # +1 float: Embree reads the last vertex with a 16-byte load
        flat = np.empty(nv * 3 + 1, np.float32)
        flat[:-1] = np.asarray(positions, np.float32).reshape(-1)
        flat[-1] = 0.0
        self._vertices = flat
        if indices.dtype == np.int32 and indices.flags.c_contiguous and (not indices.size or int(indices.min()) >= 0):
            self._triangles = indices.view(np.uint32)  # shared with the caller (the shading tables)
        else:
            self._triangles = np.ascontiguousarray(indices, np.uint32)
        if self._triangles.size and int(self._triangles.max()) >= nv:
            raise EmbreeError(None, f"triangle index {int(self._triangles.max())} out of range for {nv} vertices")
        self.nbytes = self._vertices.nbytes + self._triangles.nbytes
        self.quality = int(quality)   # the Embree build quality asked for
        if self.num_triangles:
            dev = b.device_for(tri_accel)
            scene = self._lib.bps_scene_build(dev, _ptr(self._vertices), nv, _ptr(self._triangles),
                                              self.num_triangles, int(quality), int(flags))
            if not scene and tri_accel is not None:  # a CPU / Embree build without that BVH type
                dev = b.device
                scene = self._lib.bps_scene_build(dev, _ptr(self._vertices), nv, _ptr(self._triangles),
                                                  self.num_triangles, int(quality), int(flags))
            if not scene:
                code, msg = b.error(dev)
                raise EmbreeError(None, f"Embree could not build the scene ({nv} vertices, {self.num_triangles} "
                                  f"triangles): error {code} {msg}")
            self._scene = scene

    def __del__(self):
        scene, self._scene = self._scene, None
        if scene:
            self._lib.bps_scene_release(scene)

    # -- the same two queries as the embreex accel, on given rays
    def distance(self, org: np.ndarray, dirs: np.ndarray, miss: float = 1e37) -> np.ndarray:
        """Hit distance per ray (float32 [n]; ``miss`` where nothing is hit), in units of each
        direction's length; traced in C with the GIL released."""
        org, dirs = _rays(org), _rays(dirs)
        t = np.empty(org.shape[0], np.float32)
        if self._scene is None:
            t.fill(miss)
            return t
        self._lib.bps_trace_rays(self._scene, org.shape[0], _ptr(org), _ptr(dirs), _ptr(t), None, None, None,
                                 None, miss)
        return t

    def intersect(self, org: np.ndarray, dirs: np.ndarray, miss: float = 1e37) -> dict:
        """Hits of the rays, as ``EmbreeAccel.intersect`` returns them: ``tfar`` (``miss`` where
        nothing is hit), ``primID`` (-1: miss), ``u``, ``v`` and the unnormalized normal ``Ng``."""
        org, dirs = _rays(org), _rays(dirs)
        n = org.shape[0]
        out = _hit_arrays(n, miss)
        if self._scene is not None:
            self._lib.bps_trace_rays(self._scene, n, _ptr(org), _ptr(dirs), _ptr(out["tfar"]), _ptr(out["primID"]),
                                     _ptr(out["u"]), _ptr(out["v"]), _ptr(out["Ng"]), miss)
        return out

    # -- camera rays generated in C: no [N*H*W, 3] ray arrays in numpy
    def trace_cameras(self, origins: np.ndarray, rotations: np.ndarray, cam_dirs: np.ndarray,
                      t_out: np.ndarray, hits: bool = False, miss: float = 0.0,
                      rgb_out: np.ndarray | None = None, shading: NativeShading | None = None,
                      obj_out: np.ndarray | None = None, tri_object: np.ndarray | None = None) -> dict | None:
        """Trace every agent's camera rays. ``origins`` [n,3], ``rotations`` [n,3,3] (camera ->
        world), ``cam_dirs`` [HW,3]; writes hit distances (``miss`` where nothing is hit) into
        ``t_out`` (float32, n*HW contiguous). With ``hits``, also returns primID/u/v/Ng and the
        world directions (for shading). With ``rgb_out`` (uint8, n*HW*3 contiguous) and
        ``shading``, shades every hit in C as it is traced. With ``obj_out`` (int32, n*HW
        contiguous), writes each hit triangle's id in ``tri_object`` (int32 [T]; None: all 0s)
        there, 0 on a miss: the semantic sensor, read in the same packet loop."""
        o = np.ascontiguousarray(origins, np.float32)
        r = np.ascontiguousarray(rotations, np.float32)
        d = np.ascontiguousarray(cam_dirs, np.float32)
        if o.ndim != 2 or o.shape[1] != 3:
            raise ConfigError(None, f"origins must be [n, 3]; got shape {o.shape}")
        n = o.shape[0]
        if r.shape != (n, 3, 3):
            raise ConfigError(None, f"rotations must be [{n}, 3, 3] (one per origin); got shape {r.shape}")
        if d.ndim != 2 or d.shape[1] != 3:
            raise ConfigError(None, f"cam_dirs must be [HW, 3]; got shape {d.shape}")
        hw = d.shape[0]
        if t_out.dtype != np.float32 or not t_out.flags.c_contiguous or t_out.size != n * hw:
            raise ConfigError(None, "t_out must be a C-contiguous float32 array of n * HW elements")
        if rgb_out is not None:
            if shading is None:
                raise ConfigError(None, "rgb_out needs the scene's NativeShading")
            if rgb_out.dtype != np.uint8 or not rgb_out.flags.c_contiguous or rgb_out.size != n * hw * 3:
                raise ConfigError(None, "rgb_out must be a C-contiguous uint8 array of n * HW * 3 elements")
        obj_args = _object_args(obj_out, tri_object, n * hw)
        out = None
        if hits:
            out = _hit_arrays(n * hw, miss)
            out["dirs"] = np.empty((n * hw, 3), np.float32)
        if self._scene is None:
            t_out.fill(miss)
            if rgb_out is not None:
                rgb_out.fill(0)
            if obj_out is not None:
                obj_out.fill(0)
            if out is not None:
                out["dirs"][...] = np.matmul(d[None], r.transpose(0, 2, 1)).reshape(-1, 3)
            return out
        p = (lambda k: _ptr(out[k])) if out is not None else (lambda k: None)
        rgb_args = (None, None) if rgb_out is None else (_ptr(rgb_out), ctypes.addressof(shading.struct))
        rc = self._lib.bps_trace_cameras(self._scene, n, _ptr(o), o.shape[0], _ptr(r), r.shape[0], hw, _ptr(d), d.size,
                                         _ptr(t_out), p("primID"), p("u"), p("v"), p("Ng"), p("dirs"), *rgb_args,
                                         *obj_args, miss)
        if rc < 0:  # the checks above make this unreachable; the C side checks again
            raise ConfigError(None, f"bps_trace_cameras refused its inputs (code {rc})")
        if rc > 0:
            raise CorruptFileError(shading.source, f"shading tables: {rc} hits referred outside the scene's "
                                                   "material, texture or level tables (changed after they were checked?)")
        if out is not None:
            out["tfar"] = t_out
        return out


def _object_args(obj_out: np.ndarray | None, tri_object: np.ndarray | None, rays: int) -> tuple:
    """(obj, tri_object, num_obj) for bps_trace_cameras, after checking what C will write / read."""
    if obj_out is None:
        return None, None, 0
    if obj_out.dtype != np.int32 or not obj_out.flags.c_contiguous or obj_out.size != rays:
        raise ConfigError(None, "obj_out must be a C-contiguous int32 array of n * HW elements")
    if tri_object is None:
        return _ptr(obj_out), None, 0
    if tri_object.dtype != np.int32 or not tri_object.flags.c_contiguous or tri_object.ndim != 1:
        raise ConfigError(None, "tri_object must be a C-contiguous int32 [T] array")
    return _ptr(obj_out), _ptr(tri_object), tri_object.size


def _rays(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a, np.float32)
    if a.ndim != 2 or a.shape[1] != 3:
        raise ConfigError(None, f"rays must be [n, 3] float32; got shape {a.shape}")
    return a


def _hit_arrays(n: int, miss: float) -> dict:
    return {"tfar": np.full(n, np.float32(miss), np.float32), "primID": np.full(n, -1, np.int32),
            "u": np.zeros(n, np.float32), "v": np.zeros(n, np.float32), "Ng": np.zeros((n, 3), np.float32)}
