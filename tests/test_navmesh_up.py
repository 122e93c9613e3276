"""`bps-assets navmesh --up` sets the frame transform's ``up`` option: on a small generated room
(an OBJ floor with low walls, written Z-up and Y-up), each file read with its own up axis lands
as the same room in the habitat frame (the Z-up file's -Y is habitat +Z), whatever --dataset's
preset says, and the other axis is refused."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from bps_assets.nav import load_navmesh

# a 4 m x 3 m floor with 0.3 m walls around it, in the habitat frame (Y up): x in [0, 4], z in [0, 3]
LO, HI, WALL = np.array([0.0, 0.0, 0.0]), np.array([4.0, 0.3, 3.0]), 0.3


def _room_obj(path: Path, zup: bool) -> Path:
    """The room as an OBJ: Y-up as above, or Z-up (habitat (x, y, z) written as (x, -z, y), so the
    frame's (x, y, z) -> (x, z, -y) brings it back)."""
    x0, _, z0 = LO
    x1, h, z1 = HI
    quads = [[(x0, 0, z0), (x0, 0, z1), (x1, 0, z1), (x1, 0, z0)]]   # floor, facing +Y
    for a, b in (((x0, z0), (x1, z0)), ((x1, z0), (x1, z1)), ((x1, z1), (x0, z1)), ((x0, z1), (x0, z0))):
        quads.append([(a[0], 0, a[1]), (b[0], 0, b[1]), (b[0], h, b[1]), (a[0], h, a[1])])
    lines = []
    for q in quads:
        for x, y, z in q:
            lines.append(f"v {x} {-z} {y}" if zup else f"v {x} {y} {z}")
    for i in range(len(quads)):
        k = 4 * i + 1
        lines.append(f"f {k} {k + 1} {k + 2}\nf {k} {k + 2} {k + 3}")
    path.write_text("\n".join(lines) + "\n")
    return path


def _navmesh(*args):
    from cli.cmd_navmesh import navmesh_cmd

    return CliRunner().invoke(navmesh_cmd, [str(a) for a in args])


@pytest.mark.parametrize("dataset", ["generic", "gibson"])
def test_up_sets_the_frame_whatever_the_preset(tmp_path, dataset):
    zup = _room_obj(tmp_path / "zup.obj", zup=True)
    yup = _room_obj(tmp_path / "yup.obj", zup=False)
    for src, up in ((zup, "z"), (yup, "y")):
        out = tmp_path / f"{dataset}-{up}"
        r = _navmesh(src, "-o", out, "--dataset", dataset, "--up", up, "--json")
        assert r.exit_code == 0, r.output
        rec = json.loads(r.output)
        nav = load_navmesh(rec["output"])
        b = nav.info()["bounds"]
        lo, hi = np.array(b["min"]), np.array(b["max"])
        z0, z1 = LO[2], HI[2]   # both files: the same room in the habitat frame
        # floor at y = 0, inside the room's x and (habitat) z range, the agent's radius in from the walls
        assert abs(lo[1]) < 0.05 and abs(hi[1]) < 0.05, b
        assert LO[0] < lo[0] < LO[0] + 0.5 and HI[0] - 0.5 < hi[0] < HI[0], b
        assert z0 < lo[2] < z0 + 0.5 and z1 - 0.5 < hi[2] < z1, b
        assert 8.0 < rec["navigable_area"] < 12.0, rec


def test_the_wrong_up_is_refused_both_ways(tmp_path):
    zup = _room_obj(tmp_path / "zup.obj", zup=True)
    yup = _room_obj(tmp_path / "yup.obj", zup=False)
    for src, up in ((zup, "y"), (yup, "z")):
        r = _navmesh(src, "-o", tmp_path / "o", "--up", up)
        assert r.exit_code != 0 and f"pass --up {'z' if up == 'y' else 'y'}" in r.output, r.output
    assert not (tmp_path / "o").exists() or not list((tmp_path / "o").iterdir())


def test_help_names_the_frame_option():
    r = CliRunner().invoke(__import__("cli.cmd_navmesh", fromlist=["x"]).navmesh_cmd, ["--help"])
    text = " ".join(r.output.split())
    assert "--up [y|z]" in text and "overriding --dataset's preset" in text


def test_the_library_takes_up_as_the_frame_option(tmp_path):
    """navmesh_from_file / scene_triangles take ``up`` beside ``dataset`` (frame.Options.up),
    as preprocess's ConvertOptions do: the CLI passes both through, no preset stands in."""
    from bps_assets.nav.build import frame_options, scene_triangles
    from bps_assets.nav.sources import navmesh_from_file
    from bps_assets.transforms.frame import Options

    zup = _room_obj(tmp_path / "zup.obj", zup=True)
    yup = _room_obj(tmp_path / "yup.obj", zup=False)
    assert frame_options("gibson", "y") == Options(dataset="gibson", up="y")
    assert frame_options() == Options()
    for dataset in ("generic", "gibson", "mp3d"):
        v, t, _ = scene_triangles(zup, dataset, up="z")
        w, _, _ = scene_triangles(yup, dataset, up="y")
        assert np.array_equal(v, w)
        assert navmesh_from_file(zup, dataset=dataset, up="z").navigable_area == \
            navmesh_from_file(yup, dataset=dataset, up="y").navigable_area > 8.0
