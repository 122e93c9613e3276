"""bps_assets.synth: layouts and names, determinism, Z-up geometry checked against the returned
ground truth (floor area, closed room, stairs, table tops, shelves) by parsing the written GLBs."""
from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from bps_assets import synth
from bps_assets.errors import ConfigError, OutputExistsError
from test_writers_glb import accessor_array, image_bytes, read_glb

NOISE = 0.0051  # vertex noise bound (2 x 2.5 mm) plus rounding


@pytest.fixture(scope="module")
def gib(tmp_path_factory):
    root = tmp_path_factory.mktemp("synth")
    return root, synth.generate(root, "gibson", scenes=4, seed=0)


def _load(path):
    """Per-triangle arrays of a GLB: vertices [T,3,3] (file frame), material name per triangle."""
    gltf, binary = read_glb(path)
    tris, mats = [], []
    for pr in gltf["meshes"][0]["primitives"]:
        pos = accessor_array(gltf, binary, pr["attributes"]["POSITION"])
        idx = accessor_array(gltf, binary, pr["indices"]).reshape(-1, 3)
        tris.append(pos[idx])
        mats += [gltf["materials"][pr["material"]]["name"]] * len(idx)
    return gltf, binary, np.concatenate(tris), np.array(mats)


def _to_habitat(p):
    return np.stack([p[..., 0], p[..., 2], -p[..., 1]], -1)


class _Rays:
    """Ray casting in the habitat frame on a written scene (embree)."""

    def __init__(self, tris_file_frame):
        from embreex import rtcore_scene as rtcs
        from embreex.mesh_construction import TriangleMesh

        self.scene = rtcs.EmbreeScene()
        TriangleMesh(self.scene, _to_habitat(tris_file_frame).astype(np.float32))

    def hit(self, origins, dirs):
        o = np.asarray(origins, np.float32).reshape(-1, 3)
        d = np.asarray(dirs, np.float32).reshape(-1, 3)
        d = d / np.linalg.norm(d, axis=1, keepdims=True)
        res = self.scene.run(o, d, output=1)
        t = np.where(res["geomID"] >= 0, res["tfar"], np.inf)
        with np.errstate(invalid="ignore"):
            return o + d * t[:, None], t


# ------------------------------------------------------------------------------ names, layouts

def test_scene_names_interleave_train_and_val():
    man = json.loads((synth.manifests_dir() / "gibson.json").read_text())["splits"]["tiny"]
    names = synth.scene_names("gibson", 12)
    assert [s for _, s in names[:2]] == ["train", "val"]
    assert sum(s == "train" for _, s in names) == 9 and sum(s == "val" for _, s in names) == 3
    assert [n for n, s in names if s == "train"] == man["train"][:9]
    assert [n for n, s in names if s == "val"] == man["val"][:3]
    # past the val list the train list continues, then test, then other manifest scenes
    full = synth.scene_names("gibson")
    assert len({n for n, _ in full}) == len(full)
    assert [n for n, s in full if s == "val"] == man["val"]
    mp = synth.scene_names("mp3d", 2)
    mman = json.loads((synth.manifests_dir() / "mp3d.json").read_text())["splits"]["benchmark"]
    assert mp == [(mman["train"][0], "train"), (mman["val"][0], "val")]
    with pytest.raises(ConfigError):
        synth.scene_names("gibson", len(full) + 1)
    with pytest.raises(ConfigError):
        synth.scene_names("replica", 1)


def test_layout_paths_and_no_stray_files(gib, tmp_path):
    root, infos = gib
    files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    assert files == sorted(f"gibson/{i.name}.glb" for i in infos)
    assert all(i.path == (root / i.relpath).resolve() and i.bytes == i.path.stat().st_size for i in infos)
    mp = synth.generate(tmp_path, "mp3d", scenes=2)
    files = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert files == sorted(f"mp3d/{i.name}/{i.name}.glb" for i in mp)


def test_features_by_position(gib):
    _, infos = gib
    assert [len(i.storeys) for i in infos] == [1, 2, 1, 2]
    assert [i.closed_room is not None for i in infos] == [True, False, False, True]
    assert [i.stairs is not None for i in infos] == [False, True, False, True]
    for i in infos:
        assert 3 <= len([r for r in i.rooms if r.storey == 0]) <= 12
        kinds = {f.kind for f in i.furniture}
        assert "table" in kinds and kinds & {"chair", "box", "sofa", "cabinet"}
        assert i.textures >= 4
    assert any(f.kind == "platform" for i in infos for f in i.furniture)
    assert any(f.kind == "shelf" for i in infos for f in i.furniture)


# ------------------------------------------------------------------------------ determinism

def test_deterministic_for_a_seed(gib, tmp_path):
    root, infos = gib
    again = synth.generate(tmp_path / "a", "gibson", scenes=2, seed=0)
    for a, b in zip(infos, again):
        assert a.path.read_bytes() == b.path.read_bytes()
    # by name: the same scene, whatever else is asked for
    named = synth.generate(tmp_path / "n", "gibson", scenes=[infos[3].name, "Zzyzx"], seed=0)
    assert named[0].path.read_bytes() == infos[3].path.read_bytes() and named[0].split == "train"
    assert named[1].split == "other" and named[1].path.name == "Zzyzx.glb"
    for bad in ([], ["a/b"], ["x", "x"], True):
        with pytest.raises(ConfigError):
            synth.generate(tmp_path / "bad", "gibson", scenes=bad)
    other = synth.generate(tmp_path / "b", "gibson", scenes=1, seed=1)
    assert other[0].path.read_bytes() != infos[0].path.read_bytes()
    # describe() recomputes the ground truth without writing
    d = synth.describe("gibson", infos[1].name, seed=0, size="small")
    assert d.path is None
    for f in ("triangles", "vertices", "floor_area", "storeys", "rooms", "closed_room", "furniture",
              "stairs", "bounds", "split"):
        assert getattr(d, f) == getattr(infos[1], f), f


# ------------------------------------------------------------------------------ geometry

def test_z_up_extents_counts_and_noise(gib):
    _, infos = gib
    for info in infos:
        gltf, binary, tris, mats = _load(info.path)
        assert len(tris) == info.triangles
        assert 20_000 <= info.triangles <= 45_000
        lo, hi = tris.reshape(-1, 3).min(0), tris.reshape(-1, 3).max(0)
        top = info.storeys[-1][1]
        # Z is up: the vertical extent is the storeys' height; habitat bounds are (x, z, -y)
        assert lo[2] == pytest.approx(0.0, abs=NOISE) and hi[2] == pytest.approx(top, abs=NOISE)
        (bx0, by0, bz0), (bx1, by1, bz1) = info.bounds
        assert lo[0] == pytest.approx(bx0, abs=NOISE) and hi[0] == pytest.approx(bx1, abs=NOISE)
        assert -hi[1] == pytest.approx(bz0, abs=NOISE) and -lo[1] == pytest.approx(bz1, abs=NOISE)
        assert by1 == pytest.approx(top)
        # floor area: up-facing floor triangles at a storey's floor height
        n = np.cross(tris[:, 1] - tris[:, 0], tris[:, 2] - tris[:, 0])
        area = 0.5 * np.linalg.norm(n, axis=1)
        z = tris[:, :, 2].mean(1)
        at_floor = np.zeros(len(tris), bool)
        for fy, _ in info.storeys:
            at_floor |= np.abs(z - fy) < NOISE
        floor = np.char.startswith(mats, "floor_") & (n[:, 2] > 0) & at_floor
        assert area[floor].sum() == pytest.approx(info.floor_area, rel=0.01)
        assert 40 <= info.floor_area <= 100
        # scan-like: small triangles, vertices moved by a few mm, never more than the bound
        assert np.median(area) < 0.05
        fz = tris[floor][:, :, 2].ravel()
        dev = np.abs(fz - np.round(fz / 0.05) * 0.05)
        assert 0.0005 < dev.std() < 0.003 and dev.max() <= NOISE
        # colours on every vertex, uvs wherever a texture is used
        for pr in gltf["meshes"][0]["primitives"]:
            textured = "baseColorTexture" in gltf["materials"][pr["material"]]["pbrMetallicRoughness"]
            assert {"POSITION", "COLOR_0"} | ({"TEXCOORD_0"} if textured else set()) == set(pr["attributes"])


def test_textures_are_embedded_png_and_jpeg(gib):
    _, infos = gib
    gltf, binary = read_glb(infos[0].path)
    mimes = set()
    for i in range(len(gltf["images"])):
        data, mime = image_bytes(gltf, binary, i)
        mimes.add(mime)
        im = Image.open(io.BytesIO(data))
        assert im.size[0] == im.size[1] and im.size[0] in (256, 512)
        assert np.asarray(im.convert("L")).std() > 3  # a pattern, not a flat colour
    assert mimes == {"image/png", "image/jpeg"}
    assert len(gltf["images"]) == infos[0].textures
    untextured = [m for m in gltf["materials"] if "baseColorTexture" not in m["pbrMetallicRoughness"]]
    assert all(m["pbrMetallicRoughness"]["baseColorFactor"] != [1, 1, 1, 1] for m in untextured)


def test_closed_room_is_sealed_and_open_rooms_are_not(gib):
    _, infos = gib
    info = infos[0]
    _, _, tris, _ = _load(info.path)
    rays = _Rays(tris)
    rng = np.random.default_rng(0)
    d = rng.normal(size=(4000, 3))
    for room in info.rooms:
        if room.storey != 0 or room.hall:
            continue
        eye = np.array(room.free_point) + [0, 1.0, 0]
        pts, t = rays.hit(np.repeat(eye[None], len(d), 0), d)
        r = room.rect
        inside = ((pts[:, 0] >= r.xmin - 0.01) & (pts[:, 0] <= r.xmax + 0.01) & (pts[:, 2] >= r.zmin - 0.01)
                  & (pts[:, 2] <= r.zmax + 0.01) & (pts[:, 1] >= room.floor_y - 0.01)
                  & (pts[:, 1] <= room.ceiling_y + 0.01))
        if room.closed:
            assert room.id == info.closed_room and room.doors == 0
            assert np.isfinite(t).all() and inside.all()
        else:
            assert room.doors >= 1
            assert (~inside).any()  # something outside the room is seen through a door


def test_stairs_rise_and_table_tops_and_shelves(gib):
    _, infos = gib
    info = infos[1]
    st = info.stairs
    assert st.rise <= 0.2 and st.n_steps * st.rise == pytest.approx(st.y1, abs=1e-4)
    assert st.y1 == pytest.approx(info.storeys[1][0])
    _, _, tris, _ = _load(info.path)
    rays = _Rays(tris)
    # along the flight's centre line, seen from under the upper ceiling through the stairwell:
    # heights climb from the first tread to the last in rises <= 0.2 m
    cx = (st.rect.xmin + st.rect.xmax) / 2
    assert st.rect.contains(cx, st.bottom[2] - 0.5) and not st.rect.contains(cx, st.bottom[2])
    zs = np.linspace(st.rect.zmax - 0.02, st.rect.zmin + 0.02, 400)  # habitat -z is the climbing direction
    o = np.stack([np.full_like(zs, cx), np.full_like(zs, info.storeys[1][1] - 0.05), zs], 1)
    pts, t = rays.hit(o, np.tile([0, -1, 0], (len(zs), 1)))
    assert np.isfinite(t).all()
    h = pts[:, 1]
    assert h[0] == pytest.approx(st.rise, abs=NOISE) and h[-1] == pytest.approx(st.y1 - st.rise, abs=NOISE)
    assert np.all(np.diff(h) > -NOISE) and np.diff(h).max() <= 0.2
    assert len(np.unique(np.round(h / st.rise))) == st.n_steps - 1
    for p, y in ((st.bottom, st.y0), (st.top, st.y1)):
        pts, _ = rays.hit([p[0], y + 1.0, p[2]], [0, -1, 0])
        assert pts[0, 1] == pytest.approx(y, abs=NOISE)
        up, _ = rays.hit([p[0], y + 0.1, p[2]], [0, 1, 0])
        assert up[0, 1] - y > 1.5  # head room
    # table tops are where the ground truth says, with a too-low gap under them
    for tbl in info.table_tops:
        c = [(tbl.rect.xmin + tbl.rect.xmax) / 2, 0, (tbl.rect.zmin + tbl.rect.zmax) / 2]
        room = info.rooms[tbl.room]
        pts, _ = rays.hit([c[0], tbl.top_y + 0.3, c[2]], [0, -1, 0])
        assert pts[0, 1] == pytest.approx(tbl.top_y, abs=NOISE)
        pts, _ = rays.hit([c[0], room.floor_y + 0.05, c[2]], [0, 1, 0])
        assert pts[0, 1] == pytest.approx(tbl.top_y - 0.04, abs=NOISE)  # the top's underside
    # shelves leave agent-height (1.5 m) clearance over walkable floor
    for sh in (f for f in info.furniture if f.kind == "shelf"):
        c = [(sh.rect.xmin + sh.rect.xmax) / 2, info.rooms[sh.room].floor_y + 0.3, (sh.rect.zmin + sh.rect.zmax) / 2]
        up, _ = rays.hit(c, [0, 1, 0])
        down, _ = rays.hit(c, [0, -1, 0])
        assert down[0, 1] == pytest.approx(info.rooms[sh.room].floor_y, abs=NOISE)
        assert up[0, 1] - down[0, 1] >= 1.75 and up[0, 1] < sh.top_y - 0.02  # hits the board's underside


def test_gibson_size_matches_a_real_scan():
    infos = [synth.describe("gibson", n, 0, "gibson") for n, _ in synth.scene_names("gibson", 2)]
    for i in infos:
        assert 540_000 <= i.triangles <= 700_000
        assert 125 <= i.floor_area <= 175


@pytest.mark.slow
def test_gibson_size_scene_written(tmp_path):
    info = synth.generate(tmp_path, "gibson", scenes=1, size="gibson")[0]
    gltf, binary = read_glb(info.path)
    assert sum(gltf["accessors"][p["indices"]]["count"] for p in gltf["meshes"][0]["primitives"]) == 3 * info.triangles
    for k in range(len(gltf["images"])):
        data, mime = image_bytes(gltf, binary, k)
        assert mime == "image/jpeg" and Image.open(io.BytesIO(data)).size == (2048, 2048)


# ------------------------------------------------------------------------------ overwrite, readers, CLI

def test_no_overwrite_without_flag(gib, tmp_path):
    first = synth.generate(tmp_path, "gibson", scenes=1)
    before = first[0].path.read_bytes()
    with pytest.raises(OutputExistsError):
        synth.generate(tmp_path, "gibson", scenes=2)
    # checked before writing anything: the second scene was not written either
    assert not (tmp_path / synth.scene_relpath("gibson", synth.scene_names("gibson", 2)[1][0])).exists()
    again = synth.generate(tmp_path, "gibson", scenes=1, seed=5, overwrite=True)
    assert again[0].path.read_bytes() != before
    with pytest.raises(ConfigError):
        synth.generate(tmp_path, "gibson", scenes=0)
    with pytest.raises(ConfigError):
        synth.generate(tmp_path, "gibson", scenes=1, size="huge")


def test_readers_load_round_trip(gib):
    from bps_assets import readers
    info = gib[1][1]
    doc = readers.load(info.path)
    assert doc.triangle_count == info.triangles
    lo, hi = doc.bounds()
    assert lo[2] == pytest.approx(0, abs=NOISE) and hi[2] == pytest.approx(info.storeys[-1][1], abs=NOISE)
    assert len(doc.textures) == info.textures and len(doc.materials) == info.materials


def test_cli(tmp_path):
    from click.testing import CliRunner

    from cli.main import main

    r = CliRunner().invoke(main, ["synth", str(tmp_path), "--layout", "mp3d", "--scenes", "2"])
    assert r.exit_code == 0, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 4 and lines[0].startswith("mp3d/") and "tris" in lines[0]
    assert "2 scenes" in lines[-2] and lines[-1].startswith("preprocess them: bps-assets preprocess")
    r = CliRunner().invoke(main, ["synth", str(tmp_path), "--layout", "mp3d", "--scenes", "2"])
    assert r.exit_code == 0 and "2 scene(s) already in" in r.output  # kept, none added (issue 25)
    r = CliRunner().invoke(main, ["synth", str(tmp_path), "--layout", "mp3d", "-n", "2", "--overwrite", "--json"])
    assert r.exit_code == 0
    doc = json.loads(r.output)
    assert [s["relpath"] for s in doc["scenes"]] == [l.split()[0] for l in lines[:2]]
    assert all(Path(s["path"]).is_file() for s in doc["scenes"])
    r = CliRunner().invoke(main, ["synth", str(tmp_path), "--layout", "habitat"])
    assert r.exit_code == 2


def _walk_grid(rays, info, storey, res=0.05):
    """2.5-D walkability of one storey, seen from 1 m above its floor: (heights, walkable, grid origin).

    A cell is walkable when its surface has >= 1.5 m of head room and is >= 0.1 m (agent radius)
    from any cell without a surface; neighbours connect when their heights differ by <= 0.2 m.
    """
    from scipy import ndimage

    (x0, _, z0), (x1, _, z1) = info.bounds
    xs = np.arange(x0 + res / 2, x1, res)
    zs = np.arange(z0 + res / 2, z1, res)
    X, Z = np.meshgrid(xs, zs)
    top = info.storeys[storey][0] + 1.0  # under door lintels, over table tops
    o = np.stack([X.ravel(), np.full(X.size, top), Z.ravel()], 1)
    down, _ = rays.hit(o, np.tile([0, -1, 0], (X.size, 1)))
    h = np.where(np.isfinite(down[:, 1]), down[:, 1], np.nan)
    o2 = np.stack([X.ravel(), np.nan_to_num(h) + 0.02, Z.ravel()], 1)
    up, t = rays.hit(o2, np.tile([0, 1, 0], (X.size, 1)))
    ok = np.isfinite(h) & (np.nan_to_num(t, posinf=9) >= 1.5 - 0.02)
    h, ok = h.reshape(X.shape), ok.reshape(X.shape)
    ok &= ~ndimage.binary_dilation(~np.isfinite(h), iterations=2)
    return h, ok, (x0, z0, res)


def _components(h, ok, climb=0.2):
    """Label 4-connected components of walkable cells joined by height steps <= climb."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    idx = np.arange(h.size).reshape(h.shape)
    rows, cols = [], []
    for a, b in ((np.s_[:, :-1], np.s_[:, 1:]), (np.s_[:-1, :], np.s_[1:, :])):
        m = ok[a] & ok[b] & (np.abs(h[a] - h[b]) <= climb)
        rows.append(idx[a][m])
        cols.append(idx[b][m])
    r, c = np.concatenate(rows), np.concatenate(cols)
    g = coo_matrix((np.ones(len(r)), (r, c)), shape=(h.size, h.size))
    _, lab = connected_components(g, directed=False)
    return np.where(ok.ravel(), lab, -1).reshape(h.shape)


def test_rooms_are_walkable_and_connected_through_doors(gib):
    _, infos = gib
    for info in infos:
        _, _, tris, _ = _load(info.path)
        rays = _Rays(tris)
        for s in range(len(info.storeys)):
            h, ok, (gx, gz, res) = _walk_grid(rays, info, s)
            lab = _components(h, ok)

            def at(p):
                return lab[int((p[2] - gz) / res), int((p[0] - gx) / res)]

            rooms = [r for r in info.rooms if r.storey == s]
            open_ = [at(r.free_point) for r in rooms if not r.closed]
            assert min(open_) >= 0 and len(set(open_)) == 1, (info.name, s, open_)
            for r in rooms:
                if r.closed:
                    assert at(r.free_point) >= 0 and at(r.free_point) != open_[0]
            if info.stairs is not None:  # both ends of the flight join that storey's rooms
                assert at(info.stairs.bottom if s == 0 else info.stairs.top) == open_[0]
            for tbl in (f for f in info.furniture if f.kind == "table" and f.storey == s):
                c = ((tbl.rect.xmin + tbl.rect.xmax) / 2, 0, (tbl.rect.zmin + tbl.rect.zmax) / 2)
                assert at(c) >= 0 and at(c) != open_[0]  # a walkable island of its own
            for pl in (f for f in info.furniture if f.kind == "platform" and f.storey == s):
                c = ((pl.rect.xmin + pl.rect.xmax) / 2, 0, (pl.rect.zmin + pl.rect.zmax) / 2)
                assert at(c) == at(info.rooms[pl.room].free_point)  # one low step up: part of its room's floor


def test_impossible_floor_plan_is_a_config_error():
    # rooms larger than the whole floor never split into two cells: no plan can be made
    from bps_assets.synth.layout import make_plan

    with pytest.raises(ConfigError, match="no floor plan of 40 m\\^2"):
        make_plan(np.random.default_rng(0), 40.0, 1e6, False, True)


def test_synth_semantic_prints_preprocess_with_objectnav_agent(tmp_path):
    """Issue 35 item 7: the printed command builds navmeshes for ObjectNav's agent."""
    from click.testing import CliRunner

    from bps_runtime.tasks.objectnav import DEFAULTS as OBJECTNAV
    from cli.main import main

    r = CliRunner().invoke(main, ["synth", str(tmp_path / "ds"), "-n", "1", "--semantic"])
    assert r.exit_code == 0, r.output
    cmd = next(ln for ln in r.output.splitlines() if ln.startswith("preprocess them: "))
    assert cmd.endswith(f"--agent-radius {OBJECTNAV.agent_radius} --agent-height {OBJECTNAV.agent_height}"), cmd
    assert "docs/OBJECTNAV.md" in r.output
    # InstanceImageNav refuses ObjectNav's navmeshes: its own agent's command, into its own folder
    from bps_runtime.tasks import task_spec

    iin = task_spec("instance_imagenav").defaults
    (line,) = [ln for ln in r.output.splitlines() if ln.startswith("  for instance_imagenav (its agent): ")]
    assert line.endswith(f"--agent-radius {iin.agent_radius} --agent-height {iin.agent_height}"), line
    assert "-instance_imagenav-out" in line and (iin.agent_radius, iin.agent_height) != (
        OBJECTNAV.agent_radius, OBJECTNAV.agent_height)
    r = CliRunner().invoke(main, ["synth", str(tmp_path / "plain"), "-n", "1"])
    assert "--agent-radius" not in r.output


def test_scene_count_takes_the_integer_rule_of_every_setting(tmp_path):
    """``scenes`` as a count follows ``errors.is_int``: a numpy integer is a count (it was
    refused), a bool or a string is not."""
    assert [s.name for s in synth.generate(tmp_path / "a", scenes=np.int64(1))] == \
        [s.name for s in synth.generate(tmp_path / "b", scenes=1)]
    for bad in (True, "2", 2.0, 0):
        with pytest.raises(ConfigError, match="scenes must be a positive integer"):
            synth.generate(tmp_path / "c", scenes=bad)


@pytest.mark.parametrize("layout", synth.LAYOUTS)
def test_semantic_pair_is_named_by_the_one_suffix_table(layout, tmp_path):
    """``synth.SEMANTIC_SUFFIXES`` names what write_hm3d / write_mp3d write, and what ``synth
    --semantic`` looks for beside a kept scan."""
    from bps_assets.synth import semantic as ssem
    from cli.cmd_synth import _annotated

    (info,) = synth.generate(tmp_path, layout, 1)
    assert not _annotated(tmp_path, layout, info.name)
    (ssem.write_mp3d if layout == "mp3d" else ssem.write_hm3d)(info.path, layout, info.name)
    stem = Path(info.path).name.split(".")[0]
    assert sorted(p.name for p in Path(info.path).parent.iterdir() if p != Path(info.path)) == \
        sorted(stem + s for s in synth.SEMANTIC_SUFFIXES[layout])
    assert _annotated(tmp_path, layout, info.name)
    # one file rule: the readers' (find_semantic) finds exactly the pair synth wrote
    from bps_assets.readers.semantic_files import find_semantic

    found = find_semantic(info.path)
    assert found is not None and found.format == synth.names.SEMANTIC_FORMAT[layout]
    assert [Path(found.mesh), Path(found.table)] == synth.semantic_paths(info.path, layout)
