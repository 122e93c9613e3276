"""Processing steps from a read scene to GPU-ready arrays, one step per module.

Each module has an ``Options`` dataclass, ``DEFAULTS`` and a factory returning a callable:
``frame`` and ``clean`` act on a ``SceneDocument``; ``merge`` turns the document into one
``MergedGeometry`` (one vertex/index buffer, a material id per triangle); ``weld``, ``reorder``,
``meshlets`` and ``quantize`` act on that; ``textures`` turns decoded images into
block-compressed mip chains. ``bps_assets.packed_scene`` strings them into the pipeline.
"""
from .merged import MergedGeometry, merge  # noqa: F401
