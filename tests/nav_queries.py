"""Batched navigation queries over ``NavBuffers`` with the fused step's own code (the ``move`` /
``geodesic`` Warp functions): test-only (the runtime's step calls the functions in its kernels)."""
from __future__ import annotations

import torch

from bps_runtime.nav import kernels as nk
from bps_runtime.nav.buffers import NavBuffers
from bps_runtime.nav.kernels import nav_struct, window_cells
from bps_runtime.step import kernels as sk
from bps_runtime.step.fused import _wp_dev, warp_stream


class NavQueries:
    """Batched navigation queries over ``NavBuffers`` with the fused step's own code (the
    ``move`` / ``geodesic`` Warp functions): for tests and tools, not for the step."""

    def __init__(self, nav: NavBuffers):
        self.nav = nav
        self.wp = sk.init_warp()

    def _window(self, n: int, max_len: float):
        win = window_cells(max_len, self.nav.min_cell)
        return win, torch.zeros(n, win, dtype=torch.int32, device=self.nav.device)

    def try_step(self, keys: torch.Tensor, start: torch.Tensor, end: torch.Tensor) -> torch.Tensor:
        """habitat's try_step with sliding for [N] agents in resident scenes ``keys``."""
        dev = self.nav.device
        keys = keys.to(dev, torch.int32).contiguous()
        start = start.to(dev, torch.float32).contiguous()
        end = end.to(dev, torch.float32).contiguous()
        n = start.shape[0]
        out = torch.empty_like(start)
        if n == 0:
            return out
        max_len = float(torch.linalg.vector_norm((end - start)[:, [0, 2]], dim=1).max())
        win, scratch = self._window(n, max_len)
        ft, wp = self.wp.from_torch, self.wp
        wp.launch(nk.try_step_query, dim=n, inputs=[nav_struct(self.nav), win, ft(scratch), ft(keys),
                  ft(start, dtype=wp.vec3), ft(end, dtype=wp.vec3), ft(out, dtype=wp.vec3)],
                  device=_wp_dev(dev), stream=warp_stream(dev))
        return out

    def geodesic(self, keys: torch.Tensor, rows: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """Geodesic distance [N] from ``pos`` to the goal of field ``rows`` of scenes ``keys``."""
        dev = self.nav.device
        keys = keys.to(dev, torch.int32).contiguous()
        rows = rows.to(dev, torch.int32).contiguous()
        pos = pos.to(dev, torch.float32).contiguous()
        out = torch.empty(pos.shape[0], dtype=torch.float32, device=dev)
        if pos.shape[0]:
            ft, wp = self.wp.from_torch, self.wp
            wp.launch(nk.geodesic_query, dim=pos.shape[0], inputs=[nav_struct(self.nav), ft(keys), ft(rows),
                      ft(pos, dtype=wp.vec3), ft(out)], device=_wp_dev(dev), stream=warp_stream(dev))
        return out
