"""Which converter LOD level a run loads, seen and chosen: ``bps-assets info`` names the level its
resident figure is for (and for which sensor) and lists every level's; ``make(lod=...)`` picks
it ("auto", "full", a level index; anything else a ConfigError); the runtime logs the level and
why, and ``SceneCache.resident_levels()`` reports it per resident scene."""
from __future__ import annotations

import json
import logging

import pytest

import embreex  # noqa: F401  (a dependency the test extra installs: missing is a failure, not a skip)
import meshoptimizer  # noqa: F401

from click.testing import CliRunner

import bps_runtime
from bps_assets.errors import ConfigError
from bps_assets.packed_scene import read_packed_scene

LEVELS = "0.01,0.05"


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """{"plain": manifest, "lod": manifest, "scene": the LOD scene's path} of one synth Gibson
    scene preprocessed without and with ``--lod 0.01,0.05`` (4 PointNav episodes)."""
    from bps_assets import synth
    from cli.main import main as cli

    tmp = tmp_path_factory.mktemp("lod_choice")
    synth.generate(tmp / "src", layout="gibson", scenes=1, size="small")
    out = {}
    for name, extra in (("plain", []), ("lod", ["--lod", LEVELS])):
        r = CliRunner().invoke(cli, ["preprocess", str(tmp / "src"), "-o", str(tmp / name), "--dataset", "gibson",
                                     "--split", "tiny", "--subset", "train", "--episodes", "4", "--in-process",
                                     "--no-progress", *extra])
        assert r.exit_code == 0, r.output
        out[name] = tmp / name / "manifest.json"
    entry, = json.loads(out["lod"].read_text())["scenes"].values()
    out["scene"] = out["lod"].parent / entry["outputs"]["scene"]["path"]
    return out


def _info(*args):
    from cli.main import main as cli

    return CliRunner().invoke(cli, ["info", *map(str, args)])


def test_info_names_the_level_and_sensor_and_lists_every_level(pair):
    scene = pair["scene"]
    r = _info(scene)
    assert r.exit_code == 0, r.output
    assert "above: for a 64x64, HFOV 90 sensor, which loads converter LOD level 0" in r.output
    rows = [line.split() for line in r.output.splitlines() if line.startswith("      ") and "triangles" in line]
    assert [row[:2] for row in rows] == [["full", "mesh"], ["level", "0"], ["level", "1"]]
    assert [row[-1] for row in rows].count("loaded") == 1 and rows[1][-1] == "loaded"
    js = json.loads(_info(scene, "--json").output)["resident_bytes"]
    assert js["level"] == 0 and [x["level"] for x in js["levels"]] == [-1, 0, 1]
    assert [x["max_error"] for x in js["levels"]] == [None, 0.01, 0.05]
    hdr = read_packed_scene(scene, ["tri_material"]).header
    assert [x["triangles"] for x in js["levels"][1:]] == [x["triangles"] for x in hdr["lods"]["levels"]]
    # the loaded level's totals are the breakdown's, in the per-level table too
    assert js["levels"][1]["embree"] == sum(js["embree"].values())
    assert js["levels"][0]["embree"] > 2 * js["levels"][1]["embree"]
    # a finer sensor loads the full mesh; --lod picks a level outright
    fine = _info(scene, "--resolution", 256)
    assert "256x256, HFOV 90 sensor, which loads the full mesh" in fine.output and "0.614 cm" in fine.output
    assert "which loads converter LOD level 1" in _info(scene, "--lod", 1).output
    assert "which loads converter LOD level 1" in _info(scene, "--resolution", 16).output
    assert "which loads the full mesh (lod='full'" in _info(scene, "--lod", "full").output
    bad = _info(scene, "--lod", "coarse")
    assert bad.exit_code != 0 and "lod='coarse'" in bad.output


def _resident(manifest, **kw):
    env = bps_runtime.make(manifest, split="train", num_envs=2, seed=0, threads=1, cache=1, **kw)
    try:
        env.reset()
        return env.world.scenes.resident_levels()
    finally:
        env.close()


def test_make_lod_picks_the_level_logs_it_and_the_cache_reports_it(pair, caplog):
    plain, = _resident(pair["plain"]).values()
    assert plain["level"] == -1 and "no converter LODs" in plain["reason"]
    with caplog.at_level(logging.DEBUG, logger="bps_runtime"):
        auto, = _resident(pair["lod"]).values()
    hdr = read_packed_scene(pair["scene"], ["tri_material"]).header
    assert auto["level"] == 0 and auto["triangles"] == hdr["lods"]["levels"][0]["triangles"]
    assert "2.45 cm, 64x64 HFOV 90" in auto["reason"]
    env_lines = [r.getMessage() for r in caplog.records if r.name == "bps_runtime.env"]
    assert len(env_lines) == 1 and "scenes load level 0" in env_lines[0], env_lines
    assert any("loads converter LOD level 0" in r.getMessage() and r.levelno == logging.DEBUG
               for r in caplog.records if r.name == "bps_runtime.scenes.loader")
    full, = _resident(pair["lod"], lod="full").values()
    # the full mesh of a file with LODs is charged exactly what the same scene without LODs is
    assert full["level"] == -1 and full["bytes"] == plain["bytes"] and full["triangles"] == plain["triangles"]
    assert auto["bytes"] < 0.5 * full["bytes"]
    one, = _resident(pair["lod"], lod=1).values()
    assert one["level"] == 1 and one["triangles"] == hdr["lods"]["levels"][1]["triangles"]


def test_a_level_index_past_the_files_levels_takes_its_coarsest(pair):
    coarse, = _resident(pair["lod"], lod=7).values()
    assert coarse["level"] == 1 and "the coarsest there is" in coarse["reason"]


@pytest.mark.parametrize("bad", ["coarse", "", -1, 8, "8", 1.0, True, None])
def test_bad_lod_values_are_config_errors_naming_them(bad):
    with pytest.raises(ConfigError, match="lod=" + repr(bad).replace("(", r"\(").replace(".", r"\.")):
        bps_runtime.make("nowhere/manifest.json", lod=bad)


def test_lod_in_camera_points_to_the_keyword():
    with pytest.raises(ConfigError, match=r"make\(lod="):
        bps_runtime.make("nowhere/manifest.json", camera={"lod": "full"})


def test_lod_round_trips_through_the_config():
    from bps_runtime.env.config import EnvConfig

    assert EnvConfig.from_kwargs("x", lod="1").sensors.lod == 1   # text, as a command line gives it
    c = EnvConfig.from_kwargs("x", lod=1)
    assert c.sensors.lod == 1 and c.sensors.render_options().lod == 1
    assert EnvConfig.from_dict(json.loads(json.dumps(c.to_dict()))).sensors.lod == 1
    assert EnvConfig.from_kwargs("x").sensors.render_options().lod == "auto"


def test_a_load_chooses_its_level_once_and_reports_that_choice(pair, monkeypatch):
    """The reason travels with the read (``PackedScene.lod_reason``): one ``choice`` per load."""
    from bps_runtime.render import make_renderer
    from bps_runtime.render.protocol import RenderOptions
    from bps_runtime.scenes import lod_levels
    from bps_runtime.scenes import loader as loader_module
    from bps_runtime.scenes.loader import LoadedScene, SceneLoader, SceneSource

    calls, choice = [], lod_levels.choice

    def counted(*a):
        calls.append(a)
        return choice(*a)

    for module in (lod_levels, loader_module):   # wherever the loader may look it up
        monkeypatch.setattr(module, "choice", counted, raising=False)
    loader = SceneLoader(make_renderer("embree", RenderOptions(resolution=(64, 64))), threads=1)
    try:
        got = loader.submit(SceneSource("s", str(pair["scene"]))).result(timeout=120)
    finally:
        loader.close()
    assert isinstance(got, LoadedScene), got
    assert len(calls) == 1 and got.lod == 0 and got.lod_reason == choice(*calls[0])[1]
    assert got.lod_reason.startswith("lod='auto': level 0")
