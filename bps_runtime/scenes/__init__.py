"""Scene streaming: the async ``loader`` (packed file -> render-ready scene) and the scene
manager (``cache``: which scenes are resident, swaps, scene indices)."""
