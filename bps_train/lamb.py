"""LAMB (You et al., 2019): Adam moments with a per-tensor trust ratio min(||w||, 10) / ||update||.

bps-nav trains with LAMB because the trust ratio keeps large-batch PPO stable where Adam
with a scaled learning rate diverges. As in bps-nav, the ratio is clamped to
[min_trust, 1 / min_trust] (min_trust 0.01 in the paper's recipe) so tensors with a tiny norm
still move, and tensors with a zero norm (Fixup's zero-initialized layers) or a zero update
use a ratio of 1. Each step therefore moves a tensor by about ``lr`` times its own norm: with
small batches (few steps of a small run) a larger ``lr`` than the paper's is needed.
"""
from __future__ import annotations

import torch

from bps_assets.errors import ConfigError, is_real

from .counters import MAX_STEP, int_in


class Lamb(torch.optim.Optimizer):
    def __init__(self, params, lr=5e-4, betas=(0.9, 0.999), eps=1e-6, weight_decay=1e-2,
                 min_trust=0.01, max_trust=None, max_weight_norm=10.0):
        if lr <= 0 or eps <= 0 or not 0 <= betas[0] < 1 or not 0 <= betas[1] < 1:
            raise ConfigError(None, f"invalid LAMB hyper-parameters (lr {lr}, eps {eps}, betas {tuple(betas)})")
        if not 0 < min_trust <= 1:
            raise ConfigError(None, f"min_trust {min_trust}: must be in (0, 1]")
        max_trust = 1.0 / min_trust if max_trust is None else max_trust
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      min_trust=min_trust, max_trust=max_trust,
                                      max_weight_norm=max_weight_norm))

    @torch.no_grad()
    def step(self, closure=None):
        """One step for all tensors of a group at once (torch._foreach_*: a few fused kernels per
        group instead of ~12 per tensor; the policy has ~60 tensors). The per-tensor norms and
        trust ratios stay on the device: no host sync."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            b1, b2 = group["betas"]
            grads = [p.grad for p in params]
            for p in params:
                st = self.state[p]
                if not st:
                    st["step"] = 0
                    st["m"] = torch.zeros_like(p)
                    st["v"] = torch.zeros_like(p)
                st["step"] += 1
            ms = [self.state[p]["m"] for p in params]
            vs = [self.state[p]["v"] for p in params]
            steps = [self.state[p]["step"] for p in params]
            torch._foreach_mul_(ms, b1)
            torch._foreach_add_(ms, grads, alpha=1 - b1)
            torch._foreach_mul_(vs, b2)
            torch._foreach_addcmul_(vs, grads, grads, value=1 - b2)
            denom = torch._foreach_div(vs, [1 - b2 ** t for t in steps])
            torch._foreach_sqrt_(denom)
            torch._foreach_add_(denom, group["eps"])
            update = torch._foreach_div(ms, [1 - b1 ** t for t in steps])
            torch._foreach_div_(update, denom)
            # decay weights, not biases / Fixup scalars (1-d tensors)
            decayed = [i for i, p in enumerate(params) if p.dim() > 1]
            if group["weight_decay"] and decayed:
                torch._foreach_add_([update[i] for i in decayed], [params[i] for i in decayed],
                                    alpha=group["weight_decay"])
            w_norm = torch.stack(torch._foreach_norm(params))
            u_norm = torch.stack(torch._foreach_norm(update))
            ratio = w_norm.clamp(max=group["max_weight_norm"]) / u_norm
            trust = torch.where((w_norm > 0) & (u_norm > 0), ratio, torch.ones_like(w_norm))
            trust = trust.clamp(group["min_trust"], group["max_trust"]) * -group["lr"]
            torch._foreach_mul_(update, list(trust.unbind()))
            torch._foreach_add_(params, update)
        return loss

    # what a resumed state may hold (``checkpoint.restore``): anything else fails the first step
    RANGES = {"lr": (0.0, 1e3), "eps": (0.0, 1.0), "weight_decay": (0.0, 1e3), "min_trust": (0.0, 1.0),
              "max_trust": (0.0, 1e6), "max_weight_norm": (0.0, 1e6)}

    def group_problem(self, group: dict) -> str | None:
        """What is wrong with a loaded parameter group's settings (None: nothing)."""
        def num(v, lo, hi):
            return is_real(v) and lo <= v <= hi
        if set(group) != set(self.RANGES) | {"params", "betas"}:
            return f"settings {sorted(k for k in group if k != 'params')}, expected {sorted(self.RANGES) + ['betas']}"
        bad = next((k for k, (lo, hi) in self.RANGES.items() if not num(group[k], lo, hi)), None)
        if bad is not None:
            return f"{bad} = {group[bad]!r} outside [{self.RANGES[bad][0]}, {self.RANGES[bad][1]}]"
        b = group["betas"]
        if not (isinstance(b, (tuple, list)) and len(b) == 2 and all(num(x, 0.0, 0.999999) for x in b)):
            return f"betas = {b!r}: expected two numbers in [0, 1)"
        return None

    @staticmethod
    def state_problem(param: torch.Tensor, st: dict) -> str | None:
        """What is wrong with one parameter's loaded state (None: nothing; empty: not stepped yet)."""
        if not st:
            return None
        if set(st) != {"step", "m", "v"}:
            return f"keys {sorted(map(str, st))}, expected ['m', 'step', 'v']"
        if not int_in(st["step"], 0, MAX_STEP):
            return f"step = {st['step']!r}"
        for k in ("m", "v"):
            v = st[k]
            if not (isinstance(v, torch.Tensor) and v.shape == param.shape and v.dtype == param.dtype):
                return f"{k} is not a {param.dtype} tensor of shape {tuple(param.shape)}"
        return None

