"""Warp kernels of the batch renderer (one source for Warp's CPU device and CUDA).

Imported lazily by ``warp_backend`` (an optional dependency). ``render_kernel`` (``depth_kernel``
without RGB or semantic) draws every agent of every resident scene in one launch: each agent's
scene index picks a row of a ``SceneTable`` array (the scene's BVH id and shading tables), so
the launch count does not depend on how many scenes are resident, and nothing about which agents
are in which scene is needed on the host. Rotations arrive as quaternions (xyzw) and are turned into matrices here in
float64 exactly as ``camera.rotation_matrices`` does, so poses give the same rays as on the
host path. The quaternion array may be float64 (``render``) or float32 (the fused step's own
rotation output, rendered in place inside the step's graph): float32 -> float64 is exact, so
both give the same pixels. The semantic sensor is one more output of the same launch (the
hit triangle's ``tri_object`` id), not another pass. ``shade_kernel`` colours Embree hits with the same ``shade`` function.

The shading follows ``shading_data``'s model operation for operation (same float32 order, same
integer BC1 formulas).
"""
from __future__ import annotations

from typing import Any

import warp as wp

from .camera import DEPTH_CLIPPED, DEPTH_NORMALIZED
from .shading_data import COS_FLOOR, FORMAT_BC1

COS_FLOOR_K = wp.constant(COS_FLOOR)
_CLIPPED, _NORMALIZED = wp.constant(DEPTH_CLIPPED), wp.constant(DEPTH_NORMALIZED)   # camera.depth_mode
FORMAT_BC1_K = wp.constant(FORMAT_BC1)


@wp.struct
class SceneTable:
    """One resident scene as the render kernel sees it; ``mesh == 0``: no scene (every pixel misses)."""

    mesh: wp.uint64
    indices: wp.array(dtype=int)
    uvs: wp.array(dtype=wp.vec2)
    colors: wp.array2d(dtype=wp.uint8)
    has_colors: int
    tri_material: wp.array(dtype=int)
    tri_lod: wp.array(dtype=float)
    mat_color: wp.array(dtype=wp.vec4)
    mat_tex: wp.array(dtype=int)
    tex_data: wp.array(dtype=wp.uint8)
    level_info: wp.array(dtype=wp.int64)
    lmax: int
    tex_nlevels: wp.array(dtype=int)
    tex_format: wp.array(dtype=int)
    tri_object: wp.array(dtype=wp.int32)  # instance id per triangle (semantic sensor)
    has_objects: int  # 0: the scene has no tri_object (every semantic pixel is 0)


@wp.func
def expand565(c: int) -> wp.vec3i:
    """An RGB565 colour as 8-bit channels (bit replication, as BC1 decoders do)."""
    r = (c >> 11) & 31
    g = (c >> 5) & 63
    b = c & 31
    return wp.vec3i((r << 3) | (r >> 2), (g << 2) | (g >> 4), (b << 3) | (b >> 2))


@wp.func
def bc1_texel(data: wp.array(dtype=wp.uint8), base: wp.int64, width: int, x: int, y: int) -> wp.vec3:
    """Texel (x, y) of a BC1 image of ``width`` texels whose blocks start at byte ``base`` of
    ``data``: RGB in 0..255 as floats, with Pillow's integer BC1 formulas (e.g. (2*e0 + e1) // 3)."""
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
def shade(f: int, bu: float, bv: float, z: float, cos_abs: float, tab: SceneTable,
          pixel_angle: float) -> wp.vec3:
    """Colour (RGB in 0..255, rounded, as floats) of a hit on triangle ``f`` at barycentrics
    ``bu``, ``bv`` and distance ``z``: material colour times vertex colour times a texel of the
    mip level the footprint ``z * pixel_angle / cos`` selects (``shading_data``'s model)."""
    # bu, bv: weights of the triangle's 2nd and 3rd vertex (Embree's convention)
    i0 = tab.indices[f * 3]
    i1 = tab.indices[f * 3 + 1]
    i2 = tab.indices[f * 3 + 2]
    w0 = 1.0 - bu - bv
    m = tab.tri_material[f]
    mc = tab.mat_color[m]
    col = wp.vec3(mc[0], mc[1], mc[2])
    if tab.has_colors != 0:
        vr = (w0 * float(tab.colors[i0, 0]) + bu * float(tab.colors[i1, 0]) + bv * float(tab.colors[i2, 0])) * (1.0 / 255.0)
        vg = (w0 * float(tab.colors[i0, 1]) + bu * float(tab.colors[i1, 1]) + bv * float(tab.colors[i2, 1])) * (1.0 / 255.0)
        vb = (w0 * float(tab.colors[i0, 2]) + bu * float(tab.colors[i1, 2]) + bv * float(tab.colors[i2, 2])) * (1.0 / 255.0)
        col = wp.cw_mul(col, wp.vec3(vr, vg, vb))
    t = tab.mat_tex[m]
    if t >= 0:
        uv = w0 * tab.uvs[i0] + bu * tab.uvs[i1] + bv * tab.uvs[i2]
        foot = z * pixel_angle / wp.max(cos_abs, COS_FLOOR_K)
        lod = wp.log2(wp.max(foot, 1.0e-30)) + tab.tri_lod[f]
        lvl = int(wp.floor(lod + 0.5))
        lvl = wp.clamp(lvl, 0, tab.tex_nlevels[t] - 1)
        k = (t * tab.lmax + lvl) * 3
        base = tab.level_info[k]
        wd = int(tab.level_info[k + 1])
        ht = int(tab.level_info[k + 2])
        fu = uv[0] - wp.floor(uv[0])
        fv = uv[1] - wp.floor(uv[1])
        x = wp.min(int(fu * float(wd)), wd - 1)
        y = wp.min(int(fv * float(ht)), ht - 1)
        texel = wp.vec3(0.0, 0.0, 0.0)
        if tab.tex_format[t] == FORMAT_BC1_K:
            texel = bc1_texel(tab.tex_data, base, wd, x, y)
        else:
            o = base + wp.int64((y * wd + x) * 4)
            texel = wp.vec3(float(tab.tex_data[o]), float(tab.tex_data[o + wp.int64(1)]), float(tab.tex_data[o + wp.int64(2)]))
        col = wp.cw_mul(col, texel * (1.0 / 255.0))
    return wp.vec3(wp.floor(wp.clamp(col[0], 0.0, 1.0) * 255.0 + 0.5),
                   wp.floor(wp.clamp(col[1], 0.0, 1.0) * 255.0 + 0.5),
                   wp.floor(wp.clamp(col[2], 0.0, 1.0) * 255.0 + 0.5))


@wp.func
def abs_cos(n: wp.vec3, d: wp.vec3) -> float:
    """|cos| of the angle between ``n`` and ``d`` (neither needs to be unit length)."""
    return wp.abs(wp.dot(n, d)) / wp.max(wp.length(n) * wp.length(d), 1.0e-30)


@wp.func
def quat_to_mat(q: wp.vec4d) -> wp.mat33:
    """Rotation matrix (camera -> world) of an xyzw quaternion, normalized first; identity for
    a zero quaternion."""
    # camera.rotation_matrices, in float64 then rounded to float32 as numpy does
    n = wp.sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3])
    one = wp.float64(1.0)
    two = wp.float64(2.0)
    if n < wp.float64(1.0e-12):
        return wp.mat33(1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0)
    x = q[0] / n
    y = q[1] / n
    z = q[2] / n
    w = q[3] / n
    return wp.mat33(float(one - two * (y * y + z * z)), float(two * (x * y - z * w)), float(two * (x * z + y * w)),
                    float(two * (x * y + z * w)), float(one - two * (x * x + z * z)), float(two * (y * z - x * w)),
                    float(two * (x * z - y * w)), float(two * (y * z + x * w)), float(one - two * (x * x + y * y)))


@wp.func
def ray_direction(q: Any, camera_dir: wp.vec3) -> wp.vec3:
    """A pixel's ray in the world: its camera-frame direction turned by the agent's quaternion
    ``q`` (vec4f or vec4d, turned into a matrix in float64)."""
    return quat_to_mat(wp.vec4d(wp.float64(q[0]), wp.float64(q[1]), wp.float64(q[2]), wp.float64(q[3]))) * camera_dir


@wp.func
def eye(feet: wp.vec3, sensor_height: float) -> wp.vec3:
    """The camera centre: ``sensor_height`` above the feet (the agent is upright; a pitched
    quaternion pitches the view about the sensor, as habitat's LOOK_UP / LOOK_DOWN)."""
    return feet + wp.vec3(0.0, sensor_height, 0.0)


@wp.func
def depth_value(z: float, depth_mode: int, lo: float, hi: float) -> float:
    """A pixel's depth as written (camera.finish_depth; ``depth_mode`` one of camera.depth_mode's
    values): DEPTH_RAW metres, DEPTH_CLIPPED to [lo, hi], DEPTH_NORMALIZED clipped and scaled to
    [0, 1] (a miss, z = 0, reads as lo)."""
    if depth_mode == _NORMALIZED:
        return (wp.clamp(z, lo, hi) - lo) / (hi - lo)
    if depth_mode == _CLIPPED:
        return wp.clamp(z, lo, hi)
    return z


@wp.func
def scene_mesh(meshes: wp.array(dtype=wp.uint64), s: wp.int64) -> wp.uint64:
    """Slot ``s``'s BVH id from the mesh column; 0 (every pixel a miss) for a slot outside the
    table or naming an empty row."""
    if s >= wp.int64(0) and s < wp.int64(meshes.shape[0]):
        return meshes[int(s)]
    return wp.uint64(0)


@wp.func
def trace_pixel(mesh: wp.uint64, q: Any, camera_dir: wp.vec3, feet: wp.vec3, sensor_height: float):
    """A pixel's ray in the world (the agent's quaternion ``q``, vec4f or vec4d) and its first
    hit in ``mesh``: (direction, wp.mesh_query_ray's result); the depth and render kernels'
    shared prologue."""
    d = ray_direction(q, camera_dir)
    return d, wp.mesh_query_ray(mesh, eye(feet, sensor_height), d, 1.0e30)


@wp.kernel
def depth_kernel(meshes: wp.array(dtype=wp.uint64), scene_index: wp.array(dtype=wp.int64),
                 pos: wp.array(dtype=wp.vec3), quat: wp.array(dtype=Any), dirs: wp.array(dtype=wp.vec3),
                 hw: int, sensor_height: float, depth_mode: int, lo: float, hi: float,
                 depth: wp.array2d(dtype=float)):
    """``render_kernel``'s depth alone, for frames without RGB or semantic: the same pixels,
    from a kernel without the shading code (on CUDA its registers decide how many pixels run
    at once: docs/PERFORMANCE.md, "GPU checks on an H100")."""
    tid = wp.tid()
    a = tid / hw
    p = tid - a * hw
    z = float(0.0)
    mesh = scene_mesh(meshes, scene_index[a])
    if mesh != wp.uint64(0):
        d, q = trace_pixel(mesh, quat[a], dirs[p], pos[a], sensor_height)
        if q.result:
            z = q.t
    depth[a, p] = depth_value(z, depth_mode, lo, hi)


@wp.kernel
def render_kernel(meshes: wp.array(dtype=wp.uint64), tables: wp.array(dtype=SceneTable), scene_index: wp.array(dtype=wp.int64),
                  pos: wp.array(dtype=wp.vec3), quat: wp.array(dtype=Any),
                  dirs: wp.array(dtype=wp.vec3), hw: int, sensor_height: float,
                  depth_mode: int, lo: float, hi: float,
                  depth: wp.array2d(dtype=float), want_rgb: int, rgb: wp.array3d(dtype=wp.uint8),
                  pixel_angle: float, want_sem: int, sem: wp.array2d(dtype=wp.int32)):
    """One thread per pixel (agent ``tid // hw``): trace the agent's camera ray in its scene's
    BVH (``meshes``, the ``mesh`` column of ``tables``) and write depth (z-depth in metres finished as ``depth_mode`` says:
    ``depth_value``), when ``want_rgb`` the shaded colour (black on a miss) and,
    when ``want_sem``, the hit triangle's instance id (0 on a miss or without ids). Slots
    outside the table or naming an empty row render as misses."""
    tid = wp.tid()
    a = tid / hw
    p = tid - a * hw
    s = scene_index[a]
    z = float(0.0)
    c = wp.vec3(0.0, 0.0, 0.0)
    obj = wp.int32(0)
    mesh = scene_mesh(meshes, s)
    if mesh != wp.uint64(0):
        d, q = trace_pixel(mesh, quat[a], dirs[p], pos[a], sensor_height)
        # the table row (a struct of 15 arrays) is read only by pixels that shade or label a hit
        # (warp_backend sends depth-only frames to depth_kernel; bench_warp_render times this
        # kernel on them too, for the comparison)
        if q.result:
            z = q.t
            if want_sem != 0 or want_rgb != 0:
                tab = tables[int(s)]
                if want_sem != 0 and tab.has_objects != 0:
                    obj = tab.tri_object[q.face]
                if want_rgb != 0:
                    # Warp: hit = u*p0 + v*p1 + (1-u-v)*p2 -> Embree's (weight of p1, weight of p2)
                    c = shade(q.face, q.v, 1.0 - q.u - q.v, z, abs_cos(q.normal, d), tab, pixel_angle)
    write_pixel(a, p, z, c, obj, depth_mode, lo, hi, depth, want_rgb, rgb, want_sem, sem)


@wp.func
def write_pixel(a: int, p: int, z: float, c: wp.vec3, obj: wp.int32, depth_mode: int, lo: float, hi: float,
                depth: wp.array2d(dtype=float), want_rgb: int, rgb: wp.array3d(dtype=wp.uint8),
                want_sem: int, sem: wp.array2d(dtype=wp.int32)):
    """Agent ``a``'s pixel ``p``: depth (``depth_value``), colour and semantic id."""
    depth[a, p] = depth_value(z, depth_mode, lo, hi)
    if want_rgb != 0:
        rgb[a, p, 0] = wp.uint8(int(c[0]))
        rgb[a, p, 1] = wp.uint8(int(c[1]))
        rgb[a, p, 2] = wp.uint8(int(c[2]))
    if want_sem != 0:
        sem[a, p] = obj


# the two quaternion types callers hand in (float64 from ``render``, float32 from the fused step)
for _q in (wp.vec4d, wp.vec4f):
    wp.overload(render_kernel, {"quat": wp.array(dtype=_q)})
    wp.overload(depth_kernel, {"quat": wp.array(dtype=_q)})


@wp.kernel
def shade_kernel(prim: wp.array(dtype=wp.int32), hu: wp.array(dtype=float), hv: wp.array(dtype=float),
                 z: wp.array(dtype=float), ng: wp.array(dtype=wp.vec3), dirs: wp.array(dtype=wp.vec3),
                 rgb: wp.array2d(dtype=wp.uint8), tab: SceneTable, pixel_angle: float):
    """One thread per Embree hit: its colour into ``rgb`` [n,3] (black for a miss or z <= 0)."""
    # Embree hits (primID, u, v, tfar, Ng) -> colours: the Embree backend's compiled shader
    i = wp.tid()
    f = int(prim[i])
    c = wp.vec3(0.0, 0.0, 0.0)
    if f >= 0 and z[i] > 0.0:
        c = shade(f, hu[i], hv[i], z[i], abs_cos(ng[i], dirs[i]), tab, pixel_angle)
    rgb[i, 0] = wp.uint8(int(c[0]))
    rgb[i, 1] = wp.uint8(int(c[1]))
    rgb[i, 2] = wp.uint8(int(c[2]))
