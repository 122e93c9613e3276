"""Tasks, one module each: its options, actions, state fields (declared in the step schema),
kernels, observations, reward, success and metrics. ``pointnav``: habitat-lab's PointNav.
``module_for(options)`` is the task module of an options object (its class's ``TASK``)."""
import importlib


def module_for(options):
    """The task module (``bps_runtime.tasks.<options.TASK>``) whose options ``options`` are."""
    return importlib.import_module(f"{__name__}.{type(options).TASK}")
