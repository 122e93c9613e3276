"""Memory and lookup time of the semantic category table: the sorted keys ``CategoryTable``
keeps vs the dense [scene slots, largest id + 1] rows it kept before, in one run.

    python benchmarks/bench_category_table.py                     # 64 slots, 200 objects, ids up to 2^20
    python benchmarks/bench_category_table.py --max-id 0          # HM3D-like ids 1..objects

Each slot gets a table of ``--objects`` distinct ids drawn in [1, ``--max-id``] (the first slot
holds ``--max-id`` itself, the worst case a composed dataset's habitat ``semantic_id`` makes;
``--max-id 0``: ids 1..objects) and mpcat40 categories. Both tables are filled slot by slot as
the env does, then map the same semantic frames (``--envs`` x ``--res``^2, a third of the
pixels ids the scene lists, a third 0, a third ids it does not list); their outputs must agree.
Prints one JSON line: bytes on the device of each, lookup ms (median of ``--iters``), ratios.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np


class DenseTable:
    """The former layout (kept here only to measure it): one int32 row per slot, indexed by id."""

    def __init__(self, slots, vocabulary):
        import torch

        self.vocabulary, self.table = vocabulary, torch.full((slots, 256), -1, dtype=torch.int32)

    def set(self, slot, semantics):
        import torch

        from bps_runtime.render.semantic import category_row

        row = torch.from_numpy(category_row(semantics, self.vocabulary))
        if row.shape[0] > self.table.shape[1]:
            grown = torch.full((self.table.shape[0], max(row.shape[0], 2 * self.table.shape[1])), -1,
                               dtype=torch.int32)
            grown[:, :self.table.shape[1]] = self.table
            self.table = grown
        self.table[slot].fill_(-1)
        self.table[slot, :row.shape[0]] = row

    @property
    def nbytes(self):
        return self.table.numel() * self.table.element_size()

    def lookup(self, scene_index, semantic):
        import torch

        t, ids = self.table, semantic.to(torch.int64)
        k = t.shape[1]
        rows = scene_index.to(torch.int64).reshape((-1,) + (1,) * (ids.dim() - 1))
        return t.reshape(-1)[rows * k + ids.clamp(0, k - 1)].masked_fill(ids >= k, -1)


def tables(slots, objects, max_id, names, rng):
    from bps_assets.semantics import SemanticTable

    out = []
    for s in range(slots):
        if max_id:
            ids = np.sort(rng.choice(np.arange(1, max_id, dtype=np.int64), objects - 1, replace=False))
            ids = np.append(ids, max_id) if s == 0 else np.sort(np.append(ids, rng.integers(1, max_id)))
            ids = np.unique(ids)
        else:
            ids = np.arange(1, objects + 1)
        n = len(ids)
        out.append(SemanticTable(ids=ids.astype(np.int32), category=rng.integers(-1, len(names), n).astype(np.int32),
                                 raw_names=["x"] * n, region=np.full(n, -1, np.int32),
                                 aabb=np.zeros((n, 6), np.float32), points=np.zeros((n, 1, 3), np.float32),
                                 categories=list(names)))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slots", type=int, default=64)
    ap.add_argument("--objects", type=int, default=200)
    ap.add_argument("--max-id", type=int, default=1 << 20)
    ap.add_argument("--envs", type=int, default=256)
    ap.add_argument("--res", type=int, default=64)
    ap.add_argument("--iters", type=int, default=20)
    a = ap.parse_args(argv)
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import torch

    from bps_assets.readers.semantic_categories import mpcat40
    from bps_runtime.render.semantic import CategoryTable

    rng = np.random.default_rng(0)
    vocab = mpcat40()
    scenes = tables(a.slots, a.objects, a.max_id, vocab, rng)
    dense, packed = DenseTable(a.slots, vocab), CategoryTable(a.slots, "cpu", vocabulary=vocab)
    for s, t in enumerate(scenes):
        dense.set(s, t)
        packed.set(s, t)
    slot = torch.from_numpy(rng.integers(0, a.slots, a.envs))
    listed = np.stack([rng.choice(scenes[s].ids, (a.res, a.res)) for s in slot.tolist()])
    other = rng.integers(1, max(a.max_id, a.objects) + 1, listed.shape)
    pick = rng.integers(0, 3, listed.shape)
    frames = torch.from_numpy(np.where(pick == 0, listed, np.where(pick == 1, 0, other)).astype(np.int32))[..., None]
    want = dense.lookup(slot, frames)
    assert torch.equal(packed.lookup(slot, frames), want), "the two tables disagree"
    ms = {"dense": [], "sorted": []}
    for _ in range(a.iters):   # interleaved: the machine's load falls on both alike
        for name, tab in (("dense", dense), ("sorted", packed)):
            t0 = time.perf_counter()
            tab.lookup(slot, frames)
            ms[name].append(1e3 * (time.perf_counter() - t0))
    med = {k: float(np.median(v)) for k, v in ms.items()}
    print(json.dumps({"slots": a.slots, "objects": a.objects, "max_id": a.max_id, "envs": a.envs, "res": a.res,
                      "dense_bytes": dense.nbytes, "sorted_bytes": packed.nbytes,
                      "bytes_ratio_dense_over_sorted": round(dense.nbytes / packed.nbytes, 1),
                      "lookup_ms_dense": round(med["dense"], 2), "lookup_ms_sorted": round(med["sorted"], 2),
                      "lookup_ratio_sorted_over_dense": round(med["sorted"] / med["dense"], 2)}))


if __name__ == "__main__":
    main()
