"""Issue 14 item 9: symlinks out of the dataset (verify warns, --strict refuses, the loader
warns) and habitat's content_scenes_path (only {data_path} and {scene}, inside the dataset)."""
from __future__ import annotations

import gzip
import json
import logging
import os

import numpy as np
import pytest

from bps_assets.container import write_container
from bps_assets.errors import InputError
from bps_assets.nav.episodes import read_pointnav_dataset
from bps_assets.pipeline.verify import format_report, verify_manifest
from bps_assets.safe_paths import content_scenes_dir, link_escape
from hostile_cases import manifest_over


def _dataset_with_linked_scenes(tmp_path, inside: bool):
    root = tmp_path / "ds"
    root.mkdir()
    elsewhere = (root / "store") if inside else (tmp_path / "elsewhere")
    elsewhere.mkdir()
    write_container(elsewhere / "A.bps", "SCEN", {}, {"x": np.zeros(8, np.uint8)})
    os.symlink(elsewhere, root / "scenes")
    return root, manifest_over(root, {"A": {"scene": (root / "scenes" / "A.bps", "SCEN")}})


def test_verify_warns_about_links_out_of_the_dataset_and_strict_refuses(tmp_path):
    root, m = _dataset_with_linked_scenes(tmp_path, inside=False)
    rep = verify_manifest(m)
    assert rep.ok
    assert any("scenes/A.bps: resolves through a symlink" in w and "elsewhere" in w for w in rep.warnings)
    assert "warning: scenes/A.bps" in format_report(rep)
    rep = verify_manifest(m, strict=True)
    assert not rep.ok
    probs = [p for s in rep.scenes for f in s.files for p in f.problems]
    assert probs and "refused: --strict" in probs[0]


def test_a_file_two_scenes_list_keeps_its_warnings_in_both(tmp_path):
    """A file listed by two scenes is checked once; the second scene's copy of the result keeps
    the warnings (the report lists them once)."""
    root, _ = _dataset_with_linked_scenes(tmp_path, inside=False)
    scene = (root / "scenes" / "A.bps", "SCEN")
    rep = verify_manifest(manifest_over(root, {"A": {"scene": scene}, "B": {"scene": scene}}))
    got = {s.name: [w for f in s.files if f.role == "scene" for w in f.warnings] for s in rep.scenes}
    assert set(got) == {"A", "B"} and got["A"] == got["B"]
    assert len(got["A"]) == 1 and "resolves through a symlink" in got["A"][0]
    assert sum("resolves through a symlink" in w for w in rep.warnings) == 1


def test_links_inside_the_dataset_are_fine(tmp_path):
    root, m = _dataset_with_linked_scenes(tmp_path, inside=True)
    rep = verify_manifest(m, strict=True)
    assert rep.ok and not any("symlink" in w for w in rep.warnings)
    assert link_escape(root, root / "scenes" / "A.bps") is None


def test_loader_warns_once_about_a_link_out_of_the_dataset(tmp_path, caplog):
    from bps_runtime.scenes.loader import LoadFailure, SceneLoader, SceneSource

    root, _ = _dataset_with_linked_scenes(tmp_path, inside=False)

    def reader(path):
        raise InputError(path, "stop here")

    ld = SceneLoader(renderer=None, threads=1, reader=reader)
    src = SceneSource("A", str(root / "scenes" / "A.bps"))
    try:
        with caplog.at_level(logging.WARNING, logger="bps_runtime.scenes.loader"):
            for _ in range(2):
                assert isinstance(ld.submit(src).result(), LoadFailure)
    finally:
        ld.close()
    warns = [r.getMessage() for r in caplog.records if "symlink" in r.getMessage()]
    assert len(warns) == 1 and "outside the dataset folder" in warns[0]


def _split(tmp_path, pattern):
    d = tmp_path / "pointnav" / "train"
    (d / "content").mkdir(parents=True)
    ep = {"episode_id": "0", "scene_id": "gibson/A.glb", "start_position": [0, 0, 0],
          "start_rotation": [0, 0, 0, 1], "info": {"geodesic_distance": 1.0},
          "goals": [{"position": [1, 0, 0], "radius": 0.2}]}
    (d / "content" / "A.json.gz").write_bytes(gzip.compress(json.dumps({"episodes": [ep]}).encode()))
    split = d / "train.json.gz"
    doc = {"episodes": []}
    if pattern is not None:
        doc["content_scenes_path"] = pattern
    split.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return split


@pytest.mark.parametrize("pattern", [None, "{data_path}/content/{scene}.json.gz"])
def test_content_scenes_path_default_and_habitat_form_read(tmp_path, pattern):
    assert len(read_pointnav_dataset(_split(tmp_path, pattern))) == 1


@pytest.mark.parametrize("pattern,msg", [
    ("{data_path.__class__}/content/{scene}.json.gz", "only the fields"),
    ("{data_path[0]}/content/{scene}.json.gz", "only the fields"),
    ("{data_path!r}/content/{scene}.json.gz", "only the fields"),
    ("{data_path:>300}/content/{scene}.json.gz", "only the fields"),
    ("{home}/content/{scene}.json.gz", "only the fields"),
    ("{data_path}/../../../../../../etc/{scene}", "outside the episode dataset folder"),
    ("/etc/{scene}", "outside the episode dataset folder"),
    ("{data_path}/content/{scene}/../../x.json.gz", "start of the file name"),
    ("{data_path}/content/{scene}{scene}.json.gz", "more than once"),
    ("{data_path/content/{scene}.json.gz", "bad content_scenes_path"),
])
def test_content_scenes_path_is_refused_outside_its_rules(tmp_path, pattern, msg):
    with pytest.raises(InputError, match=msg):
        read_pointnav_dataset(_split(tmp_path, pattern))


def test_content_scenes_dir_allows_a_sibling_folder_of_the_split(tmp_path):
    split = tmp_path / "pointnav" / "train" / "train.json.gz"
    d, post = content_scenes_dir(split, "{data_path}/../shared_content/{scene}.json.gz")
    assert post == ".json.gz" and d.resolve() == (tmp_path / "pointnav" / "shared_content").resolve()


def test_verify_cli_strict_exits_non_zero(tmp_path):
    from click.testing import CliRunner

    from cli.main import main

    _, m = _dataset_with_linked_scenes(tmp_path, inside=False)
    r = CliRunner().invoke(main, ["verify", str(m)])
    assert r.exit_code == 0 and "warning: scenes/A.bps: resolves through a symlink" in r.output
    r = CliRunner().invoke(main, ["verify", str(m), "--strict"])
    assert r.exit_code == 1 and "refused: --strict" in r.output
