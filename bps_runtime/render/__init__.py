"""Batch renderers behind one protocol (see base.Renderer): ``embree`` (CPU) and ``warp``
(CUDA, and Warp's CPU device for tests)."""
from __future__ import annotations

from .base import DEFAULTS, SENSORS, Renderer, RenderOptions, ShadingData, build_shading_data

BACKENDS = ("embree", "warp")


def make_renderer(backend: str = "embree", options: RenderOptions = DEFAULTS, device: str = "cpu", **kw):
    """Factory: ``embree`` needs device "cpu" (``shading="auto"|"warp"|"numpy"``); ``warp`` runs
    on "cpu" or "cuda[:i]"."""
    from bps_assets.errors import ConfigError

    if backend == "embree":
        from .embree import EmbreeRenderer
        return EmbreeRenderer(options, device=device, **kw)
    if backend == "warp":
        from .warp_backend import WarpRenderer
        return WarpRenderer(options, device=device, **kw)
    raise ConfigError(None, f"unknown render backend {backend!r}: choose from {BACKENDS}")


__all__ = ["BACKENDS", "DEFAULTS", "SENSORS", "Renderer", "RenderOptions", "ShadingData",
           "build_shading_data", "make_renderer"]
