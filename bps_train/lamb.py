"""LAMB (You et al., 2019): Adam moments with a per-tensor trust ratio ||w|| / ||update||.

bps-nav trains with LAMB because the trust ratio keeps large-batch PPO stable where Adam
with a scaled learning rate diverges. The trust ratio is clamped from below by
``min_trust`` (0.01 in the paper's recipe) so freshly zero-initialized tensors (Fixup's last
layers) still move; tensors with zero norm use a ratio of 1.
"""
from __future__ import annotations

import torch


class Lamb(torch.optim.Optimizer):
    def __init__(self, params, lr=5e-4, betas=(0.9, 0.999), eps=1e-6, weight_decay=1e-2,
                 min_trust=0.01, max_trust=10.0):
        if lr <= 0 or eps <= 0 or not 0 <= betas[0] < 1 or not 0 <= betas[1] < 1:
            raise ValueError("invalid LAMB hyper-parameters")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      min_trust=min_trust, max_trust=max_trust))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if not st:
                    st["step"] = 0
                    st["m"] = torch.zeros_like(p)
                    st["v"] = torch.zeros_like(p)
                st["step"] += 1
                m, v, t = st["m"], st["v"], st["step"]
                m.mul_(b1).add_(p.grad, alpha=1 - b1)
                v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                update = (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt_().add_(group["eps"]))
                # decay weights, not biases / Fixup scalars (1-d tensors)
                if group["weight_decay"] and p.dim() > 1:
                    update.add_(p, alpha=group["weight_decay"])
                w_norm = p.norm()
                u_norm = update.norm()
                trust = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))
                trust = trust.clamp(group["min_trust"], group["max_trust"])
                p.add_(update * trust, alpha=-group["lr"])
        return loss
