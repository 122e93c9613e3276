"""The saved counters' one range check, shared by the checkpoint and the optimizer state it holds.

``int_in(v, lo, hi)``: ``v`` is an int (not a bool) in lo..hi. ``MAX_STEP``: a step counter's
bound (the trainer's ``global_step`` and LAMB's per-tensor ``step`` alike); beyond it is damage.
Its own module so that the optimizer (``lamb``) does not import the checkpoint module.
"""
from __future__ import annotations

from bps_assets.errors import is_int

MAX_STEP = 2**53


def int_in(v, lo, hi) -> bool:
    """``v`` is an int (not a bool) in lo..hi: how every saved counter is checked (a step counter:
    0..``MAX_STEP``, the trainer's ``global_step`` and an optimizer's ``step`` alike)."""
    return is_int(v) and lo <= v <= hi
