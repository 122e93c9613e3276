"""The Warp renderer draws every agent of every resident scene in one launch, and tensors on its
own device go through without a host copy (the CUDA step's render stays sync-free)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import warp  # noqa: F401  (a dependency the test extra installs: missing is a failure, not a skip)

from bps_runtime.render import RenderOptions, build_shading_data, make_renderer  # noqa: E402
from cli.step_profile import count_ops  # noqa: E402
from runtime_scenes import room_scene  # noqa: E402

OPTS = RenderOptions(resolution=(12, 16))


def _warp_with_rooms(sizes):
    """A Warp renderer with one room per scene id 0..len(sizes)-1 (rooms of different sizes,
    so an agent drawn with another scene's table would see other walls)."""
    r = make_renderer("warp", OPTS)
    for sid, size in enumerate(sizes):
        s = room_scene(size)
        sd = build_shading_data(s)
        r.attach(sid, sd, r.prepare(sd, s.positions, s.indices))
    return r


def _poses(n, seed=0):
    rng = np.random.default_rng(seed)
    pos = torch.tensor(np.c_[rng.uniform(0.5, 4.5, n), rng.uniform(0.0, 0.5, n), rng.uniform(-3.5, -0.5, n)],
                       dtype=torch.float32)
    q = torch.tensor(rng.normal(size=(n, 4)))
    return pos, q


SIZES = [(5.0, 3.0, 4.0), (6.0, 2.5, 5.0), (7.0, 3.5, 4.5), (8.0, 3.0, 6.0)]


@pytest.mark.parametrize("scenes", [1, 4])
def test_one_launch_for_any_number_of_scenes_and_no_host_reads(scenes):
    r = _warp_with_rooms(SIZES[:scenes])
    n = 24
    sid = torch.arange(n) % scenes
    pos, q = _poses(n)
    r.render(sid, pos, q, ("depth", "rgb"))  # compile outside the count
    with count_ops() as c:
        r.render(sid, pos, q, ("depth", "rgb"))
    assert c.total("warp_launches") == 1
    # the CPU device reads the ids once for its precise residency check; nothing else reads back
    assert c.total("syncs") <= 1, c.syncs


def test_mixed_scenes_match_one_scene_at_a_time():
    r = _warp_with_rooms(SIZES)
    n = 16
    sid = torch.tensor([3, 0, 2, 1] * 4)
    pos, q = _poses(n, seed=1)
    both = r.render(sid, pos, q, ("depth", "rgb"))
    for s in range(4):
        m = (sid == s).nonzero().reshape(-1)
        alone = r.render(sid[m], pos[m], q[m], ("depth", "rgb"))
        assert torch.equal(alone["depth"], both["depth"][m])
        assert torch.equal(alone["rgb"], both["rgb"][m])
    # rooms differ, so the same pose in another scene sees other depths (the table is per agent)
    other = r.render((sid + 1) % 4, pos, q)["depth"]
    assert not torch.equal(other, both["depth"])


def test_host_and_device_inputs_give_the_same_pixels():
    r = _warp_with_rooms(SIZES[:2])
    n = 10
    pos, q = _poses(n, seed=2)
    sid = torch.arange(n) % 2
    dev = r.render(sid, pos, q, ("depth", "rgb"))
    host = r.render(sid.numpy().tolist(), pos.numpy(), q.numpy(), ("depth", "rgb"))
    assert torch.equal(dev["depth"], host["depth"]) and torch.equal(dev["rgb"], host["rgb"])
    yaw = torch.linspace(-3, 3, n)
    assert torch.equal(r.render(sid, pos, yaw)["depth"], r.render(sid.numpy(), pos.numpy(), yaw.numpy())["depth"])


def test_detached_scene_leaves_the_table():
    from bps_assets.errors import ConfigError

    r = _warp_with_rooms(SIZES[:2])
    r.detach(1)
    with pytest.raises(ConfigError, match="not resident"):
        r.render(torch.tensor([1]), torch.zeros(1, 3), torch.zeros(1))
    assert r.render(torch.tensor([0]), torch.tensor([[1.0, 0.0, -1.0]]), torch.zeros(1))["depth"].max() > 0


def test_table_keeps_its_address_while_scenes_come_and_go():
    r = _warp_with_rooms(SIZES[:2])
    ptr, version = r._table.ptr, r.table_version
    s = room_scene(SIZES[3])
    sd = build_shading_data(s)
    r.detach(0)
    r.attach(0, sd, r.prepare(sd, s.positions, s.indices))  # another room in slot 0
    assert (r._table.ptr, r.table_version) == (ptr, version)
    pos, q = _poses(4, seed=3)
    swapped = r.render(torch.zeros(4, dtype=torch.long), pos, q)["depth"]
    fresh = _warp_with_rooms([SIZES[3]]).render(torch.zeros(4, dtype=torch.long), pos, q)["depth"]
    assert torch.equal(swapped, fresh)
    r.attach(200, sd, r.prepare(sd, s.positions, s.indices))  # beyond the capacity: the table grows
    assert r.table_version == version + 1 and r._table.shape[0] > 200
    assert torch.equal(r.render(torch.full((4,), 200), pos, q)["depth"], fresh)


@pytest.mark.parametrize("normalize", [False, True])
def test_depth_only_frames_match_the_shading_kernels_depth(normalize):
    """A frame without RGB or semantic goes through the lean depth kernel; its depth is the
    general kernel's (the one RGB / semantic frames use), pixel for pixel, misses, a detached
    scene and an id past the table included (``launch_frame``: no residency check)."""
    import dataclasses

    r = _warp_with_rooms(SIZES)
    r.options = dataclasses.replace(r.options, normalize_depth=normalize)
    r.detach(2)
    n = 40
    sid = torch.tensor([3, 0, 2, 1, 4096] * 8)
    pos, q = _poses(n, seed=4)
    pos[::3, 1] = 50.0   # above the rooms' ceilings: those agents look out and miss
    frames = []
    for sensors in (("depth",), ("depth", "rgb", "semantic")):
        out = r.frame_buffers(n, sensors)
        r.launch_frame(sid, pos, q.to(torch.float64), out["depth"], out.get("rgb"), semantic=out.get("semantic"))
        frames.append(out["depth"])
    lean, general = frames
    assert torch.equal(lean, general)
    assert (lean[(sid == 2) | (sid == 4096)] == 0.0).all()   # every pixel misses (normalized too: lo -> 0)
    assert (lean[(sid != 2) & (sid != 4096)] > 0).any()
