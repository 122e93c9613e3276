"""cli.step_profile: counts torch ops, Warp launches and host syncs, per phase and thread."""
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from bps_assets.errors import ConfigError
from cli import step_profile
from cli.step_profile import count_ops


def test_counts_ops_and_syncs():
    x = torch.arange(10, dtype=torch.float32)
    with count_ops() as c:
        y = x * 2 + 1
        _ = torch.where(y > 3, y, 0.0)
    assert c.num_torch_ops >= 3 and c.num_syncs == 0
    assert c.torch_ops["step"]["mul"] == 1
    with count_ops() as c:
        m = x > 4
        _ = x[m]                      # boolean-mask index
        _ = torch.nonzero(m)
        _ = float(x.sum())            # .item()
        _ = x.tolist()
        _ = x.numpy()
        if m.any():
            pass
    s = c.syncs["step"]
    assert s["boolean-mask index"] == 1 and s["nonzero"] == 1 and s["Tensor.tolist"] == 1
    assert s["Tensor.numpy"] == 1 and s["_local_scalar_dense"] >= 2
    # patches are gone after the block
    with count_ops() as c2:
        pass
    _ = x.tolist()
    assert c2.num_syncs == 0


def test_phases_threads_and_nesting():
    x = torch.ones(4)
    pool = ThreadPoolExecutor(1)

    def work():
        with step_profile.follow():
            x.add(1)
            with step_profile.phase("render"):
                x.mul(2)
                x.tolist()

    with count_ops() as c:
        pool.submit(work).result()
        with pytest.raises(ConfigError):
            with count_ops():
                pass
    pool.submit(x.add, 1).result()          # not followed, not open: not counted
    pool.shutdown()
    assert c.torch_ops["step"]["add"] == 1
    assert c.torch_ops["render"]["mul"] == 1 and c.total("syncs", "render") == 1
    assert c.num_syncs == 0
    assert "render" in c.summary()


def test_counts_warp_launches():
    import warp as wp
    from bps_runtime.render.warp_backend import _warp
    _warp()

    @wp.kernel
    def _bump(a: wp.array(dtype=float)):
        a[wp.tid()] += 1.0

    t = torch.zeros(8)
    arr = wp.from_torch(t)
    with count_ops() as c:
        wp.launch(_bump, dim=8, inputs=[arr], device="cpu")
        wp.launch(_bump, dim=8, inputs=[arr], device="cpu")
    assert c.num_warp_launches == 2 and float(t[0]) == 2.0
    assert wp.launch.__module__.startswith("warp")
