"""What a dataset offers a trainer, answered the way the environments will read it.

The trainer asks here instead of opening the manifest and the episode files itself, so the count
it plans an evaluation with is the count of episodes ``make(episodes="dataset")`` will serve;
within ``episodes_read_once`` the files are read once for both.
"""
from __future__ import annotations

from pathlib import Path

from bps_assets.errors import ConfigError, InputError

from .dataset import episode_ids
from .files import episodes_read_once, mapped_file, resolve_episodes

__all__ = ["distinct_episodes", "episodes_read_once", "file_episode_count", "scene_and_episode_counts"]


def distinct_episodes(by_scene, names=None) -> int:
    """The distinct episodes (episode ids per scene) of ``by_scene`` (scene name -> its episodes: an
    ``EpisodeTable`` or habitat episode dicts), of the scenes in ``names`` (None: all): the episodes an
    eval can count, a repeat not again (``bps_train.episode_claims``' rule). The count an eval plans
    its environments with, before ``make()`` (``file_episode_count``); the supply does not cap by it."""
    return sum(len(set(episode_ids(eps))) for name, eps in by_scene.items() if names is None or name in names)


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


def file_episode_count(manifest_path, split: str, path, map_file) -> int:
    """Distinct episodes (``distinct_episodes``) of the episode file ``path`` on ``split``'s usable
    scenes, the file read by ``map_file`` (the task's ``TaskSpec.episode_file``) as its supply
    reads it: what an eval of the file plans its environments with (an ObjectNav file's scenes
    without semantics are served too; ``make()`` refuses them only with the ``semantic`` sensor).
    InputError when the file is missing."""
    from bps_assets.pipeline.manifest import load_manifest

    if not Path(path).exists():
        raise InputError(path, "episodes dataset not found")
    manifest = load_manifest(manifest_path)
    names = {e.name for e in manifest.scenes(split)}
    mapped = mapped_file(path, manifest, map_file)
    return distinct_episodes(mapped.by_scene, names)
