"""Input type from magic bytes (extension only a hint): Detour sets and single tiles under any
name, tile-cache files refused with a typed error, content / extension mismatches named."""
from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from click.testing import CliRunner

from bps_assets.errors import FileTypeMismatchError, NavError, UnsupportedFormatError
from bps_assets.hashing import sha256_file
from bps_assets.nav.detour import import_detour, read_detour_navmesh
from bps_assets.nav.sources import navmesh_from_file, open_navmesh
from bps_assets.readers import load
from bps_assets.readers.detect import detect_kind, resolve_kind
from cli.main import main

ASSETS = Path(__file__).resolve().parents[1].parent / "shared" / "assets"
VANGOGH = ASSETS / "habitat_test_scenes_navmesh" / "van-gogh-room.navmesh"
MESH2 = ASSETS / "navmesh" / "go-detour" / "mesh2.bin"  # Recast Demo's tiled all_tiles format
GLB = ASSETS / "habitat-sim" / "scenes" / "simple_room.glb"
PLY = ASSETS / "trimesh" / "tet.ply"
OBJ = ASSETS / "trimesh" / "joined_tetrahedra.obj"

pytestmark = pytest.mark.skipif(not ASSETS.is_dir(), reason="../shared/assets absent")


def copy(src: Path, dst: Path) -> Path:
    dst.write_bytes(src.read_bytes())
    return dst


def single_tile(tmp_path: Path) -> Path:
    """The DNAV tile of the van Gogh set, alone (what dtCreateNavMeshData returns)."""
    data = VANGOGH.read_bytes()
    size = struct.unpack_from("<i", data, 44)[0]
    p = tmp_path / "vangogh_tile.bin"
    p.write_bytes(data[48: 48 + size])
    return p


def tile_cache(tmp_path: Path) -> Path:
    # TileCacheSetHeader: magic 'TSET', version 1, numTiles, dtNavMeshParams, dtTileCacheParams
    p = tmp_path / "all_tiles_tilecache.bin"
    p.write_bytes(b"TEST" + struct.pack("<ii3fffii", 1, 0, 0, 0, 0, 48.0, 48.0, 64, 4096)
                  + bytes(64))
    return p


def run(*args):
    r = CliRunner().invoke(main, [str(a) for a in args])
    return r.exit_code, r.output


def test_kinds_from_content():
    assert detect_kind(VANGOGH) == "detour-set" and detect_kind(MESH2) == "detour-set"
    assert detect_kind(GLB) == "glb" and detect_kind(PLY) == "ply" and detect_kind(OBJ) == "obj"
    gltf = next((ASSETS / "gltf-transform").rglob("*.gltf"))
    assert detect_kind(gltf) == "gltf"


def test_single_tile_and_tiled_bin_files_import(tmp_path):
    tile = single_tile(tmp_path)
    assert detect_kind(tile) == "detour-tile"
    m = read_detour_navmesh(tile)
    ref = read_detour_navmesh(VANGOGH)
    assert m.version == 0 and len(m.tiles) == 1 and m.poly_count == ref.poly_count
    assert m.area() == pytest.approx(ref.area())
    a = navmesh_from_file(tile)
    assert a.navigable_area == pytest.approx(import_detour(VANGOGH).navigable_area)
    # an import records which file, not only its name (``navmesh --overwrite``)
    assert a.source == tile.name and a.source_file["path"] == os.path.realpath(tile)
    assert a.header()["source_file"]["sha256"] == sha256_file(tile)[0]
    # Recast Demo's tiled set under its own name, through the CLI
    out = tmp_path / "out"
    code, text = run("navmesh", MESH2, tile, "-o", out, "--json")
    assert code == 0, text
    assert (out / "mesh2.navmesh.bps").is_file() and (out / "vangogh_tile.navmesh.bps").is_file()
    code, text = run("nav", "info", tile)
    assert code == 0 and "detour set: version 0, 1 tiles" in text


def test_extension_is_only_a_hint(tmp_path):
    # a habitat navmesh named .dat and a GLB named .scene still work
    nav = open_navmesh(copy(VANGOGH, tmp_path / "room.dat"))
    assert nav.navigable_area > 8
    doc = load(copy(GLB, tmp_path / "room.scene"))
    assert doc.meshes


@pytest.mark.parametrize("src,name,content,ext", [
    (GLB, "scene.navmesh", "binary glTF", "Detour navmesh set"),
    (VANGOGH, "room.glb", "Detour navmesh set", "binary glTF"),
    (PLY, "mesh.obj", "PLY", "OBJ text"),
    (OBJ, "mesh.ply", "OBJ text", "PLY"),
    (VANGOGH, "room.gltf", "Detour navmesh set", "glTF JSON"),
])
def test_mismatch_names_both(tmp_path, src, name, content, ext):
    p = copy(src, tmp_path / name)
    with pytest.raises(FileTypeMismatchError) as e:
        resolve_kind(p)
    msg = str(e.value)
    assert str(p) in msg and content in msg and ext in msg
    code, text = run("navmesh", p, "-o", tmp_path / "out")
    assert code != 0 and content in text and ext in text and "Traceback" not in text
    assert len(text.strip().splitlines()) == 1


def test_unrecognised_bytes_are_not_called_what_the_extension_says(tmp_path):
    """`bps-assets episodes NAV garbage.glb`: no 'glTF' magic, so not called a binary glTF."""
    bad = tmp_path / "bad.glb"
    bad.write_text("garbage\n")
    with pytest.raises(NavError) as e:
        open_navmesh(bad)
    msg = str(e.value)
    assert str(bad) in msg and "not a binary glTF" in msg and "'.glb'" in msg and "b'garbage\\n'" in msg
    assert "is a binary glTF" not in msg
    (tmp_path / "empty.ply").write_bytes(b"")
    with pytest.raises(NavError, match="not a PLY .*(it is empty)"):
        open_navmesh(tmp_path / "empty.ply")
    # a real one is still named by its content
    with pytest.raises(NavError, match="is a binary glTF .*, not a navmesh"):
        open_navmesh(copy(GLB, tmp_path / "room.glb"))
    code, text = run("episodes", VANGOGH, bad, "-o", tmp_path / "out", "--split", "train", "--per-scene", 2)
    assert code != 0 and "not a binary glTF" in text and "garbage" in text and "Traceback" not in text


def test_tile_cache_is_refused_with_a_typed_error(tmp_path):
    p = tile_cache(tmp_path)
    for fn in (read_detour_navmesh, navmesh_from_file, open_navmesh, load):
        with pytest.raises(UnsupportedFormatError, match="tile-cache, build the navmesh first"):
            fn(p)
    code, text = run("navmesh", p, "-o", tmp_path / "out")
    assert code != 0 and "tile-cache" in text and len(text.strip().splitlines()) == 1
    assert not (tmp_path / "out" / "all_tiles_tilecache.navmesh.bps").exists()


def test_scene_readers_refuse_navmeshes_and_queries_refuse_scenes(tmp_path):
    with pytest.raises(UnsupportedFormatError, match="not a scene; import it"):
        load(copy(VANGOGH, tmp_path / "x.bin"))
    with pytest.raises(NavError, match="not a navmesh: build one"):
        open_navmesh(GLB)
    code, text = run("nav", "info", GLB)
    assert code != 0 and "not a navmesh" in text
