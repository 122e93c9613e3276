"""PPO pieces the training script uses: rollout storage, GAE, the clipped loss.

Kept apart from the script so the script reads as the training loop only.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch


@dataclass
class Rollout:
    """One rollout of ``T`` steps for ``N`` environments, filled group by group."""

    visual: torch.Tensor      # [T+1, N, H, W, C] (index T: bootstrap observation)
    goal: torch.Tensor        # [T+1, N, *goal shape]: the task's goal input (PointNav: pointgoal [2])
    prev_action: torch.Tensor  # [T+1, N] long, -1 at episode start
    not_done: torch.Tensor    # [T+1, N] bool: False where a new episode begins at this step
    actions: torch.Tensor     # [T, N] long
    logp: torch.Tensor        # [T, N]
    values: torch.Tensor      # [T+1, N]
    rewards: torch.Tensor     # [T, N]
    state0: tuple             # (h, c) at step 0, each [1, N, hidden]

    @classmethod
    def empty(cls, t: int, n: int, visual_shape, visual_dtype, hidden: int, device, goal_shape=(2,),
              goal_dtype=torch.float32):
        z = lambda *s, dt=torch.float32: torch.zeros(*s, dtype=dt, device=device)  # noqa: E731
        return cls(
            visual=z(t + 1, n, *visual_shape, dt=visual_dtype), goal=z(t + 1, n, *goal_shape, dt=goal_dtype),
            prev_action=z(t + 1, n, dt=torch.long), not_done=z(t + 1, n, dt=torch.bool),
            actions=z(t, n, dt=torch.long), logp=z(t, n), values=z(t + 1, n), rewards=z(t, n),
            state0=(z(1, n, hidden), z(1, n, hidden)),
        )

    @property
    def steps(self) -> int:
        return self.actions.shape[0]


def sample_actions(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Actions drawn from ``logits`` [N, A] and their log-probabilities: the ops and bits of
    ``Categorical(logits=logits).sample()`` / ``.log_prob`` (the same draw of torch's generator),
    without the distribution object's Python (a rollout step's largest share of it)."""
    norm = logits - logits.logsumexp(-1, keepdim=True)
    actions = torch.multinomial(torch.softmax(norm, -1), 1, True)[:, 0]
    return actions, norm.gather(-1, actions[:, None])[:, 0]


def gae(rollout: Rollout, gamma: float, lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimates and returns; ``not_done[t+1]`` cuts at episode ends."""
    t_max = rollout.steps
    adv = torch.zeros_like(rollout.rewards)
    last = torch.zeros_like(rollout.rewards[0])
    for t in reversed(range(t_max)):
        nonterminal = rollout.not_done[t + 1].float()
        delta = rollout.rewards[t] + gamma * rollout.values[t + 1] * nonterminal - rollout.values[t]
        last = delta + gamma * lam * nonterminal * last
        adv[t] = last
    return adv, adv + rollout.values[:-1]


def normalized_advantages(a: torch.Tensor, world: int = 1) -> torch.Tensor:
    """``(a - mean) / (std + 1e-8)``; with ``world`` > 1 ranks (torch.distributed) the mean and
    (unbiased) std are those of every rank's ``a`` together, as one process holding all of them
    would compute (DD-PPO: habitat-baselines and bps-nav normalise over all workers too)."""
    if world == 1:
        return (a - a.mean()) / (a.std() + 1e-8)
    import torch.distributed as dist

    s = torch.stack([a.sum(), (a * a).sum(), a.new_tensor(float(a.numel()))]).double()
    dist.all_reduce(s)
    n = s[2]
    mean = s[0] / n
    std = ((s[1] - n * mean * mean) / (n - 1)).clamp_min(0).sqrt()
    return (a - mean.to(a.dtype)) / (std.to(a.dtype) + 1e-8)


def ppo_loss(policy, rollout: Rollout, env_idx: torch.Tensor, adv: torch.Tensor, returns: torch.Tensor,
             clip: float, value_coef: float, entropy_coef: float,
             amp=contextlib.nullcontext, world: int = 1) -> tuple[torch.Tensor, dict]:
    """Clipped PPO loss over the environments ``env_idx`` (whole sequences: the LSTM reruns).
    ``amp()`` is entered around the policy only (bf16 autocast on CUDA); the loss is fp32.
    Advantages are normalised over the minibatch of every rank (``world``: ``normalized_advantages``).
    The metrics are 0-dim tensors: reading one waits for the device, so read them once per update."""
    t = rollout.steps
    sl = (slice(0, t), env_idx)
    with amp():
        logits, values = policy.evaluate_sequence(
            rollout.visual[sl], rollout.goal[sl], rollout.prev_action[sl],
            (rollout.state0[0][:, env_idx], rollout.state0[1][:, env_idx]), rollout.not_done[sl])
    logits, values = logits.float(), values.float()
    dist = torch.distributions.Categorical(logits=logits, validate_args=False)  # its checks read the device
    logp = dist.log_prob(rollout.actions[:, env_idx])
    ratio = torch.exp(logp - rollout.logp[:, env_idx])
    a = normalized_advantages(adv[:, env_idx], world)
    pg = -torch.min(ratio * a, ratio.clamp(1 - clip, 1 + clip) * a).mean()
    vloss = 0.5 * (values - returns[:, env_idx]).pow(2).mean()
    ent = dist.entropy().mean()
    loss = pg + value_coef * vloss - entropy_coef * ent
    with torch.no_grad():
        approx_kl = ((ratio - 1) - (logp - rollout.logp[:, env_idx])).mean()
        clipfrac = ((ratio - 1).abs() > clip).float().mean()
    return loss, {"policy_loss": pg.detach(), "value_loss": vloss.detach(), "entropy": ent.detach(),
                  "approx_kl": approx_kl, "clip_frac": clipfrac}
