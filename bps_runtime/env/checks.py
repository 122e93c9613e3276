"""What ``make()`` checks before it builds anything: the batch fits in memory, the dataset's
navmeshes were built for the task's agent.

``bytes_per_env(schema, depth, sensors, resolution)`` estimates one env's share (the step
state and outputs the schema declares, its queued episodes, and its frames: a renderer's output
plus the group's buffers); ``check_batch_memory`` compares ``num_envs`` of them with what the
device can hold (host: ``bps_assets.memory.memory_budget``; CUDA: the device's free memory) and
raises a ConfigError naming the ``num_envs`` that fits. ``check_agent(manifest, task)``: a
DatasetError with ``manifest.agent_mismatch``'s one line when the task's agent (its options'
``agent_radius`` / ``agent_height``) differs from
the one the manifest's navmeshes were built for.
"""
from __future__ import annotations

import numpy as np

from bps_assets.errors import DatasetError

FRAME_COPIES = 3             # the renderer's output, the group's frame buffers, reset's concatenation
HOST_BYTES_PER_ENV = 512     # the episode ring's host tables and names (measured order of magnitude)
_PIXEL = {"depth": 4, "rgb": 3, "semantic": 4}


def bytes_per_env(fields, depth: int, sensors, resolution, sizes=None) -> int:
    """Estimated bytes one env adds: its step fields (ring fields ``depth`` times; a named size in
    a shape from ``sizes``), its frames."""
    def count(shape):
        return int(np.prod([int((sizes or {})[d]) if isinstance(d, str) else d for d in shape] or [1]))

    from ..step.schema import item_bytes

    state = sum(item_bytes(f.dtype) * count(f.shape) * (depth if f.per == "ring" else 1) for f in fields)
    h, w = resolution
    frames = FRAME_COPIES * h * w * sum(_PIXEL[s] for s in sensors)
    return int(state + frames + HOST_BYTES_PER_ENV)


def check_batch_memory(num_envs: int, per_env: int, device) -> None:
    """ConfigError naming the num_envs that fits when ``num_envs`` x ``per_env`` bytes do not fit
    in the device's memory (free CUDA memory, or the host's budget)."""
    import torch

    from bps_assets.memory import check_num_envs

    available, where = None, "host memory"
    device = torch.device(device)
    if device.type == "cuda":
        available = int(torch.cuda.mem_get_info(device)[0] * 0.8)
        where = f"{device} memory"
    check_num_envs(num_envs, per_env, available=available, where=where)


def check_agent(manifest, task_options) -> None:
    """DatasetError when the manifest's navmeshes were built for another agent than the task's."""
    from bps_assets.pipeline.manifest import agent_mismatch

    msg = agent_mismatch(manifest, float(task_options.agent_radius), float(task_options.agent_height))
    if msg is not None:
        raise DatasetError(None, msg)
