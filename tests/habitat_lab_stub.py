"""habitat-lab's own dataset and measure classes, imported without habitat-sim.

habitat-lab is pure Python, but its package ``__init__`` pulls in the simulator, hydra, gym,
OpenCV and numpy-quaternion, and its wheel pins numpy==1.26.4 (so it is not in the ``test``
extra: it would downgrade the project's numpy). ``load_habitat()`` imports the installed
habitat-lab (``pip install --no-deps habitat-lab``) with those modules replaced by permissive
stubs in ``sys.modules``, and the habitat package ``__init__`` files skipped, so the real
``ObjectNavDatasetV1``, ``PointNavDatasetV1``, ``InstanceImageNavDatasetV1`` and nav measures
run. Returns None when habitat-lab is not installed. ``unload`` removes the stubs and habitat's modules from ``sys.modules`` again.
"""
from __future__ import annotations

import importlib.util
import os
import sys
import types

import pytest

PIN = "habitat-lab==0.3.320260507"  # the version these tests were written against


class _Meta(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Any()


class _Any(metaclass=_Meta):
    """Stands in for any class, function or value of a stubbed module."""

    def __init__(self, *a, **k):
        pass

    def __call__(self, *a, **k):
        return _Any()

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Any()

    def __bool__(self):  # e.g. OmegaConf.is_config(x) must answer "no"
        return False

    def __mro_entries__(self, bases):
        return (_Any,)


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Any


# third-party and simulator / visualization modules the dataset and nav-task modules import
STUBS = ("quaternion", "omegaconf", "omegaconf.base", "gym", "gym.spaces", "cv2", "hydra",
         "hydra.core", "hydra.core.config_store", "magnum", "numba", "imageio", "habitat_sim",
         "habitat_sim.logging", "habitat_sim.physics", "habitat_sim.agent", "habitat_sim.agent.agent",
         "habitat.config.default",
         "habitat.config.default_structured_configs", "habitat.utils.visualizations",
         "habitat.utils.visualizations.maps", "habitat.utils.visualizations.fog_of_war",
         "habitat.utils.visualizations.utils")
# habitat packages whose __init__ is skipped (their modules load from the real files)
PACKAGES = ("habitat", "habitat.core", "habitat.datasets", "habitat.datasets.pointnav",
            "habitat.datasets.object_nav", "habitat.datasets.image_nav", "habitat.tasks",
            "habitat.tasks.nav", "habitat.config", "habitat.sims", "habitat.utils")


def load_habitat() -> types.SimpleNamespace | None:
    """The habitat-lab classes (namespace: ObjectNavDatasetV1, PointNavDatasetV1,
    InstanceImageNavDatasetV1, measures, version), or None when habitat-lab is not installed."""
    spec = importlib.util.find_spec("habitat")
    if spec is None or spec.origin is None:
        return None
    root = os.path.dirname(spec.origin)
    if not os.path.exists(os.path.join(root, "datasets", "object_nav", "object_nav_dataset.py")):
        return None
    before = set(sys.modules)
    stubbed = set()
    for name in STUBS:
        if name in sys.modules and not isinstance(sys.modules[name], _StubModule):
            continue  # already imported for real: use it
        m = _StubModule(name)
        m.__path__ = []
        sys.modules[name] = m
        stubbed.add(name)
    if isinstance(sys.modules.get("gym"), _StubModule):
        sys.modules["gym"].spaces = sys.modules["gym.spaces"]
    for name in PACKAGES:
        m = types.ModuleType(name)
        m.__path__ = [os.path.join(root, *name.split(".")[1:])]
        sys.modules[name] = m
    from habitat.datasets.image_nav.instance_image_nav_dataset import InstanceImageNavDatasetV1
    from habitat.datasets.object_nav.object_nav_dataset import ObjectNavDatasetV1
    from habitat.datasets.pointnav.pointnav_dataset import PointNavDatasetV1
    from habitat.tasks.nav import nav
    from habitat.version import VERSION

    # only habitat's own modules and our stubs go again: a real module imported on the way
    # (numpy parts, PIL, ...) stays, as re-importing a C extension later would break
    added = stubbed | {m for m in set(sys.modules) - before if m == "habitat" or m.startswith("habitat.")}
    return types.SimpleNamespace(ObjectNavDatasetV1=ObjectNavDatasetV1, PointNavDatasetV1=PointNavDatasetV1,
                                 InstanceImageNavDatasetV1=InstanceImageNavDatasetV1, nav=nav, version=VERSION, _added=added)


def unload(h) -> None:
    """Remove the habitat and stub modules ``load_habitat`` added."""
    for name in getattr(h, "_added", ()):
        sys.modules.pop(name, None)


@pytest.fixture(scope="module")
def habitat_lab():
    """habitat-lab's classes for one test module (skips when habitat-lab is not installed)."""
    h = load_habitat()
    if h is None:
        pytest.skip(f"habitat-lab is not installed (pip install --no-deps {PIN})")
    yield h
    unload(h)
