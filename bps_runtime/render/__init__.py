"""Batch renderers behind one protocol (``protocol.Renderer``): ``embree`` (CPU) and ``warp``
(CUDA, and Warp's CPU device for tests).

Modules: ``protocol`` (RenderOptions, the Renderer protocol), ``camera`` (the pinhole sensor
model), ``shading_data`` (a scene's validated shading tables and the shading model),
``inputs`` (checks of what callers pass), ``embree`` / ``embree_bridge`` (CPU, with the C
shader), ``warp_backend`` / ``warp_kernels`` (CUDA / Warp CPU, with the Warp shader),
``semantic`` (the semantic sensor's ids and the per-scene id -> category table).
"""
from __future__ import annotations

from .protocol import DEFAULTS, SENSORS, Renderer, RenderOptions
from .semantic import CategoryTable
from .shading_data import ShadingData, build_shading_data

BACKENDS = ("embree", "warp")


def make_renderer(backend: str = "embree", options: RenderOptions = DEFAULTS, device: str = "cpu", **kw):
    """Factory: ``embree`` needs device "cpu" (``shading="auto"|"native"|"warp"``; auto picks
    "native", the C shading inside the Embree bridge, when the bridge is compiled, else "warp",
    the Warp shader compiled for Warp's CPU device); ``warp`` runs on "cpu" or "cuda[:i]"."""
    from bps_assets.errors import ConfigError

    if backend == "embree":
        from .embree import EmbreeRenderer
        return EmbreeRenderer(options, device=device, **kw)
    if backend == "warp":
        from .warp_backend import WarpRenderer
        return WarpRenderer(options, device=device, **kw)
    raise ConfigError(None, f"unknown render backend {backend!r}: choose from {BACKENDS}")


__all__ = ["BACKENDS", "CategoryTable", "DEFAULTS", "SENSORS", "Renderer", "RenderOptions", "ShadingData",
           "build_shading_data", "make_renderer"]
