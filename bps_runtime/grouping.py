"""Entries grouped by scene index: the one implementation the renderers (agents by scene) and
the episode supplies (episodes taken / released by scene) share.

``group_by_scene(scene_indices) -> (order, bounds)``: ``order`` is the stable argsort of the
scene indices (None when it is the identity: already sorted), ``bounds`` the [a, b) run of each
scene in that order, ascending scene index, entries in their original order within a scene.
A handful of numpy calls, whatever the number of scenes (up to ``SMALL`` entries, a few
Python list operations: cheaper there; ``group_list`` is that path for a caller holding
lists); ``groups`` gives (scene index, entry positions) pairs.
"""
from __future__ import annotations

import numpy as np

SMALL = 32   # entries up to which lists beat numpy's per-call cost (a step's few episode resets)


def group_by_scene(scene_indices: np.ndarray) -> tuple[np.ndarray | None, list[tuple[int, int]]]:
    """(order or None, [(a, b)]): see the module docstring."""
    keys = np.asarray(scene_indices).reshape(-1)
    n = len(keys)
    if n == 0:
        return None, []
    if n <= SMALL:
        pos, bounds = [], []
        for _, at in group_list(keys.tolist()):
            bounds.append((len(pos), len(pos) + len(at)))
            pos += at
        return (None if pos == list(range(n)) else np.array(pos, np.intp)), bounds
    if not (keys[1:] < keys[:-1]).any():
        order, sk = None, keys
    else:
        order = np.argsort(keys, kind="stable")
        sk = keys[order]
    cuts = (np.flatnonzero(sk[1:] != sk[:-1]) + 1).tolist()
    return order, list(zip([0] + cuts, cuts + [n]))


def group_list(keys: list, values: list | None = None) -> list[tuple[int, list]]:
    """[(scene index, its entries' ``values``)] of short Python lists, in ascending scene index,
    entries in their order (``values`` None: the positions): ``group_by_scene``'s path up to
    ``SMALL`` entries, for callers that stay in lists (a step's few ended episodes)."""
    out: dict = {}
    for k, v in zip(keys, range(len(keys)) if values is None else values):
        out.setdefault(k, []).append(v)
    return sorted(out.items()) if len(out) > 1 else list(out.items())


def groups(scene_indices: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """[(scene index, the positions of its entries)] in ascending scene index."""
    keys = np.asarray(scene_indices).reshape(-1)
    order, bounds = group_by_scene(keys)
    if order is None:
        order = np.arange(len(keys))
    return [(int(keys[order[a]]), order[a:b]) for a, b in bounds]
