"""ImageNav's goal view: the heading habitat-lab's ``ImageGoalSensor`` draws for an episode.

habitat-lab renders the goal image at ``goals[0].position`` with the yaw
``RandomState(abs(hash(episode_id)) % 2**32).uniform(0, 2 pi)``. An integer id (a JSON integer
in the file, read as an ``IntEpisodeId``) gets that very draw: Python's hash of an int is not
salted. Python salts ``hash`` of a string per process (unless PYTHONHASHSEED is set), so for a
string id habitat's image changes between runs; here its seed is ``zlib.crc32(episode_id)``: the
same draw rule, reproducible on any machine (docs/TASKS.md).
"""
from __future__ import annotations

import zlib

import numpy as np

from ..errors import is_int
from .episode_table import IntEpisodeId
from .pose import yaw_quaternion


def goal_heading(episode_id) -> float:
    """The goal view's yaw (radians about +Y, in [0, 2 pi)) for ``episode_id``: habitat's seed
    for an int (or an ``IntEpisodeId``), crc32 of the text for a string."""
    if is_int(episode_id) or isinstance(episode_id, IntEpisodeId):
        seed = abs(hash(int(episode_id))) % (2**32)
    else:
        seed = zlib.crc32(str(episode_id).encode()) % (2**32)
    return float(np.random.RandomState(seed).uniform(0, 2 * np.pi))


def goal_rotation(episode_id) -> list[float]:
    """The goal view's rotation as habitat writes it, [x, y, z, w] = [0, sin(a/2), 0, cos(a/2)]."""
    return yaw_quaternion(goal_heading(episode_id))


__all__ = ["goal_heading", "goal_rotation"]
