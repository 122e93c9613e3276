"""Scene streaming: the async ``loader`` (packed file -> render-ready scene, ``checks``) and the
scene manager (``cache``: its public face over ``policy``, ``budget``, ``scheduler``,
``residency`` listeners and ``report``: which scenes are resident, swaps, scene indices)."""
