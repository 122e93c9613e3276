"""The trainer's goal encoders, one per kind of goal a task gives (``TaskSpec.goal_encoder``): a
point goal (rho, phi), an object goal (category id, compass, gps: habitat-baselines' ObjectNav
inputs, the category through an embedding, compass as (cos, sin)), a goal image (a CNN of the
policy's kind: the policy's own visual encoder when the agent sees RGB, else a second one).
Each is an ``nn.Module`` with ``out_dim`` and ``forward(goal, visual_encoder)``; the policy
(``bps_train.models.Policy``) concatenates its output with the visual features.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .spec import GoalEncoderArgs


class PointGoalEncoder(nn.Module):
    """pointgoal [N, 2] (rho, -phi) -> relu(Linear(rho, cos phi, sin phi)) [N, 32]."""

    out_dim = 32

    def __init__(self, _args: GoalEncoderArgs):
        super().__init__()
        self.goal = nn.Linear(3, self.out_dim)

    def forward(self, goal, visual_encoder=None):
        """[N, 2] pointgoal -> [N, 32] features."""
        rho, phi = goal[:, 0:1], goal[:, 1:2]
        return F.relu(self.goal(torch.cat([rho, torch.cos(phi), torch.sin(phi)], 1)))


class ObjectGoalEncoder(nn.Module):
    """(objectgoal, compass, gps x2) [N, 4] -> category embedding, compass (cos, sin), gps [N, 96]."""

    out_dim = 96

    def __init__(self, args: GoalEncoderArgs):
        super().__init__()
        self.category = nn.Embedding(args.num_categories, 32)
        self.compass = nn.Linear(2, 32)
        self.gps = nn.Linear(2, 32)

    def forward(self, goal, visual_encoder=None):
        """[N, 4] (category, compass, gps) -> [N, 96] features."""
        cat = goal[:, 0].long().clamp(0, self.category.num_embeddings - 1)
        c = goal[:, 1:2]
        return torch.cat([self.category(cat), self.compass(torch.cat([torch.cos(c), torch.sin(c)], 1)),
                          self.gps(goal[:, 2:4])], 1)


class ImageGoalEncoder(nn.Module):
    """A goal image [N, H, W, 3] uint8 -> the visual encoder's features [N, hidden] (the policy's
    own when it sees RGB, else a CNN of its own)."""

    def __init__(self, args: GoalEncoderArgs):
        super().__init__()
        self.out_dim = args.hidden
        self.cnn = args.make_cnn(3) if args.in_channels != 3 else None

    def forward(self, goal, visual_encoder=None):
        """[N, H, W, 3] uint8 goal image -> [N, hidden] features (``visual_encoder``: the policy's)."""
        enc = visual_encoder if self.cnn is None else self.cnn
        return enc(goal.float().permute(0, 3, 1, 2) / 255.0)
