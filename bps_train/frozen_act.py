"""The rollout's policy on the CPU: the eager policy's one-step ``forward`` as a frozen,
inference-optimised TorchScript graph (issue 32 item 3; docs/PERFORMANCE.md, "third pass").

``FrozenAct(policy)`` is called like ``policy(visual, goal, prev_action, state, not_done)``. It
traces ``policy`` at its first call (the rollout's own shapes and dtypes), then freezes the
trace with the current weights and lets ``torch.jit.optimize_for_inference`` fold them (conv +
bias + relu fused by oneDNN, weights prepacked). Any in-place change of a parameter (the
optimizer's step, a checkpoint restore) bumps its version counter, and the next call re-freezes
(~15 ms, once per update): the graph never acts on stale weights. The graph runs with torch's
executor optimisation off (no profiling runs: it is optimised already) and without the GIL,
so the simulator's Python threads run beside it. The same function as the eager policy to
float rounding (tests/test_train_learner.py). Only the act path: the update trains the eager
module, and checkpoints save it; this copy is never saved. Autocast is not traced: use the
eager policy where an ``amp`` context is on.
"""
from __future__ import annotations

import warnings

import torch


class FrozenAct:
    """``policy``'s forward as a frozen TorchScript graph, re-frozen when its weights change."""

    def __init__(self, policy: torch.nn.Module):
        self.policy = policy
        self.params = [*policy.parameters(), *policy.buffers()]   # what the freeze folds in
        self.traced = None
        self.graph = None
        self.versions: tuple = ()
        self.freezes = 0   # how often the weights were frozen (tests, benchmarks)

    def _versions(self) -> tuple:
        return tuple(p._version for p in self.params)

    def __call__(self, visual, goal, prev_action, state, not_done):
        """One step of the policy (no autograd): -> (logits, value, (h, c)) as ``policy`` returns."""
        args = (visual, goal, prev_action, state, not_done)
        with torch.no_grad():
            versions = self._versions()
            if self.graph is None or versions != self.versions:
                # torch 2.13 marks TorchScript deprecated in favour of torch.compile, which ran the
                # update 0.64x and compiled for 2+ minutes here (docs/PERFORMANCE.md): kept, quietly
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", DeprecationWarning)
                    if self.traced is None:   # its parameters are the policy's own tensors (not copies)
                        self.traced = torch.jit.trace(self.policy, args, check_trace=False)
                    self.graph = torch.jit.optimize_for_inference(torch.jit.freeze(self.traced.eval()))
                self.versions = versions
                self.freezes += 1
            with torch.jit.optimized_execution(False):
                return self.graph(*args)
