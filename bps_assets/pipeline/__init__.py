"""Whole-dataset preprocessing: datasets, plan, preprocess (resumable, sharded), manifest,
verify, SLURM launcher and the demo. See docs/PIPELINE.md.

Imports are lazy so ``load_manifest`` (what the runtime needs) costs no converter imports.
"""
from __future__ import annotations

_EXPORTS = {
    "load_dataset": "datasets", "list_datasets": "datasets", "Dataset": "datasets",
    "make_plan": "plan", "Shard": "plan", "Plan": "plan",
    # not the function ``preprocess``: it would clash with the submodule of that name
    # (use ``from bps_assets.pipeline.preprocess import preprocess``)
    "PreprocessOptions": "preprocess",
    "load_manifest": "manifest", "Manifest": "manifest", "SceneEntry": "manifest",
    "merge_manifests": "manifest",
    "verify_manifest": "verify", "verify_source": "verify",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{mod}"), name)
