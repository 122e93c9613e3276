"""What a dataset offers a trainer, answered the way the environments will read it.

The trainer asks here instead of opening the manifest and the episode files itself, so the count
it plans an evaluation with is the count of episodes ``make(episodes="dataset")`` will serve;
within ``episodes_read_once`` the files are read once for both.
"""
from __future__ import annotations

from bps_assets.errors import ConfigError

from .files import episodes_read_once, resolve_episodes

__all__ = ["episodes_read_once", "scene_and_episode_counts"]


def scene_and_episode_counts(manifest_path, split: str) -> tuple[int, int]:
    """(scenes, PointNav dataset episodes) of ``split``: usable scenes that have episodes, and
    their episodes. InputError when the split has no episode file or none for its scenes."""
    from bps_assets.pipeline.manifest import load_manifest

    manifest = load_manifest(manifest_path)
    names = [e.name for e in manifest.scenes(split)]
    if not names:
        raise ConfigError(manifest_path, f"no usable scene in split {split!r} "
                                         f"(subsets: {', '.join(manifest.subsets) or 'none'})")
    _, by_scene = resolve_episodes(manifest, split, names, "dataset")
    return len(by_scene), sum(len(v) for v in by_scene.values())
