"""An episode file of another task than ``make(task=...)``'s is refused with a hint naming the
task its shape belongs to ("this looks like an ObjectNav episode file; pass task='objectnav'":
bps_assets.nav.episode_tasks), and a mistyped mode (``episodes="datset"``) lists the modes. Each
case is one the user-journey tester hit: ObjectNav to PointNav, PointNav to ObjectNav,
InstanceImageNav to ObjectNav, ObjectNav to InstanceImageNav."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

import bps_runtime
from bps_assets.errors import InputError
from bps_assets.nav.episode_tasks import episode_file_task, wrong_task_hint
from bps_runtime.tasks import instance_imagenav, pointnav
from cli.main import main
from episode_files import write_gz


POINT = {"episodes": [{"episode_id": "0", "scene_id": "s.glb", "start_position": [0, 0, 0],
                       "start_rotation": [0, 0, 0, 1], "goals": [{"position": [1, 0, 1], "radius": 0.2}]}]}
OBJECT = {"episodes": [{"episode_id": "0", "scene_id": "s.glb", "object_category": "chair", "goals": []}],
          "goals_by_category": {}}
INSTANCE = {"episodes": [{"episode_id": "0", "object_category": "chair", "goal_object_id": "3", "goal_image_id": 0}]}


def test_the_shape_names_the_task(tmp_path):
    p, o, i = (write_gz(tmp_path / f"{k}.json.gz", d) for k, d in (("p", POINT), ("o", OBJECT), ("i", INSTANCE)))
    assert [episode_file_task(f)[0] for f in (p, o, i)] == ["pointnav", "objectnav", "instance_imagenav"]
    assert episode_file_task(write_gz(tmp_path / "empty.json.gz", {"episodes": []})) is None
    assert episode_file_task(tmp_path / "missing.json.gz") is None
    assert wrong_task_hint(p, "pointnav") == wrong_task_hint(p, "imagenav") == ""   # ImageNav reads PointNav's
    assert wrong_task_hint(o, "pointnav") == "this looks like an ObjectNav episode file; pass task='objectnav'"
    assert "pass task='instance_imagenav'" in wrong_task_hint(i, "objectnav")


@pytest.fixture(scope="module")
def files(objectnav_dataset, tmp_path_factory):
    """(dataset, {task: episode file of that task for its scene})."""
    out, objectnav_file = objectnav_dataset
    root = tmp_path_factory.mktemp("hints")
    navs = sorted((out / "navmeshes").iterdir())
    r = CliRunner().invoke(main, ["episodes", *map(str, navs), "--task", "instance_imagenav", "-o", str(root / "iin"),
                                  "--split", "val", "--per-scene", "3", "--any-subset", "--scenes", str(out / "scenes")])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["episodes", *map(str, navs), "-o", str(root / "pn"), "--split", "val",
                                  "--per-scene", "3", "--any-subset"])
    assert r.exit_code == 0, r.output
    return out, {"objectnav": str(objectnav_file), "instance_imagenav": str(root / "iin" / "val" / "val.json.gz"),
                 "pointnav": str(root / "pn" / "val" / "val.json.gz")}


AGENT = {"agent_radius": 0.18, "agent_height": 0.88}   # the objectnav dataset's agent


@pytest.mark.parametrize("task,given", [
    (pointnav.TaskOptions(**AGENT), "objectnav"), ("objectnav", "pointnav"), ("objectnav", "instance_imagenav"),
    (instance_imagenav.TaskOptions(**AGENT), "objectnav"), (pointnav.TaskOptions(**AGENT), "instance_imagenav"),
])
def test_a_file_of_another_task_says_which(files, task, given):
    out, paths = files
    with pytest.raises(InputError, match=f"pass task='{given}'") as e:
        bps_runtime.make(out, split=None, task=task, episodes=paths[given], num_envs=1, resolution=(16, 16))
    assert "\n" not in str(e.value)


def test_a_mistyped_mode_lists_the_modes(files):
    out, _ = files
    for task in ("pointnav", "objectnav"):
        kw = {"task": pointnav.TaskOptions(**AGENT) if task == "pointnav" else task}
        with pytest.raises(InputError, match=r"one of None, 'dataset', 'sample' \(did you mean 'dataset'\?\)"):
            bps_runtime.make(out, split=None, episodes="datset", num_envs=1, resolution=(16, 16), **kw)
