"""One check of a file against its manifest record (``bps_assets.hashing``): ``verify`` lists the
problem, a scene's load raises it (``bps_runtime.scenes.checks.check_files``), same words."""
from __future__ import annotations

import hashlib

import pytest

from bps_assets.errors import CorruptFileError
from bps_assets.hashing import recorded_hash_problem, recorded_size_problem
from bps_runtime.scenes.checks import Expected, check_files
from bps_runtime.scenes.loader import SceneSource


def test_the_load_raises_the_problem_verify_lists(tmp_path):
    scene, nav = tmp_path / "a.bps", tmp_path / "a.navmesh"
    scene.write_bytes(b"x" * 100)
    nav.write_bytes(b"n" * 50)
    sha = hashlib.sha256(b"n" * 50).hexdigest()
    ok = Expected(scene_size=100, navmesh_size=50, navmesh_sha256=sha)
    check_files(SceneSource("a", str(scene), str(nav), ok))
    assert recorded_size_problem(scene, 100) == (100, None) and recorded_hash_problem(nav, sha) is None

    scene.write_bytes(b"x" * 60)   # truncated
    size, problem = recorded_size_problem(scene, 100)
    assert (size, problem) == (60, "size 60 != recorded 100 (truncated or replaced?)")
    with pytest.raises(CorruptFileError) as e:
        check_files(SceneSource("a", str(scene), str(nav), ok))
    assert e.value.detail == problem and e.value.path == str(scene)

    scene.write_bytes(b"x" * 100)
    nav.write_bytes(b"m" * 50)     # same size, other bytes
    problem = recorded_hash_problem(nav, sha)
    assert problem == "sha256 differs from the manifest (corrupt or replaced)"
    with pytest.raises(CorruptFileError) as e:
        check_files(SceneSource("a", str(scene), str(nav), ok))
    assert e.value.detail == problem and e.value.path == str(nav)

    assert recorded_size_problem(tmp_path / "gone", 1) == (None, "missing")
