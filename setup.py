"""Only the compiled part of the build lives here; everything else is in pyproject.toml.

The extensions are optional: without a C compiler the install still succeeds and the callers
fall back to embreex / scipy (see bps_assets/native/__init__.py for why these exist).
"""
from setuptools import Extension, setup

C_FLAGS = ["-O2", "-std=c11", "-ffp-contract=off"]  # no FMA: float32 results match numpy

setup(ext_modules=[
    Extension("bps_runtime.render._embree_bridge", ["bps_runtime/render/_embree_bridge.c"],
              extra_compile_args=C_FLAGS, libraries=["dl"], optional=True),
    Extension("bps_assets.native._dijkstra", ["bps_assets/native/_dijkstra.c"],
              extra_compile_args=C_FLAGS, optional=True),
    Extension("bps_assets.native._navbuild", ["bps_assets/native/_navbuild.c"],
              extra_compile_args=C_FLAGS, optional=True),
    # -O3: the unshuffle loops vectorize (integer work and one double multiply-add per value,
    # rounded once: the same bits as numpy's float64 formula)
    Extension("bps_assets.native._unfilter", ["bps_assets/native/_unfilter.c"],
              extra_compile_args=C_FLAGS + ["-O3"], optional=True),
    # the policy's fused stem (bps_train/stem.py): float32 results need not match numpy, so
    # multiply-adds may fuse; -O3 vectorizes the per-channel loops
    Extension("bps_train._stem", ["bps_train/_stem.c"],
              extra_compile_args=C_FLAGS + ["-O3", "-ffp-contract=fast", "-Wno-psabi"], optional=True),
])
