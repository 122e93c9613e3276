"""The step state declared once (issue 21): a task's fields, added to the core schema, become the
Warp struct its kernels read, the torch tensors they share, and the env's per-group views --
here a toy task with an ObjectNav-like per-env goal category and a ring field."""
from __future__ import annotations

import pytest
import torch

from bps_runtime.step import schema as sc
from bps_runtime.warp_init import init_warp

wp = init_warp()
TOY = (sc.Field("goal_category", "int32", owner="toy"), sc.Field("r_goal_category", "int32", per="ring", owner="toy"),
       sc.Field("found", "bool", "out", owner="toy"), sc.Field("heading", "float32", "out", shape=(2,), owner="toy"))
SCHEMA = sc.Schema(sc.CORE).extend(TOY)
State = sc.warp_struct(wp, "ToyState", SCHEMA.of("state"), __name__)
Out = sc.warp_struct(wp, "ToyOut", SCHEMA.of("out"), __name__)


@wp.kernel
def toy_step(st: State, out: Out):
    e = wp.tid()
    st.goal_category[e] = st.r_goal_category[1, e]
    out.found[e] = wp.uint8(st.goal_category[e] == 7)
    out.heading[e, 1] = wp.float32(st.goal_category[e])
    out.scene_index[e] = wp.int64(st.scene_index[e])
    out.position[e] = st.pos[e] + wp.vec3(0.0, 1.0, 0.0)


def test_a_task_field_flows_from_the_schema_to_kernel_tensors_and_views():
    st = sc.allocate(SCHEMA.of("state"), 4, 2, "cpu")
    out = sc.allocate(SCHEMA.of("out"), 4, 2, "cpu")
    assert st["r_goal_category"].shape == (2, 4) and st["pos"].shape == (4, 3)
    assert out["heading"].shape == (4, 2) and out["found"].dtype == torch.uint8
    st["r_goal_category"][1] = torch.tensor([7, 3, 7, 1], dtype=torch.int32)
    st["scene_index"][:] = torch.tensor([0, 1, 2, 3], dtype=torch.int32)
    wp.launch(toy_step, dim=4, inputs=[sc.bind(wp, State, SCHEMA.of("state"), st),
                                       sc.bind(wp, Out, SCHEMA.of("out"), out)], device="cpu")
    v = sc.views(SCHEMA.of("out"), out, slice(2, 4))
    assert v.found.dtype == torch.bool and v.found.tolist() == [True, False]
    assert v.heading[:, 1].tolist() == [7.0, 1.0] and v.scene_index.tolist() == [2, 3]
    assert torch.equal(v.position[:, 1], torch.ones(2))
    assert sc.views(SCHEMA.of("state"), st, slice(0, 4)).goal_category.tolist() == [7, 3, 7, 1]


def test_a_field_declared_twice_is_refused():
    with pytest.raises(sc.SchemaError, match="declared twice"):
        sc.Schema(sc.CORE).extend([sc.Field("pos", "vec3")])
    with pytest.raises(sc.SchemaError, match="bad dtype"):
        sc.Field("x", "float16")
    sc.Schema(sc.CORE).extend([sc.Field("pos", "vec3", "out", owner="t")])   # another kind: allowed


def test_pointnav_declares_its_fields_once():
    from bps_runtime.tasks import pointnav

    names = [(f.kind, f.name) for f in pointnav.SCHEMA]
    assert len(names) == len(set(names))
    assert {f.owner for f in pointnav.FIELDS} == {"pointnav"}
    assert {"pointgoal", "success", "spl", "distance_to_goal"} <= {f.name for f in pointnav.SCHEMA.of("out")}
