"""The three semantic features together, on synth annotated scans converted by the real pipeline:
the renderers' semantic sensor (loaded through the scene loader's default reader) against an
independent ray cast of the ANNOTATION mesh (embreex called directly on synth's annotated
geometry with its per-face ids, and on the annotation files as read back), and the object table
through the env's ``CategoryTable`` with the HM3D ObjectNav vocabulary."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from bps_assets.packed_scene import read_packed_scene
from bps_assets.readers.semantic_categories import objectnav_hm3d
from bps_assets.readers.semantic_files import find_semantic, read_annotation
from bps_runtime.render import RenderOptions, make_renderer
from bps_runtime.render.semantic import UNKNOWN, CategoryTable
from semantic_fixtures import annotation_mesh, synth_semantic_scene
from test_runtime_semantic import ENGINE_IDS, ENGINES, RES, boundary, poses, reference_ids

CASES = [("gibson", "texture"), ("gibson", "vertex"), ("mp3d", "")]


@pytest.fixture(scope="module", params=CASES, ids=[f"{a}-{b}".strip("-") for a, b in CASES])
def converted(request, tmp_path_factory):
    """(packed path, PackedScene, poses, reference ids from synth's annotation geometry,
    reference ids from the annotation files as read back)."""
    import embreex  # noqa: F401  (a dependency the test extra installs: missing is a failure, not a skip)
    layout, colours = request.param
    out, info, _ = synth_semantic_scene(tmp_path_factory.mktemp(layout), layout, colours or "texture")
    ps = read_packed_scene(out)
    pos, yaw = poses(info)
    apos, aidx, aids = annotation_mesh(out, layout, info.name)
    ref = reference_ids(SimpleNamespace(positions=apos, indices=aidx, tri_object=aids), pos, yaw)
    return out, ps, pos, yaw, ref, _file_reference(info, out, pos, yaw)


def _file_reference(info, packed, pos, yaw):
    """Ids per pixel from the annotation files themselves (HM3D: the texel or vertex colour at
    the hit, through ``Annotation.ids_at``; MP3D: the PLY face's id)."""
    ann = read_annotation(find_semantic(info.path))
    m = np.asarray(read_packed_scene(packed, sections=["tri_object"]).header["frame"]["matrix"], np.float64)
    p = (ann.positions.astype(np.float64) @ m[:3, :3].T + m[:3, 3]).astype(np.float32)
    return reference_ids(SimpleNamespace(positions=p, indices=ann.indices), pos, yaw, ids_at=ann.ids_at)


def _agrees(sem, ref, what):
    same = sem == ref
    assert same.mean() >= 0.995, (what, same.mean())
    assert boundary(ref)[~same].all(), f"{what}: a pixel away from every object boundary has another id"


@pytest.mark.parametrize("backend,kw", ENGINES, ids=ENGINE_IDS)
def test_sensor_on_a_converted_scan_equals_a_ray_cast_of_the_annotation(converted, backend, kw):
    from bps_runtime.scenes.loader import LoadFailure, SceneLoader, SceneSource

    out, ps, pos, yaw, ref, ref_files = converted
    # the views are not vacuous: many objects, of the ObjectNav goal categories too
    assert (ref > 0).mean() > 0.9 and len(np.unique(ref)) >= 20
    _agrees(ref_files, ref, "the annotation files as read back")
    if backend == "warp":
        import warp  # noqa: F401  (a dependency the test extra installs: missing is a failure, not a skip)
    r = make_renderer(backend, RenderOptions(resolution=(RES, RES), threads=2), **kw)
    loader = SceneLoader(r, threads=1)  # the default reader: read_packed_scene of the real file
    try:
        loaded = loader.submit(SceneSource("s", str(out)), quiet=True).result()
    finally:
        loader.close()
    if isinstance(loaded, LoadFailure):
        raise loaded.error
    np.testing.assert_array_equal(loaded.shading.tri_object, ps.tri_object)
    r.attach(3, loaded.shading, loaded.accel)
    frame = r.render(np.full(len(pos), 3), pos, yaw, ("depth", "semantic"))
    sem = frame["semantic"].numpy()[..., 0]
    _agrees(sem, ref, "synth's annotation mesh")
    _agrees(sem, ref_files, "the annotation files")
    depth = frame["depth"].numpy()[..., 0]
    assert (depth[sem > 0] > 0).all()   # the same rays as depth: an id only where depth hit
    # with RGB in the same frame (the shading paths), the same ids and depths
    both = r.render(np.full(len(pos), 3), pos, yaw, ("semantic", "rgb", "depth"))
    np.testing.assert_array_equal(both["semantic"].numpy()[..., 0], sem)
    np.testing.assert_array_equal(both["depth"].numpy()[..., 0], depth)


def test_category_table_with_a_real_object_table(converted):
    """``CategoryTable`` over the packed scene's ``semantics`` and habitat's six ObjectNav
    categories (task ids from data_manifests/): each pixel's category is its object's."""
    out, ps, pos, yaw, ref, _ = converted
    task = objectnav_hm3d()
    vocab = sorted(task, key=task.get)
    assert [task[c] for c in vocab] == list(range(len(vocab)))
    table = ps.semantics
    ct = CategoryTable(2, vocabulary=vocab)
    ct.set(1, table)
    frames = torch.from_numpy(ref[..., None].astype(np.int32))
    cats = ct.lookup(torch.ones(len(ref), dtype=torch.int64), frames).numpy()[..., 0]
    name = {int(i): table.category_name(k) for k, i in enumerate(table.ids)}
    want = np.vectorize(lambda i: task.get(name.get(int(i), ""), UNKNOWN))(ref)
    np.testing.assert_array_equal(cats, want)
    seen = {vocab[c] for c in np.unique(cats) if c >= 0}
    assert {"chair", "bed"} <= seen and len(seen) >= 4, seen   # goal objects are in view, mapped
    assert (cats[ref == 0] == UNKNOWN).all() and (cats == UNKNOWN).mean() > 0.3  # walls, floors
    ct.clear(1)
    assert ct.lookup(torch.ones(len(ref), dtype=torch.int64), frames).eq(UNKNOWN).all()
