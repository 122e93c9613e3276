"""Sensor and actuation noise (habitat-sim's models) on the step's device: ``options``
(NoiseOptions, the PyRobot parameters), ``presets`` (habitat's realistic PointNav),
``rng`` (counter-based per-env streams), ``sensors`` (Redwood depth, RGB models: one launch),
``actuation`` (the noisy move / turn as Warp functions the step kernels call). Warp is
imported by ``rng`` / ``sensors`` / ``actuation`` only. docs/NOISE.md states the semantics.
"""
