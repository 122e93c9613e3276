"""Task options as a habitat-lab config ports them: every on / off option is a bool (habitat's
``allow_sliding: False`` ported as text must not switch sliding on), ``max_pitch_degrees`` None
or >= 0 (a negative one read as the kernels' "no limit"), ``max_episode_steps`` within the
kernels' int32 (2^32 + 1 wrapped to a one-step limit). Each is a ConfigError naming the option,
raised when the options are built (``tasks.options.check_rules``)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from bps_assets.errors import ConfigError
from bps_runtime.tasks import TASKS, imagenav, instance_imagenav, objectnav, pointnav
from bps_runtime.tasks.goalnav import make_params
from bps_runtime.tasks.options import MAX_STEPS

MODULES = {"pointnav": pointnav, "objectnav": objectnav, "imagenav": imagenav,
           "instance_imagenav": instance_imagenav}
BOOL_FIELDS = [(m, f) for m in MODULES for f in ("sliding", "gps_compass") if hasattr(MODULES[m].DEFAULTS, f)]


def test_every_task_is_covered():
    assert set(MODULES) == set(TASKS)
    assert ("pointnav", "gps_compass") in BOOL_FIELDS and ("objectnav", "sliding") in BOOL_FIELDS


@pytest.mark.parametrize("task,field", BOOL_FIELDS)
@pytest.mark.parametrize("bad", ["False", "no", 0, 1, None, 1.0])
def test_a_bool_option_refuses_anything_but_a_bool(task, field, bad):
    options = MODULES[task].TaskOptions
    with pytest.raises(ConfigError, match=rf"{field}={bad!r}: expected True or False"):
        options(**{field: bad})
    with pytest.raises(ConfigError, match=field):   # env.task = replace(...) is checked the same way
        replace(options(), **{field: bad})


@pytest.mark.parametrize("task,field", BOOL_FIELDS)
def test_a_bool_option_takes_python_and_numpy_bools(task, field):
    options = MODULES[task].TaskOptions
    for value in (False, True, np.bool_(False), np.bool_(True)):
        got = getattr(options(**{field: value}), field)
        assert got is bool(value)   # stored as Python's bool


def test_sliding_text_no_longer_switches_sliding_on():
    """What the kernels saw before: int(bool("False")) == 1."""
    with pytest.raises(ConfigError, match="sliding='False'"):
        objectnav.TaskOptions(sliding="False")
    assert make_params(objectnav.TaskOptions(sliding=np.bool_(False)), 8, True, False).sliding == 0


@pytest.mark.parametrize("module", [objectnav, instance_imagenav, imagenav])
def test_max_pitch_is_none_or_not_negative(module):
    for bad in (-10, -0.5, np.float32(-30)):
        with pytest.raises(ConfigError, match=r"max_pitch_degrees=.*None \(no limit\) or a limit >= 0"):
            module.TaskOptions(max_pitch_degrees=bad)
    assert module.TaskOptions(max_pitch_degrees=None).max_pitch_degrees is None
    assert module.TaskOptions(max_pitch_degrees=0).max_pitch_degrees == 0
    # a limit of 0 clamps (the kernels' "no limit" is only None)
    assert make_params(objectnav.TaskOptions(max_pitch_degrees=0), 8, True, False).max_pitch == 0.0


@pytest.mark.parametrize("task", sorted(MODULES))
def test_max_episode_steps_fits_the_kernels(task):
    options = MODULES[task].TaskOptions
    assert options(max_episode_steps=MAX_STEPS).max_episode_steps == 2**31 - 1
    for bad in (2**31, 2**32 + 1, np.int64(2**40)):
        with pytest.raises(ConfigError, match=r"max_episode_steps=.*expected an int in 0\.\.2147483647"):
            options(max_episode_steps=bad)


@pytest.mark.parametrize("task", sorted(MODULES))
def test_an_unknown_option_is_a_config_error_with_habitats_name(task):
    """A habitat-lab key passed as it is named there is a ConfigError giving the bps name (the
    dataclass' own TypeError named neither); ``replace`` and ``EnvConfig.from_dict`` alike."""
    from bps_runtime.env.config import EnvConfig

    options = MODULES[task].TaskOptions
    with pytest.raises(ConfigError, match=r"'turn_angle': habitat-lab's turn_angle is 'turn_degrees' here"):
        options(turn_angle=30)
    with pytest.raises(ConfigError, match=r"'forward_step_size': habitat-lab's forward_step_size is 'forward_step'"):
        replace(options(), forward_step_size=0.5)
    with pytest.raises(ConfigError, match=r"'succes_distance': did you mean 'success_distance'\?"):
        options(succes_distance=0.5)
    d = EnvConfig.from_kwargs("m", task=task).to_dict()
    d["task"]["allow_sliding"] = False
    with pytest.raises(ConfigError, match="'allow_sliding': habitat-lab's allow_sliding is 'sliding' here"):
        EnvConfig.from_dict(d)
    # a key whose bps name this task lacks gets no false hint
    if not hasattr(options(), "tilt_degrees"):
        with pytest.raises(ConfigError, match=r"unknown option\(s\) 'tilt_angle'; it takes"):
            options(tilt_angle=30)
    assert options(0.5).forward_step == 0.5   # positional fields still work
