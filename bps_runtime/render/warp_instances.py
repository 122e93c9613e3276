"""Composed scenes on the Warp backend without flattening: a top-level ``wp.Bvh`` over the
instances' world bounds, each ray taken into the hit candidate's asset frame and traced with
``wp.mesh_query_ray`` on the asset's own ``wp.Mesh`` (built once per asset, shared by every
instance and every resident scene that uses it: ``scenes.assets``).

``WarpInstances(wp, device, parts)``: ``parts`` are ``(WarpScene, transform 4x4, semantic id)``
(the stage first, identity, id 0). ``render_instanced_kernel`` runs over every pixel of a frame
and draws the agents whose scene index is this scene's (one launch per resident composed scene,
after the renderer's main launch; nothing is read back to the host). Shading is the Warp
backend's ``shade`` on the hit asset's tables, with the normal taken to world space and the
footprint scaled by the instance's linear scale (as ``embree_instances``).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import warp as wp

from ..warp_init import CudaReleased, device_build
from .warp_kernels import SceneTable, abs_cos, eye, ray_direction, shade, write_pixel

# the top-level wp.Bvh's nodes and the host's bookkeeping per instance (RSS growth of 249-251 B
# per instance building 10,000 on Warp's CPU device, less the 136 B of arrays counted below;
# benchmarks/bench_instance_bytes.py, docs/PERFORMANCE.md "Instance structure bytes")
WARP_BVH_BYTES_PER_INSTANCE = 116


def instances_bytes(num_instances: int, num_meshes: int) -> int:
    """``WarpInstances.nbytes`` for ``num_instances`` parts over ``num_meshes`` distinct meshes
    (at least it: empty parts are left out of the build)."""
    size = wp.types.type_size_in_bytes
    per = sum(size(t) for t in (wp.int32, wp.mat44, wp.mat33, float, wp.int32, wp.vec3, wp.vec3))
    return size(SceneTable) * num_meshes + (per + WARP_BVH_BYTES_PER_INSTANCE) * num_instances


class WarpInstances(CudaReleased):
    """A composed scene's instance tables on the device (see the module docstring)."""

    composed = True

    def __init__(self, wp_mod, device, parts):
        self._cuda = device.is_cuda
        parts = [p for p in parts if p[0].mesh is not None]
        self.parts = parts                   # keeps the shared assets' meshes alive
        n = len(parts)
        m = np.array([p[1] for p in parts], np.float64).reshape(n, 4, 4)
        lin = m[:, :3, :3]
        inv = np.linalg.inv(m) if n else np.zeros((0, 4, 4))
        det = np.abs(np.linalg.det(lin)) if n else np.zeros(0)
        meshes: dict[int, int] = {}
        rows, boxes = [], []
        asset_of = np.zeros(n, np.int32)
        for i, (sc, _, _) in enumerate(parts):
            key = id(sc)
            if key not in meshes:   # once per asset (on CUDA: one copy back of its points)
                meshes[key] = len(rows)
                rows.append(sc.shading.table(_k(), sc.mesh.id))
                pts = sc.points.numpy().astype(np.float64)
                boxes.append(((pts.max(0) + pts.min(0)) / 2, (pts.max(0) - pts.min(0)) / 2))
            asset_of[i] = meshes[key]
        # each instance's world box: its asset's box (centre, half extent) placed by its transform
        c = np.array([b[0] for b in boxes]).reshape(-1, 3)[asset_of]
        e = np.array([b[1] for b in boxes]).reshape(-1, 3)[asset_of]
        mid = np.einsum("nij,nj->ni", lin, c) + m[:, :3, 3]
        half = np.einsum("nij,nj->ni", np.abs(lin), e)
        lo, hi = mid - half, mid + half
        pad = 1e-4 * np.maximum(1.0, np.abs(np.concatenate([lo, hi], 1)).max(1, initial=1.0))[:, None] if n else 0
        # device= on every array: Warp's ScopedDevice sets a process-wide default, which another
        # loader thread's scope can restore under this one
        self.assets = wp_mod.array(rows, dtype=SceneTable, device=device)
        self.asset_of = wp_mod.array(asset_of, dtype=wp.int32, device=device)
        self.inv = wp_mod.array(inv.astype(np.float32), dtype=wp.mat44, device=device)
        nxf = np.linalg.inv(lin).transpose(0, 2, 1) if n else np.zeros((0, 3, 3))
        self.nxf = wp_mod.array(nxf.astype(np.float32), dtype=wp.mat33, device=device)
        lod = (1.0 / np.cbrt(det)) if n else np.zeros(0)
        lod[np.isclose(lod, 1.0, rtol=0, atol=1e-6)] = 1.0
        self.lod = wp_mod.array(lod.astype(np.float32), dtype=float, device=device)
        self.obj = wp_mod.array(np.array([p[2] for p in parts], np.int32), dtype=wp.int32, device=device)
        self.lowers = wp_mod.array((lo - pad).astype(np.float32), dtype=wp.vec3, device=device)
        self.uppers = wp_mod.array((hi + pad).astype(np.float32), dtype=wp.vec3, device=device)
        with device_build(device):   # NVIDIA/warp#1491: one CUDA BVH build at a time
            self.bvh = wp_mod.Bvh(self.lowers, self.uppers) if n else None
            wp_mod.synchronize_device(device)
        self.mesh = None   # the renderer's main launch sees an empty row: this scene is drawn here
        self.nbytes = instances_bytes(n, len(rows))


def _k():
    from . import warp_kernels
    return warp_kernels


@wp.kernel
def render_instanced_kernel(this_scene: wp.int64, bvh: wp.uint64, assets: wp.array(dtype=SceneTable),
                            asset_of: wp.array(dtype=wp.int32), inv: wp.array(dtype=wp.mat44),
                            nxf: wp.array(dtype=wp.mat33), lod: wp.array(dtype=float),
                            objs: wp.array(dtype=wp.int32), scene_index: wp.array(dtype=wp.int64),
                            pos: wp.array(dtype=wp.vec3), quat: wp.array(dtype=Any),
                            dirs: wp.array(dtype=wp.vec3), hw: int, sensor_height: float,
                            finish: int, lo: float, hi: float,
                            depth: wp.array2d(dtype=float), want_rgb: int, rgb: wp.array3d(dtype=wp.uint8),
                            pixel_angle: float, want_sem: int, sem: wp.array2d(dtype=wp.int32)):
    """``warp_kernels.render_kernel`` for the agents in scene ``this_scene`` (others untouched)."""
    tid = wp.tid()
    a = tid / hw
    p = tid - a * hw
    if scene_index[a] != this_scene:
        return
    d = ray_direction(quat[a], dirs[p])
    cam = eye(pos[a], sensor_height)
    best = float(1.0e30)
    hit_i = int(-1)
    face = int(0)
    bu = float(0.0)
    bv = float(0.0)
    nrm = wp.vec3(0.0, 0.0, 0.0)
    query = wp.bvh_query_ray(bvh, cam, d)
    i = int(0)
    while wp.bvh_query_next(query, i, best):
        m = inv[i]
        lo_o = wp.transform_point(m, cam)
        lo_d = wp.transform_vector(m, d)
        q = wp.mesh_query_ray(assets[asset_of[i]].mesh, lo_o, lo_d, best)
        if q.result and q.t < best:
            best = q.t
            hit_i = i
            face = q.face
            bu = q.u
            bv = q.v
            nrm = q.normal
    z = float(0.0)
    c = wp.vec3(0.0, 0.0, 0.0)
    obj = wp.int32(0)
    if hit_i >= 0:
        z = best
        obj = objs[hit_i]
        if want_rgb != 0:
            c = shade(face, bv, 1.0 - bu - bv, z * lod[hit_i], abs_cos(nxf[hit_i] * nrm, d),
                      assets[asset_of[hit_i]], pixel_angle)
    write_pixel(a, p, z, c, obj, finish, lo, hi, depth, want_rgb, rgb, want_sem, sem)


for _q in (wp.vec4d, wp.vec4f):
    wp.overload(render_instanced_kernel, {"quat": wp.array(dtype=_q)})
