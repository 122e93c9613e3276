"""PointNav v1 episodes as a compact table: ``EpisodeTable`` keeps each episode as its JSON text
(one str, ~1x the file's bytes, against ~4x as a tree of dicts and lists) with its id and its
scene id beside it, and makes habitat's dict on access (``table[k]``: a fresh dict, the id as a
string, the scene id as read and joined). What ``make(episodes=PATH)`` holds for a PointNav /
ImageNav file (``episodes.read_pointnav_table``); slices and ``take`` give sub-tables.
"""
from __future__ import annotations

import json
import operator
from collections.abc import Sequence


class EpisodeTable(Sequence):
    """Episodes of a PointNav v1 file: ``texts`` (each one's JSON), ``ids`` (str) and
    ``scene_ids`` (one str object per distinct scene); a read-only sequence of habitat dicts."""

    __slots__ = ("texts", "ids", "scene_ids")

    def __init__(self, texts=None, ids=None, scene_ids=None):
        self.texts, self.ids, self.scene_ids = texts or [], ids or [], scene_ids or []

    def append(self, text: str, episode_id: str, scene_id: str) -> None:
        """Add one (already validated) episode."""
        self.texts.append(text)
        self.ids.append(episode_id)
        self.scene_ids.append(scene_id)

    def extend(self, other: "EpisodeTable") -> None:
        """Add every episode of ``other``."""
        self.texts += other.texts
        self.ids += other.ids
        self.scene_ids += other.scene_ids

    def take(self, indices) -> "EpisodeTable":
        """The episodes at ``indices``, in that order."""
        return EpisodeTable([self.texts[i] for i in indices], [self.ids[i] for i in indices],
                            [self.scene_ids[i] for i in indices])

    def __len__(self) -> int:
        return len(self.texts)

    def __getitem__(self, k):
        if isinstance(k, slice):
            return self.take(range(*k.indices(len(self))))
        k = operator.index(k)
        e = json.loads(self.texts[k])
        e["episode_id"], e["scene_id"] = self.ids[k], self.scene_ids[k]
        return e

    def __eq__(self, other):
        if isinstance(other, (EpisodeTable, list)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None

    def __repr__(self) -> str:
        return f"EpisodeTable({len(self)} episodes)"
