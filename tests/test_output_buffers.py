"""Which of a step's outputs are fresh and which are the group's buffers, as docs/ENV.md says:
sensor frames are new tensors each step (kept values stay; without ``capture_graph``), whatever
the renderer, with or without sensor noise; the task's observations (``pointgoal`` ...),
``reward``, ``done`` and the info tensors (``info["episode"]`` too) are the group's output
buffers, rewritten by its next step; ``reset()``'s observations are copies. The user-journey
tester's fresh.py found the doc saying every returned tensor was fresh."""
from __future__ import annotations

import pytest
import torch

import bps_runtime

FORWARD = 1


def _outputs(obs, reward, done, info) -> dict:
    out = {f"obs.{k}": v for k, v in obs.items()}
    out.update({"reward": reward, "done": done})
    out.update({f"info.{k}": v for k, v in info.items() if isinstance(v, torch.Tensor) and k != "env_id"})
    out.update({f"episode.{k}": v for k, v in info["episode"].items() if isinstance(v, torch.Tensor)})
    return out


FRAMES = ("obs.depth", "obs.rgb", "obs.semantic")


@pytest.mark.parametrize("renderer,batch_size,noise", [
    ("embree", None, None), ("embree", 2, None), ("warp", 2, None), ("warp", None, {"depth": "redwood"}),
])
def test_frames_are_fresh_and_the_rest_are_the_groups_buffers(manifest, renderer, batch_size, noise):
    with bps_runtime.make(manifest, split="train", num_envs=4, batch_size=batch_size, resolution=(16, 16),
                          sensors=("depth", "rgb", "semantic"), renderer=renderer, noise=noise) as env:
        first = env.reset()
        kept_reset = {k: v.clone() for k, v in first.items()}
        groups = env.num_envs // env.batch_size
        actions = torch.full((env.batch_size,), FORWARD, dtype=torch.long)
        got = _outputs(*env.step(actions))
        kept = {k: v.clone() for k, v in got.items()}
        changed = set()
        for _ in range(4):   # the same group's later steps (every group steps once in between)
            later = None
            for _ in range(groups):
                later = _outputs(*env.step(actions))
            for k, v in later.items():
                if not torch.equal(v, kept[k]):
                    changed.add(k)
                if k in FRAMES:   # fresh: a new tensor, the kept one unchanged
                    assert v.data_ptr() != got[k].data_ptr() and torch.equal(got[k], kept[k]), k
                else:             # the group's buffer: the same storage, rewritten in place
                    assert v.data_ptr() == got[k].data_ptr(), k
                    assert torch.equal(got[k], v), k
        assert {"obs.depth", "obs.pointgoal", "reward", "info.position", "info.distance_to_goal"} <= changed
        for k, v in first.items():   # reset()'s observations are copies
            assert torch.equal(v, kept_reset[k]), k
