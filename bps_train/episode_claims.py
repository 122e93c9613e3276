"""The first ``want`` distinct episodes of a run, each taken once: the rule by which an
evaluation counts episodes (``train.evaluate``) and ``video.EpisodeRecorder`` records them.

An episode is its (scene id, episode id). An env that ends early draws its scene's next
episode, perhaps one running or finished elsewhere: that repeat is not taken again, as
habitat runs each episode once. ``EpisodeClaims(want).claim(key)`` takes ``key`` while room is
left; ``claim(None)`` holds a place for an episode whose key is known only at its end, and
``settle(key)`` names it then (a repeat frees the place); ``release(key)`` gives back the claim
of an episode dropped unfinished; ``taken(key)``: whether ``key`` holds a claim (a repeat).
"""
from __future__ import annotations


class EpisodeClaims:
    """The episodes claimed so far (at most ``want``: settable, e.g. lowered by a cap)."""

    def __init__(self, want: int):
        self.want = int(want)
        self._keys: set = set()   # (scene id, episode id) of the claims made
        self._open = 0            # places held by claim(None), not yet settled

    @property
    def room(self) -> int:
        """How many more claims can be made."""
        return self.want - len(self._keys) - self._open

    def taken(self, key) -> bool:
        """Episode ``key`` holds a claim (claimed or settled, not released): a start of it now is a repeat."""
        return key in self._keys

    def claim(self, key) -> bool:
        """Take episode ``key`` (None: a place for an episode named at its end by ``settle``);
        False when no room is left or ``key`` was taken before."""
        if self.room <= 0 or (key is not None and key in self._keys):
            return False
        if key is None:
            self._open += 1
        else:
            self._keys.add(key)
        return True

    def settle(self, key) -> bool:
        """Name the episode of a ``claim(None)`` place; False (the place is freed): a repeat."""
        self._open -= 1
        return self.claim(key)

    def release(self, key) -> None:
        """Give back the claim of ``key`` (None: a ``claim(None)`` place) whose episode was
        dropped unfinished."""
        if key is None:
            self._open -= 1
        else:
            self._keys.discard(key)
