"""The task seam (bps_runtime/tasks/spec.py): every registered task gives a complete, consistent
``TaskSpec``, and the generic layers of the runtime name no task."""
from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import numpy as np
import pytest
import torch

from bps_runtime.step.schema import CORE, STAGE
from bps_runtime.tasks import TASKS, spec_for, task_spec
from bps_runtime.tasks.spec import GoalEncoderArgs, TaskSpec

ROOT = Path(__file__).resolve().parents[1] / "bps_runtime"
GENERIC = ("env", "step", "scenes", "episodes", "render", "nav")


@pytest.mark.parametrize("name", TASKS)
def test_every_task_gives_a_consistent_spec(name):
    spec = task_spec(name)
    assert isinstance(spec, TaskSpec) and spec.name == name
    assert spec.options.TASK == name and isinstance(spec.defaults, spec.options)
    assert spec_for(spec.defaults) is spec
    assert spec.actions[:4] == ("STOP", "MOVE_FORWARD", "TURN_LEFT", "TURN_RIGHT") and spec.num_actions == len(spec.actions)
    for f in CORE:   # the shared fields are the schema's, declared once
        assert f in spec.schema.fields
    state = {f.name: f for f in spec.schema.of("state")}
    out = {f.name: f for f in spec.schema.of("out")}
    # staging: the generic columns first, every ring column naming a ring field of the state
    assert spec.staging.columns[:len(STAGE.columns)] == STAGE.columns
    for c in spec.staging.columns:
        if c.ring is not None:
            assert state[c.ring].per == "ring", c
    # observations: each is an output field of its dtype; its space shape resolves
    h, w = 12, 20
    sizes = spec.sizes((h, w))
    for o in spec.observations:
        f = out[o.field_name]   # its own name, or the field it reads (``Observation.source``)
        assert f.dtype == o.dtype and f == o.field(f.owner)
        n = int(np.prod([sizes[d] if isinstance(d, str) else d for d in f.shape] or [1]))
        assert n == int(np.prod(o.space_shape(h, w)))
    named = {d for f in spec.schema for d in f.shape if isinstance(d, str)}
    assert named <= set(sizes), f"{name}: sizes() misses {named - set(sizes)}"
    # the Warp structs carry every field of their kind
    assert set(spec.State.vars) == set(state) and set(spec.Out.vars) == set(out)
    assert spec.max_move(spec.defaults) > 0 and spec.params(spec.defaults, 8, **sizes) is not None
    from bps_runtime.env.config import CAMERA_FIELDS
    from bps_runtime.tasks.options import TaskOptions

    assert set(spec.camera) <= set(CAMERA_FIELDS) and isinstance(spec.defaults, TaskOptions)   # one base
    goals = spec.goal_record(None, "7", float("nan"))
    assert isinstance(goals, dict) and not {"env_id", "episode_id", "goals"} & set(goals)
    # the trainer's goal input and encoder, from observations shaped as the spaces say
    from bps_runtime.env.spaces import single_observation_space

    space = single_observation_space(("rgb",), (h, w), True, spec)
    obs = {k: torch.zeros((2, *space[k].shape), dtype=torch.from_numpy(np.zeros(0, space[k].dtype)).dtype)
           for k in space.keys()}
    shape, dtype = spec.goal_input_spec((h, w))
    goal = spec.goal_input(obs)
    assert tuple(goal.shape) == (2, *shape) and goal.dtype == dtype
    from bps_train.models import _cnn

    enc = spec.goal_encoder(GoalEncoderArgs(1, 16, 8, (h, w), 8, lambda c: _cnn(c, 8, 16, (h, w))))
    assert enc(goal, _cnn(3, 8, 16, (h, w))).shape == (2, enc.out_dim)


@pytest.mark.parametrize("name", TASKS)
def test_eval_takes_its_episode_source_from_the_spec(name):
    """``bps-train --eval`` without a file runs the episodes the task declares
    (``TaskSpec.eval_episodes``), not a choice by task name in the trainer."""
    from argparse import Namespace

    from bps_train.train import eval_source

    spec = task_spec(name)
    assert spec.eval_episodes in ("dataset", "sample")
    assert eval_source(Namespace(task=name, eval_episodes_file=None)) == spec.eval_episodes
    assert eval_source(Namespace(task=name, eval_episodes_file="e.json.gz")) == "e.json.gz"
    # the choices of before: generated episodes where the split files are not the task's
    assert spec.eval_episodes == ("sample" if name in ("objectnav", "instance_imagenav") else "dataset")


@pytest.mark.parametrize("name", TASKS)
def test_a_task_whose_goal_record_reads_headings_declares_them(name):
    """``TaskSpec.goal_headings`` (the ring keeps goal-view headings only then) is declared by every
    task whose ``goal_record`` depends on the heading (ImageNav's ``goal_heading``; its host hook
    renders the goal image at it)."""
    spec = task_spec(name)
    reads = spec.goal_record(None, "3", 0.5) != spec.goal_record(None, "3", 1.0)
    assert not reads or spec.goal_headings
    assert spec.goal_headings == (name == "imagenav")   # the one task that reads them


def test_the_ring_keeps_no_headings_for_a_task_that_reads_none(tmp_path):
    """PointNav (goal_headings False): the ring stores, stages and passes no goal-view headings,
    and ``episode_goals()`` still answers each env's goal."""
    import pointnav_trace as pt
    from bps_runtime import make

    m = pt.build_manifest(tmp_path)
    with make(m, **pt.CONFIGS["sample"]) as env:
        env.reset()
        for _ in range(30):
            env.step(torch.randint(0, env.num_actions, (env.batch_size,)))
        assert env.ring.heading is None and env.ring.staged_headings == []
        goals = env.episode_goals()
        assert len(goals) == env.num_envs and all(len(g["goal_position"]) == 3 for g in goals)


def _code_tokens(path: Path):
    """(kind, text, line) of a module's names and string literals, docstrings and comments left out."""
    toks = list(tokenize.generate_tokens(io.StringIO(path.read_text()).readline))
    prev = tokenize.NEWLINE
    for t in toks:
        if t.type == tokenize.STRING and prev in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.NL):
            prev = t.type
            continue   # a docstring (a string statement)
        if t.type in (tokenize.NAME, tokenize.STRING):
            yield t.type, t.string, t.start[0]
        if t.type not in (tokenize.COMMENT, tokenize.NL):
            prev = t.type


def test_generic_layers_name_no_task():
    """env/, step/, scenes/, episodes/, render/, nav/: no task name as an identifier or a string,
    no ``NAME ==`` branch, no import of a task module (tasks.<name>, bps_assets.nav.<task>)."""
    names = [n.lower() for n in TASKS] + ["goalnav"]
    bad = []
    for room in GENERIC:
        for path in sorted((ROOT / room).rglob("*.py")):
            rel = path.relative_to(ROOT.parent)
            for kind, text, line in _code_tokens(path):
                low = text.lower()
                if kind == tokenize.NAME and any(n in low for n in names):
                    bad.append(f"{rel}:{line}: {text}")
                elif kind == tokenize.STRING and low.strip("'\"") in names:
                    bad.append(f"{rel}:{line}: {text}")
            for i, line in enumerate(path.read_text().splitlines(), 1):
                if re.search(r"\bNAME\s*==|\.NAME\b|\.IMAGE\b", line):
                    bad.append(f"{rel}:{i}: {line.strip()}")
    assert not bad, "task knowledge in the generic layers:\n" + "\n".join(bad)


def test_the_seam_test_sees_a_task_name(tmp_path):
    """The grep above finds what it looks for (an identifier, a string, a NAME branch)."""
    p = tmp_path / "m.py"
    p.write_text('"""Docstring naming pointnav is fine."""\n# so is a comment: objectnav\n'
                 'from x import imagenav_thing\nif k == "pointnav":\n    pass\n')
    found = [(k, t) for k, t, _ in _code_tokens(p) if any(n in t.lower() for n in TASKS)]
    assert [t for _, t in found] == ["imagenav_thing", '"pointnav"']
