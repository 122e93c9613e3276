"""Today's (88cbd84) torch navigation, kept only as the reference the fused step is checked
against in tests/test_fused_step.py: ``DeviceNavMesh.try_step`` (a port of
``bps_assets.nav.queries.try_step`` as ~300 small torch ops) and the geodesic ``lookup``
(``GoalFields.lookup`` of bps_runtime/nav.py, on a [rows, S] field table)."""
from __future__ import annotations

import math

import numpy as np
import torch

PULL_INSIDE = 1e-4
LOCATE_MAX_DY = 0.5


class DeviceNavMesh:
    """A ``bps_assets.nav.NavMesh`` on a torch device (read-only after construction)."""

    def __init__(self, navmesh, device="cpu"):
        dev = torch.device(device)
        self.device = dev
        self.navmesh = navmesh
        self.cell_size = float(navmesh.cell_size)
        self.origin = (float(navmesh.origin[0]), float(navmesh.origin[1]))
        self.L, self.D, self.W = navmesh.shape
        self.num_spans = int(navmesh.num_spans)
        self.height = torch.as_tensor(navmesh.height, device=dev)                          # [L,D,W]
        self.layer_nbr = torch.as_tensor(navmesh.neighbors.astype(np.int64), device=dev)   # [L,D,W,4]
        self.span_index = torch.as_tensor(navmesh.span_index.astype(np.int64), device=dev)  # [L,D,W]
        self.span_pos = torch.as_tensor(navmesh.span_pos, dtype=torch.float32, device=dev)  # [S,3]
        lrc = np.asarray(navmesh.span_lrc, np.int64)
        self.span_lrc = torch.as_tensor(lrc, device=dev)                                   # [S,3]
        self.span_island = torch.as_tensor(np.asarray(navmesh.span_island, np.int64), device=dev)
        S = self.num_spans
        # padded copies: row S stands for "no span" (as NavMesh.nbr's sink row)
        self.nbr = torch.as_tensor(np.asarray(navmesh.nbr, np.int64), device=dev)          # [S+1,4]
        self.span_pos64 = torch.as_tensor(np.vstack([navmesh.span_pos, np.zeros((1, 3))]), device=dev)
        self.span_lrc_pad = torch.as_tensor(np.vstack([lrc, np.zeros((1, 3), np.int64)]), device=dev)
        self.span_island_pad = torch.as_tensor(np.r_[np.asarray(navmesh.span_island, np.int64), -1], device=dev)
        self.max_climb = float(navmesh.settings.max_climb)
        self.snap_extents = torch.tensor([2.0, 4.0, 2.0], dtype=torch.float64, device=dev)
        # geodesic reads: spans seen directly from each span (itself first), S = none
        from bps_assets.nav.queries import geodesic_graph
        g = geodesic_graph(navmesh)
        seen = np.concatenate([np.arange(S, dtype=np.int64)[:, None], g.adj], axis=1)
        self.seen = torch.as_tensor(np.vstack([seen, np.full((1, seen.shape[1]), S)]).astype(np.int32), device=dev)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (
            self.height, self.layer_nbr, self.span_index, self.span_pos, self.span_lrc, self.span_island,
            self.nbr, self.span_pos64, self.span_lrc_pad, self.span_island_pad, self.seen))

    # ------------------------------------------------------------------ lookups
    def cells(self, p: torch.Tensor):
        """(row, col) long tensors of the cells of points [N,3] (may be outside the grid)."""
        cs = self.cell_size
        c = torch.floor((p[:, 0].double() - self.origin[0]) / cs).long()
        r = torch.floor((p[:, 2].double() - self.origin[1]) / cs).long()
        return r, c

    def locate(self, p: torch.Tensor, max_dy: float = LOCATE_MAX_DY) -> torch.Tensor:
        """Span id [N] of each point (the span of its cell nearest in y, within max_dy), -1 if none."""
        r, c = self.cells(p)
        inb = (r >= 0) & (r < self.D) & (c >= 0) & (c < self.W)
        rr, cc = r.clamp(0, self.D - 1), c.clamp(0, self.W - 1)
        h = self.height[:, rr, cc].T                                        # [N, L]
        dy = torch.abs(h - p[:, 1:2])
        dy = torch.where(torch.isnan(dy), torch.full_like(dy, math.inf), dy)
        best, layer = dy.min(dim=1)
        sid = self.span_index[layer, rr, cc]
        ok = inb & (best <= max_dy) & (sid >= 0)
        return torch.where(ok, sid, torch.full_like(sid, -1))

    def offset_to_centre(self, p: torch.Tensor, span: torch.Tensor) -> torch.Tensor:
        """x/z distance from points to the centres of their spans."""
        c = self.span_pos[span.clamp_min(0)]
        return torch.hypot(p[:, 0] - c[:, 0], p[:, 2] - c[:, 2])

    # ------------------------------------------------------------------ snapping
    def _window(self, r0: torch.Tensor, c0: torch.Tensor, R: int):
        """Rows [N, n, 1] and cols [N, 1, n] of the (2R+1)^2 window centred on (r0, c0)."""
        off = torch.arange(-R, R + 1, device=self.device)
        return r0[:, None, None] + off[None, :, None], c0[:, None, None] + off[None, None, :]

    def _window_spans(self, rr, cc):
        """Span ids [N, L, n, n] of window cells (S where none / outside the grid)."""
        S = self.num_spans
        n = rr.shape[1]
        inb = (rr >= 0) & (rr < self.D) & (cc >= 0) & (cc < self.W)            # [N, n, n]
        r = rr.clamp(0, self.D - 1).expand(-1, n, n)
        c = cc.clamp(0, self.W - 1).expand(-1, n, n)
        sid = self.span_index[:, r, c].permute(1, 0, 2, 3)                    # [N, L, n, n]
        return torch.where(inb[:, None] & (sid >= 0), sid, torch.full_like(sid, S))

    def snap_window(self, p: torch.Tensor, r0, c0, R: int):
        """The NavMesh's snap rule (Detour's findNearestPoly: |dy| - max climb over a cell,
        else the 3D distance to the nearest point of the cell square, inside the 2 x 4 x 2 m
        box) restricted to the spans of a window around (r0, c0) -> (points [N,3] f64,
        span ids [N], S where none)."""
        S, cs = self.num_spans, self.cell_size
        N = p.shape[0]
        rr, cc = self._window(r0, c0, R)
        cand = self._window_spans(rr, cc).reshape(N, -1)                        # [N, K]
        cen = self.span_pos64[cand]                                             # [N, K, 3]
        pp = p.double()[:, None, :]
        h = cs / 2 - PULL_INSIDE
        qx = torch.minimum(torch.maximum(pp[..., 0], cen[..., 0] - h), cen[..., 0] + h)
        qz = torch.minimum(torch.maximum(pp[..., 2], cen[..., 2] - h), cen[..., 2] + h)
        q = torch.stack([qx, cen[..., 1], qz], dim=-1)
        over = ((pp[..., 0] - cen[..., 0]).abs() <= cs / 2) & ((pp[..., 2] - cen[..., 2]).abs() <= cs / 2)
        dy = (pp[..., 1] - q[..., 1]).abs()
        d_over = (dy - self.max_climb).clamp_min(0.0) ** 2
        d_far = ((q - pp) ** 2).sum(-1)
        d = torch.where(over, d_over, d_far)
        inbox = ((q - pp).abs() <= self.snap_extents).all(-1)
        d = torch.where((cand < S) & inbox, d, torch.full_like(d, math.inf))
        best, j = d.min(dim=1)
        ar = torch.arange(N, device=self.device)
        found = torch.isfinite(best)
        sid = torch.where(found, cand[ar, j], torch.full_like(j, S))
        out = q[ar, j]
        keep = found & over[ar, j]
        out[:, 0] = torch.where(keep, pp[:, 0, 0], out[:, 0])
        out[:, 2] = torch.where(keep, pp[:, 0, 2], out[:, 2])
        return out, sid, best

    def snap(self, p: torch.Tensor, R: int):
        """``snap_window`` around each point's own cell, widened to R cells only for the points
        that are not over a span (d > 0): the exact answer at a fraction of the cost."""
        r, c = self.cells(p)
        q, sid, best = self.snap_window(p, r, c, 1)
        far = torch.nonzero(best > 0).reshape(-1)
        if far.numel() and R > 1:
            q2, sid2, _ = self.snap_window(p[far], r[far], c[far], R)
            q[far], sid[far] = q2, sid2
        return q, sid

    # ------------------------------------------------------------------ try_step
    def try_step(self, start: torch.Tensor, end: torch.Tensor) -> torch.Tensor:
        """habitat's try_step with sliding for [N,3] start / end points: a port of
        ``bps_assets.nav.queries.try_step`` (same window, circle, fill order, tie-breaks)."""
        N = start.shape[0]
        if N == 0 or self.num_spans == 0:
            return start.clone()
        S, cs, dev = self.num_spans, self.cell_size, self.device
        ps, pe = start.double(), end.double()
        dist = torch.hypot(pe[:, 0] - ps[:, 0], pe[:, 2] - ps[:, 2])
        # nearest spans lie within |end - start| + 2 cells of the points' own cells
        Rs = int(math.ceil(float(dist.max()) / cs)) + 2
        qs, ss = self.snap(ps, Rs)
        _, se = self.snap(pe, Rs)
        ok = (ss < S) & (se < S)
        ok &= self.span_island_pad[ss] == self.span_island_pad[se]
        # Detour's search circle: cells within rad of the midpoint; the window is centred on
        # the midpoint's cell (row-major order, hence argmin tie-breaks, are the grid's)
        d2 = torch.hypot(pe[:, 0] - qs[:, 0], pe[:, 2] - qs[:, 2])
        rad = d2 / 2 + 1e-3
        R = int(math.ceil(float(rad.max()) / cs)) + 1
        n = 2 * R + 1
        mid = (qs + pe) / 2
        r0, c0 = self.cells(mid)
        rr, cc = self._window(r0, c0, R)                                        # [N,n,1], [N,1,n]
        mid_x = (qs[:, 0] + pe[:, 0]) / 2
        mid_z = (qs[:, 2] + pe[:, 2]) / 2
        d2 = torch.hypot(pe[:, 0] - qs[:, 0], pe[:, 2] - qs[:, 2])
        rad = d2 / 2 + 1e-3
        x0 = self.origin[0] + cc.double() * cs
        z0 = self.origin[1] + rr.double() * cs
        mx, mz = mid_x[:, None, None], mid_z[:, None, None]
        dx = torch.maximum(torch.maximum(x0 - mx, torch.zeros_like(x0)), mx - (x0 + cs))
        dz = torch.maximum(torch.maximum(z0 - mz, torch.zeros_like(z0)), mz - (z0 + cs))
        allowed = (dx ** 2 + dz ** 2) <= (rad ** 2)[:, None, None]              # [N, n, n]
        state = torch.full((N, n, n), S, dtype=torch.long, device=dev)
        ar = torch.arange(N, device=dev)
        si = (self.span_lrc_pad[ss, 1] - r0 + R).clamp(0, n - 1)
        sj = (self.span_lrc_pad[ss, 2] - c0 + R).clamp(0, n - 1)
        state[ar, si, sj] = ss
        nbr = self.nbr
        moves = ((0, 0, 1), (1, 1, 0), (2, 0, -1), (3, -1, 0))                  # (dir, drow, dcol)
        for _ in range(n * n):
            changed = False
            for k, di, dj in moves:
                src = state[:, max(0, -di):n - max(0, di), max(0, -dj):n - max(0, dj)]
                dst = state[:, max(0, di):n - max(0, -di), max(0, dj):n - max(0, -dj)]
                al = allowed[:, max(0, di):n - max(0, -di), max(0, dj):n - max(0, -dj)]
                cand = nbr[src, k]
                upd = (dst == S) & (cand < S) & al
                if bool(upd.any()):
                    dst[upd] = cand[upd]
                    changed = True
            if not changed:
                break
        reached = state < S
        h = cs / 2 - PULL_INSIDE
        cx = (self.origin[0] + (cc.double() + 0.5) * cs).expand(N, n, n)
        cz = (self.origin[1] + (rr.double() + 0.5) * cs).expand(N, n, n)
        ex, ez = pe[:, 0, None, None], pe[:, 2, None, None]
        hf = cs / 2
        qx = torch.minimum(torch.maximum(ex, cx - hf), cx + hf)
        qz = torch.minimum(torch.maximum(ez, cz - hf), cz + hf)
        dd = (qx - ex) ** 2 + (qz - ez) ** 2
        dd = torch.where(reached, dd, torch.full_like(dd, math.inf)).reshape(N, -1)
        j = dd.argmin(dim=1)
        sp = state.reshape(N, -1)[ar, j]
        rx, rz = qx.reshape(N, -1)[ar, j], qz.reshape(N, -1)[ar, j]
        # a slid (clamped) result is pulled inside its cell so it locates back to that span
        inside = dd[ar, j] == 0
        ccx, ccz = cx.reshape(N, -1)[ar, j], cz.reshape(N, -1)[ar, j]
        rx = torch.where(inside, rx, torch.minimum(torch.maximum(rx, ccx - h), ccx + h))
        rz = torch.where(inside, rz, torch.minimum(torch.maximum(rz, ccz - h), ccz + h))
        res = torch.stack([rx, self.span_pos64[sp, 1], rz], 1)
        return torch.where(ok[:, None], res, ps).to(start.dtype)


def lookup(m: DeviceNavMesh, table: torch.Tensor, rows: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """Geodesic distance at ``pos`` [N,3] to the goals of ``rows`` [N]: the NavMesh's
    ``distance_at`` (min over the spans seen directly from the point's span of field +
    distance to their centre), the point's span found by ``locate``."""
    S = m.num_spans
    span = m.locate(pos, max_dy=math.inf)
    span = torch.where(span >= 0, span, torch.full_like(span, S))
    seen = m.seen[span].long()                                          # [N, K]
    f = table[rows[:, None], seen.clamp_max(S - 1)]                     # [N, K]
    q = pos.double().clone()
    q[:, 1] = m.span_pos64[span, 1]
    d = torch.linalg.vector_norm(m.span_pos64[seen] - q[:, None, :], dim=2)
    tot = torch.where(seen < S, f.double() + d, torch.full_like(d, math.inf))
    return tot.min(dim=1).values.to(torch.float32)

