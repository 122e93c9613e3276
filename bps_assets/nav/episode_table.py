"""Episodes as a compact table: ``EpisodeTable`` keeps each episode as its JSON text (one str,
~1x the file's bytes, against ~4x as a tree of dicts and lists) with its id, its scene id and
any other normalised field (``columns``, e.g. ObjectNav's ``object_category``) beside it, and
makes habitat's dict on access (``table[k]``: a fresh dict, the id as a string, the scene id as
read and joined, the columns' values). What ``make(episodes=PATH)`` holds for PointNav / ImageNav
(``episodes.read_pointnav_table``) and ObjectNav files; slices and ``take`` give sub-tables.
``first_repeat``: the first repeated (scene, episode id) of a table, without a dict of every id.
"""
from __future__ import annotations

import copy
import json
import operator
from collections.abc import Sequence

import numpy as np


class IntEpisodeId(str):
    """An episode id a file wrote as a JSON integer, kept as its text (an id is a str everywhere:
    keys, logs, infos) but marked, so ImageNav's ``goal_heading`` draws habitat-lab's heading for
    the integer (habitat keeps the file's int). ``str(x)`` gives a plain str (the mark is lost)."""

    __slots__ = ()


def text_id(episode_id) -> str:
    """A file's episode id as text: an ``IntEpisodeId`` for a JSON integer, else ``str(id)``."""
    if isinstance(episode_id, int) and not isinstance(episode_id, bool):
        return IntEpisodeId(episode_id)
    return episode_id if isinstance(episode_id, str) else str(episode_id)


class EpisodeTable(Sequence):
    """Episodes of a habitat v1 file: ``texts`` (each one's JSON), ``ids`` (str; ``text_id``), ``scene_ids``
    (one str object per distinct scene) and ``columns`` (field -> a value per episode, replacing
    the text's); a read-only sequence of habitat dicts."""

    __slots__ = ("texts", "ids", "scene_ids", "columns")

    def __init__(self, texts=None, ids=None, scene_ids=None, columns=()):
        self.texts, self.ids, self.scene_ids = texts or [], ids or [], scene_ids or []
        self.columns = columns if isinstance(columns, dict) else {c: [] for c in columns}

    def append(self, text: str, episode_id: str, scene_id: str, *values) -> None:
        """Add one (already validated) episode; ``values``: one per column, in order."""
        self.texts.append(text)
        self.ids.append(episode_id)
        self.scene_ids.append(scene_id)
        for col, v in zip(self.columns.values(), values, strict=True):
            col.append(v)

    def extend(self, other: "EpisodeTable") -> None:
        """Add every episode of ``other`` (the same columns)."""
        self.texts += other.texts
        self.ids += other.ids
        self.scene_ids += other.scene_ids
        for k, col in self.columns.items():
            col += other.columns[k]

    def take(self, indices) -> "EpisodeTable":
        """The episodes at ``indices``, in that order."""
        return EpisodeTable([self.texts[i] for i in indices], [self.ids[i] for i in indices],
                            [self.scene_ids[i] for i in indices],
                            {k: [col[i] for i in indices] for k, col in self.columns.items()})

    def __len__(self) -> int:
        return len(self.texts)

    def __getitem__(self, k):
        if isinstance(k, slice):
            return self.take(range(*k.indices(len(self))))
        k = operator.index(k)
        e = json.loads(self.texts[k])
        e["episode_id"], e["scene_id"] = self.ids[k], self.scene_ids[k]
        for name, col in self.columns.items():
            e[name] = copy.copy(col[k])   # a list value (e.g. goals) is the caller's own
        return e

    def __eq__(self, other):
        if isinstance(other, (EpisodeTable, list)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None

    def __repr__(self) -> str:
        return f"EpisodeTable({len(self)} episodes)"


def first_repeat(table: EpisodeTable) -> tuple[int, int] | None:
    """(k0, k): the first episode ``k`` (in table order) whose (scene id, episode id) an earlier
    episode ``k0`` (its first) has, or None. Hashes sorted in int64 arrays: 16 bytes an episode
    while it runs, where a dict of every key seen would hold ~300."""
    n = len(table)
    if n < 2:
        return None
    h = np.fromiter((hash(key) for key in zip(table.scene_ids, table.ids)), np.int64, n)
    order = np.argsort(h, kind="stable")   # equal hashes keep table order
    hs = h[order]
    same = np.flatnonzero(hs[1:] == hs[:-1])
    best = None
    for start in same[np.r_[True, np.diff(same) > 1]] if len(same) else ():   # each run of one hash
        stop = start + 1
        while stop < n and hs[stop] == hs[start]:
            stop += 1
        first: dict = {}
        for k in order[start:stop].tolist():
            key = (table.scene_ids[k], table.ids[k])
            if key in first:
                if best is None or k < best[1]:
                    best = (first[key], k)
            else:
                first[key] = k
    return best
