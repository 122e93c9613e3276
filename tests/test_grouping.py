"""``group_by_scene``'s list path (up to ``SMALL`` entries) and its numpy path give the same
grouping: the stable order (None when already sorted) and the same runs, for every size around
the switch and keys with repeats, sorted or not."""
from __future__ import annotations

import numpy as np

from bps_runtime import grouping
from bps_runtime.grouping import SMALL, group_by_scene, groups


def _numpy_path(keys):
    saved = grouping.SMALL
    grouping.SMALL = -1
    try:
        return group_by_scene(keys)
    finally:
        grouping.SMALL = saved


def test_list_path_matches_numpy_path():
    rng = np.random.default_rng(0)
    for n in list(range(1, SMALL + 3)) * 8:
        for keys in (rng.integers(0, 5, n), np.sort(rng.integers(0, 3, n)), np.full(n, 7)):
            keys = keys.astype(np.int64)
            o1, b1 = group_by_scene(keys)
            o2, b2 = _numpy_path(keys)
            assert b1 == b2, (keys, b1, b2)
            assert (o1 is None) == (o2 is None), keys
            if o1 is not None:
                assert o1.dtype == o2.dtype and np.array_equal(o1, o2), keys
            # each run is one scene, ascending, its entries in their original order
            order = np.arange(n) if o1 is None else o1
            firsts = [int(keys[order[a]]) for a, _ in b1]
            assert firsts == sorted(set(keys.tolist()))
            for a, b in b1:
                assert (np.diff(order[a:b]) > 0).all() and len(set(keys[order[a:b]].tolist())) == 1


def test_groups_gives_positions_per_scene():
    assert [(s, p.tolist()) for s, p in groups(np.array([3, 1, 3, 0]))] == [(0, [3]), (1, [1]), (3, [0, 2])]
    assert group_by_scene(np.array([], np.int64)) == (None, [])


def test_group_list_is_the_list_path_with_values():
    """``group_list`` (the list path, which ``EpisodeSupply.release_many`` uses for a step's few
    ended episodes) groups values as ``groups`` groups positions: ascending scene, entry order."""
    from bps_runtime.grouping import group_list

    rng = np.random.default_rng(1)
    for n in range(1, SMALL + 1):
        keys = rng.integers(0, 4, n).tolist()
        vals = rng.integers(0, 1000, n).tolist()
        want = [(s, [vals[i] for i in p.tolist()]) for s, p in groups(np.asarray(keys, np.int64))]
        assert group_list(keys, vals) == want
        assert group_list(keys) == [(s, p.tolist()) for s, p in groups(np.asarray(keys, np.int64))]
    assert group_list([]) == []
