"""An eval's episode count (``dataset_info.distinct_episodes``), planned before ``make()`` by
``file_episode_count``, follows the claims' rule: the distinct (scene, episode id) episodes, a
repeat not counted again."""
from __future__ import annotations

import pytest

from bps_assets.nav.episode_table import EpisodeTable
from bps_runtime.episodes.dataset_info import distinct_episodes
from bps_train.episode_claims import EpisodeClaims


def _table(scene, ids):
    t = EpisodeTable()
    for i in ids:
        t.append("{}", i, scene)
    return t


@pytest.mark.parametrize("kind", ["table", "dicts"])
def test_a_repeated_id_is_counted_once_as_the_claims_take_it(kind):
    ids = {"a": ["0", "1", "0"], "b": ["0", "2"]}
    by_scene = {s: _table(s, v) if kind == "table" else [{"episode_id": i} for i in v] for s, v in ids.items()}
    n = distinct_episodes(by_scene)
    claims = EpisodeClaims(10)
    taken = sum(claims.claim((s, i)) for s, v in ids.items() for i in v)
    assert n == taken == 4
    assert distinct_episodes(by_scene, {"b"}) == 2 and distinct_episodes(by_scene, set()) == 0


def test_dict_ids_are_compared_as_the_claims_key_them():
    """The claims key an episode by its id as a string: an int id and its string are one episode."""
    assert distinct_episodes({"a": [{"episode_id": 3}, {"episode_id": "3"}]}) == 1
