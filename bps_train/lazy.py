"""A module (or one of its attributes) imported on first use, for names a script binds at its
top: ``torch = lazy("torch")``. ``bps-train --help`` and argument errors then answer within an
interpreter start instead of after torch's 2 s import; the first real use imports it.

Contract: attribute access and calls are forwarded to the target (imported once, then cached);
``isinstance(x, proxy)`` does not work (use the real class).
"""
from __future__ import annotations

import importlib


class lazy:  # noqa: N801 - reads like the import statement it replaces
    """``lazy("torch")`` stands for ``import torch``; ``lazy("bps_train.models", "Policy")``
    for ``from bps_train.models import Policy``."""

    def __init__(self, module: str, attr: str | None = None):
        self.__dict__["_spec"] = (module, attr)

    def _target(self):
        t = self.__dict__.get("_obj")
        if t is None:
            module, attr = self.__dict__["_spec"]
            t = importlib.import_module(module)
            t = getattr(t, attr) if attr else t
            self.__dict__["_obj"] = t
        return t

    def __getattr__(self, name):
        return getattr(self._target(), name)

    def __call__(self, *args, **kwargs):
        return self._target()(*args, **kwargs)

    def __repr__(self):
        module, attr = self.__dict__["_spec"]
        return f"<lazy {module}{'.' + attr if attr else ''}>"
