"""DD-PPO's update is one process's update: 2 gloo ranks, each ``learn``-ing on half of a rollout's
envs, end with the weights of one process's ``learn`` on all of them (to float rounding), when
one process's minibatch m is the union of the ranks' minibatches m. This covers every term of
the update: the clipped policy loss, the value loss and entropy (means over each rank's rows,
averaged over ranks with equal counts), advantages normalised over both ranks, GAE across
episode ends, the gradient clip on the averaged gradient, LAMB's per-tensor trust ratio, and a
second epoch on the updated weights and optimizer state.

The test runs this file under torchrun (``rank_main``: one rank); each rank saves both updates.
"""
from __future__ import annotations

import contextlib
import copy
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

N, T, EPOCHS, MB = 8, 6, 2, 2   # envs per rank, steps, epochs, minibatches per epoch
CLIPS = (0.05, 1e9)             # max_grad_norm: on in every minibatch, never


def _rollout(policy):
    """2N envs of T steps with episode ends; logp and values off the policy's, so ratios clip."""
    from bps_train.ppo import Rollout

    g = torch.Generator().manual_seed(5)
    ro = Rollout.empty(T, 2 * N, (16, 16, 1), torch.float32, 16, "cpu")
    ro.visual.copy_(torch.rand(ro.visual.shape, generator=g))
    ro.goal.copy_(torch.randn(ro.goal.shape, generator=g) * 3)
    ro.not_done.copy_(torch.rand(ro.not_done.shape, generator=g) > 0.2)
    ro.actions.copy_(torch.randint(0, 4, ro.actions.shape, generator=g))
    ro.prev_action[1:] = ro.actions
    ro.prev_action[0] = torch.randint(0, 4, (2 * N,), generator=g)
    ro.prev_action[~ro.not_done] = -1
    ro.state0 = (torch.randn(1, 2 * N, 16, generator=g) * 0.5, torch.randn(1, 2 * N, 16, generator=g) * 0.5)
    with torch.no_grad():
        logits, values = policy.evaluate_sequence(ro.visual[:T], ro.goal[:T], ro.prev_action[:T], ro.state0,
                                                  ro.not_done[:T])
    ro.logp.copy_(torch.log_softmax(logits, -1).gather(-1, ro.actions[..., None])[..., 0]
                  + torch.randn(ro.logp.shape, generator=g) * 0.5)
    ro.values[:T] = values + torch.randn(values.shape, generator=g) * 0.3
    ro.values[T] = torch.randn(2 * N, generator=g)
    ro.rewards.copy_(torch.randn(ro.rewards.shape, generator=g)
                     + 2.5 * (torch.rand(ro.rewards.shape, generator=g) > 0.9))
    return ro


def _envs(ro, sl: slice):
    """The rollout of envs ``sl`` (dimension 1 of every field)."""
    return type(ro)(ro.visual[:, sl], ro.goal[:, sl], ro.prev_action[:, sl], ro.not_done[:, sl], ro.actions[:, sl],
                    ro.logp[:, sl], ro.values[:, sl], ro.rewards[:, sl], (ro.state0[0][:, sl], ro.state0[1][:, sl]))


@contextlib.contextmanager
def _permutations(perms):
    """``learn`` draws one ``torch.randperm`` per epoch: hand it ``perms`` in turn."""
    real, it = torch.randperm, iter(perms)
    torch.randperm = lambda n, **kw: next(it)
    try:
        yield
    finally:
        torch.randperm = real


def _update(policy, ro, perms, world, max_grad_norm):
    """``train.learn`` once on ``ro`` from a copy of ``policy`` and a fresh LAMB: the new weights."""
    from bps_train import train
    from bps_train.lamb import Lamb

    policy = copy.deepcopy(policy)
    opt = Lamb(policy.parameters(), lr=0.05, weight_decay=1e-2, min_trust=0.01)
    args = SimpleNamespace(gamma=0.99, gae_lambda=0.95, epochs=EPOCHS, minibatches=MB, clip=0.2, value_coef=0.5,
                           entropy_coef=0.05, max_grad_norm=max_grad_norm)
    with _permutations(perms):
        train.learn(policy, opt, ro, args, contextlib.nullcontext, world)
    return {k: v.detach().clone() for k, v in policy.state_dict().items()}


def rank_main(out: str) -> None:
    """One rank: one process's update of all 2N envs and this rank's DD-PPO update of its N."""
    import torch.distributed as dist

    from bps_train.models import Policy

    dist.init_process_group("gloo")
    r = dist.get_rank()
    torch.manual_seed(0)
    policy = Policy(1, hidden=16, width=4, resolution=(16, 16))
    ro = _rollout(policy)
    # per epoch and rank a permutation of the rank's envs; one process's minibatch m is rank 0's
    # chunk m and rank 1's chunk m (its envs shifted by N)
    g = torch.Generator().manual_seed(11)
    local = [[torch.randperm(N, generator=g) for _ in range(2)] for _ in range(EPOCHS)]
    whole = [torch.cat([torch.cat([p[0].chunk(MB)[m], p[1].chunk(MB)[m] + N]) for m in range(MB)]) for p in local]
    # the clip on in every minibatch (well below the gradient's norm), and off: with it on, a sum
    # over ranks in place of the mean would be clipped to the same step
    got = {"before": policy.state_dict()}
    for clip in CLIPS:
        got[clip] = (_update(policy, ro, whole, 1, clip),
                     _update(policy, _envs(ro, slice(r * N, (r + 1) * N)), [p[r] for p in local], 2, clip))
    torch.save(got, os.path.join(out, f"rank{r}.pt"))
    dist.barrier()
    dist.destroy_process_group()
    # one write of the whole line: two ranks' prints share a pipe and a print's parts interleave
    sys.stdout.write(f"rank {r} ok\n")
    sys.stdout.flush()
    os._exit(0)   # the teardown abort train.main avoids the same way


def test_two_ranks_update_as_one_process_on_all_their_envs(tmp_path):
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                        str(Path(__file__)), str(tmp_path)], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0 and r.stdout.count(" ok") == 2, r.stdout[-2000:] + r.stderr[-3000:]
    a, b = (torch.load(tmp_path / f"rank{i}.pt") for i in (0, 1))
    before = a["before"]
    for clip in CLIPS:
        (one, ranks), (one_b, ranks_b) = a[clip], b[clip]
        assert one.keys() == ranks.keys() == before.keys()
        for k, w in one.items():
            assert torch.equal(ranks[k], ranks_b[k]), (clip, k)   # the ranks agree bit for bit
            assert torch.equal(one_b[k], w), (clip, k)            # the reference is deterministic
            step = (w - before[k]).norm()
            assert step > 0, (clip, k)   # every tensor takes a step: none is left out of the all-reduce
            # each tensor's step to float rounding (LAMB moves a tensor by ~lr x its norm)
            assert (ranks[k] - w).norm() <= 1e-5 * step, (clip, k, ((ranks[k] - w).norm() / step).item())


if __name__ == "__main__":   # torchrun runs this file as one rank
    rank_main(sys.argv[1])
